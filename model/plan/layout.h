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
  double search_s = 0;  // wall seconds its searches took
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
// Whether a layout fits is asked of the coarse first-fit pass first, the whole first-fit search only once some
// layout fits; when none fits by the coarse pass, none is taken to fit and the lowest-memory one's diagnosis is
// the coarse pass's. `exhaustive`: the whole search asks every layout (the answer the coarse order is tested
// against; it can take many minutes on an 8B).
LayoutChoice plan_layout(const ForecastRequest& base, const TierBudgets& budgets, int fixed_sp, int fixed_zero,
                         bool exhaustive = false);

// --max-seq with the layout chosen (strata-plan --gpus N --max-seq --budget ...): the longest length at which some
// layout of base.gpus GPUs (as plan_layout's: `fixed_sp`, `fixed_zero` when given) has a plan under the budgets,
// by max_seq_for_budget's bisection; a length is asked of each layout the model and the length allow, the
// lowest-memory first (the most sequence parallel, then the highest ZeRO stage), until one fits. At the answer
// plan_layout chooses the fastest layout and plan; when nothing in range fits, `layout` diagnoses the shortest.
struct MaxSeqLayout {
  MaxSeqResult search;  // its plan: at the answer's length, the chosen layout's
  LayoutChoice layout;  // the layouts at the answer's length (its plan moved to search.plan)
};
MaxSeqLayout max_seq_with_layout(const ForecastRequest& base, const TierBudgets& budgets, int lo, int hi, int multiple,
                                 int fixed_sp, int fixed_zero);
// The most ranks that can share a row among base.gpus's divisors (fixed_sp > 0: that one), for the length bound.
int widest_sequence_parallel(const ForecastRequest& base, int fixed_sp);

}  // namespace strata
