// How the budget planner lays out several GPUs when the run does not say: the sequence-parallel degree (a divisor
// of the GPUs; the rest data parallel) and the ZeRO stage (0-3). Each layout the model allows is planned by
// plan_for_budget; the fastest forecast per token that fits every budget wins (ties: the smaller device peak).
// A layout whose keep-everything step (no plan of it is faster) cannot beat the best found is not searched, and
// each search only looks for plans faster than that best (planner_detail::Goal::bound_s).
#pragma once
#include <string>
#include <vector>

#include "model/plan/planner.h"

namespace strata {

struct Layout {
  int sequence_parallel = 1;  // ranks sharing each row (ForecastRequest::sequence_parallel)
  int zero_stage = 0;         // ForecastRequest::zero_stage
};
// "sequence parallel 4 x data parallel 1, ZeRO-3" for `gpus` GPUs.
std::string layout_name(const Layout& l, int gpus);

struct LayoutTried {
  Layout layout;
  std::string status;             // "fits", "nothing fits", "not searched: ...", "not possible: ..."
  bool fits = false;              // a plan fits every budget
  double tokens_per_s = 0;        // fits: its forecast (every rank's tokens)
  size_t peak_bytes = 0;          // fits: its device peak (ZeRO: the largest rank's)
  double bound_tokens_per_s = 0;  // keep everything's forecast: no plan of this layout is faster
  std::string label;              // fits: the plan
  int sim_runs = 0;
};

struct LayoutChoice {
  bool found = false;
  Layout layout;                   // the chosen one (found), else the lowest-memory one (whose diagnosis `plan` is)
  PlanResult plan;                 // the planner's result at that layout
  std::vector<LayoutTried> tried;  // every layout: fitting ones fastest first, then the rest
  std::string why;                 // one line: why this layout
  int sim_runs = 0;                // over every layout
};

// The layouts of base.gpus GPUs (base.gpus > 1): sequence_parallel `fixed_sp` (> 0: given) or every divisor of the
// GPUs the model's heads and base.seq allow; zero stage `fixed_zero` (>= 0: given) or 0..3. Each is planned from
// base (its plan, budgets, tiles) with that layout; one time limit (base.plan_time_limit_s) covers them all.
LayoutChoice plan_layout(const ForecastRequest& base, const TierBudgets& budgets, int fixed_sp, int fixed_zero);

}  // namespace strata
