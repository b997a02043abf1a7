// The FP8 codecs (engine/fp8.h): the cpu reference the cuda kernels (kernels/fp8_cast.cu) match code for code.
#include "engine/fp8.h"

#include <cmath>

namespace strata::fp8 {
namespace {
struct Layout {
  int mant, bias;
};
constexpr Layout layout(Format f) {
  return f == Format::e4m3 ? Layout{3, 7} : Layout{2, 15};
}
}  // namespace

float scale_for(float amax, Format f) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  const float s = max_finite(f) / amax;
  return std::isfinite(s) ? s : 1.0f;  // a subnormal amax: the scale would overflow
}

uint8_t encode(float v, Format f) {
  const Layout l = layout(f);
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  if (std::isnan(v)) return uint8_t(sign | (f == Format::e4m3 ? 0x7f : 0x7f));
  float a = std::fabs(v);
  const float mx = max_finite(f);
  if (a >= mx) a = mx;
  const int emin = 1 - l.bias;  // the smallest normal exponent
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  e -= 1;             // a in [2^e, 2^(e+1))
  if (a == 0.0f || e < emin) e = emin;
  const float quantum = std::ldexp(1.0f, e - l.mant);
  float q = std::nearbyint(a / quantum) * quantum;  // round half to even (the default rounding mode)
  if (q > mx) q = mx;
  if (q == 0.0f) return sign;
  int qe = 0;
  std::frexp(q, &qe);
  qe -= 1;
  if (qe < emin) return uint8_t(sign | int(std::ldexp(q, l.mant - emin)));  // subnormal: exponent field 0
  const int m = int(std::ldexp(q, l.mant - qe)) - (1 << l.mant);
  return uint8_t(sign | ((qe + l.bias) << l.mant) | m);
}

float decode(uint8_t code, Format f) {
  const Layout l = layout(f);
  const int e = (code & 0x7f) >> l.mant, m = code & ((1 << l.mant) - 1);
  const float s = (code & 0x80) ? -1.0f : 1.0f;
  if (f == Format::e4m3 && e == 15 && m == 7) return std::nanf("");
  if (f == Format::e5m2 && e == 31) return m ? std::nanf("") : s * INFINITY;
  if (e == 0) return s * std::ldexp(float(m), 1 - l.bias - l.mant);
  return s * std::ldexp(float(m + (1 << l.mant)), e - l.bias - l.mant);
}

void quantize(const float* x, int rows, int cols, Format f, uint8_t* out, uint8_t* out_t, float* sb) {
  const size_t n = size_t(rows) * size_t(cols);
  float amax = 0.0f;
  for (size_t i = 0; i < n; i++) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a) || a > amax) amax = a;
    if (std::isnan(a)) break;
  }
  const float s = scale_for(amax, f);
  sb[kInvScale] = 1.0f / s, sb[kScale] = s, sb[kAmax] = amax, sb[3] = 0.0f;
  encode_all(x, rows, cols, f, s, out, out_t);
}

void encode_all(const float* x, int rows, int cols, Format f, float s, uint8_t* out, uint8_t* out_t) {
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      const uint8_t q = encode(x[size_t(r) * cols + c] * s, f);
      if (out) out[size_t(r) * cols + c] = q;
      if (out_t) out_t[size_t(c) * rows + r] = q;
    }
}

}  // namespace strata::fp8
