// The code maps of 8-bit optimizer moments (optimizer_state: 8bit, engine/state_recipe.h), shared
// by the cpu reference and the cuda kernels so both encode and decode bit for bit alike.
//
// A block of kQuantBlock values is stored as one fp32 scale s (the block's largest magnitude) and one
// code byte per value. Codes stand for magnitudes relative to s on a geometric ladder: level(j) =
// 2^(-j/8), j = 0 (the block's largest) ... K - 1, and code 0 is zero:
//   m (signed):   bit 7 the sign, bits 0..6 k in 0..127; k >= 1 stands for level(127 - k)
//                 (smallest nonzero magnitude 2^(-126/8) ~ 1.8e-5 s)
//   v (unsigned): k in 0..255; k >= 1 stands for level(255 - k) (smallest 2^(-254/8) ~ 2.8e-10 s)
// Consecutive levels differ by 2^(1/8) (9.1%), so a decoded value is within 4.4% of the stored one.
// Encoding picks the nearest level: the midpoints between consecutive levels, rounded to float,
// bound each level's range, and a value on a midpoint goes to the smaller level (so within half a
// float ulp of an exact midpoint the pick may be the other neighbour). A magnitude nearer to a
// level below the smallest becomes zero, except that a positive v always keeps at least the smallest code: a
// second moment rounded to zero would turn AdamW's denominator into eps alone.
// The arithmetic is exact but for one reciprocal per block (1 / s) and one product per value (value
// times it), each correctly rounded on both sides: levels are 2^-e times one of 8 float constants
// (ldexp is exact), midpoints likewise.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STRATA_Q8 __host__ __device__ __forceinline__
#define STRATA_Q8_UNROLL _Pragma("unroll")
#else
#define STRATA_Q8 inline
#define STRATA_Q8_UNROLL  // host compilers unroll on their own (GCC warns on `#pragma unroll`)
#endif

namespace strata::q8 {

// 2^(-f/8) for f = 0..7, as floats.
STRATA_Q8 float ladder(int f) {
  constexpr float c[8] = {0x1p+0f,        0x1.d5818ep-1f, 0x1.ae89fap-1f, 0x1.8ace54p-1f,
                          0x1.6a09e6p-1f, 0x1.4bfdaep-1f, 0x1.306fe0p-1f, 0x1.172b84p-1f};
  return c[f];
}
// The midpoint between ladder(f) and the next level down (ladder(f + 1), or 0.5 for f = 7), as floats.
STRATA_Q8 float ladder_mid(int f) {
  constexpr float c[8] = {0x1.eac0c8p-1f, 0x1.c205c4p-1f, 0x1.9cac28p-1f, 0x1.7a6c1cp-1f,
                          0x1.5b03cap-1f, 0x1.3e36c8p-1f, 0x1.23cdb2p-1f, 0x1.0b95c2p-1f};
  return c[f];
}

STRATA_Q8 float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
STRATA_Q8 float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// x's bits as a To of the same size (std::bit_cast's job, on the host and the device alike).
template <class To, class From>
STRATA_Q8 To bits_as(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To y;
  memcpy(&y, &x, sizeof y);
  return y;
}

// level(j) = 2^(-j/8), exactly as defined above.
STRATA_Q8 float level(int j) {
  return ldexpf(ladder(j & 7), -(j >> 3));
}

// The ladder index j nearest to r in (0, 1] (ties to the larger j, the smaller level).
STRATA_Q8 int nearest_step(float r) {
  if (r >= 1.0f) return 0;
  if (!(r > 0.0f)) return 1 << 20;  // underflowed (or NaN): below every level
  int ex = 0;
  float m;               // r = m 2^ex, m in [0.5, 1): levels 2^ex ladder(f), f = 0..8
  if (r >= 0x1p-126f) {  // normal: frexpf's answer from the bits (exponent field E: ex = E - 126, m's field 126)
    const uint32_t b = bits_as<uint32_t>(r);
    ex = int(b >> 23) - 126;
    m = bits_as<float>((b & 0x007fffffu) | 0x3f000000u);
  } else {
    m = frexpf(r, &ex);
  }
  int f = 0;
  STRATA_Q8_UNROLL
  for (int i = 0; i < 8; i++) f += ladder_mid(i) >= m ? 1 : 0;
  return 8 * (-ex) + f;
}

// Top codes: the signed map's magnitude codes 1..127, the unsigned map's 1..255.
constexpr int kSignedTop = 127, kUnsignedTop = 255;

STRATA_Q8 float decode_signed(uint8_t c, float scale) {
  const int k = c & 0x7f;
  if (k == 0) return 0.0f;
  const float x = mul_rn(level(kSignedTop - k), scale);
  return (c & 0x80) ? -x : x;
}
STRATA_Q8 float decode_unsigned(uint8_t c, float scale) {
  return c == 0 ? 0.0f : mul_rn(level(kUnsignedTop - c), scale);
}

// The same decodes from a table of level(0..255) (a kernel's copy in shared memory: a ladder constant picked by a
// value's own index would sit in local memory); the table's entries are level()'s, so the bits are decode_*'s.
STRATA_Q8 float decode_signed(uint8_t c, float scale, const float* levels) {
  const int k = c & 0x7f;
  if (k == 0) return 0.0f;
  const float x = mul_rn(levels[kSignedTop - k], scale);
  return (c & 0x80) ? -x : x;
}
STRATA_Q8 float decode_unsigned(uint8_t c, float scale, const float* levels) {
  return c == 0 ? 0.0f : mul_rn(levels[kUnsignedTop - c], scale);
}

// The reciprocal a block's values are scaled by before encoding: 1 / absmax (0 for an all-zero block).
STRATA_Q8 float inverse_scale(float absmax) {
  return absmax > 0.0f ? div_rn(1.0f, absmax) : 0.0f;
}

// x relative to its block's largest magnitude: r = |x| * inv (inv = inverse_scale(absmax)).
STRATA_Q8 uint8_t encode_signed(float x, float inv) {
  const float a = fabsf(x);
  if (!(a > 0.0f) || !(inv > 0.0f)) return 0;
  const int j = nearest_step(mul_rn(a, inv));
  const int k = j >= kSignedTop ? 0 : kSignedTop - j;
  return uint8_t((x < 0.0f && k ? 0x80 : 0) | k);
}
STRATA_Q8 uint8_t encode_unsigned(float x, float inv) {
  if (!(x > 0.0f) || !(inv > 0.0f)) return 0;
  const int j = nearest_step(mul_rn(x, inv));
  return uint8_t(j >= kUnsignedTop ? 1 : kUnsignedTop - j);  // a positive v never becomes zero
}

}  // namespace strata::q8
