// The LM head's logits on cuda: one cuBLASLt GEMM with an fp32 output.
#define STRATA_CUDA_OP_IMPL
#include "kernels/gemm_cuda.h"
#include "kernels/op_dispatch.h"

namespace strata {
// lm_head_logits(logits, x, w)
void lm_head_logits_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const Tensor &x = c.t[1], &w = c.t[2];
  ctx.gemm.logits_f32(f32(c.t[0]), bf16(x), bf16(w), int(rows(x)), int(cols(x)), int(w.shape[0]),
                      static_cast<cudaStream_t>(ctx.stream));
}
}  // namespace strata
