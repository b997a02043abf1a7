// RMSNorm (Llama): out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps), fp32 math, bf16 in/out.
// Forward: one block per row; each thread holds K packs of V columns in registers, loaded together
// up front (memory parallelism) and reused after the row's reduction, so x is read once.
// Backward: a grid sized to fill the device; each block walks rows, writes (or adds into) dx and
// keeps its dw partial column sums in shared memory (fp32), then adds them to dw with atomics.
// 16-byte accesses (V = 8) when C % 8 == 0 and the pointers are aligned; `out` may alias `x`.
#include <algorithm>

#include "kernels/cuda_common.cuh"
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
  if (C % 8 == 0 && all_aligned16(dx, dw, dout, x, w))
    launch_bwd<8>(dx, dw, dout, x, w, rstd, N, C, acc_dx, stream);
  else
    launch_bwd<1>(dx, dw, dout, x, w, rstd, N, C, acc_dx, stream);
}

}  // namespace strata::cuda
