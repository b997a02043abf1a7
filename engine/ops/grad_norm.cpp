// grad_norm: the sum of squares of gradients into a device scalar (Backend::grad_norm_sq and its list and ZeRO-2
// part forms), which AdamW's clipping reads without a host sync.
#include "engine/ops/op_common.h"

namespace strata {

namespace {
using namespace ops::detail;
// The trainer sums the norm in backward, as gradients become final: backward time. form 0: grad_norm_sq(out, g);
// 1: the list form, one cuda launch per kOptimizerListTensors tensors; 2: grad_norm_sq_part(parts, g), a
// memset-free sum into its part; 3: grad_norm_sq_add_parts(out, parts; n), one single-thread kernel.
OpTime grad_norm_price(const OpCall& c, OpSim& sim) {
  const CostModel& cost = sim.cost();
  switch (c.form) {
    case 0:
    case 2:
      return {cost.memory(B(c.t[1])), 1, false};
    case 1: {
      double bytes = 0;
      for (const Tensor& g : c.tensors) bytes += B(g);
      return {cost.memory(bytes), optimizer_list_launches(c.tensors.size()), false};
    }
    default:
      return {cost.memory(double(c.n) * 8 + 8), 1, false};
  }
}
}  // namespace

const OpInfo& op_desc::grad_norm() {
  static const OpInfo i{OpKind::grad_norm, "grad_norm",    {}, nullptr, nullptr, nullptr, "grad_norm_sq",
                        "grad_norm_sq",    grad_norm_price};
  return i;
}

}  // namespace strata
