// linear_fp8 on cpu: the GEMMs on the decoded codes in fp32, times both operands' 1 / scale, as cuBLASLt's FP8
// GEMMs compute them (exact products, fp32 sums; the order of the sums differs).
#include <vector>

#include "engine/fp8.h"
#include "kernels/linear.h"
#include "kernels/op_dispatch.h"

namespace strata {
namespace {
using fp8::Format;

std::vector<float> decoded(const uint8_t* codes, size_t n, Format f, float inv_scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = fp8::decode(codes[i], f) * inv_scale;
  return v;
}
// The tensor as its FP8 codes would give it back: decode(encode(x * scale)) / scale.
std::vector<float> round_trip(const float* x, int rows, int cols, Format f) {
  std::vector<uint8_t> q(size_t(rows) * cols);
  float sb[fp8::kScaleFloats];
  fp8::quantize(x, rows, cols, f, q.data(), nullptr, sb);
  return decoded(q.data(), q.size(), f, sb[fp8::kInvScale]);
}
}  // namespace

// linear_fp8_fwd(y, x8, sx, w): x8 [N, I] E4M3 codes with their scale block sx; w [O, I] cast to E4M3 here.
// linear_fp8_bwd(dx, dw, dy, x8t, sx, w; acc_dx, acc_dw): dy cast to E5M2, w to E4M3; x8t [I, N].
void linear_fp8_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  if (!c.backward) {
    const Tensor &y = t[0], &x8 = t[1], &sx = t[2], &w = t[3];
    const int N = int(rows(x8)), I = int(cols(x8)), O = int(w.shape[0]);
    const std::vector<float> x =
        decoded(static_cast<const uint8_t*>(x8.data), size_t(N) * I, Format::e4m3, f32(sx)[fp8::kInvScale]);
    const std::vector<float> wq = round_trip(f32(w), O, I, Format::e4m3);
    return cpu::linear_fwd(f32(y), x.data(), wq.data(), N, I, O);
  }
  const Tensor &dx = t[0], &dw = t[1], &dy = t[2], &x8t = t[3], &sx = t[4], &w = t[5];
  const int N = int(rows(dy)), O = int(cols(dy)), I = int(cols(w));
  const std::vector<float> dyq = round_trip(f32(dy), N, O, Format::e5m2);
  const std::vector<float> wq = round_trip(f32(w), O, I, Format::e4m3);
  std::vector<float> x;
  if (dw.defined()) {  // x8t [I, N] back to [N, I]
    const std::vector<float> xt =
        decoded(static_cast<const uint8_t*>(x8t.data), size_t(I) * N, Format::e4m3, f32(sx)[fp8::kInvScale]);
    x.resize(xt.size());
    for (int i = 0; i < I; i++)
      for (int n = 0; n < N; n++) x[size_t(n) * I + i] = xt[size_t(i) * N + n];
  }
  cpu::linear_bwd(f32(dx), grad_out(dw), dyq.data(), dw.defined() ? x.data() : nullptr, wq.data(), N, I, O, c.acc[0],
                  c.acc[1]);
}
}  // namespace strata
