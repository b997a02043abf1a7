// The budget planner's entry points: a fixed state placement's checks, and ZeRO's search over the ranks'
// peaks, around the per-rank search of model/plan/planner.cpp (plan_with_tiles).
#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "engine/error.h"
#include "model/plan/planner.h"
#include "model/plan/planner_search.h"

namespace strata {

using planner_detail::out_of_time;
using planner_detail::plan_with_tiles;
using planner_detail::search_progress;

namespace {

constexpr int kVerifyPastLimit = 64;

// ZeRO over several ranks: each rank owns another share of the state (model/llama/zero.h), so the ranks' peaks
// differ and a plan must fit the largest. The search runs on one rank's forecasts, the rank with the largest
// peak under the base plan; the plan it chooses is then forecast on every rank under the budgets, and while
// one does not fit, the search runs again with the device budget lowered by the shortfall (the ranks differ
// mostly by their persistent state: the same bytes under every plan). The result's forecast is the rank with
// the largest peak under the chosen plan (`rank`), and rank_peak_bytes every rank's.
// The owners fill the lowest ranks first (model/llama/zero.h): the ranks from Forecast::zero_owning_ranks on own no
// state and differ only by their place in a sequence-parallel group, so one forecast stands for each place and a
// scan forecasts at most owners + sequence_parallel ranks, however many there are.
PlanResult plan_every_rank(const ForecastRequest& base, const TierBudgets& budgets, const planner_detail::Goal& goal) {
  if (base.zero_stage < 1 || base.gpus < 2) return plan_with_tiles(base, budgets, goal);
  ForecastRequest r = base;
  r.budget = 0;
  int runs = 0, search_rank = 0;
  size_t top = 0;
  const int sp = std::max(1, base.sequence_parallel);
  int owning = base.gpus, scanned = base.gpus;  // ranks [0, scanned) are forecast, the others share one's
  for (int q = 0; q < scanned; ++q) {
    if (out_of_time()) {  // the ranks not scanned are not known to fit: no plan
      PlanResult pr;
      pr.budgets = budgets;
      pr.sim_runs = runs;
      return pr;
    }
    ForecastRequest scan = r;
    scan.rank = q;
    scan.detail = false;  // the peak alone
    const Forecast f = forecast(scan);
    const size_t peak = f.peak_bytes;
    if (q == 0) owning = f.zero_owning_ranks, scanned = std::min(base.gpus, owning + sp);
    runs++;
    search_progress(1);
    if (q == 0 || peak > top) top = peak, search_rank = q;
  }
  if (top > budgets.device) {
    // Keeping everything does not fit, so the plan will be a low-memory one, and under those the ranks' peaks can
    // order otherwise. The rank with the largest lowest-memory peak is searched instead: the plan found fits the
    // others more often, and fewer rounds search again under a lower budget (the 8B at 4M tokens on 8 GPUs, ZeRO-3:
    // one round instead of three).
    size_t low_top = 0;
    for (int q = 0; q < scanned && !out_of_time(); ++q) {
      const size_t low = planner_detail::floor_peak(base, budgets, runs, q);
      if (q == 0 || low > low_top) low_top = low, search_rank = q;
    }
  }
  r.rank = search_rank;
  size_t margin = 0;  // bytes the search leaves unused for the other ranks' larger peaks
  PlanResult pr;
  for (int round = 0; round <= base.gpus; ++round) {
    pr = plan_with_tiles(r, TierBudgets{budgets.device - margin, budgets.host, budgets.disk}, goal);
    runs += pr.sim_runs;
    pr.sim_runs = runs;
    pr.rank = search_rank;
    if (!pr.found) {
      pr.minimum_bytes += margin;  // what the search rank needs plus the others' excess over it
      return pr;
    }
    if (!(pr.forecast.step_s < goal.bound_s)) {
      // Only plans faster than the bound matter (a layout's search after a faster one was found): this one is not,
      // and a lower budget only makes the plans slower, so the ranks are not checked and no round follows.
      pr.found = false;
      return pr;
    }
    ForecastRequest c = r;
    c.plan = pr.plan;
    c.mlp_tiles = pr.plan.mlp_tiles;
    pr.rank_peak_bytes.assign(size_t(base.gpus), 0);
    size_t short_by = 0;
    int largest = -1;  // the fitting rank with the largest peak
    for (int q = 0; q < scanned; ++q) {
      // A found plan is verified on every scanned rank past the time limit too (a few runs a rank), unless they
      // are so many that this alone would take minutes.
      if (out_of_time() && scanned > kVerifyPastLimit) {  // not verified on every rank
        pr.found = false;
        pr.rank_peak_bytes.clear();
        pr.sim_runs = runs;
        return pr;
      }
      c.rank = q;
      c.budget = budgets.device;
      Forecast f = forecast(c);
      runs++;
      search_progress(1);
      const bool fits = f.fits && f.host_held_bytes() <= budgets.host && f.peak_disk_bytes <= budgets.disk;
      if (!fits) {
        c.budget = 0;  // the in-use peak, as the search measures it
        f = forecast(c);
        runs++;
        const size_t over = f.peak_bytes > budgets.device ? f.peak_bytes - budgets.device : 0;
        short_by = std::max(short_by, std::max(over, std::max<size_t>(budgets.device / 100, size_t(1) << 20)));
      }
      pr.rank_peak_bytes[size_t(q)] = f.peak_bytes;
      if (fits && (largest < 0 || f.peak_bytes > pr.rank_peak_bytes[size_t(largest)])) {
        largest = q;
        pr.rank = q;
        pr.forecast = std::move(f);
      }
    }
    for (int q = scanned; q < base.gpus; ++q)  // owning nothing: as the forecast one in the same group place
      pr.rank_peak_bytes[size_t(q)] = pr.rank_peak_bytes[size_t(owning + (q - owning) % sp)];
    pr.sim_runs = runs;
    if (!short_by) return pr;
    margin += short_by;
    pr.found = false;  // unless a later round fits every rank
    pr.minimum_bytes = budgets.device + short_by;
    if (margin >= budgets.device) break;
  }
  return pr;  // no plan found fits every rank: the last one and what it lacks
}

// A fixed state placement (base.plan places state): its tiers need budgets, and the label names it.
PlanResult plan_fixed_state(const ForecastRequest& base, const TierBudgets& budgets, const planner_detail::Goal& goal) {
  const Plan& p = base.plan;
  if (!p.places_state()) return plan_every_rank(base, budgets, goal);
  for (auto [tier, budget, key] : {std::tuple{Decision::host, budgets.host, "host_memory_budget"},
                                   std::tuple{Decision::disk, budgets.disk, "disk_memory_budget"}})
    if (p.state_uses(tier) && budget == 0)
      STRATA_THROW(ConfigError,
                   fmt::format("the plan's persistent state ({}) goes to the {} tier, which has no budget: give the "
                               "planner a {} budget (--{}-budget, YAML {})",
                               p.state_label(), decision_name(tier), decision_name(tier), decision_name(tier), key),
                   "budget planner", key);
  PlanResult r = plan_every_rank(base, budgets, goal);
  r.label += fmt::format(" + state (fixed): {}", p.state_label());
  return r;
}

}  // namespace

PlanResult planner_detail::plan_for_goal(const ForecastRequest& base, const TierBudgets& budgets,
                                         const planner_detail::Goal& goal) {
  check_forecast_shape(base);
  return plan_fixed_state(base, budgets, goal);
}

PlanResult plan_for_budget(const ForecastRequest& base, const TierBudgets& budgets) {
  check_forecast_shape(base);
  planner_detail::SearchClock clock(base);
  PlanResult r = plan_fixed_state(base, budgets, planner_detail::Goal{true});
  clock.finish(r);
  return r;
}

PlanResult plan_for_budget_undiagnosed(const ForecastRequest& base, const TierBudgets& budgets) {
  check_forecast_shape(base);
  planner_detail::SearchClock clock(base);
  PlanResult r = plan_fixed_state(base, budgets, planner_detail::Goal{});
  clock.finish(r);
  return r;
}

PlanResult plan_first_fit(const ForecastRequest& base, const TierBudgets& budgets) {
  check_forecast_shape(base);
  planner_detail::SearchClock clock(base);
  PlanResult r = plan_fixed_state(base, budgets, planner_detail::Goal{false, true});
  clock.finish(r);
  return r;
}

}  // namespace strata
