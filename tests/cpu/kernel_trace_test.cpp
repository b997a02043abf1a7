// strata-bench's kernel trace (tools/kernel_trace.*): the table's order, per-step figures, cut and
// header; and that starting a trace either works or says why (no GPU here: it says why).
#include "tools/kernel_trace.h"

#include <gtest/gtest.h>

#include <string>

namespace strata::tools {
namespace {

TEST(KernelTrace, RowsLongestFirstTiesByName) {
  const auto rows = summarize_kernels({{"b", {2.0, 4}}, {"a", {2.0, 2}}, {"c", {9.5, 1}}, {"d", {0.5, 8}}});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].name, "c");
  EXPECT_EQ(rows[1].name, "a");  // same time as b: by name
  EXPECT_EQ(rows[2].name, "b");
  EXPECT_EQ(rows[3].name, "d");
  EXPECT_EQ(rows[2].launches, 4);
  EXPECT_DOUBLE_EQ(rows[0].ms, 9.5);
}

TEST(KernelTrace, TableIsPerStepAndCut) {
  const std::string long_name(150, 'k');
  const auto rows = summarize_kernels({{"gemm", {30.0, 6}}, {"attn", {10.0, 2}}, {long_name, {0.2, 2}}});
  const std::string t = format_kernel_table(rows, 2, 2);
  // 40.2 ms over 2 steps; 10 launches over 2 steps.
  EXPECT_NE(t.find("20.10 ms GPU time a step in 5 launches of 3 kernels"), std::string::npos) << t;
  EXPECT_NE(t.find("   15.000 ms  74.6%     3  gemm"), std::string::npos) << t;
  EXPECT_NE(t.find("    5.000 ms  24.9%     1  attn"), std::string::npos) << t;
  EXPECT_EQ(t.find("kkk"), std::string::npos) << "only the top 2 rows";
  const std::string all = format_kernel_table(rows, 1, 10);
  EXPECT_NE(all.find(std::string(110, 'k') + "\n"), std::string::npos) << "names are cut at 110";
  EXPECT_EQ(all.find(std::string(111, 'k')), std::string::npos);
}

TEST(KernelTrace, TimelineUnitesOverlapsAndCountsGaps) {
  // ns: [0,100) and [50,150) overlap (busy 150); gap 150 -> 30,150 (30 us); [30150, 30200);
  // gap 10 us; [40200, 40300) contains [40210, 40220). Given out of order.
  const std::string a = "a", b = "b", c = "c", d = "d";
  const Timeline t =
      summarize_timeline({{40210, 40220, &d}, {0, 100, &a}, {30150, 30200, &c}, {50, 150, &b}, {40200, 40300, &d}});
  EXPECT_DOUBLE_EQ(t.span_ms, 40300e-6);
  EXPECT_DOUBLE_EQ(t.busy_ms, (150 + 50 + 100) * 1e-6);
  EXPECT_DOUBLE_EQ(t.idle_ms, (30000 + 10000) * 1e-6);
  EXPECT_EQ(t.gaps_over_20us, 1);
  EXPECT_DOUBLE_EQ(t.gaps_over_20us_ms, 0.03);
  EXPECT_DOUBLE_EQ(t.longest_gap_ms, 0.03);
  const std::string s = format_timeline(t, 2);
  EXPECT_NE(s.find("0.02 ms span a step, GPU busy 0.00 ms, idle 0.02 ms (99.3%); 0.5 gaps over 20 us"),
            std::string::npos)
      << s;
  ASSERT_EQ(t.longest.size(), 2u);
  EXPECT_DOUBLE_EQ(t.longest[0].ms, 0.03);
  EXPECT_EQ(t.longest[0].before, "b") << "b ends the first busy stretch";
  EXPECT_EQ(t.longest[0].after, "c");
  EXPECT_DOUBLE_EQ(t.longest[1].ms, 0.01);
  EXPECT_EQ(t.longest[1].before, "c");
  EXPECT_EQ(t.longest[1].after, "d");
  EXPECT_NE(s.find("  gap    0.030 ms after b, before c\n"), std::string::npos) << s;
  const Timeline none = summarize_timeline({});
  EXPECT_EQ(none.span_ms, 0.0);
  EXPECT_EQ(none.gaps_over_20us, 0);
}

TEST(KernelTrace, StartEitherRunsOrSaysWhy) {
  std::string why;
  auto t = KernelTrace::start(&why);
  if (t) {
    EXPECT_FALSE(t->library().empty());
    t->stop();
  } else {
    EXPECT_FALSE(why.empty());
    // A second attempt gives the same answer (nothing was left half-started).
    std::string again;
    EXPECT_EQ(KernelTrace::start(&again), nullptr);
    EXPECT_FALSE(again.empty());
  }
}

}  // namespace
}  // namespace strata::tools
