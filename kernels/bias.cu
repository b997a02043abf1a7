// A projection's bias: y += b broadcast over rows, and db = column sums of dy (fp32).
// Forward: elementwise, 16-byte accesses when O % 8 == 0 and aligned (a pack never crosses a row).
// Backward: a block of 32 x 8 threads owns 32 * V columns; its 8 row lanes walk a share of the rows
// keeping V fp32 sums each, meet in shared memory, and add to db with atomics (an overwrite
// zeroes db first), so any N fills the device without a second pass.
#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

struct BiasFwd {
  bf16* y;
  const bf16* b;
  long O;
  template <int V>
  __device__ void apply(size_t i) const {
    float a[V], c[V];
    load_bf16(a, y + i);
    load_bf16(c, b + i % size_t(O));
#pragma unroll
    for (int k = 0; k < V; k++) a[k] += c[k];
    store_bf16(y + i, a);
  }
};

constexpr int kRowLanes = 8;

template <int V>
__global__ void __launch_bounds__(32 * kRowLanes)
    bias_bwd_kernel(float* __restrict__ db, const bf16* __restrict__ dy, long N, long O) {
  __shared__ float part[kRowLanes][32 * V];
  const long c0 = (long(blockIdx.x) * 32 + threadIdx.x) * V;
  float s[V];
#pragma unroll
  for (int k = 0; k < V; k++) s[k] = 0.0f;
  if (c0 < O)
    for (long n = long(blockIdx.y) * kRowLanes + threadIdx.y; n < N; n += long(gridDim.y) * kRowLanes) {
      float d[V];
      load_bf16(d, dy + size_t(n) * size_t(O) + size_t(c0));
#pragma unroll
      for (int k = 0; k < V; k++) s[k] += d[k];
    }
#pragma unroll
  for (int k = 0; k < V; k++) part[threadIdx.y][threadIdx.x * V + k] = s[k];
  __syncthreads();
  // Thread (x, y) folds the row lanes for columns y*32*V/8 ... of the block's 32*V, one at a time.
  for (int j = threadIdx.y * 32 + threadIdx.x; j < 32 * V; j += 32 * kRowLanes) {
    const long c = long(blockIdx.x) * 32 * V + j;
    if (c >= O) continue;
    float t = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowLanes; r++) t += part[r][j];
    atomicAdd(db + c, t);
  }
}

}  // namespace

void bias_fwd(bf16* y, const bf16* b, long N, long O, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && O > 0, "bias_fwd: bad shape");
  launch_elementwise<8>("bias_fwd", size_t(N) * size_t(O), O % 8 == 0 && all_aligned16(y, b), BiasFwd{y, b, O}, stream);
}

void bias_bwd(float* db, const bf16* dy, long N, long O, bool acc, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && O > 0, "bias_bwd: bad shape");
  if (!db) return;
  if (!acc) STRATA_CUDA_CHECK(cudaMemsetAsync(db, 0, size_t(O) * sizeof(float), stream));
  if (N == 0) return;
  const bool vec = O % 8 == 0 && all_aligned16(dy);
  const long cols_per_block = 32L * (vec ? 8 : 1);
  const long gx = (O + cols_per_block - 1) / cols_per_block;
  // About 1024 blocks in all, at least 64 rows for each row lane.
  const long gy = std::clamp((N + 64 * kRowLanes - 1) / (64 * kRowLanes), 1L, std::max(1L, 1024 / gx));
  const dim3 grid(unsigned(gx), unsigned(std::min(gy, 65535L))), block(32, kRowLanes);
  if (vec)
    bias_bwd_kernel<8><<<grid, block, 0, stream>>>(db, dy, N, O);
  else
    bias_bwd_kernel<1><<<grid, block, 0, stream>>>(db, dy, N, O);
  STRATA_LAUNCH_CHECK("bias_bwd");
}

}  // namespace strata::cuda

namespace strata {
// A bf16 db through the fp32 column sums of its scratch, as rmsnorm's weight gradient.
void bias_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  if (!c.backward) return cuda::bias_fwd(bf16(t[0]), bf16(t[1]), long(rows(t[0])), long(cols(t[0])), s);
  const Tensor &db = t[0], &dy = t[1];
  if (!db.defined()) return;
  if (db.dtype != DType::bf16) return cuda::bias_bwd(f32(db), bf16(dy), long(rows(dy)), long(cols(dy)), c.acc[0], s);
  float* sums = f32(ctx.scratch[0]);
  cuda::bias_bwd(sums, bf16(dy), long(rows(dy)), long(cols(dy)), false, s);
  cuda::grad_fold_bf16(bf16(db), sums, size_t(db.numel()), c.acc[0], s);
}
}  // namespace strata
