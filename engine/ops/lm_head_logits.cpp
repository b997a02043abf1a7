// lm_head_logits: logits [N, V] f32 = x [N, C] w^T (w [V, C]), for evaluation and generation; no backward.
#include "engine/ops/op_common.h"

namespace strata {

namespace {
using namespace ops::detail;
// lm_head_logits(logits, x, w): one GEMM.
OpTime lm_head_logits_price(const OpCall& c, OpSim& sim) {
  const Tensor &logits = c.t[0], &x = c.t[1], &w = c.t[2];
  return {gemm_time(sim, 0, rows(x), double(w.shape[0]), cols(x), B(x) + B(w) + B(logits))};
}
}  // namespace

const OpInfo& op_desc::lm_head_logits() {
  static const OpInfo i{
      OpKind::lm_head_logits, "lm_head_logits", {}, nullptr, nullptr, nullptr, "lm_head_logits", nullptr,
      lm_head_logits_price};
  return i;
}

}  // namespace strata
