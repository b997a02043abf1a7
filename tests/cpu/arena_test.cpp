// The device arena: rounding, best fit, coalescing, exhaustion, fragmentation, the event log,
// peak tracking, and the Buffer owner that returns its block exactly once.
#include "engine/arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/tensor.h"

namespace strata {
namespace {

constexpr size_t A = Arena::kAlign;

TEST(arena, budget_is_rounded_down_to_the_alignment) {
  Arena a("device", 10 * A + 17);
  EXPECT_EQ(a.budget(), 10 * A);
  EXPECT_EQ(a.tier(), "device");
  Arena tiny("device", A - 1);  // below one block: nothing can be allocated
  EXPECT_EQ(tiny.budget(), 0u);
  EXPECT_THROW(tiny.allocate(1, "x"), OutOfMemoryError);
}

TEST(arena, sizes_round_up_to_256_and_offsets_are_aligned) {
  Arena a("device", 64 * A);
  size_t o1 = a.allocate(1, "one");  // 1 byte -> one block
  EXPECT_EQ(a.in_use(), A);
  size_t o2 = a.allocate(A + 1, "two");  // 257 bytes -> two blocks
  EXPECT_EQ(a.in_use(), 3 * A);
  size_t o3 = a.allocate(0, "zero");  // empty tensors still get a distinct block
  EXPECT_EQ(a.in_use(), 4 * A);
  size_t o4 = a.allocate(2 * A, "exact");  // already aligned: no padding
  EXPECT_EQ(a.in_use(), 6 * A);
  for (size_t o : {o1, o2, o3, o4}) EXPECT_EQ(o % A, 0u) << o;
  // A fresh arena hands out blocks from the bottom, back to back.
  EXPECT_EQ(o1, 0u);
  EXPECT_EQ(o2, A);
  EXPECT_EQ(o3, 3 * A);
  EXPECT_EQ(o4, 4 * A);
  EXPECT_EQ(a.high_water(), 6 * A);
  EXPECT_EQ(a.live_blocks(), 4u);
}

TEST(arena, best_fit_prefers_the_smallest_hole_that_fits) {
  Arena a("device", 64 * A);
  size_t big = a.allocate(4 * A, "big");  // [0, 4A)
  size_t sep1 = a.allocate(A, "sep1");    // [4A, 5A)
  size_t small = a.allocate(A, "small");  // [5A, 6A)
  size_t sep2 = a.allocate(A, "sep2");    // [6A, 7A); the tail [7A, 64A) stays free
  a.free(big);
  a.free(small);
  // Holes: 4A at 0 (lowest address), 1A at 5A (smallest), 57A tail. A small request takes the
  // smallest hole, not the first one.
  size_t s = a.allocate(100, "fits-small");
  EXPECT_EQ(s, small);
  // A 2-block request does not fit the (now used) small hole: the 4A hole beats the big tail.
  size_t m = a.allocate(2 * A, "fits-big");
  EXPECT_EQ(m, big);
  // The remaining 2A of that hole is split off and reused next for a 2A request.
  size_t r = a.allocate(2 * A, "rest-of-big");
  EXPECT_EQ(r, big + 2 * A);
  EXPECT_EQ(a.high_water(), 7 * A);  // nothing had to come from the tail
  (void)sep1;
  (void)sep2;
}

TEST(arena, equal_sized_holes_pick_the_lowest_address) {
  Arena a("device", 16 * A);
  std::vector<size_t> o;
  for (int i = 0; i < 6; ++i) o.push_back(a.allocate(A, "b"));
  a.free(o[3]);
  a.free(o[1]);
  EXPECT_EQ(a.allocate(A, "again"), o[1]);
}

TEST(arena, freeing_neighbours_coalesces_into_one_block) {
  Arena a("device", 4 * A);
  std::vector<size_t> o;
  for (int i = 0; i < 4; ++i) o.push_back(a.allocate(A, "b"));
  EXPECT_THROW(a.allocate(1, "full"), OutOfMemoryError);
  // Free the two outer-middle blocks with a live block between them: 2A free, but no 2A hole.
  a.free(o[0]);
  a.free(o[2]);
  EXPECT_THROW(a.allocate(2 * A, "no-hole"), OutOfMemoryError);
  // Freeing the block in between merges left, middle and right into one 3A block at 0.
  a.free(o[1]);
  EXPECT_EQ(a.allocate(3 * A, "merged"), 0u);
  EXPECT_EQ(a.in_use(), 4 * A);
}

TEST(arena, freeing_everything_restores_the_whole_budget) {
  Arena a("device", 8 * A);
  std::vector<size_t> o;
  for (int i = 0; i < 8; ++i) o.push_back(a.allocate(A, "b"));
  // An order that exercises merging with the next block, the previous block, and both.
  for (int i : {6, 4, 7, 1, 0, 3, 2, 5}) a.free(o[size_t(i)]);
  EXPECT_EQ(a.in_use(), 0u);
  EXPECT_EQ(a.live_blocks(), 0u);
  EXPECT_DOUBLE_EQ(a.fragmentation(), 0.0);
  EXPECT_EQ(a.allocate(8 * A, "all"), 0u);
}

TEST(arena, exhaustion_throws_out_of_memory_naming_tag_and_tier) {
  Arena a("device", 8 * A);
  a.allocate(3 * A, "weights");
  try {
    a.allocate(6 * A, "L3.mlp.gate");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("L3.mlp.gate"), std::string::npos) << what;
    EXPECT_NE(what.find("device"), std::string::npos) << what;
    EXPECT_EQ(e.tier, "device");
    EXPECT_EQ(e.tag, "L3.mlp.gate");
    EXPECT_EQ(e.requested_bytes, 6 * A);
    EXPECT_EQ(e.in_use_bytes, 3 * A);
    EXPECT_EQ(e.budget_bytes, 8 * A);
  }
  // A failed allocation changes nothing.
  EXPECT_EQ(a.in_use(), 3 * A);
  EXPECT_EQ(a.live_blocks(), 1u);
  EXPECT_EQ(a.allocate(5 * A, "fits"), 3 * A);
}

TEST(arena, oom_is_also_a_strata_error) {
  Arena a("host", 2 * A);
  EXPECT_THROW(a.allocate(3 * A, "x"), Error);
}

// A request near SIZE_MAX (e.g. a negative numel cast to size_t) must not wrap around to a
// tiny rounded size and succeed.
TEST(arena, huge_request_throws_instead_of_wrapping) {
  Arena a("device", 16 * A);
  const size_t huge = std::numeric_limits<size_t>::max();
  EXPECT_THROW(a.allocate(huge, "huge"), OutOfMemoryError);
  EXPECT_THROW(a.allocate(huge - 3, "huge-3"), OutOfMemoryError);
  EXPECT_THROW(a.allocate(huge - A, "huge-A"), OutOfMemoryError);
  EXPECT_EQ(a.in_use(), 0u);
  EXPECT_EQ(a.live_blocks(), 0u);
}

TEST(arena, fragmentation_is_zero_without_holes_and_positive_with_them) {
  Arena a("device", 64 * A);
  EXPECT_DOUBLE_EQ(a.fragmentation(), 0.0);  // fresh: nothing below the high-water mark
  size_t b0 = a.allocate(A, "b0");           // [0, A)
  size_t b1 = a.allocate(A, "b1");           // [A, 2A)
  size_t b2 = a.allocate(2 * A, "b2");       // [2A, 4A)
  size_t b3 = a.allocate(A, "b3");           // [4A, 5A)
  EXPECT_DOUBLE_EQ(a.fragmentation(), 0.0);  // packed; the free tail is above high water
  a.free(b1);
  EXPECT_DOUBLE_EQ(a.fragmentation(), 0.0);  // one hole: it is also the largest
  a.free(b3);                                // merges with the tail: only [4A, 5A) of it lies below high water
  // Holes below high water: 1A at A and 1A at 4A -> 1 - 1/2.
  EXPECT_DOUBLE_EQ(a.fragmentation(), 0.5);
  a.free(b0);  // merges with b1's hole: 2A and 1A -> 1 - 2/3
  EXPECT_NEAR(a.fragmentation(), 1.0 / 3.0, 1e-12);
  a.free(b2);  // everything free: one block
  EXPECT_DOUBLE_EQ(a.fragmentation(), 0.0);
  EXPECT_EQ(a.high_water(), 5 * A);  // high water never goes down
}

TEST(arena, null_base_hands_out_offsets_for_the_sim_backend) {
  const size_t budget = size_t(1) << 40;  // 1 TiB: accounted, never backed
  Arena a("sim", budget, nullptr);
  size_t o1 = a.allocate(size_t(300) << 30, "weights");
  size_t o2 = a.allocate(size_t(500) << 30, "activations");
  EXPECT_EQ(o1, 0u);
  EXPECT_EQ(o2, size_t(300) << 30);
  EXPECT_EQ(a.ptr(o1), nullptr);
  EXPECT_EQ(a.ptr(o2), nullptr);
  EXPECT_EQ(a.in_use(), size_t(800) << 30);
  EXPECT_THROW(a.allocate(size_t(300) << 30, "too-much"), OutOfMemoryError);
  a.free(o1);
  EXPECT_EQ(a.in_use(), size_t(500) << 30);
}

TEST(arena, real_base_pointers_are_base_plus_offset) {
  std::vector<std::byte> mem(8 * A);
  Arena a("device", mem.size(), mem.data());
  a.allocate(A, "x");
  size_t o = a.allocate(A, "y");
  EXPECT_EQ(a.ptr(o), mem.data() + o);
  EXPECT_EQ(a.ptr(o), mem.data() + A);
}

TEST(arena, event_log_records_deltas_tags_and_clock) {
  Arena a("device", 64 * A);
  a.allocate(A, "before-logging");  // not logged
  EXPECT_TRUE(a.events().empty());
  double now = 0.0;
  a.set_clock([&now] { return now += 1.5; });
  a.set_logging(true);
  size_t x = a.allocate(3 * A, "x");
  size_t y = a.allocate(100, "y");
  a.free(x);
  size_t z = a.allocate(A + 1, "z");
  a.free(y);
  (void)z;
  const auto& ev = a.events();
  ASSERT_EQ(ev.size(), 5u);
  // Deltas in order, with the freed block's tag on the free event.
  std::vector<std::pair<int64_t, std::string>> want = {
      {int64_t(3 * A), "x"}, {int64_t(A), "y"}, {-int64_t(3 * A), "x"}, {int64_t(2 * A), "z"}, {-int64_t(A), "y"}};
  int64_t running = int64_t(A);  // the block allocated before logging was turned on
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].delta, want[i].first) << i;
    EXPECT_EQ(ev[i].tag, want[i].second) << i;
    running += ev[i].delta;
    EXPECT_EQ(int64_t(ev[i].in_use), running) << i;  // in_use after the event
    EXPECT_DOUBLE_EQ(ev[i].time_s, 1.5 * double(i + 1)) << i;
  }
  EXPECT_EQ(running, int64_t(a.in_use()));
  a.clear_events();
  EXPECT_TRUE(a.events().empty());
  a.set_logging(false);
  a.allocate(A, "off");
  EXPECT_TRUE(a.events().empty());
}

