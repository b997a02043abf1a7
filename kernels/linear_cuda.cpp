// linear on cuda: the backend's cuBLASLt GEMMs (kernels/gemm_cuda.h), bf16 in, fp32 accumulate.
#define STRATA_CUDA_OP_IMPL
#include "kernels/gemm_cuda.h"
#include "kernels/op_dispatch.h"

namespace strata {
// linear_fwd(y, x, w) and linear_bwd(dx, dw, dy, x, w; acc_dx, acc_dw): dw f32, or bf16 with gradients: bf16 (the
// GEMM writes bf16, one rounding per element).
void linear_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  if (!c.backward) {
    const Tensor &x = t[1], &w = t[2];
    return ctx.gemm.linear_fwd(bf16(t[0]), bf16(x), bf16(w), int(rows(x)), int(cols(x)), int(w.shape[0]), s);
  }
  const Tensor &dx = t[0], &dw = t[1], &dy = t[2], &x = t[3], &w = t[4];
  const int N = int(rows(dy)), In = int(cols(w)), O = int(w.shape[0]);
  if (dx.defined()) ctx.gemm.linear_bwd_dx(bf16(dx), bf16(dy), bf16(w), N, In, O, c.acc[0], s);
  if (!dw.defined()) return;
  if (dw.dtype == DType::bf16)
    ctx.gemm.linear_bwd_dw(bf16(dw), bf16(dy), bf16(x), N, In, O, c.acc[1], s);
  else
    ctx.gemm.linear_bwd_dw(f32(dw), bf16(dy), bf16(x), N, In, O, c.acc[1], s);
}
}  // namespace strata
