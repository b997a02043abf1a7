// Flash-style causal GQA attention on CUDA cores: the fallback for shapes cuDNN declines.
// fp32 math on bf16 tiles staged in shared memory; never materialises [T, T]; deterministic
// (no atomics); needs no workspace because the backward recomputes P in two kernels:
//   dkdv: one block per (b, kv head, 32 keys), loops over the group's query heads and tiles;
//   dq:   one block per (b, q head, 32 queries), loops over key tiles.
// Both recompute Di = dout_i . out_i from their query tile. Formulas as in attention_cpu.cpp:
//   p = exp(s - lse_i), ds = p (dout_i . v_j - Di), dq_i = scale sum ds k_j, dk_j = scale sum ds q_i.
// Thread layout (128 threads): row r = tid / 4 of a 32-row tile, lane c = tid % 4. A thread scores
// columns c, c+4, ..., c+28 of its row and owns output features c, c+4, ... (DMAX / 4 registers).
// Sample packing (pos non-null, [B*T]): query i attends keys j in [i - pos[i], i], its own example.
// An example's first token i - pos[i] never decreases along a row, so a query tile's keys start at
// its first row's example start, and a key tile's queries end where a query's example starts past it:
// tiles outside every example of the tile are skipped, the rest masked per element.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "kernels/attention_cuda.h"

