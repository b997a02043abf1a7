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
std::vector<float> decoded(const Tensor& codes, const Tensor& sb, Format f) {
  return decoded(static_cast<const uint8_t*>(codes.data), size_t(codes.numel()), f, dispatch::f32(sb)[fp8::kInvScale]);
}
// [r, c] row-major to [c, r]
std::vector<float> transposed(const std::vector<float>& a, int r, int c) {
  std::vector<float> t(a.size());
  for (int i = 0; i < r; i++)
    for (int j = 0; j < c; j++) t[size_t(j) * r + i] = a[size_t(i) * c + j];
  return t;
}
// The tensor as its FP8 codes would give it back: decode(encode(x * scale)) / scale.
std::vector<float> round_trip(const float* x, int rows, int cols, Format f) {
  std::vector<uint8_t> q(size_t(rows) * cols);
  float sb[fp8::kScaleFloats];
  fp8::quantize(x, rows, cols, f, q.data(), nullptr, sb);
  return decoded(q.data(), q.size(), f, sb[fp8::kInvScale]);
}
}  // namespace

// linear_fp8_fwd(y, x8, sx, w8, sw): x8 [N, I] and w8 [O, I] E4M3 codes with their scale blocks.
// linear_fp8_bwd(dx, dw, dy, x8t, sx, w8t, sw; acc_dx, acc_dw): dy cast to E5M2; x8t [I, N], w8t [I, O].
void linear_fp8_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  if (!c.backward) {
    const Tensor &y = t[0], &x8 = t[1], &sx = t[2], &w8 = t[3], &sw = t[4];
    const int N = int(rows(x8)), I = int(cols(x8)), O = int(w8.shape[0]);
    const std::vector<float> x = decoded(x8, sx, Format::e4m3), wq = decoded(w8, sw, Format::e4m3);
    return cpu::linear_fwd(f32(y), x.data(), wq.data(), N, I, O);
  }
  const Tensor &dx = t[0], &dw = t[1], &dy = t[2], &x8t = t[3], &sx = t[4], &w8t = t[5], &sw = t[6];
  const int N = int(rows(dy)), O = int(cols(dy));
  const int I = int(dx.defined() ? w8t.shape[0] : x8t.shape[0]);
  const std::vector<float> dyq = round_trip(f32(dy), N, O, Format::e5m2);
  // w8t [I, O] back to [O, I]; x8t [I, N] back to [N, I]
  const std::vector<float> wq = dx.defined() ? transposed(decoded(w8t, sw, Format::e4m3), I, O) : std::vector<float>();
  const std::vector<float> x = dw.defined() ? transposed(decoded(x8t, sx, Format::e4m3), I, N) : std::vector<float>();
  cpu::linear_bwd(f32(dx), grad_out(dw), dyq.data(), dw.defined() ? x.data() : nullptr,
                  dx.defined() ? wq.data() : nullptr, N, I, O, c.acc[0], c.acc[1]);
}
}  // namespace strata
