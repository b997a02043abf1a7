// Split master weights (engine/master_split.h): the bf16 high half plus an i16 low half give back
// the fp32 master bit for bit, and the high half is the master rounded to nearest bf16.
#include "engine/master_split.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/dtype.h"

namespace strata {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Checks one pattern: exact round trip, and hi is the nearest bf16 (ties away from zero).
void check(uint32_t u) {
  uint16_t hi;
  int16_t lo;
  master_split_bits(u, hi, lo);
  const float x = float_of(u);
  if (std::isnan(x)) {
    EXPECT_TRUE(std::isnan(bf16_to_f32(hi))) << std::hex << u;
    EXPECT_TRUE(std::isnan(float_of(master_join_bits(hi, lo)))) << std::hex << u;
    return;
  }
  ASSERT_EQ(master_join_bits(hi, lo), u) << "round trip of 0x" << std::hex << u;
  // hi is one of the two bf16 neighbours (truncation or the next one up in magnitude) ...
  const uint16_t down = uint16_t(u >> 16), up = uint16_t(down + 1);
  ASSERT_TRUE(hi == down || hi == up) << std::hex << u;
  // ... the nearer one; on an exact tie the one away from zero. Differences are exact in double.
  if (std::isinf(x)) {
    EXPECT_EQ(hi, down) << std::hex << u;
    return;
  }
  const double xd = x, d_down = std::fabs(xd - double(bf16_to_f32(down)));
  if (std::isinf(bf16_to_f32(up))) {
    // Above the largest bf16 the nearest is chosen in bit patterns, as round-to-nearest does.
    EXPECT_EQ(hi, (u & 0xffffu) >= 0x8000u ? up : down) << std::hex << u;
    return;
  }
  const double d_up = std::fabs(double(bf16_to_f32(up)) - xd);
  if (d_down < d_up)
    EXPECT_EQ(hi, down) << std::hex << u;
  else
    EXPECT_EQ(hi, up) << std::hex << u;
  // Off ties this is exactly round-to-nearest-even, the engine's bf16 conversion.
  if ((u & 0xffffu) != 0x8000u) {  // braces: EXPECT_EQ is an if/else of its own (-Wdangling-else)
    EXPECT_EQ(hi, f32_to_bf16(x)) << std::hex << u;
  }
}

TEST(MasterSplit, EveryLowHalfOfSeveralHighHalves) {
  // All 65536 low halves under high halves that cover +-0, subnormals, 1, the top of a binade (the
  // carry into the exponent), the largest finite numbers and the infinities / NaN patterns.
  for (uint32_t high : {0x0000u, 0x0001u, 0x007fu, 0x0080u, 0x3f80u, 0x3fffu, 0x4049u, 0x7f7fu, 0x7f80u, 0x7fc0u,
                        0x8000u, 0x8001u, 0xbf80u, 0xbfffu, 0xff7fu, 0xff80u, 0xffffu})
    for (uint32_t low = 0; low < 0x10000u; ++low) check((high << 16) | low);
}

TEST(MasterSplit, RandomPatternsAndTrainingLikeValues) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) check(uint32_t(rng()));
  std::normal_distribution<float> w(0.0f, 0.02f);
  for (int i = 0; i < 200000; ++i) check(bits_of(w(rng)));
}

TEST(MasterSplit, HostHelpersRoundTripArrays) {
  std::mt19937 rng(11);
  std::normal_distribution<float> w(0.0f, 1.0f);
  std::vector<float> master(100003), back(master.size());
  for (float& x : master) x = w(rng);
  master[5] = std::numeric_limits<float>::infinity();
  master[6] = -0.0f;
  master[7] = float_of(0x3f808000u);  // a tie: rounds away from zero
  std::vector<uint16_t> hi(master.size());
  std::vector<int16_t> lo(master.size());
  master_split(master.data(), hi.data(), lo.data(), master.size());
  master_join(back.data(), hi.data(), lo.data(), master.size());
  EXPECT_EQ(std::memcmp(master.data(), back.data(), master.size() * 4), 0);
  EXPECT_EQ(hi[7], 0x3f81u);
  EXPECT_EQ(lo[7], -0x8000);
  EXPECT_EQ(bits_of(back[6]), 0x80000000u);
}

}  // namespace
}  // namespace strata
