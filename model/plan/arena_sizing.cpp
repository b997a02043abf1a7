#include "model/plan/arena_sizing.h"

#include <algorithm>

namespace strata {

ArenaSizing arena_for_plan(const ForecastRequest& r) {
  ForecastRequest req = r;
  req.budget = 0;  // unbounded: the high-water offset is what the step needs
  const Forecast f = forecast(req);
  ArenaSizing a;
  a.high_water = f.high_water_bytes;
  a.headroom = std::max(kArenaHeadroomMin, size_t(double(a.high_water) * kArenaHeadroomFraction));
  constexpr size_t kAlign = size_t(2) << 20;
  a.bytes = (a.high_water + a.headroom + kAlign - 1) / kAlign * kAlign;
  return a;
}

}  // namespace strata
