#include "model/plan/arena_sizing.h"

#include <algorithm>

namespace strata {

namespace {
ArenaSizing sized(size_t high_water) {
  ArenaSizing a;
  a.high_water = high_water;
  a.headroom = std::max(kArenaHeadroomMin, size_t(double(a.high_water) * kArenaHeadroomFraction));
  constexpr size_t kAlign = size_t(2) << 20;
  a.bytes = (a.high_water + a.headroom + kAlign - 1) / kAlign * kAlign;
  return a;
}
}  // namespace

ArenaSizing arena_for_plan(const ForecastRequest& r) {
  ForecastRequest req = r;
  req.budget = 0;  // unbounded: the high-water offset is what the step needs
  return sized(forecast(req).high_water_bytes);
}

ArenaSizing arena_for_lengths(const ForecastRequest& r, const std::vector<int>& seqs) {
  STRATA_CHECK(r.positions.empty(), "arena_for_lengths: packed positions are per length");
  ForecastRequest req = r;
  req.budget = 0;
  size_t high = 0;
  for (int t : seqs) {
    req.seq = t;
    high = std::max(high, forecast(req).high_water_bytes);
  }
  return sized(high);
}

}  // namespace strata
