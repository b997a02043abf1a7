// The budget planner's per-rank search (model/planner.cpp), for its entry points (model/planner_ranks.cpp):
// plan_for_budget's search on one rank's forecasts, over the MLP's tile counts (model/plan/planner.h).
#pragma once
#include "model/plan/planner.h"

namespace strata::planner_detail {

// diagnose: when nothing fits, also find the minimum device budget and the tier that would help.
PlanResult plan_with_tiles(const ForecastRequest& base, const TierBudgets& budgets, bool diagnose);

}  // namespace strata::planner_detail
