// attention: causal softmax(q k^T / sqrt(D)) v over q [B, T, Hq, D], k/v [B, T, Hkv, D] (GQA), saving lse
// [B, Hq, T] f32; cuDNN on cuda (the flash kernel for packed rows).
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

class AttentionOp final : public Op {
 public:
  AttentionOp(int B, int T, int Hq, int Hkv, int D, double pairs)
      : B_(B), T_(T), Hq_(Hq), Hkv_(Hkv), D_(D), pairs_(pairs) {}
  const char* name() const override { return "attention"; }
  OpKind kind() const override { return OpKind::attention; }
  Tensor q4(const Tensor& x) const { return x.defined() ? x.reshape(Shape{B_, T_, Hq_, D_}) : x; }
  Tensor kv4(const Tensor& x) const { return x.defined() ? x.reshape(Shape{B_, T_, Hkv_, D_}) : x; }
  // Packed rows: the positions are input 3 (batch data, external, like the token ids).
  AttnSegments segments(const OpArgs& a) const {
    return a.in.size() > 3 ? AttnSegments{a.in[3], pairs_} : AttnSegments{};
  }
  void forward(Backend& be, const OpArgs& a) override {
    be.attention_fwd(q4(a.out[0]), a.out[1], q4(a.in[0]), kv4(a.in[1]), kv4(a.in[2]), segments(a));
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (!a.gout[0].defined()) return;
    be.attention_bwd(q4(a.gin[0]), kv4(a.gin[1]), kv4(a.gin[2]), q4(a.gout[0]), q4(a.in[0]), kv4(a.in[1]), kv4(a.in[2]),
                     q4(a.out[0]), a.out[1], a.acc[0], a.acc[1], a.acc[2], segments(a));
  }
  bool saves_input(int) const override { return true; }
  bool saves_output(int) const override { return true; }

 private:
  int B_, T_, Hq_, Hkv_, D_;
  double pairs_;
};

}  // namespace

std::pair<VId, VId> attention(Tape& t, VId q, VId k, VId v, int B, int T, int Hq, int Hkv, int D,
                              const std::string& prefix, VId packed_pos, double pairs) {
  std::vector<VId> in = {q, k, v};
  if (packed_pos >= 0) {
    STRATA_CHECK(t.value(packed_pos).dtype == DType::i32 && t.value(packed_pos).shape.numel() == int64_t(B) * T,
                 "attention: the packed positions are not [B*T] i32");
    in.push_back(packed_pos);
  }
  auto ids = t.record(std::make_unique<AttentionOp>(B, T, Hq, Hkv, D, pairs), in,
                      {{prefix + ".out", t.value(q).shape, act(t)}, {prefix + ".lse", Shape{B, Hq, T}, DType::f32}});
  return {ids[0], ids[1]};
}

}  // namespace ops

namespace {
using namespace ops::detail;

// attention_fwd(out, lse, q, k, v, pos) and attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, pos): pos defined for
// packed rows, which take the flash kernel on cuda (no workspace; the work is the pairs the segments attend).
const Tensor& q_of(const OpCall& c) {
  return c.t[c.backward ? 4 : 2];
}
const Tensor& k_of(const OpCall& c) {
  return c.t[c.backward ? 5 : 3];
}
bool packed(const OpCall& c) {
  return c.t[c.backward ? 9 : 5].defined();
}
// A gradient nobody needs still lands somewhere: bf16 scratch shaped like its input (backward), then the cuDNN
// workspace (unpacked rows).
ScratchList attention_scratch(const OpCall& c, OpEnv& env) {
  const Tensor &q = q_of(c), &k = k_of(c);
  ScratchList l;
  if (c.backward) l = attention_unused_grad_scratch(c.t[0], c.t[1], c.t[2], q, k, c.t[6]);
  if (packed(c)) return l;
  const ScratchList ws = attention_workspace_scratch(
      env.attention_workspace_bytes(int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), int(k.shape[2]), int(q.shape[3]),
                                    c.backward, c.backward && (c.acc[0] || c.acc[1] || c.acc[2])));
  l.insert(l.end(), ws.begin(), ws.end());
  return l;
}
double attention_time(const OpCall& c, const CostModel& cost) {
  const Tensor& q = q_of(c);
  const double b = double(q.shape[0]), t = double(q.shape[1]), hq = double(q.shape[2]), d = double(q.shape[3]);
  return packed(c) ? cost.attention_pairs(b * t, c.pairs, hq, d, c.backward) : cost.attention(b, t, hq, d, c.backward);
}
// On cuda one mode serves all three gradients: an overwrite lets cuDNN write them in place; adding zeroes the
// overwritten ones and goes through scratch and three adds.
OpTime attention_price(const OpCall& c, OpSim& sim) {
  const Tensor &q = q_of(c), &k = k_of(c);
  if (!packed(c))  // packed rows run the flash kernels, which are not tuned
    sim.attention_problem(int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), int(k.shape[2]), int(q.shape[3]),
                          c.backward);
  if (!c.backward) return {attention_time(c, sim.cost())};
  const Tensor &dq = c.t[0], &dk = c.t[1], &dv = c.t[2];
  double extra = 0;
  int kernels = 1;
  const bool accumulate = c.acc[0] || c.acc[1] || c.acc[2];
  if (sim.mirrors_cuda() && accumulate) {
    if (!c.acc[0] && dq.defined()) sim.zero_first(dq);
    if (!c.acc[1] && dk.defined()) sim.zero_first(dk);
    if (!c.acc[2] && dv.defined()) sim.zero_first(dv);
  }
  if (sim.mirrors_cuda() && !packed(c) && sim.attention_uses_cudnn(int(q.shape[3])) && accumulate) {
    // cuDNN overwrites: the engine accumulates through scratch + three adds.
    const double nq = double(q.numel()), nkv = double(k.numel());
    extra += sim.cost().memory(3 * 2 * nq) + 2 * sim.cost().memory(3 * 2 * nkv);
    kernels += 3;
  }
  return {attention_time(c, sim.cost()) + extra, kernels, false};
}

}  // namespace

const OpInfo& op_desc::attention() {
  using namespace scratch_tag;
  static const OpInfo i{OpKind::attention, "attention",     {attn_unused_grad, attn_workspace},
                        nullptr,           nullptr,         attention_scratch,
                        "attention_fwd",   "attention_bwd", attention_price};
  return i;
}

}  // namespace strata
