// block_copy: strided blocks of one tensor copied (or added) into another (engine/op_params.h BlockCopy), the
// data movement of sequence parallelism's all-to-alls (engine/ops/seq.cpp records them).
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {

namespace {
// block_copy(out, in; accumulate): read, written (and read again when it adds). Never counted as recompute: the
// backend cannot tell a replayed all-to-all's copies from backward's.
OpTime block_copy_price(const OpCall& c, OpSim& sim) {
  const double bytes = double(static_cast<const BlockCopy*>(c.params)->count()) * double(dtype_size(c.t[1].dtype));
  return {sim.cost().memory((c.acc[0] ? 3 : 2) * bytes), 1, false};
}
}  // namespace

// Its scratch tag is sequence parallelism's blocks, which the tape op (engine/ops/seq.cpp) takes around its copies.
const OpInfo& op_desc::block_copy() {
  static const OpInfo i{
      OpKind::block_copy, "block_copy", {scratch_tag::seq_parallel}, nullptr, nullptr, nullptr, "block_copy", nullptr,
      block_copy_price};
  return i;
}

}  // namespace strata