namespace strata::cuda {
namespace {

constexpr int kRows = 32;      // rows per tile (queries in fwd/dq, keys in dkdv)
constexpr int kCols = 32;      // columns scored per step (keys in fwd/dq, queries in dkdv)
constexpr int kThreads = 128;  // kRows rows x 4 lanes
constexpr int kPerLane = kCols / 4;

struct Geom {
  int T, Hq, Hkv, D;
  float scale;
  const int* pos;  // [B*T] packed positions, or null: one causal sequence a row
};

// The first key query i (< T) of row b attends.
__device__ __forceinline__ int first_key(const Geom& g, int b, int i) {
  return g.pos ? i - g.pos[size_t(b) * g.T + i] : 0;
}

// Loads rows [row0, row0 + 32) of one head into smem [32][DMAX + 1] as fp32 times `mul`, zeroing
// rows past T and features past D (so register loops can run to DMAX without guards).
template <int DMAX>
__device__ void load_tile(float* dst, const bf16* src, int row0, int T, int row_stride, int D, float mul) {
  constexpr int LD = DMAX + 1;
  for (int idx = threadIdx.x; idx < kRows * DMAX; idx += kThreads) {
    const int rr = idx / DMAX, d = idx - rr * DMAX;
    const int t = row0 + rr;
    float x = 0.0f;
    if (t < T && d < D) x = __bfloat162float(src[size_t(t) * row_stride + d]) * mul;
    dst[rr * LD + d] = x;
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Di for the 32 query rows staged in dO_s and O_s (row r summed by its 4 lanes).
template <int DMAX>
__device__ void row_dots(float* Di_s, const float* dO_s, const float* O_s) {
  constexpr int LD = DMAX + 1;
  const int r = threadIdx.x >> 2, c = threadIdx.x & 3;
  float acc = 0.0f;
#pragma unroll
  for (int kk = 0; kk < DMAX / 4; kk++) acc += dO_s[r * LD + c + 4 * kk] * O_s[r * LD + c + 4 * kk];
  acc = quad_sum(acc);
  if (c == 0) Di_s[r] = acc;
}

template <int DMAX>
__device__ __forceinline__ float dot_rows(const float* a, const float* b, int D) {
  float s = 0.0f;
  for (int d = 0; d < D; d++) s += a[d] * b[d];
  return s;
}

// grid (ceil(T/32), Hq, B). smem: Q[32][LD] (pre-scaled), K[32][LD], V[32][LD], P[32][33].
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    fwd_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q, const bf16* __restrict__ k,
               const bf16* __restrict__ v, Geom g) {
  constexpr int LD = DMAX + 1;
  extern __shared__ float sm[];
  float* Q_s = sm;
  float* K_s = Q_s + kRows * LD;
  float* V_s = K_s + kCols * LD;
  float* P_s = V_s + kCols * LD;  // [32][kCols + 1]
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kRows;
  const int kh = h / (g.Hq / g.Hkv);
  const int r = threadIdx.x >> 2, c = threadIdx.x & 3, i = q0 + r;
  const int qs = g.Hq * g.D, ks = g.Hkv * g.D;  // row strides
  const bf16* qb = q + (size_t(b) * g.T * g.Hq + h) * g.D;
  const bf16* kb = k + (size_t(b) * g.T * g.Hkv + kh) * g.D;
  const bf16* vb = v + (size_t(b) * g.T * g.Hkv + kh) * g.D;

  load_tile<DMAX>(Q_s, qb, q0, g.T, qs, g.D, g.scale);
  float m = -INFINITY, l = 0.0f, o[DMAX / 4];
#pragma unroll
  for (int kk = 0; kk < DMAX / 4; kk++) o[kk] = 0.0f;

  const int j_first = i < g.T ? first_key(g, b, i) : 0;
  const int k_end = min(g.T, q0 + kRows);  // causal: keys < k_end
  for (int k0 = first_key(g, b, q0) / kCols * kCols; k0 < k_end; k0 += kCols) {
    __syncthreads();  // previous tile's K/V/P reads are done
    load_tile<DMAX>(K_s, kb, k0, g.T, ks, g.D, 1.0f);
    load_tile<DMAX>(V_s, vb, k0, g.T, ks, g.D, 1.0f);
    __syncthreads();
    float s[kPerLane];
#pragma unroll
    for (int jj = 0; jj < kPerLane; jj++) {
      const int j = k0 + c + 4 * jj;
      s[jj] =
          (j <= i && j >= j_first && j < g.T) ? dot_rows<DMAX>(Q_s + r * LD, K_s + (c + 4 * jj) * LD, g.D) : -INFINITY;
    }
    float mt = s[0];
#pragma unroll
    for (int jj = 1; jj < kPerLane; jj++) mt = fmaxf(mt, s[jj]);
    const float m_new = fmaxf(m, quad_max(mt));
    // Rows past T see only -inf; keep them at p = 0 instead of exp(nan).
    const float alpha = (m == -INFINITY) ? 0.0f : __expf(m - m_new);
    float ls = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kPerLane; jj++) {
      const float p = (s[jj] == -INFINITY) ? 0.0f : __expf(s[jj] - m_new);
      P_s[r * (kCols + 1) + c + 4 * jj] = p;
      ls += p;
    }
    l = l * alpha + quad_sum(ls);
    m = m_new;
    __syncwarp();  // a row's P is written and read by the same 4 lanes of one warp
#pragma unroll
    for (int kk = 0; kk < DMAX / 4; kk++) o[kk] *= alpha;
    for (int j = 0; j < kCols; j++) {
      const float p = P_s[r * (kCols + 1) + j];
      const float* vr = V_s + j * LD + c;
#pragma unroll
      for (int kk = 0; kk < DMAX / 4; kk++) o[kk] += p * vr[4 * kk];
    }
  }
  if (i < g.T) {
    const float inv = 1.0f / l;
    bf16* orow = out + ((size_t(b) * g.T + i) * g.Hq + h) * g.D;
#pragma unroll
    for (int kk = 0; kk < DMAX / 4; kk++) {
      const int d = c + 4 * kk;
      if (d < g.D) orow[d] = __float2bfloat16(o[kk] * inv);
    }
    if (c == 0) lse[(size_t(b) * g.Hq + h) * g.T + i] = m + logf(l);
  }
}

// grid (ceil(T/32), Hkv, B). smem: K, V, Q (pre-scaled), dO [32][LD]; P, dS [32][33]; lse, Di [32].
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout, const bf16* __restrict__ q,
                const bf16* __restrict__ k, const bf16* __restrict__ v, const bf16* __restrict__ out,
                const float* __restrict__ lse, Geom g, bool accumulate) {
  constexpr int LD = DMAX + 1, LP = kCols + 1;
  extern __shared__ float sm[];
  float* K_s = sm;
  float* V_s = K_s + kRows * LD;
  float* Q_s = V_s + kRows * LD;
  float* dO_s = Q_s + kCols * LD;
  float* P_s = dO_s + kCols * LD;  // [key][query]
  float* dS_s = P_s + kRows * LP;
  float* lse_s = dS_s + kRows * LP;
  float* Di_s = lse_s + kCols;
  int* first_s = reinterpret_cast<int*>(Di_s + kCols);  // [32] each query's first key
  const int b = blockIdx.z, kh = blockIdx.y, k0 = blockIdx.x * kRows;
  const int group = g.Hq / g.Hkv;
  const int r = threadIdx.x >> 2, c = threadIdx.x & 3, j = k0 + r;
  const int qs = g.Hq * g.D, ks = g.Hkv * g.D;
  const size_t kv_off = (size_t(b) * g.T * g.Hkv + kh) * g.D;
  load_tile<DMAX>(K_s, k + kv_off, k0, g.T, ks, g.D, 1.0f);
  load_tile<DMAX>(V_s, v + kv_off, k0, g.T, ks, g.D, 1.0f);
  float dk_acc[DMAX / 4], dv_acc[DMAX / 4];
#pragma unroll
  for (int kk = 0; kk < DMAX / 4; kk++) dk_acc[kk] = dv_acc[kk] = 0.0f;

  for (int h = kh * group; h < (kh + 1) * group; h++) {
    const size_t q_off = (size_t(b) * g.T * g.Hq + h) * g.D;
    const float* lse_h = lse + (size_t(b) * g.Hq + h) * g.T;
    for (int q0 = k0; q0 < g.T; q0 += kCols) {       // causal: queries >= k0 (kRows == kCols)
      if (first_key(g, b, q0) >= k0 + kRows) break;  // this tile's queries and all later ones start past these keys
      __syncthreads();
      load_tile<DMAX>(dO_s, dout + q_off, q0, g.T, qs, g.D, 1.0f);
      load_tile<DMAX>(Q_s, out + q_off, q0, g.T, qs, g.D, 1.0f);  // out staged in Q_s for Di
      if (threadIdx.x < kCols) {
        const int i = q0 + threadIdx.x;
        lse_s[threadIdx.x] = i < g.T ? lse_h[i] : 0.0f;
        first_s[threadIdx.x] = i < g.T ? first_key(g, b, i) : 0;
      }
      __syncthreads();
      row_dots<DMAX>(Di_s, dO_s, Q_s);
      __syncthreads();
      load_tile<DMAX>(Q_s, q + q_off, q0, g.T, qs, g.D, g.scale);
      __syncthreads();
#pragma unroll
      for (int ii = 0; ii < kPerLane; ii++) {
        const int il = c + 4 * ii, i = q0 + il;
        float p = 0.0f, ds = 0.0f;
        if (i >= j && i < g.T && j < g.T && j >= first_s[il]) {
          p = __expf(dot_rows<DMAX>(Q_s + il * LD, K_s + r * LD, g.D) - lse_s[il]);
          ds = p * (dot_rows<DMAX>(dO_s + il * LD, V_s + r * LD, g.D) - Di_s[il]);
        }
        P_s[r * LP + il] = p;
        dS_s[r * LP + il] = ds;
      }
      __syncwarp();
      for (int il = 0; il < kCols; il++) {
        const float p = P_s[r * LP + il], ds = dS_s[r * LP + il];
        const float* dor = dO_s + il * LD + c;
        const float* qr = Q_s + il * LD + c;  // pre-scaled: ds * (scale q) = scale ds q
#pragma unroll
        for (int kk = 0; kk < DMAX / 4; kk++) {
          dv_acc[kk] += p * dor[4 * kk];
          dk_acc[kk] += ds * qr[4 * kk];
        }
      }
    }
  }
  if (j < g.T) {
    bf16* dkr = dk + kv_off + size_t(j) * ks;
    bf16* dvr = dv + kv_off + size_t(j) * ks;
#pragma unroll
    for (int kk = 0; kk < DMAX / 4; kk++) {
      const int d = c + 4 * kk;
      if (d < g.D) {
        float a = dk_acc[kk], bv = dv_acc[kk];
        if (accumulate) {
          a += __bfloat162float(dkr[d]);
          bv += __bfloat162float(dvr[d]);
        }
        dkr[d] = __float2bfloat16(a);
        dvr[d] = __float2bfloat16(bv);
      }
    }
  }
}

// grid (ceil(T/32), Hq, B). smem: Q (pre-scaled), dO, K, V [32][LD]; dS [32][33]; lse, Di [32].
template <int DMAX>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout, const bf16* __restrict__ q,
              const bf16* __restrict__ k, const bf16* __restrict__ v, const bf16* __restrict__ out,
              const float* __restrict__ lse, Geom g, bool accumulate) {
  constexpr int LD = DMAX + 1, LP = kCols + 1;
  extern __shared__ float sm[];
  float* Q_s = sm;
  float* dO_s = Q_s + kRows * LD;
  float* K_s = dO_s + kRows * LD;
  float* V_s = K_s + kCols * LD;
  float* dS_s = V_s + kCols * LD;
  float* lse_s = dS_s + kRows * LP;
  float* Di_s = lse_s + kRows;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kRows;
  const int kh = h / (g.Hq / g.Hkv);
  const int r = threadIdx.x >> 2, c = threadIdx.x & 3, i = q0 + r;
  const int j_first = i < g.T ? first_key(g, b, i) : 0;
  const int qs = g.Hq * g.D, ks = g.Hkv * g.D;
  const size_t q_off = (size_t(b) * g.T * g.Hq + h) * g.D;
  const size_t kv_off = (size_t(b) * g.T * g.Hkv + kh) * g.D;

  load_tile<DMAX>(dO_s, dout + q_off, q0, g.T, qs, g.D, 1.0f);
  load_tile<DMAX>(K_s, out + q_off, q0, g.T, qs, g.D, 1.0f);  // out staged in K_s for Di
  if (threadIdx.x < kRows) {
    const int ii = q0 + threadIdx.x;
    lse_s[threadIdx.x] = ii < g.T ? lse[(size_t(b) * g.Hq + h) * g.T + ii] : 0.0f;
  }
  __syncthreads();
  row_dots<DMAX>(Di_s, dO_s, K_s);
  load_tile<DMAX>(Q_s, q + q_off, q0, g.T, qs, g.D, g.scale);
  float dq_acc[DMAX / 4];
#pragma unroll
  for (int kk = 0; kk < DMAX / 4; kk++) dq_acc[kk] = 0.0f;

  const int k_end = min(g.T, q0 + kRows);
  for (int k0 = first_key(g, b, q0) / kCols * kCols; k0 < k_end; k0 += kCols) {
    __syncthreads();  // Di/lse/Q ready; previous K/V/dS reads done
    load_tile<DMAX>(K_s, k + kv_off, k0, g.T, ks, g.D, 1.0f);
    load_tile<DMAX>(V_s, v + kv_off, k0, g.T, ks, g.D, 1.0f);
    __syncthreads();
#pragma unroll
    for (int jj = 0; jj < kPerLane; jj++) {
      const int jl = c + 4 * jj, j = k0 + jl;
      float ds = 0.0f;
      if (j <= i && j >= j_first && i < g.T) {
        const float p = __expf(dot_rows<DMAX>(Q_s + r * LD, K_s + jl * LD, g.D) - lse_s[r]);
        ds = p * (dot_rows<DMAX>(dO_s + r * LD, V_s + jl * LD, g.D) - Di_s[r]);
      }
      dS_s[r * LP + jl] = ds;
    }
    __syncwarp();
    for (int jl = 0; jl < kCols; jl++) {
      const float ds = dS_s[r * LP + jl];
      const float* kr = K_s + jl * LD + c;
#pragma unroll
      for (int kk = 0; kk < DMAX / 4; kk++) dq_acc[kk] += ds * kr[4 * kk];
    }
  }
  if (i < g.T) {
    bf16* dqr = dq + q_off + size_t(i) * qs;
#pragma unroll
    for (int kk = 0; kk < DMAX / 4; kk++) {
      const int d = c + 4 * kk;
      if (d < g.D) {
        float a = dq_acc[kk] * g.scale;
        if (accumulate) a += __bfloat162float(dqr[d]);
        dqr[d] = __float2bfloat16(a);
      }
    }
  }
}

