// block_copy: strided blocks of one tensor copied (or added) into another (engine/op_params.h BlockCopy), the
// data movement of sequence parallelism's all-to-alls (engine/ops/seq.cpp records them).
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {

const OpInfo& op_desc::block_copy() {
  static const OpInfo i{OpKind::block_copy, "block_copy", {scratch_tag::seq_parallel}};
  return i;
}

}  // namespace strata
