// Runtime element types. Kernels are templated over these; dtype is never a compile-time macro.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace strata {

enum class DType : uint8_t { f32, bf16, f16, i32, u8, i16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::u8:
      return 1;
    case DType::i16:
      return 2;
  }
  return 0;
}

// Lower-case engine name ("f32", "bf16", ...).
std::string_view dtype_name(DType t);
// Parses an engine name or a safetensors name ("F32", "BF16", "F16", "I32", "U8").
std::optional<DType> parse_dtype(std::string_view s);
// The safetensors spelling ("F32", ...).
std::string_view dtype_safetensors_name(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of `src` (type `from`) to float.
void convert_to_f32(float* dst, const void* src, DType from, size_t n);
// Converts n floats to `to` (f32, bf16 or f16).
void convert_from_f32(void* dst, DType to, const float* src, size_t n);

}  // namespace strata
