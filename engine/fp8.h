// FP8 for the linear layers' GEMMs (the recipe's fp8: true): the two OCP formats Hopper's tensor cores take, E4M3
// (weights and activations: 3 mantissa bits, finite max 448, no infinities) and E5M2 (gradients: 2 mantissa bits,
// finite max 57344), with one fp32 scale per tensor.
//
// A tensor's codes are its values times `scale`, rounded to nearest even and saturated to the format's finite
// range; `scale` = max / amax, from the tensor's own current amax (1 when the amax is 0 or not finite), so the
// largest magnitude lands on the format's largest finite value. The scale block beside the codes is kScaleFloats
// fp32: {1 / scale, scale, amax, 0} (kInvScale, kScale, kAmax); a GEMM multiplies its fp32 sum by both operands'
// 1 / scale, which it reads through a pointer to the block's start (cuBLASLt's FP8 kernels refuse a scale pointer
// that is only 8-byte aligned).
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::fp8 {

enum class Format : uint8_t { e4m3, e5m2 };

inline constexpr float kMaxE4M3 = 448.0f;
inline constexpr float kMaxE5M2 = 57344.0f;
inline constexpr int kScaleFloats = 4;  // {1 / scale, scale, amax, 0}
inline constexpr int kInvScale = 0, kScale = 1, kAmax = 2;
// cuBLASLt's FP8 kernels want every dimension and leading dimension a multiple of 16 (and 16-byte aligned
// pointers): a linear layer takes the FP8 path only when its rows, inputs and outputs all are.
inline constexpr int kDimMultiple = 16;

// fp8_cast's form: the Format, with this bit when sb already holds x's scale block (a replay of a cast whose block
// was kept): the codes only, from sb's scale, without the amax pass; sb is not written.
inline constexpr uint8_t kScaleGiven = 0x10;
constexpr Format form_format(uint8_t form) {
  return Format(form & 0x0f);
}

constexpr float max_finite(Format f) {
  return f == Format::e4m3 ? kMaxE4M3 : kMaxE5M2;
}

// max / amax; 1 for an amax of 0, NaN or inf (the codes then carry what the tensor holds, NaN included).
float scale_for(float amax, Format f);
// The code of v (already scaled): nearest even, saturated to +-max_finite; NaN to the format's NaN.
uint8_t encode(float v, Format f);
float decode(uint8_t code, Format f);

// The scale block of x[n] (amax over |x|, NaN propagating) and its codes; `out` [rows, cols] row-major and
// `out_t` [cols, rows] (its transpose) may each be null.
void quantize(const float* x, int rows, int cols, Format f, uint8_t* out, uint8_t* out_t, float* scale_block);
// The codes alone, at a given scale (a scale block's kScale).
void encode_all(const float* x, int rows, int cols, Format f, float scale, uint8_t* out, uint8_t* out_t);

}  // namespace strata::fp8
