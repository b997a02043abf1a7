#include "model/llama/zero.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <queue>
#include <utility>

#include "engine/error.h"

namespace strata {

std::vector<int> zero_owner(const std::vector<size_t>& numel, int world) {
  if (world < 1) throw ConfigError(fmt::format("zero: world size must be >= 1, got {}", world), "zero", "world");
  std::vector<size_t> order(numel.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numel[a] > numel[b]; });
  // The first least loaded rank takes each: while a rank holds nothing that is the lowest empty one, after that
  // the lowest (load, rank) of a heap. The same owners as a scan of every rank's load, in O(P log P) for P
  // parameters however many ranks there are (the planner builds the model once a rank it forecasts).
  using Load = std::pair<size_t, int>;  // (elements, rank)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loaded;
  int next_empty = 0;
  std::vector<int> owner(numel.size(), -1);
  for (size_t i : order) {
    if (numel[i] == 0) continue;
    Load r{0, next_empty};
    if (next_empty < world) {
      ++next_empty;
    } else {
      r = loaded.top();
      loaded.pop();
    }
    owner[i] = r.second;
    loaded.push({r.first + numel[i], r.second});
  }
  return owner;
}

void check_zero_stage(int stage, const char* where) {
  if (stage < 0 || stage > 3)
    throw ConfigError(fmt::format("{} must be 0 (no sharding), 1 (optimizer state sharded), 2 (gradients too) or 3 "
                                  "(layer weights too), got {}",
                                  where, stage),
                      where, "zero_stage");
}

}  // namespace strata