__global__ void add_kernel(bf16* __restrict__ y, const bf16* __restrict__ x, size_t n) {
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < n; idx += size_t(gridDim.x) * blockDim.x)
    y[idx] = __float2bfloat16(__bfloat162float(y[idx]) + __bfloat162float(x[idx]));
}

void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    STRATA_THROW(Error, std::string("attention fallback: ") + what + " launch failed: " + cudaGetErrorString(e));
}

Geom geom(const AttnShape& s, const int32_t* pos) {
  if (s.B <= 0 || s.T <= 0 || s.D <= 0 || s.Hq <= 0 || s.Hkv <= 0 || s.Hq % s.Hkv != 0)
    STRATA_THROW(Error, "attention fallback: bad shape (need positive sizes and Hq % Hkv == 0)");
  if (s.D > 128) STRATA_THROW(UnsupportedError, "attention fallback: head dim " + std::to_string(s.D) + " > 128");
  return Geom{s.T, s.Hq, s.Hkv, s.D, 1.0f / std::sqrt(float(s.D)), pos};
}

template <int DMAX>
void fwd_impl(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttnShape& s,
              const int32_t* pos, cudaStream_t st) {
  constexpr int LD = DMAX + 1;
  const size_t smem = sizeof(float) * ((kRows + 2 * kCols) * LD + kRows * (kCols + 1));
  cudaFuncSetAttribute(fwd_kernel<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  dim3 grid((s.T + kRows - 1) / kRows, s.Hq, s.B);
  fwd_kernel<DMAX><<<grid, kThreads, smem, st>>>(out, lse, q, k, v, geom(s, pos));
  check_launch("fwd");
}

template <int DMAX>
void bwd_impl(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
              const bf16* out, const float* lse, const AttnShape& s, bool accumulate, const int32_t* pos,
              cudaStream_t st) {
  constexpr int LD = DMAX + 1, LP = kCols + 1;
  const Geom g = geom(s, pos);
  const size_t smem_kv =
      sizeof(float) * ((2 * kRows + 2 * kCols) * LD + 2 * kRows * LP + 2 * kCols) + sizeof(int) * kCols;
  cudaFuncSetAttribute(dkdv_kernel<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_kv));
  dkdv_kernel<DMAX><<<dim3((s.T + kRows - 1) / kRows, s.Hkv, s.B), kThreads, smem_kv, st>>>(dk, dv, dout, q, k, v, out,
                                                                                            lse, g, accumulate);
  check_launch("dkdv");
  const size_t smem_q = sizeof(float) * ((2 * kRows + 2 * kCols) * LD + kRows * LP + 2 * kRows);
  cudaFuncSetAttribute(dq_kernel<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_q));
  dq_kernel<DMAX><<<dim3((s.T + kRows - 1) / kRows, s.Hq, s.B), kThreads, smem_q, st>>>(dq, dout, q, k, v, out, lse, g,
                                                                                        accumulate);
  check_launch("dq");
}

}  // namespace

