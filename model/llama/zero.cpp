#include "model/llama/zero.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "engine/error.h"

namespace strata {

std::vector<int> zero_owner(const std::vector<size_t>& numel, int world) {
  if (world < 1) throw ConfigError(fmt::format("zero: world size must be >= 1, got {}", world), "zero", "world");
  std::vector<size_t> order(numel.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numel[a] > numel[b]; });
  std::vector<size_t> load(size_t(world), 0);
  std::vector<int> owner(numel.size(), -1);
  for (size_t i : order) {
    if (numel[i] == 0) continue;
    const size_t r = size_t(std::min_element(load.begin(), load.end()) - load.begin());  // first least loaded
    owner[i] = int(r);
    load[r] += numel[i];
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
