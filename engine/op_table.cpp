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
OpKernelBytes one(double b) {
  return OpKernelBytes{}.add(b);
}
// embedding_fwd(out, tokens, wte): a row gathered per token.
OpKernelBytes embedding_fwd(const OpCall& c) {
  return one(2 * B(c.t[0]) + B(c.t[1]));
}
// rmsnorm_fwd(out, rstd, x, w)
OpKernelBytes rmsnorm_fwd(const OpCall& c) {
  return one(B(c.t[2]) + B(c.t[0]) + B(c.t[3]) + B(c.t[1]));
}
// rmsnorm_bwd(dx, dw, dout, x, w, rstd): f32 dw added into by atomics; bf16 dw through fp32 column sums, folded.
OpKernelBytes rmsnorm_bwd(const OpCall& c) {
  const Tensor &dx = c.t[0], &dw = c.t[1];
  const double in = B(c.t[2]) + B(c.t[3]) + B(c.t[4]) + B(c.t[5]);
  if (!dw.defined() || dw.dtype != DType::bf16) return one(in + rw(dx, c.acc[0]) + 2 * B(dw));
  const double sum_bytes = 4.0 * double(dw.numel());
  return OpKernelBytes{}.add(in + rw(dx, c.acc[0]) + 2 * sum_bytes).add(sum_bytes + rw(dw, c.acc[1]));
}
ScratchList rmsnorm_scratch(const OpCall& c) {
  const Tensor& dw = c.t[1];
  return c.backward && dw.defined() && dw.dtype == DType::bf16 ? grad_sums_scratch(dw.numel()) : ScratchList{};
}
// rope_fwd(out, x, pos, inv_freq)
OpKernelBytes rope_fwd(const OpCall& c) {
  return one(B(c.t[1]) + B(c.t[0]) + B(c.t[2]));
}
// rope_bwd(dx, dout, pos, inv_freq)
OpKernelBytes rope_bwd(const OpCall& c) {
  return one(B(c.t[1]) + rw(c.t[0], c.acc[0]) + B(c.t[2]));
}
// swiglu_fwd(out, gate, up)
OpKernelBytes swiglu_fwd(const OpCall& c) {
  return one(B(c.t[1]) + B(c.t[2]) + B(c.t[0]));
}
// swiglu_bwd(dgate, dup, dout, gate, up)
OpKernelBytes swiglu_bwd(const OpCall& c) {
  return one(B(c.t[2]) + B(c.t[3]) + B(c.t[4]) + rw(c.t[0], c.acc[0]) + rw(c.t[1], c.acc[1]));
}
// add_fwd(out, a, b)
OpKernelBytes add_fwd(const OpCall& c) {
  return one(B(c.t[1]) + B(c.t[2]) + B(c.t[0]));
}
// add_bwd(da, db, dout)
OpKernelBytes add_bwd(const OpCall& c) {
  return one(B(c.t[2]) + rw(c.t[0], c.acc[0]) + rw(c.t[1], c.acc[1]));
}
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
ScratchList bias_scratch(const OpCall& c) {
  const Tensor& db = c.t[0];
  return c.backward && db.defined() && db.dtype == DType::bf16 ? grad_sums_scratch(db.numel()) : ScratchList{};
}

using namespace scratch_tag;

const std::array<OpInfo, size_t(OpKind::count_)>& table() {
  static const std::array<OpInfo, size_t(OpKind::count_)> t = {{
      {OpKind::embedding, "embedding", {grad_rows, grad_row_map}, embedding_fwd},
      {OpKind::rmsnorm,
       "rmsnorm",
       {grad_sums},
       rmsnorm_fwd,
       rmsnorm_bwd,
       rmsnorm_scratch,
       "rmsnorm_fwd",
       "rmsnorm_bwd"},
      {OpKind::linear, "linear", {cublaslt}},
      {OpKind::rope, "rope", {}, rope_fwd, rope_bwd},
      {OpKind::attention, "attention", {attn_unused_grad, attn_workspace}},
      {OpKind::swiglu, "swiglu", {}, swiglu_fwd, swiglu_bwd, nullptr, "swiglu_fwd", "swiglu_bwd"},
      {OpKind::add, "add", {}, add_fwd, add_bwd, nullptr, "add_fwd", "add_bwd"},
      {OpKind::bias, "bias", {grad_sums}, bias_fwd, bias_bwd, bias_scratch, "bias_fwd", "bias_bwd"},
      {OpKind::lm_head_ce, "lm_head_ce", {logits_chunk, dlogits_chunk, token_loss, n_valid}},
      {OpKind::lm_head_logits, "lm_head_logits", {}},
      {OpKind::adamw, "adamw", {}},
      {OpKind::grad_norm, "grad_norm", {}},
      {OpKind::block_copy, "block_copy", {seq_parallel}},
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
