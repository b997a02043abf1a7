// adamw: one AdamW step over parameter slots (Backend::adamw_step, adamw_step_list), called by the optimizer
// (model/train/optimizer.h) after backward; the clip scale is formed on the device from the gradient norm.
#include "engine/ops/op_common.h"

namespace strata {

const OpInfo& op_desc::adamw() {
  static const OpInfo i{OpKind::adamw, "adamw", {}};
  return i;
}

}  // namespace strata
