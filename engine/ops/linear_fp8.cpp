// linear_fp8: y [N, O] = x [N, I] w^T through FP8 GEMMs (fp8: true; engine/fp8.h). Forward: x's E4M3 codes times
// w's, each an fp8_cast node (x's shared by the layers reading x; w's once per tape). Backward: dy cast to E5M2
// (both layouts) in the call; dx = dy w against w's transposed codes, dw = dy^T x against x's transposed codes.
// cuBLASLt's FP8 kernels take A transposed and B not (both K-contiguous), which is why the transposes exist. Every
// code the GEMMs read is a slot of the tape (a class "<cls>.fp8" of x's, "<cls>.wfp8" of w's, with "t" for the
// transposes): the planner keeps, recomputes (casts again) or moves them as any other.
#include <fmt/format.h>

#include "engine/fp8.h"
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

// Inputs x, x8, sx, w, w8, sw; then w8t when x takes a gradient, x8t when w does; then b with a bias. Backward
// reads only the transposed codes and their scales, never x or w.
class LinearFp8Op final : public Op {
 public:
  LinearFp8Op(bool dx, bool trainable, bool bias) : dx_(dx), trainable_(trainable), bias_(bias) {}
  const char* name() const override { return "linear_fp8"; }
  OpKind kind() const override { return OpKind::linear_fp8; }
  void forward(Backend& be, const OpArgs& a) override {
    be.linear_fp8_fwd(a.out[0], a.in[1], a.in[2], a.in[4], a.in[5]);
    if (bias_) be.bias_fwd(a.out[0], a.in[size_t(bias_at())]);
  }
  void backward(Backend& be, const OpArgs& a) override {
    const int b = bias_at();
    if (bias_ && a.gin[size_t(b)].defined()) be.bias_bwd(a.gin[size_t(b)], a.gout[0], a.acc[size_t(b)]);
    STRATA_CHECK(dx_ || !a.gin[0].defined(), "linear_fp8: x's gradient without w's transposed codes");
    be.linear_fp8_bwd(a.gin[0], a.gin[3], a.gout[0], trainable_ ? a.in[size_t(x8t_at())] : Tensor(), a.in[2],
                      dx_ ? a.in[6] : Tensor(), a.in[5], a.acc[0], a.acc[3]);
  }
  bool saves_input(int i) const override {
    return (dx_ && (i == 5 || i == 6)) || (trainable_ && (i == 2 || i == x8t_at()));
  }
  bool saves_output(int) const override { return false; }
  // The transposed codes are backward's alone: the first forward under recompute leaves them to the replays.
  bool forward_reads(int i) const override { return !(dx_ && i == 6) && !(trainable_ && i == x8t_at()); }

 private:
  int x8t_at() const { return dx_ ? 7 : 6; }
  int bias_at() const { return 6 + int(dx_) + int(trainable_); }
  bool dx_, trainable_, bias_;
};

}  // namespace

VId linear_fp8(Tape& t, VId x, const Fp8Codes& q, VId w, const Fp8Codes& wq, VId b, std::string cls) {
  const Value& wv = t.value(w);
  const Shape out = rows_by(t.value(x).shape, wv.shape[0]);
  const int64_t in = wv.shape[1];
  STRATA_CHECK(fp8_shape_ok(out[0], in, out[1]),
               fmt::format("linear_fp8 '{}': [{} x {}] by [{} x {}] is not a multiple of {} in every dimension", cls,
                           out[0], in, out[1], in, fp8::kDimMultiple));
  STRATA_CHECK(q.rows >= 0 && q.scale >= 0 && t.value(q.rows).shape == Shape({out[0], in}),
               "linear_fp8: the codes are not x's");
  STRATA_CHECK(wq.rows >= 0 && wq.scale >= 0 && t.value(wq.rows).shape == wv.shape,
               "linear_fp8: the weight's codes are not w's");
  const bool trainable = wv.requires_grad, dx = t.value(x).requires_grad;
  STRATA_CHECK(!trainable || q.cols >= 0, "linear_fp8: a trainable weight needs x's transposed codes");
  STRATA_CHECK(!dx || wq.cols >= 0, "linear_fp8: x's gradient needs the weight's transposed codes");
  std::vector<VId> inputs = {x, q.rows, q.scale, w, wq.rows, wq.scale};
  if (dx) inputs.push_back(wq.cols);
  if (trainable) inputs.push_back(q.cols);
  if (b >= 0) {
    STRATA_CHECK(t.value(b).shape.numel() == out[1], "linear_fp8: the bias length is not the output width");
    inputs.push_back(b);
  }
  return t.record1(std::make_unique<LinearFp8Op>(dx, trainable, b >= 0), inputs, {std::move(cls), out, act(t)});
}

}  // namespace ops

