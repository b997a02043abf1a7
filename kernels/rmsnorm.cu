// RMSNorm (Llama): out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps), fp32 math, bf16 in/out.
// Forward: one block per row; each thread holds K packs of V columns in registers, loaded together
// up front (memory parallelism) and reused after the row's reduction, so x is read once.
// Backward: rmsnorm_bwd_rows_kernel where C % 8 == 0 (row groups, registers, few atomics); else a
// grid sized to fill the device, each block walking rows, writing (or adding into) dx and keeping
// its dw partial column sums in shared memory (fp32), then adding them to dw with atomics.
// 16-byte accesses (V = 8) when C % 8 == 0 and the pointers are aligned; `out` may alias `x`.
#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

// Forward packs per thread: enough loads in flight, few enough registers for 1024 threads.
constexpr int kVecPacks = 4;      // packs of 8 on the 16-byte path: C <= 32768
constexpr int kScalarPacks = 16;  // single columns otherwise: C <= 16384

// Loads this thread's K packs of row r (zeros past C). Pack j starts at column (tid + j*blockDim)*V.
template <int V, int K>
__device__ __forceinline__ void load_row(float (&a)[K][V], const bf16* r, int C) {
#pragma unroll
  for (int j = 0; j < K; j++) {
    const int c = (threadIdx.x + j * blockDim.x) * V;
    if (c < C) {
      load_bf16(a[j], r + c);
    } else {
#pragma unroll
      for (int k = 0; k < V; k++) a[j][k] = 0.0f;
    }
  }
}

template <int V, int K>
__global__ void rmsnorm_fwd_kernel(bf16* out, float* __restrict__ rstd, const bf16* x, const bf16* __restrict__ w,
                                   int C, float eps) {
  const size_t row = blockIdx.x;
  float a[K][V];
  load_row(a, x + row * C, C);
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < K; j++)
#pragma unroll
    for (int k = 0; k < V; k++) ss += a[j][k] * a[j][k];
  ss = block_sum(ss);  // also the barrier that makes in-place (out == x) safe
  const float r = 1.0f / sqrtf(ss / float(C) + eps);
  bf16* yr = out + row * C;  // [C]
#pragma unroll
  for (int j = 0; j < K; j++) {
    const int c = (threadIdx.x + j * blockDim.x) * V;
    if (c >= C) break;
    float wv[V];
    load_bf16(wv, w + c);
#pragma unroll
    for (int k = 0; k < V; k++) a[j][k] = wv[k] * (a[j][k] * r);
    store_bf16(yr + c, a[j]);
  }
  if (rstd && threadIdx.x == 0) rstd[row] = r;
}

// dx_c (+)= r w_c dy_c - x_c r^3/C sum_k(dy_k w_k x_k);  dw_c += sum_rows dy_c x_c r.
// Each thread owns the same columns in every row, so its dw partials in shared memory are private
// to it (laid out [V][C/V] so a warp's accesses fall in distinct banks) and need no barrier.
// (Caching dy and x in registers instead measured slower on an H200: fewer resident blocks.)
template <int V>
__global__ void rmsnorm_bwd_kernel(bf16* __restrict__ dx, float* __restrict__ dw, const bf16* __restrict__ dout,
                                   const bf16* __restrict__ x, const bf16* __restrict__ w,
                                   const float* __restrict__ rstd, int N, int C, bool acc_dx) {
  extern __shared__ float dw_part[];  // [V][C / V] when dw
  const int lanes = C / V;
  if (dw)
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V)
#pragma unroll
      for (int k = 0; k < V; k++) dw_part[k * lanes + c / V] = 0.0f;
  for (int row = blockIdx.x; row < N; row += gridDim.x) {
    const float r = rstd[row];
    const bf16* dyr = dout + size_t(row) * C;  // [C]
    const bf16* xr = x + size_t(row) * C;      // [C]
    float dot = 0.0f;
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
      float dy[V], xv[V];
      load_bf16(dy, dyr + c);
      load_bf16(xv, xr + c);
      if (dx) {
        float wv[V];
        load_bf16(wv, w + c);
#pragma unroll
        for (int k = 0; k < V; k++) dot += dy[k] * wv[k] * xv[k];
      }
      if (dw)
#pragma unroll
        for (int k = 0; k < V; k++) dw_part[k * lanes + c / V] += dy[k] * xv[k] * r;
    }
    if (!dx) continue;  // uniform across the block
    dot = block_sum(dot);
    const float kk = dot * r * r * r / float(C);
    bf16* dxr = dx + size_t(row) * C;  // [C]
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
      float dy[V], xv[V], wv[V], acc[V];
      load_bf16(dy, dyr + c);  // second reads of the row hit L1/L2
      load_bf16(xv, xr + c);
      load_bf16(wv, w + c);
      load_grad_bf16(acc, dxr + c, acc_dx);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += r * wv[k] * dy[k] - xv[k] * kk;
      store_bf16(dxr + c, acc);
    }
  }
  if (dw)
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
      float part[V];
