// The strided block copy (kernels/block_copy.h) of bf16 blocks: one element (or a 16-byte pack of 8 when every block
// and stride is a multiple of 8 elements and both pointers are 16-byte aligned) per thread-step; fp32 math to add.
#include "kernels/block_copy.h"
#include "kernels/cuda_common.cuh"
#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

struct BlockCopyOp {
  bf16* out;
  const bf16* in;
  BlockCopy c;
  bool accumulate;
  // Elements [i, i + V) of the copy in (block, element) order: a pack never crosses a block (e % V == 0).
  template <int V>
  __device__ void apply(size_t i) const {
    const int64_t k = int64_t(i) % c.e, block = int64_t(i) / c.e;
    const int64_t bj = block % c.inner, bi = block / c.inner;
    const bf16* src = in + bi * c.in_outer + bj * c.in_inner + k;
    bf16* dst = out + bi * c.out_outer + bj * c.out_inner + k;
    if (!accumulate) {
      if constexpr (V == 8) {
        *reinterpret_cast<int4*>(dst) = *reinterpret_cast<const int4*>(src);
      } else {
#pragma unroll
        for (int j = 0; j < V; j++) dst[j] = src[j];
      }
      return;
    }
    float x[V], y[V];
    load_bf16(x, src);
    load_bf16(y, dst);
#pragma unroll
    for (int j = 0; j < V; j++) y[j] += x[j];
    store_bf16(dst, y);
  }
};

}  // namespace

void block_copy(bf16* out, const bf16* in, const BlockCopy& c, bool accumulate, cudaStream_t stream) {
  STRATA_CHECK(c.outer >= 0 && c.inner >= 0 && c.e >= 0, "block_copy: negative block counts");
  const int64_t n = c.count();
  if (n == 0) return;
  const bool vec = c.e % 8 == 0 && c.in_outer % 8 == 0 && c.in_inner % 8 == 0 && c.out_outer % 8 == 0 &&
                   c.out_inner % 8 == 0 && all_aligned16(out, in);
  launch_elementwise<8>("block_copy", size_t(n), vec, BlockCopyOp{out, in, c, accumulate}, stream);
}

}  // namespace strata::cuda

namespace strata {
// block_copy(out, in; accumulate) with its BlockCopy (checked by Backend::block_copy): bf16 activations.
void block_copy_cuda(const OpCall& c, const CudaOpContext& ctx) {
  STRATA_CHECK(c.t[1].dtype == DType::bf16, "block_copy: the cuda backend copies bf16 activations");
  cuda::block_copy(dispatch::bf16(c.t[0]), dispatch::bf16(c.t[1]), *static_cast<const BlockCopy*>(c.params), c.acc[0],
                   static_cast<cudaStream_t>(ctx.stream));
}
}  // namespace strata
