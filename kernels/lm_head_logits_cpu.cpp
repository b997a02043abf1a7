// The LM head's logits for evaluation (cpu::lm_head_logits, kernels/lm_head_ce_cpu.cpp).
#include "kernels/lm_head_ce.h"
#include "kernels/op_dispatch.h"

namespace strata {
// lm_head_logits(logits, x, w)
void lm_head_logits_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  cpu::lm_head_logits(f32(t[0]), f32(t[1]), f32(t[2]), int(rows(t[1])), int(cols(t[1])), int(t[2].shape[0]));
}
}  // namespace strata