TEST(arena, default_clock_is_monotonic_wall_time) {
  Arena a("device", 8 * A);
  a.set_logging(true);
  size_t o = a.allocate(A, "a");
  a.free(o);
  ASSERT_EQ(a.events().size(), 2u);
  EXPECT_GE(a.events()[0].time_s, 0.0);
  EXPECT_GE(a.events()[1].time_s, a.events()[0].time_s);
}

TEST(arena, peak_and_reset_peak) {
  Arena a("device", 64 * A);
  size_t big = a.allocate(4 * A, "big");
  a.allocate(2 * A, "mid");
  EXPECT_EQ(a.peak(), 6 * A);
  a.free(big);
  EXPECT_EQ(a.in_use(), 2 * A);
  EXPECT_EQ(a.peak(), 6 * A);  // peak survives frees
  a.reset_peak();
  EXPECT_EQ(a.peak(), 2 * A);  // back to the current use
  size_t t = a.allocate(A, "t");
  EXPECT_EQ(a.peak(), 3 * A);
  a.free(t);
  EXPECT_EQ(a.peak(), 3 * A);
  EXPECT_EQ(a.high_water(), 6 * A);  // reset_peak does not touch high water
}

TEST(arena, tag_of_names_live_blocks_only) {
  Arena a("device", 8 * A);
  size_t o = a.allocate(A, "grad:L1.attn.q");
  EXPECT_EQ(a.tag_of(o), "grad:L1.attn.q");
  EXPECT_EQ(a.tag_of(o + A), "");  // not a block start
  a.free(o);
  EXPECT_EQ(a.tag_of(o), "");
}

