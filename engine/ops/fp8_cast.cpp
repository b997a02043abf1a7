// fp8_cast: a tensor's FP8 codes and scale block (kernels/fp8.h) for the FP8 linear layers; forward only.
#include "engine/fp8.h"
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

// Input x; outputs the codes (rows, and with `transpose` their transpose) and the scale block, none of which
// carries a gradient: the node never runs a backward. The transposed codes are optional (the first forward under
// recompute leaves them to the replay, which backward asks for); the scale block is always kept, so a replay
// casts from it in one pass, without the amax.
class Fp8CastOp final : public Op {
 public:
  explicit Fp8CastOp(bool transpose) : transpose_(transpose) {}
  const char* name() const override { return "fp8_cast"; }
  OpKind kind() const override { return OpKind::fp8_cast; }
  void forward(Backend& be, const OpArgs& a) override {
    const int sb = scale_at();
    const bool given = size_t(sb) < a.kept.size() && a.kept[size_t(sb)];
    be.fp8_cast(a.out[0], transpose_ ? a.out[1] : Tensor(), a.out[size_t(sb)], a.in[0],
                uint8_t(uint8_t(fp8::Format::e4m3) | (given ? fp8::kScaleGiven : 0)));
  }
  bool optional_output(int i) const override { return transpose_ && i == 1; }
  bool keep_output(int i) const override { return i == scale_at(); }
  void backward(Backend&, const OpArgs&) override {
    STRATA_THROW(Error, "fp8_cast: no gradient flows through FP8 codes (its outputs are no_grad)");
  }
  bool saves_input(int) const override { return false; }
  bool saves_output(int) const override { return false; }

 private:
  int scale_at() const { return transpose_ ? 2 : 1; }
  bool transpose_;
};

}  // namespace

bool fp8_shape_ok(int64_t n, int64_t in, int64_t out) {
  const int64_t m = fp8::kDimMultiple;
  return n > 0 && in > 0 && out > 0 && n % m == 0 && in % m == 0 && out % m == 0;
}

Fp8Codes fp8_cast(Tape& t, VId x, bool transpose, const std::string& cls) {
  const Shape& s = t.value(x).shape;
  const int64_t n = s.numel() / s[s.nd - 1], c = s[s.nd - 1];
  std::vector<OutSpec> outs = {{cls, Shape{n, c}, DType::u8, true}};
  if (transpose) outs.push_back({cls + "t", Shape{c, n}, DType::u8, true});
  outs.push_back({cls + ".scale", Shape{int64_t(fp8::kScaleFloats)}, DType::f32, true});
  std::vector<VId> ids = t.record(std::make_unique<Fp8CastOp>(transpose), {x}, std::move(outs));
  return {ids[0], transpose ? ids[1] : VId(-1), ids.back()};
}

}  // namespace ops

namespace {
using namespace ops::detail;
// fp8_cast(out, out_t, sb, x): the amax's partial maxima (one pass over x), then the codes (x again, each output
// written once); with fp8::kScaleGiven the codes alone, from sb.
// Priced at the profile's cast rate (CostModel::fp8_cast), not the elementwise kernels'.
OpTime fp8_cast_price(const OpCall& c, OpSim& sim) {
  const CostModel& cost = sim.cost();
  const double codes = cost.fp8_cast(B(c.t[3]) + B(c.t[0]) + B(c.t[1]) + B(c.t[2]));
  if (c.form & fp8::kScaleGiven) return {codes, 1, true};
  return {cost.fp8_cast(B(c.t[3])) + codes, 2, true};
}
ScratchList fp8_cast_scratch(const OpCall& c, OpEnv&) {
  if (c.form & fp8::kScaleGiven) return {};
  return {{scratch_tag::fp8_amax, DType::f32, Shape{kFp8AmaxBlocks}}};
}
}  // namespace

const OpInfo& op_desc::fp8_cast() {
  static const OpInfo i{OpKind::fp8_cast, "fp8_cast", {scratch_tag::fp8_amax}, nullptr, nullptr, fp8_cast_scratch,
                        "fp8_cast_fwd",   nullptr,    fp8_cast_price};
  return i;
}

}  // namespace strata
