#include "engine/op_table.h"

#include "engine/op_scratch.h"

namespace strata {

namespace {

double B(const Tensor& t) {
  return t.defined() ? double(t.bytes()) : 0.0;
}
// Bytes a gradient write moves: read and written when it adds, written when it overwrites.
double rw(const Tensor& g, bool acc) {
  return (acc ? 2.0 : 1.0) * B(g);
}

// Each cost sums its terms in the order the sim always has, so forecasts stay bit-identical.
// embedding_fwd(out, tokens, wte): a row gathered per token.
double embedding_fwd(const OpCostArgs& a) {
  return 2 * B(a.t[0]) + B(a.t[1]);
}
// rmsnorm_fwd(out, rstd, x, w)
double rmsnorm_fwd(const OpCostArgs& a) {
  return B(a.t[2]) + B(a.t[0]) + B(a.t[3]) + B(a.t[1]);
}
// rmsnorm_bwd(dx, dw, dout, x, w, rstd), dw f32 (added into by atomics)
double rmsnorm_bwd(const OpCostArgs& a) {
  return B(a.t[2]) + B(a.t[3]) + B(a.t[4]) + B(a.t[5]) + rw(a.t[0], a.acc[0]) + 2 * B(a.t[1]);
}
// rope_fwd(out, x, pos, inv_freq)
double rope_fwd(const OpCostArgs& a) {
  return B(a.t[1]) + B(a.t[0]) + B(a.t[2]);
}
// rope_bwd(dx, dout, pos, inv_freq)
double rope_bwd(const OpCostArgs& a) {
  return B(a.t[1]) + rw(a.t[0], a.acc[0]) + B(a.t[2]);
}
// swiglu_fwd(out, gate, up)
double swiglu_fwd(const OpCostArgs& a) {
  return B(a.t[1]) + B(a.t[2]) + B(a.t[0]);
}
// swiglu_bwd(dgate, dup, dout, gate, up)
double swiglu_bwd(const OpCostArgs& a) {
  return B(a.t[2]) + B(a.t[3]) + B(a.t[4]) + rw(a.t[0], a.acc[0]) + rw(a.t[1], a.acc[1]);
}
// add_fwd(out, a, b)
double add_fwd(const OpCostArgs& a) {
  return B(a.t[1]) + B(a.t[2]) + B(a.t[0]);
}
// add_bwd(da, db, dout)
double add_bwd(const OpCostArgs& a) {
  return B(a.t[2]) + rw(a.t[0], a.acc[0]) + rw(a.t[1], a.acc[1]);
}
// bias_fwd(y, b): y read and written in place.
double bias_fwd(const OpCostArgs& a) {
  return 2 * B(a.t[0]) + B(a.t[1]);
}
// bias_bwd(db, dy), db f32
double bias_bwd(const OpCostArgs& a) {
  return B(a.t[1]) + rw(a.t[0], a.acc[0]);
}

using namespace scratch_tag;

const std::array<OpInfo, size_t(OpKind::count_)>& table() {
  static const std::array<OpInfo, size_t(OpKind::count_)> t = {{
      {OpKind::embedding, "embedding", {grad_rows, grad_row_map}, embedding_fwd, nullptr},
      {OpKind::rmsnorm, "rmsnorm", {grad_sums}, rmsnorm_fwd, rmsnorm_bwd},
      {OpKind::linear, "linear", {cublaslt}, nullptr, nullptr},
      {OpKind::rope, "rope", {}, rope_fwd, rope_bwd},
      {OpKind::attention, "attention", {attn_unused_grad, attn_workspace}, nullptr, nullptr},
      {OpKind::swiglu, "swiglu", {}, swiglu_fwd, swiglu_bwd},
      {OpKind::add, "add", {}, add_fwd, add_bwd},
      {OpKind::bias, "bias", {grad_sums}, bias_fwd, bias_bwd},
      {OpKind::lm_head_ce, "lm_head_ce", {logits_chunk, dlogits_chunk, token_loss, n_valid}, nullptr, nullptr},
      {OpKind::lm_head_logits, "lm_head_logits", {}, nullptr, nullptr},
      {OpKind::adamw, "adamw", {}, nullptr, nullptr},
      {OpKind::grad_norm, "grad_norm", {}, nullptr, nullptr},
      {OpKind::block_copy, "block_copy", {seq_parallel}, nullptr, nullptr},
  }};
  return t;
}

}  // namespace

const OpInfo& op_info(OpKind k) {
  const OpInfo& i = table()[size_t(k)];
  STRATA_CHECK(i.kind == k, "op table: entries out of OpKind order");
  return i;
}

const char* op_kind_name(OpKind k) {
  return op_info(k).name;
}

}  // namespace strata