TEST(arena, freeing_an_unknown_offset_throws) {
  Arena a("device", 8 * A);
  size_t o = a.allocate(2 * A, "x");
  EXPECT_THROW(a.free(12345), Error);
  EXPECT_THROW(a.free(o + A), Error);  // inside a block, not its start
  try {
    a.free(7 * A);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown offset"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.in_use(), 2 * A);  // bad frees leave the accounting alone
  a.free(o);
  EXPECT_THROW(a.free(o), Error);  // double free
  EXPECT_EQ(a.in_use(), 0u);
}

TEST(arena, format_bytes_units) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(size_t(3) << 29), "1.50 GiB");
}

// ---- Buffer: one owner per block.

TEST(buffer, owns_one_block_and_views_it) {
  std::vector<std::byte> mem(16 * A);
  Arena a("device", mem.size(), mem.data());
  {
    Buffer b(a, DType::f32, Shape{10, 20}, "act");  // 800 bytes -> 1024
    EXPECT_TRUE(b.allocated());
    EXPECT_EQ(a.in_use(), 4 * A);
    EXPECT_EQ(a.live_blocks(), 1u);
    EXPECT_EQ(a.tag_of(b.offset()), "act");
    EXPECT_EQ(b.view().data, static_cast<void*>(a.ptr(b.offset())));
    EXPECT_EQ(b.view().shape, (Shape{10, 20}));
    EXPECT_EQ(b.view().dtype, DType::f32);
  }
  EXPECT_EQ(a.in_use(), 0u);
  EXPECT_EQ(a.live_blocks(), 0u);
}

