// swiglu: out = silu(gate) * up, elementwise over gate, up [N, F].
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

class SwigluOp final : public Op {
 public:
  const char* name() const override { return "swiglu"; }
  OpKind kind() const override { return OpKind::swiglu; }
  void forward(Backend& be, const OpArgs& a) override { be.swiglu_fwd(a.out[0], a.in[0], a.in[1]); }
  void backward(Backend& be, const OpArgs& a) override {
    be.swiglu_bwd(a.gin[0], a.gin[1], a.gout[0], a.in[0], a.in[1], a.acc[0], a.acc[1]);
  }
  bool saves_input(int) const override { return true; }
  bool saves_output(int) const override { return false; }
};

}  // namespace

VId swiglu(Tape& t, VId gate, VId up, std::string cls) {
  return t.record1(std::make_unique<SwigluOp>(), {gate, up}, {std::move(cls), t.value(gate).shape, act(t)});
}

}  // namespace ops

namespace {
using namespace ops::detail;
// swiglu_fwd(out, gate, up)
OpKernelBytes swiglu_fwd(const OpCall& c) {
  return one(B(c.t[1]) + B(c.t[2]) + B(c.t[0]));
}
// swiglu_bwd(dgate, dup, dout, gate, up)
OpKernelBytes swiglu_bwd(const OpCall& c) {
  return one(B(c.t[2]) + B(c.t[3]) + B(c.t[4]) + rw(c.t[0], c.acc[0]) + rw(c.t[1], c.acc[1]));
}
}  // namespace

const OpInfo& op_desc::swiglu() {
  static const OpInfo i{OpKind::swiglu, "swiglu", {}, swiglu_fwd, swiglu_bwd, nullptr, "swiglu_fwd", "swiglu_bwd"};
  return i;
}

}  // namespace strata
