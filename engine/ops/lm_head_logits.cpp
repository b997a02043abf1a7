// lm_head_logits: logits [N, V] f32 = x [N, C] w^T (w [V, C]), for evaluation and generation; no backward.
#include "engine/ops/op_common.h"

namespace strata {

// One GEMM, priced by flops in the sim.
const OpInfo& op_desc::lm_head_logits() {
  static const OpInfo i{OpKind::lm_head_logits, "lm_head_logits", {}};
  return i;
}

}  // namespace strata
