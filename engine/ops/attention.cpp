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

// Priced by flops in the sim; its scratch is the cuDNN workspace and the gradients nobody wants.
const OpInfo& op_desc::attention() {
  using namespace scratch_tag;
  static const OpInfo i{OpKind::attention, "attention", {attn_unused_grad, attn_workspace}};
  return i;
}

}  // namespace strata
