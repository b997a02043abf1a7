// rope: the rotary position embedding of x [N, H, D] at positions pos [N] i32 with frequencies inv_freq [D/2] f32,
// cos and sin scaled by the attention factor (yarn, longrope; 1 otherwise).
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

class RopeOp final : public Op {
 public:
  RopeOp(int heads, float attention_factor) : heads_(heads), attention_factor_(attention_factor) {}
  const char* name() const override { return "rope"; }
  OpKind kind() const override { return OpKind::rope; }
  Tensor heads(const Tensor& x) const {
    if (!x.defined()) return x;
    int64_t n = x.shape[0], hd = x.shape[1];
    return x.reshape(Shape{n, heads_, hd / heads_});
  }
  void forward(Backend& be, const OpArgs& a) override {
    be.rope_fwd(heads(a.out[0]), heads(a.in[0]), a.in[1], a.in[2], attention_factor_);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (a.gin[0].defined())
      be.rope_bwd(heads(a.gin[0]), heads(a.gout[0]), a.in[1], a.in[2], a.acc[0], attention_factor_);
  }
  bool saves_input(int i) const override { return i != 0; }  // positions and frequencies (external)
  bool saves_output(int) const override { return false; }

 private:
  int heads_;
  float attention_factor_;
};

}  // namespace

VId rope(Tape& t, VId x, VId pos, VId inv_freq, int heads, std::string cls, float attention_factor) {
  return t.record1(std::make_unique<RopeOp>(heads, attention_factor), {x, pos, inv_freq},
                   {std::move(cls), t.value(x).shape, act(t)});
}

}  // namespace ops

namespace {
using namespace ops::detail;
// rope_fwd(out, x, pos, inv_freq)
OpKernelBytes rope_fwd(const OpCall& c) {
  return one(B(c.t[1]) + B(c.t[0]) + B(c.t[2]));
}
// rope_bwd(dx, dout, pos, inv_freq)
OpKernelBytes rope_bwd(const OpCall& c) {
  return one(B(c.t[1]) + rw(c.t[0], c.acc[0]) + B(c.t[2]));
}
}  // namespace

const OpInfo& op_desc::rope() {
  static const OpInfo i{OpKind::rope, "rope", {}, rope_fwd, rope_bwd, nullptr, "rope_fwd", "rope_bwd"};
  return i;
}

}  // namespace strata
