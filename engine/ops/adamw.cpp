// adamw: one AdamW step over parameter slots (Backend::adamw_step, adamw_step_list), called by the optimizer
// (model/train/optimizer.h) after backward; the clip scale is formed on the device from the gradient norm.
#include <algorithm>

#include "engine/ops/op_common.h"

namespace strata {

namespace {
using namespace ops::detail;

// HBM bytes of one AdamW step: master, m and v read and written, g read; a whole master's compute copy is written,
// a split master's (its high half) read and written.
double adamw_bytes(const AdamWSlot& a) {
  double bytes = 2 * (B(a.master) + B(a.m) + B(a.v) + B(a.m_scale) + B(a.v_scale)) + B(a.g);
  // A split master's high half, or the weights themselves without a master: read and written.
  if (a.param_out.defined() && (!a.master.defined() || a.master.dtype == DType::i16)) return bytes + 2 * B(a.param_out);
  if (a.param_out.defined() && a.param_out.dtype != a.master.dtype) bytes += B(a.param_out);
  return bytes;
}
// 8-bit moments: the kernel is bound by its arithmetic (DeviceProfile::adamw_q8_gelems) or its bytes.
double q8_elems(const AdamWSlot& a) {
  return a.m.dtype == DType::u8 ? double(a.g.numel()) : 0.0;
}
// The cuda backend launches once per kOptimizerListTensors slots (kernels/adamw.cu).
OpTime adamw_price(const OpCall& c, OpSim& sim) {
  sim.optimizer_starts();
  double bytes = 0, q8 = 0;
  for (const AdamWSlot& a : c.slots) bytes += adamw_bytes(a), q8 += q8_elems(a);
  const double t = sim.cost().memory(bytes);
  const double rate = sim.cost().profile().adamw_q8_gelems;
  return {rate > 0 && q8 > 0 ? std::max(t, q8 / (rate * 1e9)) : t, optimizer_list_launches(c.slots.size()), false};
}
}  // namespace

const OpInfo& op_desc::adamw() {
  static const OpInfo i{OpKind::adamw, "adamw", {}, nullptr, nullptr, nullptr, "adamw_step", nullptr, adamw_price};
  return i;
}

}  // namespace strata
