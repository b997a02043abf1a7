// The device arena: one reservation carved by our own best-fit allocator working on offsets,
// so the same allocator runs on a null base (sim backend), on host memory (cpu backend) and on
// a GPU reservation (cuda backend). Budget, current/peak bytes, fragmentation and an event log.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata {

struct ArenaEvent {
  double time_s;    // from the arena's clock (wall time, or the sim backend's model time)
  int64_t delta;    // +bytes allocated, -bytes freed
  size_t in_use;    // bytes in use after the event
  std::string tag;  // what the block holds (slot class, "grad:...", "weights", ...)
};

class Arena {
 public:
  static constexpr size_t kAlign = 256;

  // `base` may be null: offsets are still handed out and accounted (sim backend). `align`:
  // block alignment and size granule (256 for device memory, 4096 for O_DIRECT extents).
  Arena(std::string tier, size_t budget_bytes, std::byte* base = nullptr, size_t align = kAlign);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Returns the offset of a block of at least `bytes` (rounded up to the alignment). Throws
  // OutOfMemoryError naming `tag` when no free block fits within the budget.
  size_t allocate(size_t bytes, std::string_view tag);
  // allocate without the throw: kNoBlock when no free block fits (a caller that waits for blocks to come back and
  // tries again; a planner's search meets this thousands of times a second, where an exception's unwinding showed).
  static constexpr size_t kNoBlock = SIZE_MAX;
  size_t try_allocate(size_t bytes, std::string_view tag);
  // The OutOfMemoryError allocate throws for a request of `bytes` that does not fit now.
  [[noreturn]] void out_of_memory(size_t bytes, std::string_view tag) const;
  void free(size_t offset);
  std::byte* ptr(size_t offset) const { return base_ ? base_ + offset : nullptr; }

  const std::string& tier() const { return tier_; }
  size_t budget() const { return budget_; }
  size_t alignment() const { return align_; }
  size_t in_use() const { return in_use_; }
  size_t peak() const { return peak_; }
  // Highest end offset ever handed out: the memory the reservation actually had to back.
  size_t high_water() const { return high_water_; }
  // 1 - largest free block / all free bytes below the high-water mark (0 = no holes).
  double fragmentation() const;
  size_t live_blocks() const { return live_.size(); }
  void reset_peak() { peak_ = in_use_; }

  // The event log (off by default for speed; the tools and tests turn it on).
  void set_logging(bool on) { logging_ = on; }
  const std::vector<ArenaEvent>& events() const { return events_; }
  void clear_events() { events_.clear(); }
  void set_clock(std::function<double()> clock) { clock_ = std::move(clock); }
  // Tag of the live block at `offset` (empty if none).
  std::string_view tag_of(size_t offset) const;
  bool logging() const { return logging_; }
  // What the next allocations depend on (the free blocks, and what is in use), to tell whether a block of
  // allocations and frees left the arena as it found it (Backend::end_repeat).
  struct Mark {
    size_t in_use = 0, live = 0;
    std::vector<std::pair<size_t, size_t>> free;  // (offset, size)
  };
  Mark mark() const;
  bool unchanged_since(const Mark& m) const;

 private:
  void insert_free(size_t off, size_t size);
  void erase_free(std::map<size_t, size_t>::iterator it);
  void log(int64_t delta, std::string_view tag);

  std::string tier_;
  size_t align_;
  size_t budget_;
  std::byte* base_;
  using FreeByOff = std::map<size_t, size_t>;
  using FreeBySize = std::set<std::pair<size_t, size_t>>;
  FreeByOff free_by_off_;    // offset -> size
  FreeBySize free_by_size_;  // (size, offset): best fit, lowest address
  struct Live {
    size_t size;
    std::string tag;
  };
  using LiveMap = std::map<size_t, Live>;
  LiveMap live_;
  // The trees' nodes of blocks gone, reused by the next ones: a planner's search runs millions of allocations on
  // sim arenas, and a node (with its tag's buffer) taken from here costs no heap call.
  std::vector<FreeByOff::node_type> spare_off_;
  std::vector<FreeBySize::node_type> spare_size_;
  std::vector<LiveMap::node_type> spare_live_;
  size_t in_use_ = 0, peak_ = 0, high_water_ = 0;
  bool logging_ = false;
  std::vector<ArenaEvent> events_;
  std::function<double()> clock_;
};

std::string format_bytes(size_t bytes);

}  // namespace strata
