// Split master weights: an fp32 master weight stored as two 16-bit halves, exactly.
//
// On a backend whose compute dtype is bf16, a trainable weight needs both its bf16 compute copy and
// its fp32 master. Storing the master whole repeats the compute copy's 16 bits. Instead the compute
// copy is the master rounded to bf16 (to nearest; an exact tie rounds away from zero, where round-
// to-nearest-even would pick the even neighbour), and a 16-bit `lo` holds the signed difference of
// the two bit patterns, which always fits: -0x8000 <= bits(master) - (hi << 16) < 0x8000. So
//   bits(master) == (hi << 16) + lo   (32-bit wrap-around arithmetic)
// holds for every float but NaN (a NaN master becomes a quiet NaN). The optimizer reads hi and lo,
// updates the fp32 value and writes both back: the same fp32 arithmetic as a whole fp32 master, in
// 4 bytes per weight instead of 6 (the compute copy included), and 8 bytes of traffic instead of 10.
// Used by the cuda kernels (kernels/adamw.cu) and by the host side of uploads and checkpoints.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__ __forceinline__
#else
#define STRATA_HD inline
#endif

namespace strata {

// bits: the fp32 master's bit pattern. Writes the compute copy's bits (hi) and the low half (lo).
STRATA_HD void master_split_bits(uint32_t bits, uint16_t& hi, int16_t& lo) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a (quiet) NaN
    hi = uint16_t((bits >> 16) | 0x40u);
    lo = 0;
    return;
  }
  hi = uint16_t((bits + 0x8000u) >> 16);  // cannot wrap: the sum only overflows from NaN patterns
  lo = int16_t(int32_t(bits - (uint32_t(hi) << 16)));
}

STRATA_HD uint32_t master_join_bits(uint16_t hi, int16_t lo) {
  return (uint32_t(hi) << 16) + uint32_t(int32_t(lo));
}

// Host helpers over n weights (uploads, checkpoints).
void master_split(const float* master, uint16_t* hi, int16_t* lo, size_t n);
void master_join(float* master, const uint16_t* hi, const int16_t* lo, size_t n);

}  // namespace strata