TEST(buffer, move_construction_transfers_ownership) {
  Arena a("device", 16 * A);
  Buffer src(a, DType::f32, Shape{64}, "x");
  const size_t off = src.offset();
  Buffer dst(std::move(src));
  EXPECT_FALSE(src.allocated());  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  EXPECT_FALSE(src.view().defined());
  EXPECT_TRUE(dst.allocated());
  EXPECT_EQ(dst.offset(), off);
  EXPECT_EQ(a.live_blocks(), 1u);
  src.reset();  // a moved-from buffer frees nothing
  EXPECT_EQ(a.live_blocks(), 1u);
  dst.reset();
  EXPECT_EQ(a.live_blocks(), 0u);
  dst.reset();  // a second reset is a no-op, not a double free
  EXPECT_EQ(a.in_use(), 0u);
}

TEST(buffer, move_assignment_frees_the_old_block_exactly_once) {
  Arena a("device", 16 * A);
  a.set_logging(true);
  Buffer x(a, DType::f32, Shape{64}, "x");   // 256 bytes
  Buffer y(a, DType::f32, Shape{128}, "y");  // 512 bytes
  const size_t xo = x.offset();
  EXPECT_EQ(a.in_use(), 3 * A);
  y = std::move(x);  // y's old block goes back, x's block moves into y
  EXPECT_EQ(a.in_use(), A);
  EXPECT_EQ(a.live_blocks(), 1u);
  EXPECT_EQ(y.offset(), xo);
  EXPECT_EQ(a.tag_of(xo), "x");
  EXPECT_FALSE(x.allocated());
  Buffer& alias = y;
  y = std::move(alias);  // self-move keeps the block
  EXPECT_TRUE(y.allocated());
  EXPECT_EQ(a.live_blocks(), 1u);
  {
    std::vector<Buffer> v;
    v.push_back(std::move(y));
    v.emplace_back(a, DType::i32, Shape{3}, "z");
    v.reserve(64);  // relocation moves the buffers; nothing is freed or duplicated
    EXPECT_EQ(a.live_blocks(), 2u);
  }
  EXPECT_EQ(a.in_use(), 0u);
  // Exactly one free per allocation in the log.
  int allocs = 0, frees = 0;
  for (auto& e : a.events()) (e.delta > 0 ? allocs : frees)++;
  EXPECT_EQ(allocs, 3);
  EXPECT_EQ(frees, 3);
}

TEST(buffer, failed_construction_allocates_nothing) {
  Arena a("device", 4 * A);
  Buffer keep(a, DType::f32, Shape{64}, "keep");
  EXPECT_THROW(Buffer(a, DType::f32, Shape{1024}, "too-big"), OutOfMemoryError);
  EXPECT_EQ(a.in_use(), A);
  EXPECT_EQ(a.live_blocks(), 1u);
}

}  // namespace
}  // namespace strata
