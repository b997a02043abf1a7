// The budget planner's per-rank search (model/plan/planner.cpp), for its entry points (model/plan/planner_ranks.cpp):
// plan_for_budget's search on one rank's forecasts, over the MLP's tile counts (model/plan/planner.h).
#pragma once
#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "model/plan/planner.h"

namespace strata::planner_detail {

// What a search is after.
struct Goal {
  bool diagnose = false;   // when nothing fits, also find the minimum device budget and the tier that would help
  bool first_fit = false;  // stop at the first plan that fits every budget: whether one exists, not the fastest
  // Only the low-memory families (checkpointing every k, the tier families) and the state placed per layer
  // under them (step 5): no greedy, no refinement. A first pass whose "nothing fits" the whole search may
  // rarely overturn with a mix of per-type decisions.
  bool coarse = false;
  // Only plans faster than this (seconds a step) matter: one that fast is known already (another tile count,
  // layout or state placement). Candidates slower than it, and what only adds work to them, are not run.
  double bound_s = std::numeric_limits<double>::infinity();
  // Only plans that page the layers' weights from the host (layer_weights: page): the others are known to be no
  // faster than a plan found elsewhere (plan_layout: a layout without ZeRO beside a ZeRO-3 one that fits). Nothing
  // is found when paging is not possible.
  bool paged_only = false;
};

PlanResult plan_with_tiles(const ForecastRequest& base, const TierBudgets& budgets, const Goal& goal);
// The persistent state's levels a search of r may try (kStateOffloadingLevels, lowest first): all but "all" (the
// gradients on the host) under gradient accumulation, which sums the micro-batches in the gradients' device buffers
// (on the host that sum is not priced by the forecast).
std::vector<std::string> state_levels(const ForecastRequest& r);
// The smallest device peak of r's lowest-memory plans: the most MLP tiles, the layers paged and the persistent
// state on the host where the budgets allow, and every layer checkpointed, or the layer inputs (the rest
// recomputed) or every layer slot on a tier with a budget. When even that exceeds the device budget, a search
// finds nothing (its candidates keep more on the device). Rank 0's by default: a plan must fit every rank, so rank 0
// not fitting settles it. `runs`: the sim runs it took (a few). `page`: false for the floor of the plans that keep
// the layers' weights on the device.
size_t floor_peak(const ForecastRequest& r, const TierBudgets& budgets, int& runs, int rank = 0, bool page = true);
// Whether a floor rules the device budget out. Not a strict bound: on a small model a mix of recomputed
// classes can need less than checkpointing every layer (whose replay holds a whole layer's working set), so
// only a floor an eighth over the budget counts.
inline bool floor_excludes(size_t floor, size_t device_budget) {
  return floor > device_budget + device_budget / 8;
}

// plan_for_budget toward `goal` (its fixed state placement's checks, ZeRO's ranks, the tile counts), inside the
// caller's SearchClock.
PlanResult plan_for_goal(const ForecastRequest& base, const TierBudgets& budgets, const Goal& goal);

// max_seq_for_budget's bisection over lengths, with what it asks at a length given: `decide` whether some plan fits
// (first fit; `coarse`: the low-memory families alone; `runs` += its sim runs besides the result's), `fastest` the
// fastest plan at the answer, `diagnose` what the shortest length would need when nothing in range fits. The
// layout planner's --max-seq (max_seq_with_layout) asks them of every layout.
struct MaxSeqHooks {
  std::function<PlanResult(const ForecastRequest&, bool coarse, int& runs)> decide;
  std::function<PlanResult(const ForecastRequest&)> fastest, diagnose;
};
MaxSeqResult max_seq_search(const ForecastRequest& base, const TierBudgets& budgets, int lo, int hi, int multiple,
                            const MaxSeqHooks& hooks);

// The search's clock (ForecastRequest::plan_time_limit_s), on the calling thread: the outermost
// entry point (plan_for_budget, max_seq_for_budget) starts it, nested ones share it. Once the limit
// has passed, no new sim run starts: the search ends with the best plan found by then.
class SearchClock {
 public:
  explicit SearchClock(const ForecastRequest& r);
  ~SearchClock();
  SearchClock(const SearchClock&) = delete;
  SearchClock& operator=(const SearchClock&) = delete;
  // Marks `pr` stopped when the limit cut the search short, and (outermost only) says so.
  void finish(PlanResult& pr) const;
  bool outermost() const { return outermost_; }

 private:
  bool outermost_ = false;
};

using Deadline = std::chrono::steady_clock::time_point;
// When the current search must stop (time_point::max() without a limit or a search).
Deadline search_deadline();
// True once the current search's limit has passed; the search records that it stopped.
bool out_of_time();
// The current search's number, new with each outermost entry point (0 outside a search): what the sims shared
// between its nested searches are valid for.
long search_epoch();
// Whether the current search stopped at its limit.
bool search_stopped();
// `runs` more sim runs done; a progress line every 10 s of a long search, naming the fastest fitting plan any of
// the outermost search's nested searches reported (`best`, forecast at `best_step_s`).
void search_progress(int runs, const std::string& best = "", double best_step_s = 0);

}  // namespace strata::planner_detail
