// rmsnorm: out = x / sqrt(mean(x^2) + eps) * w over the last dimension, saving rstd [rows] f32.
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

// heads > 1: x [N, H*D] with w [D] normalises each head's D values, as rows of an [N*H, D] view.
class RmsNormOp final : public Op {
 public:
  RmsNormOp(float eps, int heads) : eps_(eps), heads_(heads) {}
  const char* name() const override { return "rmsnorm"; }
  OpKind kind() const override { return OpKind::rmsnorm; }
  void forward(Backend& be, const OpArgs& a) override {
    be.rmsnorm_fwd(rows(a.out[0]), a.out[1], rows(a.in[0]), a.in[1], eps_);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (a.gout[0].defined())
      be.rmsnorm_bwd(rows(a.gin[0]), a.gin[1], rows(a.gout[0]), rows(a.in[0]), a.in[1], a.out[1], a.acc[0], a.acc[1]);
  }
  bool saves_input(int) const override { return true; }
  bool saves_output(int i) const override { return i == 1; }

 private:
  Tensor rows(Tensor x) const {
    if (heads_ == 1 || !x.defined()) return x;
    const int64_t cols = x.shape[x.shape.nd - 1] / heads_;
    return x.reshape(Shape{x.numel() / cols, cols});
  }
  float eps_;
  int heads_;
};

}  // namespace

std::pair<VId, VId> rmsnorm(Tape& t, VId x, VId w, float eps, const std::string& prefix) {
  const Shape& s = t.value(x).shape;
  auto ids = t.record(std::make_unique<RmsNormOp>(eps, 1), {x, w},
                      {{prefix + ".out", s, act(t)}, {prefix + ".rstd", Shape{s.numel() / s[s.nd - 1]}, DType::f32}});
  return {ids[0], ids[1]};
}

std::pair<VId, VId> rmsnorm_heads(Tape& t, VId x, VId w, int heads, float eps, const std::string& prefix) {
  const Shape& s = t.value(x).shape;
  const int64_t D = t.value(w).shape.numel();
  STRATA_CHECK(heads > 0 && s[s.nd - 1] == heads * D,
               "rmsnorm_heads: the last dimension is not heads x the weight's length");
  auto ids = t.record(std::make_unique<RmsNormOp>(eps, heads), {x, w},
                      {{prefix + ".out", s, act(t)}, {prefix + ".rstd", Shape{s.numel() / D}, DType::f32}});
  return {ids[0], ids[1]};
}

}  // namespace ops

namespace {
using namespace ops::detail;
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
ScratchList rmsnorm_scratch(const OpCall& c, OpEnv&) {
  const Tensor& dw = c.t[1];
  return c.backward && dw.defined() && dw.dtype == DType::bf16 ? grad_sums_scratch(dw.numel()) : ScratchList{};
}
}  // namespace

const OpInfo& op_desc::rmsnorm() {
  static const OpInfo i{OpKind::rmsnorm, "rmsnorm",    {scratch_tag::grad_sums},
                        rmsnorm_fwd,     rmsnorm_bwd,  rmsnorm_scratch,
                        "rmsnorm_fwd",   "rmsnorm_bwd"};
  return i;
}

}  // namespace strata
