// linear: y [N, O] = x [N, I] w^T (w [O, I]), a cuBLASLt GEMM on cuda; with a bias, bias_fwd adds it in place.
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

// Inputs x, w and, with a bias, b.
class LinearOp final : public Op {
 public:
  LinearOp(bool weight_trainable, bool bias) : weight_trainable_(weight_trainable), bias_(bias) {}
  const char* name() const override { return "linear"; }
  OpKind kind() const override { return OpKind::linear; }
  void forward(Backend& be, const OpArgs& a) override {
    be.linear_fwd(a.out[0], a.in[0], a.in[1]);
    if (bias_) be.bias_fwd(a.out[0], a.in[2]);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (bias_ && a.gin[2].defined()) be.bias_bwd(a.gin[2], a.gout[0], a.acc[2]);
    be.linear_bwd(a.gin[0], a.gin[1], a.gout[0], a.in[0], a.in[1], a.acc[0], a.acc[1]);
  }
  // x is needed only for the weight gradient: a frozen linear saves nothing but its weight (and bias).
  bool saves_input(int i) const override { return i >= 1 || weight_trainable_; }
  bool saves_output(int) const override { return false; }

 private:
  bool weight_trainable_, bias_;
};

}  // namespace

VId linear(Tape& t, VId x, VId w, std::string cls) {
  return linear(t, x, w, -1, std::move(cls));
}

VId linear(Tape& t, VId x, VId w, VId b, std::string cls) {
  Shape out = rows_by(t.value(x).shape, t.value(w).shape[0]);
  const bool bias = b >= 0;
  if (bias) STRATA_CHECK(t.value(b).shape.numel() == out[1], "linear: the bias length is not the output width");
  std::vector<VId> in = {x, w};
  if (bias) in.push_back(b);
  return t.record1(std::make_unique<LinearOp>(t.value(w).requires_grad, bias), in, {std::move(cls), out, act(t)});
}

}  // namespace ops

namespace {
using namespace ops::detail;
// GEMMs: flops or bytes, whichever binds. linear_fwd(y, x, w); linear_bwd(dx, dw, dy, x, w) runs the dx and the
// dw GEMM for the gradients wanted.
OpTime linear_price(const OpCall& c, OpSim& sim) {
  if (!c.backward) {
    const Tensor &y = c.t[0], &x = c.t[1], &w = c.t[2];
    return {gemm_time(sim, 0, rows(x), double(w.shape[0]), cols(x), B(x) + B(w) + B(y))};
  }
  const Tensor &dx = c.t[0], &dw = c.t[1], &dy = c.t[2], &w = c.t[4];
  const double n = rows(dy), in = cols(w), o = double(w.shape[0]);
  double t = 0;
  if (dx.defined()) t += gemm_time(sim, 1, n, in, o, B(dy) + B(w) + rw(dx, c.acc[0]));
  if (dw.defined()) t += gemm_time(sim, 2, o, in, n, B(dy) + n * in * dtype_size(dy.dtype) + rw(dw, c.acc[1]));
  return {t, int(dx.defined()) + int(dw.defined()), false};
}
}  // namespace

// The cuBLASLt workspace is taken once, when the backend is made.
const OpInfo& op_desc::linear() {
  static const OpInfo i{OpKind::linear, "linear",    {scratch_tag::cublaslt}, nullptr, nullptr, nullptr, "linear_fwd",
                        "linear_bwd",   linear_price};
  return i;
}

}  // namespace strata