#pragma unroll
      for (int k = 0; k < V; k++) part[k] = dw_part[k * lanes + c / V];
      atomic_add_f32(dw + c, part);
    }
}

// The row-group backward, for C % 8 == 0 and C <= 8 * 512 * kMaxRowPacks (every Llama width): a
// block of G groups, each walking its own rows; a thread owns K packs of 8 columns of every row.
// dy and x stay in registers between the row's reduction and the dx write, w is loaded once, and
// the dw partials live in registers until the end, where the G groups meet in shared memory and
// the block adds them to dw with C / 4 atomics. Fewer, fuller blocks than rmsnorm_bwd_kernel:
// its per-block atomics dominated at 4096 x 2048 (H200).
constexpr int kMaxRowPacks = 4;

template <int K>
__global__ void __launch_bounds__(K == 1 ? 1024 : 512)
    rmsnorm_bwd_rows_kernel(bf16* __restrict__ dx, float* __restrict__ dw, const bf16* __restrict__ dout,
                            const bf16* __restrict__ x, const bf16* __restrict__ w, const float* __restrict__ rstd,
                            int N, int C, int groups, bool acc_dx) {
  extern __shared__ float dw_groups[];  // [groups][C] when dw
  __shared__ float red[2][32];          // per warp, double-buffered by row-iteration parity
  const int gt = blockDim.x / groups, g = threadIdx.x / gt, lt = threadIdx.x % gt;
  const int warps_per_group = gt / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float wv[K][8], dwp[K][8];
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int c = (lt + k * gt) * 8;
#pragma unroll
    for (int e = 0; e < 8; e++) wv[k][e] = dwp[k][e] = 0.0f;
    if (c < C) load_bf16(wv[k], w + c);
  }
  int parity = 0;
  for (int base = blockIdx.x * groups; base < N; base += gridDim.x * groups, parity ^= 1) {
    const int row = base + g;
    const bool active = row < N;
    const float r = active ? rstd[row] : 0.0f;
    // dx's running value (acc_dx) is loaded with dy and x, before the row's reduction: all three
    // streams in flight together (1.5x the bytes in flight of loading it after the barrier).
    float dy[K][8], xv[K][8], acc[K][8];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
      const int c = (lt + k * gt) * 8;
      if (active && c < C) {
        load_bf16(dy[k], dout + size_t(row) * C + c);
        load_bf16(xv[k], x + size_t(row) * C + c);
        load_grad_bf16(acc[k], dx ? dx + size_t(row) * C + c : nullptr, dx && acc_dx);
      } else {
#pragma unroll
        for (int e = 0; e < 8; e++) dy[k][e] = xv[k][e] = acc[k][e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < 8; e++) {
        dot += dy[k][e] * wv[k][e] * xv[k][e];
        dwp[k][e] += dy[k][e] * xv[k][e] * r;
      }
    }
    if (!dx) continue;  // uniform across the block
    // The group's sum: warps, then the group's warps through shared memory (one barrier per row,
    // the buffer alternating so the next row's writes cannot meet this row's reads).
    dot = warp_sum(dot);
    if (lane == 0) red[parity][warp] = dot;
    __syncthreads();
    dot = 0.0f;
    for (int i = 0; i < warps_per_group; i++) dot += red[parity][g * warps_per_group + i];
    if (!active) continue;
    const float kk = dot * r * r * r / float(C);
    bf16* dxr = dx + size_t(row) * C;  // [C]
#pragma unroll
    for (int k = 0; k < K; k++) {
      const int c = (lt + k * gt) * 8;
      if (c >= C) break;
#pragma unroll
      for (int e = 0; e < 8; e++) acc[k][e] += r * wv[k][e] * dy[k][e] - xv[k][e] * kk;
      store_bf16(dxr + c, acc[k]);
    }
  }
  if (!dw) return;
