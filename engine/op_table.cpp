#include "engine/op_table.h"

#include <array>

#include "engine/error.h"

namespace strata {

namespace {

const std::array<const OpInfo*, size_t(OpKind::count_)>& table() {
#define STRATA_OP_ENTRY(op) &op_desc::op(),
  static const std::array<const OpInfo*, size_t(OpKind::count_)> t = {STRATA_OPS(STRATA_OP_ENTRY)};
#undef STRATA_OP_ENTRY
  return t;
}

}  // namespace

const OpInfo& op_info(OpKind k) {
  const OpInfo& i = *table()[size_t(k)];
  STRATA_CHECK(i.kind == k, "op table: entries out of OpKind order");
  return i;
}

const char* op_kind_name(OpKind k) {
  return op_info(k).name;
}

}  // namespace strata