void flash_attention_fwd(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttnShape& s,
                         cudaStream_t st, const int32_t* pos) {
  geom(s, pos);
  if (s.D <= 32) return fwd_impl<32>(out, lse, q, k, v, s, pos, st);
  if (s.D <= 64) return fwd_impl<64>(out, lse, q, k, v, s, pos, st);
  return fwd_impl<128>(out, lse, q, k, v, s, pos, st);
}

void flash_attention_bwd(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                         const bf16* out, const float* lse, const AttnShape& s, bool accumulate, cudaStream_t st,
                         const int32_t* pos) {
  geom(s, pos);
  if (s.D <= 32) return bwd_impl<32>(dq, dk, dv, dout, q, k, v, out, lse, s, accumulate, pos, st);
  if (s.D <= 64) return bwd_impl<64>(dq, dk, dv, dout, q, k, v, out, lse, s, accumulate, pos, st);
  return bwd_impl<128>(dq, dk, dv, dout, q, k, v, out, lse, s, accumulate, pos, st);
}

void add_bf16_inplace(bf16* y, const bf16* x, size_t n, cudaStream_t st) {
  if (n == 0) return;
  const int threads = 256;
  const int blocks = int(std::min<size_t>((n + threads - 1) / threads, 4096));
  add_kernel<<<blocks, threads, 0, st>>>(y, x, n);
  check_launch("add");
}

}  // namespace strata::cuda
