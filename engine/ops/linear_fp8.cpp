// linear_fp8: y [N, O] = x [N, I] w^T through FP8 GEMMs (fp8: true; engine/fp8.h). Forward: x's E4M3 codes (an
// fp8_cast node shared by the layers reading x) times w cast to E4M3 in the call. Backward: dy cast to E5M2 (both
// layouts) in the call; dx = dy w against w's transposed E4M3 codes, dw = dy^T x against x's saved transposed codes.
// cuBLASLt's FP8 kernels take A transposed and B not (both K-contiguous), which is why the transposes exist.
#include <fmt/format.h>

#include "engine/fp8.h"
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

// Inputs x, x8 (codes), sx (scale block), w, then x8t (the transposed codes) when w is trainable, then b with a bias.
class LinearFp8Op final : public Op {
 public:
  LinearFp8Op(bool trainable, bool bias) : trainable_(trainable), bias_(bias) {}
  const char* name() const override { return "linear_fp8"; }
  OpKind kind() const override { return OpKind::linear_fp8; }
  void forward(Backend& be, const OpArgs& a) override {
    be.linear_fp8_fwd(a.out[0], a.in[1], a.in[2], a.in[3]);
    if (bias_) be.bias_fwd(a.out[0], a.in[bias_at()]);
  }
  void backward(Backend& be, const OpArgs& a) override {
    const int b = bias_at();
    if (bias_ && a.gin[size_t(b)].defined()) be.bias_bwd(a.gin[size_t(b)], a.gout[0], a.acc[size_t(b)]);
    be.linear_fp8_bwd(a.gin[0], a.gin[3], a.gout[0], trainable_ ? a.in[4] : Tensor(), a.in[2], a.in[3], a.acc[0],
                      a.acc[3]);
  }
  // Backward reads the weight, and with a trainable weight x's transposed codes and their scale; never x itself.
  bool saves_input(int i) const override { return i == 3 || (trainable_ && (i == 2 || i == 4)); }
  bool saves_output(int) const override { return false; }

 private:
  int bias_at() const { return trainable_ ? 5 : 4; }
  bool trainable_, bias_;
};

}  // namespace

VId linear_fp8(Tape& t, VId x, const Fp8Codes& q, VId w, VId b, std::string cls) {
  const Value& wv = t.value(w);
  const Shape out = rows_by(t.value(x).shape, wv.shape[0]);
  const int64_t in = wv.shape[1];
  STRATA_CHECK(fp8_shape_ok(out[0], in, out[1]),
               fmt::format("linear_fp8 '{}': [{} x {}] by [{} x {}] is not a multiple of {} in every dimension", cls,
                           out[0], in, out[1], in, fp8::kDimMultiple));
  STRATA_CHECK(q.rows >= 0 && q.scale >= 0 && t.value(q.rows).shape == Shape({out[0], in}),
               "linear_fp8: the codes are not x's");
  const bool trainable = wv.requires_grad;
  STRATA_CHECK(!trainable || q.cols >= 0, "linear_fp8: a trainable weight needs x's transposed codes");
  std::vector<VId> inputs = {x, q.rows, q.scale, w};
  if (trainable) inputs.push_back(q.cols);
  if (b >= 0) {
    STRATA_CHECK(t.value(b).shape.numel() == out[1], "linear_fp8: the bias length is not the output width");
    inputs.push_back(b);
  }
  return t.record1(std::make_unique<LinearFp8Op>(trainable, b >= 0), inputs, {std::move(cls), out, act(t)});
}

}  // namespace ops

namespace {
using namespace ops::detail;
constexpr double kScaleBytes = fp8::kScaleFloats * 4.0;

// linear_fp8_fwd(y, x8, sx, w): w's amax and E4M3 codes, then the GEMM.
// linear_fp8_bwd(dx, dw, dy, x8t, sx, w): dy's amax and E5M2 codes (rows for dx, transposed for dw), w's amax and
// transposed codes (for dx), then the dx and dw GEMMs.
OpTime linear_fp8_price(const OpCall& c, OpSim& sim) {
  const CostModel& cost = sim.cost();
  if (!c.backward) {
    const Tensor &y = c.t[0], &x8 = c.t[1], &w = c.t[3];
    const double n = rows(x8), in = cols(x8), o = double(w.shape[0]);
    double s = cost.fp8_cast(B(w)) + cost.fp8_cast(B(w) + o * in + kScaleBytes);
    s += cost.gemm_fp8(n, o, in, B(x8) + o * in + B(y));
    return {s, 3, true};
  }
  const Tensor &dx = c.t[0], &dw = c.t[1], &dy = c.t[2], &w = c.t[5];
  const double n = rows(dy), o = cols(dy), in = cols(w);
  double s = cost.fp8_cast(B(dy)) + cost.fp8_cast(B(dy) + (double(dx.defined()) + double(dw.defined())) * n * o);
  int kernels = 2;
  if (dx.defined()) {
    s += cost.fp8_cast(B(w)) + cost.fp8_cast(B(w) + o * in + kScaleBytes);
    s += cost.gemm_fp8(n, in, o, n * o + o * in + rw(dx, c.acc[0]));
    kernels += 3;
  }
  if (dw.defined()) {
    s += cost.gemm_fp8(o, in, n, n * o + n * in + rw(dw, c.acc[1]));
    kernels += 1;
  }
  return {s, kernels, false};
}

ScratchList linear_fp8_scratch(const OpCall& c, OpEnv&) {
  const Shape sb{int64_t(fp8::kScaleFloats)};
  ScratchList l = {{scratch_tag::fp8_amax, DType::f32, Shape{kFp8AmaxBlocks}}};
  if (!c.backward) {
    const Tensor& w = c.t[3];
    l.push_back({scratch_tag::fp8_weight, DType::u8, w.shape});
    l.push_back({scratch_tag::fp8_weight_scale, DType::f32, sb});
    return l;
  }
  const Tensor &dx = c.t[0], &dw = c.t[1], &dy = c.t[2], &w = c.t[5];
  const int64_t n = int64_t(rows(dy)), o = int64_t(cols(dy)), in = int64_t(cols(w));
  if (dx.defined()) l.push_back({scratch_tag::fp8_grad, DType::u8, Shape{n, o}});
  if (dw.defined()) l.push_back({scratch_tag::fp8_grad_t, DType::u8, Shape{o, n}});
  l.push_back({scratch_tag::fp8_grad_scale, DType::f32, sb});
  if (dx.defined()) {
    l.push_back({scratch_tag::fp8_weight, DType::u8, Shape{in, o}});
    l.push_back({scratch_tag::fp8_weight_scale, DType::f32, sb});
  }
  return l;
}
}  // namespace

// The cuBLASLt workspace is taken once, when the backend is made.
const OpInfo& op_desc::linear_fp8() {
  static const OpInfo i{
      OpKind::linear_fp8,
      "linear_fp8",
      {scratch_tag::cublaslt, scratch_tag::fp8_amax, scratch_tag::fp8_weight, scratch_tag::fp8_weight_scale,
       scratch_tag::fp8_grad, scratch_tag::fp8_grad_t, scratch_tag::fp8_grad_scale},
      nullptr,
      nullptr,
      linear_fp8_scratch,
      "linear_fp8_fwd",
      "linear_fp8_bwd",
      linear_fp8_price};
  return i;
}

}  // namespace strata
