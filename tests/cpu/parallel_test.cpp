// engine/parallel.h and the conversions built on it: chunks cover [0, n) exactly once, their
// boundaries do not depend on the thread count, and converting a multi-chunk array gives what
// converting it element by element gives.
#include "engine/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "engine/dtype.h"
#include "engine/error.h"

namespace strata {
namespace {

TEST(ParallelChunks, CoverEveryElementOnceOnFixedBoundaries) {
  for (size_t n : {size_t(0), size_t(1), size_t(999), size_t(1000), size_t(1001), size_t(123457)}) {
    std::vector<std::atomic<int>> hits(n);
    std::mutex mu;
    std::set<std::pair<size_t, size_t>> ranges;
    parallel_chunks(n, 1000, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
      std::lock_guard<std::mutex> lock(mu);
      ranges.insert({b, e});
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    EXPECT_EQ(ranges.size(), (n + 999) / 1000) << n;
    for (auto [b, e] : ranges) {
      EXPECT_EQ(b % 1000, 0u);
      EXPECT_EQ(e, std::min(n, b + 1000));
    }
  }
}

TEST(ParallelChunks, ConversionsOfManyChunksMatchElementByElement) {
  const size_t n = (size_t(1) << 20) * 3 + 12345;  // several conversion chunks and a tail
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  std::vector<uint16_t> b16(n);
  convert_from_f32(b16.data(), DType::bf16, x.data(), n);
  for (size_t i = 0; i < n; i += 997) ASSERT_EQ(b16[i], f32_to_bf16(x[i])) << i;
  ASSERT_EQ(b16[n - 1], f32_to_bf16(x[n - 1]));
  std::vector<float> back(n);
  convert_to_f32(back.data(), b16.data(), DType::bf16, n);
  for (size_t i = 0; i < n; i += 997) ASSERT_EQ(back[i], bf16_to_f32(b16[i])) << i;
  ASSERT_EQ(back[n - 1], bf16_to_f32(b16[n - 1]));
  EXPECT_THROW(convert_from_f32(b16.data(), DType::i32, x.data(), n), Error);
}

}  // namespace
}  // namespace strata
