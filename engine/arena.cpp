#include "engine/arena.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "engine/error.h"

namespace strata {

std::string format_bytes(size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

Arena::Arena(std::string tier, size_t budget_bytes, std::byte* base, size_t align)
    : tier_(std::move(tier)), align_(align), budget_(budget_bytes / align * align), base_(base) {
  if (budget_ > 0) insert_free(0, budget_);
  auto t0 = std::chrono::steady_clock::now();
  clock_ = [t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
}

void Arena::insert_free(size_t off, size_t size) {
  if (spare_off_.empty()) {
    free_by_off_.emplace(off, size);
    free_by_size_.emplace(size, off);
    return;
  }
  FreeByOff::node_type o = std::move(spare_off_.back());
  FreeBySize::node_type s = std::move(spare_size_.back());
  spare_off_.pop_back();
  spare_size_.pop_back();
  o.key() = off;
  o.mapped() = size;
  s.value() = {size, off};
  free_by_off_.insert(std::move(o));
  free_by_size_.insert(std::move(s));
}

void Arena::erase_free(FreeByOff::iterator it) {
  spare_size_.push_back(free_by_size_.extract({it->second, it->first}));
  spare_off_.push_back(free_by_off_.extract(it));
}

void Arena::log(int64_t delta, std::string_view tag) {
  if (logging_) events_.push_back({clock_(), delta, in_use_, std::string(tag)});
}

size_t Arena::allocate(size_t bytes, std::string_view tag) {
  const size_t off = try_allocate(bytes, tag);
  if (off == kNoBlock) out_of_memory(bytes, tag);
  return off;
}

void Arena::out_of_memory(size_t bytes, std::string_view tag) const {
  const size_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  std::string what =
      fmt::format("{} arena: out of budget allocating '{}' ({}): {} in use of a {} budget, largest free block {}",
                  tier_, tag, format_bytes(bytes), format_bytes(in_use_), format_bytes(budget_), format_bytes(largest));
  STRATA_THROW(OutOfMemoryError, what, tier_, std::string(tag), bytes, in_use_, budget_);
}

size_t Arena::try_allocate(size_t bytes, std::string_view tag) {
  // Requests beyond the budget cannot fit; checking first also keeps the rounding below from
  // wrapping around for sizes near SIZE_MAX (e.g. a negative numel cast to size_t).
  size_t size = bytes > budget_ ? SIZE_MAX : std::max<size_t>(align_, (bytes + align_ - 1) / align_ * align_);
  auto it = free_by_size_.lower_bound({size, 0});
  if (it == free_by_size_.end()) return kNoBlock;
  size_t off = it->second, have = it->first;
  erase_free(free_by_off_.find(off));
  if (have > size) insert_free(off + size, have - size);
  if (spare_live_.empty()) {
    live_.emplace(off, Live{size, std::string(tag)});
  } else {
    LiveMap::node_type n = std::move(spare_live_.back());
    spare_live_.pop_back();
    n.key() = off;
    n.mapped().size = size;
    n.mapped().tag.assign(tag);
    live_.insert(std::move(n));
  }
  in_use_ += size;
  peak_ = std::max(peak_, in_use_);
  high_water_ = std::max(high_water_, off + size);
  log(int64_t(size), tag);
  return off;
}

void Arena::free(size_t off) {
  auto lit = live_.find(off);
  STRATA_CHECK(lit != live_.end(), fmt::format("{} arena: free of unknown offset {}", tier_, off));
  size_t size = lit->second.size;
  in_use_ -= size;
  log(-int64_t(size), lit->second.tag);
  spare_live_.push_back(live_.extract(lit));
  // Coalesce with the neighbours on both sides.
  size_t start = off, end = off + size;
  auto next = free_by_off_.lower_bound(off);
  if (next != free_by_off_.end() && next->first == end) {
    end += next->second;
    erase_free(next);
  }
  auto prev = free_by_off_.lower_bound(off);
  if (prev != free_by_off_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      erase_free(prev);
    }
  }
  insert_free(start, end - start);
}

double Arena::fragmentation() const {
  size_t free_below = 0, largest = 0;
  for (auto& [off, size] : free_by_off_) {
    if (off >= high_water_) continue;
    size_t s = std::min(size, high_water_ - off);
    free_below += s;
    largest = std::max(largest, s);
  }
  return free_below == 0 ? 0.0 : 1.0 - double(largest) / double(free_below);
}

Arena::Mark Arena::mark() const {
  return Mark{in_use_, live_.size(), {free_by_off_.begin(), free_by_off_.end()}};
}

bool Arena::unchanged_since(const Mark& m) const {
  return m.in_use == in_use_ && m.live == live_.size() && m.free.size() == free_by_off_.size() &&
         std::equal(m.free.begin(), m.free.end(), free_by_off_.begin(),
                    [](const std::pair<size_t, size_t>& a, const auto& b) {
                      return a.first == b.first && a.second == b.second;
                    });
}

std::string_view Arena::tag_of(size_t offset) const {
  auto it = live_.find(offset);
  return it == live_.end() ? std::string_view() : std::string_view(it->second.tag);
}

}  // namespace strata
