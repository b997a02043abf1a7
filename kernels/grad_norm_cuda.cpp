// The gradient norm's cuda forms (engine/ops/grad_norm.cpp): the sums of squares of kernels/grad_norm.cu, each
// launch adding its blocks' sums into the scalar in a fixed order.
#define STRATA_CUDA_OP_IMPL
#include <vector>

#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata {
namespace {

void sum_squares_into(float* out, const Tensor& g, cudaStream_t s) {
  if (g.dtype == DType::bf16) return cuda::sum_squares_bf16(out, dispatch::bf16(g), size_t(g.numel()), s);
  cuda::sum_squares(out, g.f32(), size_t(g.numel()), s);
}

}  // namespace

// form 0: grad_norm_sq(out, g); 1: the list (f32 and bf16 gradients each in their own launches; the sum is one
// either way); 2: grad_norm_sq_part(parts, g; n = k): a part holds an f32 in its first word (its second stays
// zero), added into atomically as the one scalar otherwise; 3: grad_norm_sq_add_parts(out, parts; n).
void grad_norm_cuda(const OpCall& c, const CudaOpContext& ctx) {
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  const auto& t = c.t;
  switch (c.form) {
    case 0:
      return sum_squares_into(t[0].f32(), t[1], s);
    case 1: {
      std::vector<const float*> ptrs;
      std::vector<const cuda::bf16*> ptrs_bf16;
      std::vector<size_t> ns, ns_bf16;
      for (const Tensor& g : c.tensors) {
        if (g.dtype == DType::bf16) {
          ptrs_bf16.push_back(dispatch::bf16(g));
          ns_bf16.push_back(size_t(g.numel()));
        } else {
          ptrs.push_back(g.f32());
          ns.push_back(size_t(g.numel()));
        }
      }
      if (!ptrs.empty()) cuda::sum_squares_list(t[0].f32(), ptrs.data(), ns.data(), int(ptrs.size()), s);
      if (!ptrs_bf16.empty())
        cuda::sum_squares_list_bf16(t[0].f32(), ptrs_bf16.data(), ns_bf16.data(), int(ptrs_bf16.size()), s);
      return;
    }
    case 2:
      return sum_squares_into(static_cast<float*>(t[0].data) + 2 * c.n, t[1], s);
    default:
      cuda::add_parts(t[0].f32(), static_cast<const float*>(t[1].data), 2, int(c.n), s);
  }
}

}  // namespace strata
