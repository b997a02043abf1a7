// bias: a projection's bias, y [N, O] += b [O] in place; db [O] (+)= the column sums of dy. Recorded inside the
// linear and mlp_tiled tape ops, never on its own.
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {

namespace {
using namespace ops::detail;
// bias_fwd(y, b): y read and written in place.
OpKernelBytes bias_fwd(const OpCall& c) {
  return one(2 * B(c.t[0]) + B(c.t[1]));
}
// bias_bwd(db, dy): nothing without db; a bf16 db through fp32 column sums, as rmsnorm's.
OpKernelBytes bias_bwd(const OpCall& c) {
  const Tensor &db = c.t[0], &dy = c.t[1];
  if (!db.defined()) return {};
  if (db.dtype != DType::bf16) return one(B(dy) + rw(db, c.acc[0]));
  const double sum_bytes = 4.0 * double(db.numel());
  return OpKernelBytes{}.add(B(dy) + sum_bytes).add(sum_bytes + rw(db, c.acc[0]));
}
ScratchList bias_scratch(const OpCall& c, OpEnv&) {
  const Tensor& db = c.t[0];
  return c.backward && db.defined() && db.dtype == DType::bf16 ? grad_sums_scratch(db.numel()) : ScratchList{};
}
}  // namespace

const OpInfo& op_desc::bias() {
  static const OpInfo i{OpKind::bias, "bias",    {scratch_tag::grad_sums}, bias_fwd, bias_bwd, bias_scratch,
                        "bias_fwd",   "bias_bwd"};
  return i;
}

}  // namespace strata