namespace {
using namespace ops::detail;

// linear_fp8_fwd(y, x8, sx, w8, sw): the GEMM.
// linear_fp8_bwd(dx, dw, dy, x8t, sx, w8t, sw): dy's amax and E5M2 codes (rows for dx, transposed for dw), then the
// dx and dw GEMMs. The casts of x and w are fp8_cast nodes, priced as theirs.
OpTime linear_fp8_price(const OpCall& c, OpSim& sim) {
  const CostModel& cost = sim.cost();
  if (!c.backward) {
    const Tensor &y = c.t[0], &x8 = c.t[1], &w8 = c.t[3];
    return {gemm_fp8_time(sim, 0, rows(x8), double(w8.shape[0]), cols(x8), B(x8) + B(w8) + B(y)), 1, true};
  }
  const Tensor &dx = c.t[0], &dw = c.t[1], &dy = c.t[2], &x8t = c.t[3], &w8t = c.t[5];
  const double n = rows(dy), o = cols(dy);
  double s = cost.fp8_cast(B(dy)) + cost.fp8_cast(B(dy) + (double(dx.defined()) + double(dw.defined())) * n * o);
  int kernels = 2;
  if (dx.defined()) {
    s += gemm_fp8_time(sim, 1, n, rows(w8t), o, n * o + B(w8t) + rw(dx, c.acc[0]));
    kernels += 1;
  }
  if (dw.defined()) {
    s += gemm_fp8_time(sim, 2, o, rows(x8t), n, n * o + B(x8t) + rw(dw, c.acc[1]));
    kernels += 1;
  }
  return {s, kernels, false};
}

ScratchList linear_fp8_scratch(const OpCall& c, OpEnv&) {
  if (!c.backward) return {};
  const Tensor &dx = c.t[0], &dw = c.t[1], &dy = c.t[2];
  const int64_t n = int64_t(rows(dy)), o = int64_t(cols(dy));
  ScratchList l = {{scratch_tag::fp8_amax, DType::f32, Shape{kFp8AmaxBlocks}}};
  if (dx.defined()) l.push_back({scratch_tag::fp8_grad, DType::u8, Shape{n, o}});
  if (dw.defined()) l.push_back({scratch_tag::fp8_grad_t, DType::u8, Shape{o, n}});
  l.push_back({scratch_tag::fp8_grad_scale, DType::f32, Shape{int64_t(fp8::kScaleFloats)}});
  return l;
}
}  // namespace

// The cuBLASLt workspace is taken once, when the backend is made.
const OpInfo& op_desc::linear_fp8() {
  static const OpInfo i{OpKind::linear_fp8,
                        "linear_fp8",
                        {scratch_tag::cublaslt, scratch_tag::fp8_amax, scratch_tag::fp8_grad, scratch_tag::fp8_grad_t,
                         scratch_tag::fp8_grad_scale},
                        nullptr,
                        nullptr,
                        linear_fp8_scratch,
                        "linear_fp8_fwd",
                        "linear_fp8_bwd",
                        linear_fp8_price};
  return i;
}

}  // namespace strata
