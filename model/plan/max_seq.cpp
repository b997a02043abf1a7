// The longest sequence the budget planner fits (strata-plan --max-seq): a bisection over lengths in
// multiples of `multiple`, each a plan_for_budget (model/plan/planner.h).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "engine/error.h"
#include "model/plan/planner.h"
#include "model/plan/planner_search.h"

namespace strata {

int default_max_seq_limit(const io::LlamaConfig& c) {
  return std::min(c.max_position_embeddings, 1 << 20);
}

MaxSeqResult max_seq_for_budget(const ForecastRequest& base, const TierBudgets& budgets, int lo, int hi, int multiple) {
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
  // One planner run per length; only the longest fitting one's result is kept.
  auto fits = [&](long k) {
    ForecastRequest r = base;
    r.seq = int(k * multiple);
    PlanResult pr = plan_first_fit(r, budgets);  // whether a plan fits; the fastest is searched at the answer
    out.sim_runs += pr.sim_runs;
    if (pr.stopped && !pr.found) return false;  // undecided: the time limit passed
    out.tried.emplace_back(r.seq, pr.found);
    if (pr.found && r.seq > out.seq) {
      out.found = true;
      out.seq = r.seq;
      out.plan = std::move(pr);
    }
    return out.tried.back().second;
  };
  if (!fits(k_lo)) {  // nothing in range: say what the shortest length needs
    ForecastRequest r = base;
    r.seq = out.lo;
    out.plan = plan_for_budget(r, budgets);
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
    PlanResult pr = plan_for_budget_undiagnosed(r, budgets);
    out.sim_runs += pr.sim_runs;
    if (pr.found) out.plan = std::move(pr);
    out.stopped = planner_detail::search_stopped();
  };
  if (k_hi == k_lo || fits(k_hi)) {
    out.at_limit = true;
    fastest();
    if (out.stopped) clock.finish(out.plan);
    return out;
  }
  long a = k_lo, b = k_hi;  // a fits, b does not
  while (b - a > 1 && !planner_detail::search_stopped()) {
    const long mid = a + (b - a) / 2;
    const bool ok = fits(mid);
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
