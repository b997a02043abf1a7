#include "engine/dtype.h"

#include <cmath>

#include "engine/error.h"
#include "engine/master_split.h"
#include "engine/names.h"
#include "engine/parallel.h"

namespace strata {

namespace {
// Each dtype's engine name, safetensors name and torch name (parse_dtype accepts all three).
constexpr EnumName<DType> kDTypeNames[] = {{DType::f32, "f32"}, {DType::bf16, "bf16"}, {DType::f16, "f16"},
                                           {DType::i32, "i32"}, {DType::u8, "u8"},     {DType::i16, "i16"}};
constexpr EnumName<DType> kSafetensorsNames[] = {{DType::f32, "F32"}, {DType::bf16, "BF16"}, {DType::f16, "F16"},
                                                 {DType::i32, "I32"}, {DType::u8, "U8"},     {DType::i16, "I16"}};
constexpr EnumName<DType> kTorchNames[] = {{DType::f32, "float32"}, {DType::bf16, "bfloat16"}, {DType::f16, "float16"},
                                           {DType::i32, "int32"},   {DType::u8, "uint8"},      {DType::i16, "int16"}};
}  // namespace

std::string_view dtype_name(DType t) {
  return name_of(kDTypeNames, t);
}

std::string_view dtype_safetensors_name(DType t) {
  return name_of(kSafetensorsNames, t);
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (auto t = parse_name(kDTypeNames, s)) return t;
  if (auto t = parse_name(kSafetensorsNames, s)) return t;
  return parse_name(kTorchNames, s);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while ((man & 0x400) == 0);
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  if (std::isnan(f)) return sign | 0x7e00;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to inf
  if (a < 6.103515625e-05f) {               // subnormal range: quantise to 2^-24 steps
    return sign | uint16_t(std::nearbyint(a * 16777216.0f));
  }
  uint32_t ua;
  std::memcpy(&ua, &a, 4);
  uint32_t exp = (ua >> 23) - 127 + 15;
  uint32_t man = ua & 0x7fffff;
  uint32_t r = exp << 10 | man >> 13;
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return sign | uint16_t(r);
}

namespace {

// Elements per parallel chunk of the conversions (4 MiB of f32).
constexpr size_t kConvertGrain = size_t(1) << 20;

void convert_to_f32_serial(float* dst, const void* src, DType from, size_t n) {
  switch (from) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::bf16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::f16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::i32: {
      auto* s = static_cast<const int32_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    case DType::u8: {
      auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    case DType::i16: {
      auto* s = static_cast<const int16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
  }
}

void convert_from_f32_serial(void* dst, DType to, const float* src, size_t n) {
  switch (to) {
    case DType::f32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::bf16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::f16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      STRATA_THROW(Error, "convert_from_f32: cannot convert to " + std::string(dtype_name(to)));
  }
}

}  // namespace

void convert_to_f32(float* dst, const void* src, DType from, size_t n) {
  const size_t esize = dtype_size(from);
  parallel_chunks(n, kConvertGrain, [&](size_t b, size_t e) {
    convert_to_f32_serial(dst + b, static_cast<const std::byte*>(src) + b * esize, from, e - b);
  });
}

void convert_from_f32(void* dst, DType to, const float* src, size_t n) {
  if (to != DType::f32 && to != DType::bf16 && to != DType::f16)  // before any thread starts
    STRATA_THROW(Error, "convert_from_f32: cannot convert to " + std::string(dtype_name(to)));
  const size_t esize = dtype_size(to);
  parallel_chunks(n, kConvertGrain, [&](size_t b, size_t e) {
    convert_from_f32_serial(static_cast<std::byte*>(dst) + b * esize, to, src + b, e - b);
  });
}

}  // namespace strata

namespace strata {

// --- split master weights (engine/master_split.h) -----------------------------------------------

void master_split(const float* master, uint16_t* hi, int16_t* lo, size_t n) {
  parallel_chunks(n, kConvertGrain, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      uint32_t u;
      std::memcpy(&u, &master[i], 4);
      master_split_bits(u, hi[i], lo[i]);
    }
  });
}

void master_join(float* master, const uint16_t* hi, const int16_t* lo, size_t n) {
  parallel_chunks(n, kConvertGrain, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const uint32_t u = master_join_bits(hi[i], lo[i]);
      std::memcpy(&master[i], &u, 4);
    }
  });
}

}  // namespace strata
