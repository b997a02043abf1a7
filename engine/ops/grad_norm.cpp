// grad_norm: the sum of squares of gradients into a device scalar (Backend::grad_norm_sq and its list and ZeRO-2
// part forms), which AdamW's clipping reads without a host sync.
#include "engine/ops/op_common.h"

namespace strata {

const OpInfo& op_desc::grad_norm() {
  static const OpInfo i{OpKind::grad_norm, "grad_norm", {}};
  return i;
}

}  // namespace strata
