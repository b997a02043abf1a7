// The longest sequence the budget planner fits (strata-plan --max-seq): a bisection over lengths in
// multiples of `multiple`, each a plan_for_budget (model/plan/planner.h).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "engine/error.h"
#include "model/plan/planner.h"
#include "model/plan/planner_search.h"

namespace strata {

SeqLimit max_seq_upper_bound(const ForecastRequest& r, const TierBudgets& budgets) {
  const int sp = std::max(1, r.sequence_parallel);
  const int64_t per_token = 2 * int64_t(r.model.hidden_size) + 12;  // bf16 hidden state + tokens, targets, positions
  const int64_t rows = int64_t(std::max(1, r.batch));
  const int64_t device = int64_t(budgets.device / size_t(per_token)) / rows * sp;  // tokens of a row
  const int64_t micro = std::max(1, r.grad_accum);
  const int64_t tokens = std::min(kMaxForecastTokens / rows, kMaxForecastStepTokens / (rows * micro));
  SeqLimit out{kMaxForecastSeq, fmt::format("the longest row a forecast runs ({})", kMaxForecastSeq)};
  if (tokens < out.seq)
    out = {int(tokens), fmt::format("the most tokens a forecast's step runs ({} x batch {}{})", tokens, rows,
                                    micro > 1 ? fmt::format(" x {} micro-batches", micro) : std::string())};
  if (device < out.seq)
    out = {int(device), fmt::format("the device budget: a row of more than {} tokens leaves no room for a bf16 hidden "
                                    "state of {} x {} bytes{}",
                                    device, r.model.hidden_size, 2, sp > 1 ? fmt::format(" over {} ranks", sp) : "")};
  return out;
}

MaxSeqResult max_seq_for_budget(const ForecastRequest& base, const TierBudgets& budgets, int lo, int hi, int multiple) {
  planner_detail::MaxSeqHooks hooks;
  hooks.decide = [&](const ForecastRequest& r, bool coarse, int& runs) {
    // Even the lowest-memory plans over the device budget: no search needed (a few sim runs, not hundreds).
    const size_t low = planner_detail::floor_peak(r, budgets, runs);
    if (planner_detail::search_stopped() || planner_detail::floor_excludes(low, budgets.device)) return PlanResult{};
    planner_detail::Goal goal;
    goal.first_fit = true;  // whether a plan fits; the fastest is searched at the answer
    goal.coarse = coarse;
    return planner_detail::plan_for_goal(r, budgets, goal);
  };
  hooks.fastest = [&](const ForecastRequest& r) { return plan_for_budget_undiagnosed(r, budgets); };
  hooks.diagnose = [&](const ForecastRequest& r) { return plan_for_budget(r, budgets); };
  return planner_detail::max_seq_search(base, budgets, lo, hi, multiple, hooks);
}

MaxSeqResult planner_detail::max_seq_search(const ForecastRequest& base, const TierBudgets& budgets, int lo, int hi,
                                            int multiple, const MaxSeqHooks& hooks) {
  if (multiple < 1)
    throw ConfigError(fmt::format("max-seq search: the multiple must be at least 1, got {}", multiple), "command line",
                      "seq-multiple");
  // Sequence parallel: every length must split evenly over the group's ranks.
  if (const int sp = std::max(1, base.sequence_parallel); multiple % sp != 0) multiple = std::lcm(multiple, sp);
  if (hi > kMaxForecastSeq)
    throw ConfigError(
        fmt::format("max-seq search: the limit (seq-limit) {} is longer than a forecast runs (at most {})", hi,
                    kMaxForecastSeq),
        "command line", "seq-limit");
  planner_detail::SearchClock clock(base);  // one time limit for the whole bisection
  MaxSeqResult out;
  out.multiple = multiple;
  const long k_lo = (std::max<long>(lo, multiple) + multiple - 1) / multiple;  // lengths in units of `multiple`
  const long k_hi = hi / multiple;
  if (k_hi < k_lo)
    throw ConfigError(fmt::format("max-seq search: no multiple of {} between {} and {}", multiple, lo, hi),
                      "command line", "seq-limit");
  out.lo = int(k_lo * multiple);
  out.hi = int(k_hi * multiple);
  // One planner run per length; only the longest fitting one's result is kept. `coarse`: the low-memory families
  // alone (planner_detail::Goal::coarse), else the whole first-fit search.
  auto fits = [&](long k, bool coarse) {
    ForecastRequest r = base;
    r.seq = int(k * multiple);
    int runs = 0;
    PlanResult pr = hooks.decide(r, coarse, runs);
    out.sim_runs += runs + pr.sim_runs;
    if (!pr.found && (pr.stopped || planner_detail::search_stopped()))
      return false;  // undecided: the time limit passed
    out.tried.emplace_back(r.seq, pr.found);
    if (pr.found && r.seq > out.seq) {
      out.found = true;
      out.seq = r.seq;
      out.plan = std::move(pr);
    }
    return out.tried.back().second;
  };
  if (!fits(k_lo, false)) {  // nothing in range: say what the shortest length needs
    ForecastRequest r = base;
    r.seq = out.lo;
    out.plan = hooks.diagnose(r);
    out.sim_runs += out.plan.sim_runs;
    out.stopped = planner_detail::search_stopped();
    if (out.stopped) out.plan.sim_runs = out.sim_runs;  // what the report counts: the whole search's
    clock.finish(out.plan);
    return out;
  }
  // The fastest plan at the answer's length (the lengths tried asked only whether one fits).
  auto fastest = [&] {
    if (planner_detail::search_stopped()) return;
    ForecastRequest r = base;
    r.seq = out.seq;
    PlanResult pr = hooks.fastest(r);
    out.sim_runs += pr.sim_runs;
    if (pr.found) out.plan = std::move(pr);
    out.stopped = planner_detail::search_stopped();
  };
  auto at_limit = [&] {
    out.at_limit = true;
    fastest();
    if (out.stopped) clock.finish(out.plan);
    return out;
  };
  if (k_hi == k_lo || fits(k_hi, true)) return at_limit();
  // a fits, b does not, by the coarse pass: the low-memory families and the state placed per layer under them
  // (and the device floor). A mix of per-type decisions the whole search would find might rarely fit a little
  // longer; the time goes to the fastest plan at the answer instead.
  long a = k_lo, b = k_hi;
  while (b - a > 1 && !planner_detail::search_stopped()) {
    const long mid = a + (b - a) / 2;
    const bool ok = fits(mid, true);
    if (planner_detail::search_stopped()) break;  // mid was not decided
    (ok ? a : b) = mid;
  }
  if (planner_detail::search_stopped()) {  // the longest length verified by then; longer ones undecided
    out.stopped = true;
    clock.finish(out.plan);
    return out;
  }
  out.next_seq = int(b * multiple);
  fastest();
  if (out.stopped) clock.finish(out.plan);
  return out;
}
}  // namespace strata
