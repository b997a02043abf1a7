// add: out = a + scale * b; the residual add (scale 1) passes its gradient through by aliasing.
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

class AddOp final : public Op {
 public:
  explicit AddOp(float scale) : scale_(scale) {}
  const char* name() const override { return "add"; }
  OpKind kind() const override { return OpKind::add; }
  void forward(Backend& be, const OpArgs& a) override { be.add_fwd(a.out[0], a.in[0], a.in[1], scale_); }
  void backward(Backend& be, const OpArgs& a) override {
    be.add_bwd(a.gin[0], a.gin[1], a.gout[0], scale_, a.acc[0], a.acc[1]);
  }
  bool saves_input(int) const override { return false; }
  bool saves_output(int) const override { return false; }
  // The residual add: da = db = dout, which the tape serves by aliasing gradient buffers.
  bool passes_grad() const override { return scale_ == 1.0f; }

 private:
  float scale_;
};

}  // namespace

VId add(Tape& t, VId a, VId b, float scale, std::string cls) {
  return t.record1(std::make_unique<AddOp>(scale), {a, b}, {std::move(cls), t.value(a).shape, act(t)});
}

}  // namespace ops

namespace {
using namespace ops::detail;
// add_fwd(out, a, b)
OpKernelBytes add_fwd(const OpCall& c) {
  return one(B(c.t[1]) + B(c.t[2]) + B(c.t[0]));
}
// add_bwd(da, db, dout)
OpKernelBytes add_bwd(const OpCall& c) {
  return one(B(c.t[2]) + rw(c.t[0], c.acc[0]) + rw(c.t[1], c.acc[1]));
}
}  // namespace

const OpInfo& op_desc::add() {
  static const OpInfo i{OpKind::add, "add", {}, add_fwd, add_bwd, nullptr, "add_fwd", "add_bwd"};
  return i;
}

}  // namespace strata