#pragma unroll
  for (int k = 0; k < K; k++) {
    const int c = (lt + k * gt) * 8;
    if (c < C)
#pragma unroll
      for (int e = 0; e < 8; e++) dw_groups[size_t(g) * C + c + e] = dwp[k][e];
  }
  __syncthreads();
  for (int c = threadIdx.x * 4; c < C; c += blockDim.x * 4) {
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < groups; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) sum[e] += dw_groups[size_t(j) * C + c + e];
    atomic_add_f32(dw + c, sum);
  }
}

template <int V, int K>
void launch_fwd(bf16* out, float* rstd, const bf16* x, const bf16* w, int N, int C, float eps, cudaStream_t stream) {
  auto kernel = rmsnorm_fwd_kernel<V, K>;
  static const int max_threads = [&] {
    cudaFuncAttributes attr{};
    STRATA_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    return attr.maxThreadsPerBlock;
  }();
  const int threads = row_threads((C / V + K - 1) / K, 1024);  // K packs of V columns each cover C
  if (threads > max_threads || threads * K * V < C)
    STRATA_THROW(UnsupportedError, "rmsnorm_fwd: C = " + std::to_string(C) + " is too large (at most " +
                                       std::to_string(max_threads * K * V) + (V == 1 ? " when C % 8 != 0)" : ")"));
  kernel<<<N, threads, 0, stream>>>(out, rstd, x, w, C, eps);
  STRATA_LAUNCH_CHECK("rmsnorm_fwd_kernel");
}

template <int V>
void launch_bwd(bf16* dx, float* dw, const bf16* dout, const bf16* x, const bf16* w, const float* rstd, int N, int C,
                bool acc_dx, cudaStream_t stream) {
  const int threads = row_threads(C / V);
  const size_t smem = dw ? sizeof(float) * C : 0;
  auto kernel = rmsnorm_bwd_kernel<V>;
  if (smem > 48 * 1024) {
    int dev = 0, max_optin = 0;
    STRATA_CUDA_CHECK(cudaGetDevice(&dev));
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > size_t(max_optin))
      STRATA_THROW(UnsupportedError, "rmsnorm_bwd: C = " + std::to_string(C) + " is too large for dw in shared memory");
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  int per_sm = 0;
  STRATA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int blocks = std::max(1, std::min(N, num_sms() * std::max(per_sm, 1)));
  kernel<<<blocks, threads, smem, stream>>>(dx, dw, dout, x, w, rstd, N, C, acc_dx);
  STRATA_LAUNCH_CHECK("rmsnorm_bwd_kernel");
}

// Threads per group (a multiple of 32, at most 512), packs per thread K, groups per block G.
struct RowsConfig {
  int gt = 0, K = 0, G = 0;
};
RowsConfig rows_config(int C) {
  const int packs = C / 8;
  RowsConfig rc;
  rc.K = (packs + 511) / 512;
  rc.gt = ((packs + rc.K - 1) / rc.K + 31) / 32 * 32;
  rc.G = std::max(1, std::min(4, (rc.K == 1 ? 1024 : 512) / rc.gt));  // registers: see __launch_bounds__
  return rc;
}

