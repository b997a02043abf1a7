// linear_fp8 on cuda: the output gradient's FP8 cast (kernels/fp8_cast.cu) and cuBLASLt's FP8 GEMMs
// (kernels/gemm_cuda.h), fp32 accumulation. The forward GEMM takes the tensor cores' fast accumulation; the gradients'
// GEMMs promote their partial sums to fp32 as they go (Transformer Engine's split: the backward sums are the long,
// error-prone ones).
#define STRATA_CUDA_OP_IMPL
#include "kernels/fp8_cuda.h"
#include "kernels/gemm_cuda.h"
#include "kernels/op_dispatch.h"

namespace strata {
namespace {
uint8_t* codes(const Tensor& t) {
  return t.defined() ? static_cast<uint8_t*>(t.data) : nullptr;
}
}  // namespace

// linear_fp8_fwd(y, x8, sx, w8, sw) and linear_fp8_bwd(dx, dw, dy, x8t, sx, w8t, sw; acc_dx, acc_dw); scratch as
// engine/ops/linear_fp8.cpp describes it, in its order.
void linear_fp8_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  using fp8::Format;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  if (!c.backward) {  // y[N, O] = x8[N, I] w8[O, I]^T
    const Tensor &y = t[0], &x8 = t[1], &sx = t[2], &w8 = t[3], &sw = t[4];
    const int N = int(rows(x8)), I = int(cols(x8)), O = int(w8.shape[0]);
    return ctx.gemm.fp8(bf16(y), true, codes(x8), false, f32(sx) + fp8::kInvScale, codes(w8), false,
                        f32(sw) + fp8::kInvScale, N, O, I, false, true, s);
  }
  const ScratchSet& sc = ctx.scratch;
  const Tensor &dx = t[0], &dw = t[1], &dy = t[2], &x8t = t[3], &sx = t[4], &w8t = t[5], &sw = t[6];
  const int N = int(rows(dy)), O = int(cols(dy)), I = int(dx.defined() ? w8t.shape[0] : x8t.shape[0]);
  uint8_t *dy8 = codes(sc.at(scratch_tag::fp8_grad)), *dy8t = codes(sc.at(scratch_tag::fp8_grad_t));
  float* sdy = f32(sc.at(scratch_tag::fp8_grad_scale));
  cuda::fp8_quantize(bf16(dy), N, O, Format::e5m2, dx.defined() ? dy8 : nullptr, dw.defined() ? dy8t : nullptr, sdy,
                     f32(sc.at(scratch_tag::fp8_amax)), s);
  if (dx.defined())  // dx[N, I] (+)= dy8[N, O] w8t[I, O]^T
    ctx.gemm.fp8(bf16(dx), true, dy8, true, sdy + fp8::kInvScale, codes(w8t), false, f32(sw) + fp8::kInvScale, N, I, O,
                 c.acc[0], false, s);
  if (!dw.defined()) return;
  // dw[O, I] (+)= dy8t[O, N] x8t[I, N]^T, into fp32 or (gradients: bf16) bf16
  const bool dw_bf16 = dw.dtype == DType::bf16;
  void* d = dw_bf16 ? static_cast<void*>(bf16(dw)) : static_cast<void*>(f32(dw));
  ctx.gemm.fp8(d, dw_bf16, dy8t, true, sdy + fp8::kInvScale, codes(x8t), false, f32(sx) + fp8::kInvScale, O, I, N,
               c.acc[1], false, s);
}
}  // namespace strata
