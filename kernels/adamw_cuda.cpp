// AdamW on cuda over a list of slots (kernels/adamw.cu): one launch per 48 tensors, any state precision.
#define STRATA_CUDA_OP_IMPL
#include <fmt/format.h>

#include <vector>

#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata {
void check_split_master(const Tensor& lo, const Tensor& hi) {
  STRATA_CHECK(lo.defined() && hi.defined() && lo.dtype == DType::i16 && hi.dtype == DType::bf16 &&
                   lo.numel() == hi.numel() && lo.contiguous() && hi.contiguous(),
               fmt::format("cuda keeps fp32 masters split: needs an i16 low half and the bf16 weights of one shape, "
                           "got {} [{}] and {} [{}]",
                           lo.defined() ? dtype_name(lo.dtype) : "none", lo.defined() ? lo.numel() : 0,
                           hi.defined() ? dtype_name(hi.dtype) : "none", hi.defined() ? hi.numel() : 0));
}

// adamw_step(norm_sq; slots, max_norm, params, t): every slot of one call shares one precision (the model's recipe).
void adamw_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using dispatch::bf16;
  using dispatch::f32;
  const auto& slots = c.slots;
  if (slots.empty()) return;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  const AdamWParams& p = *static_cast<const AdamWParams*>(c.params);
  const Tensor& norm_sq = c.t[0];
  const float max_norm = c.scalar;
  const int t = int(c.n);
  const bool split = slots[0].master.defined();
  const DType mdt = slots[0].m.dtype, gdt = slots[0].g.dtype;
  for (const AdamWSlot& a : slots) {
    STRATA_CHECK(a.master.defined() == split && a.m.dtype == mdt && a.v.dtype == mdt && a.g.dtype == gdt,
                 "adamw_step_list: the slots of one call must share one state precision");
    STRATA_CHECK(gdt == DType::f32 || gdt == DType::bf16, "adamw_step_list: gradients must be f32 or bf16");
    if (split) check_split_master(a.master, a.param_out);
    STRATA_CHECK(a.param_out.defined() && a.param_out.dtype == DType::bf16 && a.param_out.numel() == a.g.numel(),
                 "adamw_step_list: cuda updates bf16 weights of the gradient's size");
  }
  const OptimizerState moments = mdt == DType::f32    ? OptimizerState::fp32
                                 : mdt == DType::bf16 ? OptimizerState::bf16
                                                      : OptimizerState::q8;
  STRATA_CHECK(moments != OptimizerState::q8 || mdt == DType::u8, "adamw_step_list: moments must be f32, bf16 or u8");
  std::vector<cuda::AdamWAnyTensors> ts;
  for (const AdamWSlot& a : slots) {
    const bool q = moments == OptimizerState::q8;
    STRATA_CHECK(!q || (a.m_scale.defined() && a.v_scale.defined()), "adamw_step_list: 8-bit moments need scales");
    const bool g16 = gdt == DType::bf16;  // read widened by the kernel (gradients: bf16)
    ts.push_back({split ? static_cast<int16_t*>(a.master.data) : nullptr, bf16(a.param_out), a.m.data, a.v.data,
                  q ? f32(a.m_scale) : nullptr, q ? f32(a.v_scale) : nullptr, g16 ? nullptr : f32(a.g),
                  size_t(a.g.numel()), g16 ? bf16(a.g) : nullptr});
  }
  cuda::adamw_step_any(ts.data(), int(ts.size()), split, moments, f32(norm_sq), max_norm, p.lr, p.beta1, p.beta2, p.eps,
                       p.weight_decay, t, s);
}

}  // namespace strata