template <int K>
void launch_bwd_rows(bf16* dx, float* dw, const bf16* dout, const bf16* x, const bf16* w, const float* rstd, int N,
                     int C, bool acc_dx, const RowsConfig& rc, cudaStream_t stream) {
  auto kernel = rmsnorm_bwd_rows_kernel<K>;
  const int threads = rc.gt * rc.G;
  const size_t smem = dw ? sizeof(float) * size_t(rc.G) * C : 0;
  static int max_optin = [] {
    int dev = 0, v = 0;
    STRATA_CUDA_CHECK(cudaGetDevice(&dev));
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v;
  }();
  if (smem > size_t(max_optin))
    STRATA_THROW(UnsupportedError, "rmsnorm_bwd: C = " + std::to_string(C) + " is too large for dw in shared memory");
  if (smem > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  STRATA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int blocks = std::max(1, std::min((N + rc.G - 1) / rc.G, num_sms() * std::max(per_sm, 1)));
  kernel<<<blocks, threads, smem, stream>>>(dx, dw, dout, x, w, rstd, N, C, rc.G, acc_dx);
  STRATA_LAUNCH_CHECK("rmsnorm_bwd_rows_kernel");
}

}  // namespace

void rmsnorm_fwd(bf16* out, float* rstd, const bf16* x, const bf16* w, int N, int C, float eps, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0, "rmsnorm_fwd: bad shape");
  if (N == 0) return;
  if (C % 8 == 0 && all_aligned16(out, x, w))
    launch_fwd<8, kVecPacks>(out, rstd, x, w, N, C, eps, stream);
  else
    launch_fwd<1, kScalarPacks>(out, rstd, x, w, N, C, eps, stream);
}

void rmsnorm_bwd(bf16* dx, float* dw, const bf16* dout, const bf16* x, const bf16* w, const float* rstd, int N, int C,
                 bool acc_dx, bool acc_dw, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0, "rmsnorm_bwd: bad shape");
  // The blocks' dw partials meet in atomics: an overwrite starts them from zero ([C], cheap).
  if (dw && !acc_dw) STRATA_CUDA_CHECK(cudaMemsetAsync(dw, 0, sizeof(float) * C, stream));
  if (N == 0 || (!dx && !dw)) return;
  const RowsConfig rc = rows_config(C);
  if (C % 8 == 0 && rc.K <= kMaxRowPacks && all_aligned16(dx, dw, dout, x, w)) {
    switch (rc.K) {
      case 1:
        return launch_bwd_rows<1>(dx, dw, dout, x, w, rstd, N, C, acc_dx, rc, stream);
      case 2:
        return launch_bwd_rows<2>(dx, dw, dout, x, w, rstd, N, C, acc_dx, rc, stream);
      case 3:
        return launch_bwd_rows<3>(dx, dw, dout, x, w, rstd, N, C, acc_dx, rc, stream);
      default:
        return launch_bwd_rows<4>(dx, dw, dout, x, w, rstd, N, C, acc_dx, rc, stream);
    }
  }
  if (C % 8 == 0 && all_aligned16(dx, dw, dout, x, w))
    launch_bwd<8>(dx, dw, dout, x, w, rstd, N, C, acc_dx, stream);
  else
    launch_bwd<1>(dx, dw, dout, x, w, rstd, N, C, acc_dx, stream);
}

}  // namespace strata::cuda

namespace strata {
// rmsnorm_cpu's call on the cuda backend; a bf16 dw through the fp32 column sums of its scratch, folded once.
void rmsnorm_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  const int N = int(rows(t[2])), C = int(cols(t[2]));
  if (!c.backward) return cuda::rmsnorm_fwd(bf16(t[0]), f32(t[1]), bf16(t[2]), bf16(t[3]), N, C, c.scalar, s);
  const Tensor& dw = t[1];
  if (!dw.defined() || dw.dtype != DType::bf16)
    return cuda::rmsnorm_bwd(bf16(t[0]), f32(dw), bf16(t[2]), bf16(t[3]), bf16(t[4]), f32(t[5]), N, C, c.acc[0],
                             c.acc[1], s);
  float* sums = f32(ctx.scratch[0]);
  cuda::rmsnorm_bwd(bf16(t[0]), sums, bf16(t[2]), bf16(t[3]), bf16(t[4]), f32(t[5]), N, C, c.acc[0], false, s);
  cuda::grad_fold_bf16(bf16(dw), sums, size_t(dw.numel()), c.acc[1], s);
}
}  // namespace strata
