// The device arena's in-use bytes over one forecast step as a hand-written SVG: one step-wise
// polyline over model time, the forward / backward / optimizer phases shaded, the peak marked
// and the budget (if any) drawn as a dashed line.
#pragma once
#include <string>

#include "model/plan/forecast.h"

namespace strata {

std::string timeline_svg(const Forecast& f, const std::string& title, size_t budget_bytes = 0);

}  // namespace strata
