// The budget planner's candidates (planner_candidates.h): their sim runs, one by one or prefetched on the host's
// cores, and the searches over them that need no tier: checkpointed layers, greedy, refinement.
#include "model/plan/planner_candidates.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "engine/parallel.h"

namespace strata {

namespace {

std::atomic<int> planner_threads{16};

// Sim runs shared by the searches under one clock (planner_search.h search_epoch): the layouts, tile counts and
// lengths of one question search many of the same candidates (a first-fit search and the diagnosis after it, a
// coarse pass and the whole search after it, the searches around state placements), often under other labels (the
// same types in another order, a fixed placement that a spec's state level makes too). A candidate's sims depend on
// the request's shape and layout, the budgets and the plan alone, which the key names (Search::sim_key).
struct SharedSims {
  long epoch = 0;
  std::map<std::string, planner_detail::Search::Sims> sims;
  std::map<std::string, Forecast> unbounded;  // by budget_free_key: a candidate's forecast without a device budget
};
thread_local SharedSims shared_sims;

}  // namespace

void set_planner_threads(int threads) {
  planner_threads = std::max(threads, 1);
}

namespace planner_detail {

namespace {

bool has_type(const PlanSpec& s, const std::string& t) {
  return std::any_of(s.types.begin(), s.types.end(), [&](auto& e) { return e.first == t; });
}

// Whether no class name matches two of s.types' patterns, so that their order does not change Plan::decide (first
// match wins): each is "L*" and a literal suffix, and no suffix ends another (a name ends with both only then).
bool types_commute(const PlanSpec& s) {
  auto suffix = [](const std::string& t) -> std::optional<std::string_view> {
    if (t.rfind("L*", 0) != 0 || t.find_first_of("*?", 2) != std::string::npos) return std::nullopt;
    return std::string_view(t).substr(2);
  };
  for (size_t i = 0; i < s.types.size(); ++i)
    for (size_t j = i + 1; j < s.types.size(); ++j) {
      const auto a = suffix(s.types[i].first), b = suffix(s.types[j].first);
      if (!a || !b || a->ends_with(*b) || b->ends_with(*a)) return false;
    }
  return true;
}

}  // namespace

Search::Sims Search::simulate(const PlanSpec& s, planner_detail::Deadline deadline, const Forecast* known) const {
  Sims o;
  // Whether its in-use peak fits the budgets: then the placement under the device budget is forecast too.
  auto fits_budgets = [&](const Forecast& f) {
    return f.fits && f.peak_bytes <= b.device && f.host_held_bytes() <= b.host && f.peak_disk_bytes <= b.disk;
  };
  if ((!known || fits_budgets(*known)) && std::chrono::steady_clock::now() > deadline) {  // a sim would run
    o.skipped = true;
    return o;
  }
  try {
    ForecastRequest r = base;
    r.plan = make_plan(s, layers, fixed_state);
    r.budget = 0;      // the in-use peak does not depend on the budget; fitting does (placement)
    r.detail = false;  // peaks and steps only: the one that becomes the answer is run again whole (eval)
    if (known) {
      o.f = *known;
      o.f_known = true;
    } else {
      o.f = forecast(r);
    }
    if (fits_budgets(o.f)) {
      r.budget = b.device;
      o.fb = forecast(r);
      o.budgeted = true;
    }
  } catch (...) {
    o.error = std::current_exception();
  }
  return o;
}

// What a candidate's sims depend on besides the request's fixed fields: its shape, layout, tiles and budgets, and
// the plan it makes, its types in a fixed order where that order cannot change a decision.
std::string Search::sim_key(const PlanSpec& s) const {
  return fmt::format("{} {} {} {}", b.device, b.host, b.disk, budget_free_key(s));
}

std::string Search::budget_free_key(const PlanSpec& s) const {
  PlanSpec c = s;
  if (types_commute(c)) std::sort(c.types.begin(), c.types.end());
  const Plan p = make_plan(c, layers, fixed_state);
  std::string k = fmt::format("{} {}x{} {} {} {} {} {} | {} {} {} {}", base.seq, base.batch, base.grad_accum, base.gpus,
                              base.sequence_parallel, base.zero_stage, base.rank, base.mlp_tiles, p.checkpoint_every,
                              p.sync_transfers, decision_name(p.layer_weights), p.state_layers);
  for (const auto* table : {&p.overrides, &p.rules, &p.state, &p.state_layer_rules}) {
    k += " |";
    for (const auto& [pattern, d] : *table) k += fmt::format(" {}:{}", pattern, decision_name(d));
  }
  return k;
}

// Runs the sims of the candidates not yet evaluated on the host's cores (engine/parallel.h).
void Search::prefetch(const std::vector<PlanSpec>& specs) {
  struct Todo {
    std::string key;  // sim_key
    const PlanSpec* spec;
    const Forecast* known;  // its unbounded forecast, run under this clock already (shared_unbounded)
  };
  std::vector<Todo> todo;
  for (const PlanSpec& s : specs) {
    if (cache.count(describe(s))) continue;
    std::string key = sim_key(s);
    if (pre.count(key) || shared(key) || std::any_of(todo.begin(), todo.end(), [&](auto& e) { return e.key == key; }))
      continue;
    todo.push_back({std::move(key), &s, shared_unbounded(budget_free_key(s))});
  }
  if (todo.size() < 2 || planner_detail::out_of_time()) return;  // eval runs a single one itself
  std::vector<Sims> out(todo.size());
  const planner_detail::Deadline deadline = planner_detail::search_deadline();  // the workers' threads have no clock
  parallel_chunks(
      todo.size(), 1, [&](size_t i, size_t) { out[i] = simulate(*todo[i].spec, deadline, todo[i].known); },
      size_t(planner_threads.load()));
  for (size_t i = 0; i < todo.size(); ++i) pre.emplace(std::move(todo[i].key), std::move(out[i]));
}

const Search::Sims* Search::shared(const std::string& key) const {
  if (search_epoch() == 0 || shared_sims.epoch != search_epoch()) return nullptr;
  auto it = shared_sims.sims.find(key);
  return it == shared_sims.sims.end() ? nullptr : &it->second;
}

const Forecast* Search::shared_unbounded(const std::string& key) const {
  if (search_epoch() == 0 || shared_sims.epoch != search_epoch()) return nullptr;
  auto it = shared_sims.unbounded.find(key);
  return it == shared_sims.unbounded.end() ? nullptr : &it->second;
}

PlanTried Search::eval(const PlanSpec& s) {
  const std::string label = describe(s);
  if (auto it = cache.find(label); it != cache.end()) return it->second;
  // Past the time limit nothing more is tried: an untried candidate reads as not fitting, and is
  // neither cached nor listed, so the search runs out quickly to the best found so far.
  PlanTried untried{label};
  if (planner_detail::out_of_time()) return untried;
  const std::string key = sim_key(s);
  Sims sims;
  const Sims* done = shared(key);  // run already under this clock (this search or another)
  if (done) {
    sims = *done;
  } else if (auto it = pre.find(key); it != pre.end()) {
    sims = std::move(it->second);
    pre.erase(it);
  } else {
    sims = simulate(s, planner_detail::search_deadline(), shared_unbounded(budget_free_key(s)));
  }
  if (sims.skipped) {  // prefetched after the limit passed
    planner_detail::out_of_time();
    return untried;
  }
  if (sims.error) std::rethrow_exception(sims.error);
  const int runs = done ? 0 : int(!sims.f_known) + int(sims.budgeted);  // the sim runs this candidate took now
  if (!done && search_epoch() != 0) {
    if (shared_sims.epoch != search_epoch()) shared_sims = SharedSims{search_epoch(), {}, {}};
    shared_sims.sims.emplace(key, sims);
    if (!sims.f_known) shared_sims.unbounded.emplace(budget_free_key(s), sims.f);
  }
  const Forecast& f = sims.f;
  res.sim_runs += runs;
  PlanTried t{label, f.peak_bytes, f.high_water_bytes, f.host_held_bytes(), f.peak_disk_bytes, f.step_s, false};
  const bool device_ok = f.fits && f.peak_bytes <= b.device;
  if (device_ok && !tiers_ok(t) && (!have_short || t.step_s < short_t.step_s)) have_short = true, short_t = t;
  if (sims.budgeted) {
    const Forecast& fb = sims.fb;
    t.fits = fb.fits;
    if (fb.fits) t.high_water_bytes = fb.high_water_bytes;
    if (fb.fits &&
        (!have_best || t.step_s < best.step_s || (t.step_s == best.step_s && t.peak_bytes < best.peak_bytes))) {
      have_best = true;
      best = t;
      best_spec = s;
      res.plan = make_plan(s, layers, fixed_state);
      res.label = label;
      // The budgeted forecast again, whole (its event log, breakdown and plan table): the search's answer so far.
      ForecastRequest r = base;
      r.plan = res.plan;
      r.budget = b.device;
      res.forecast = forecast(r);
      res.sim_runs++;
      planner_detail::search_progress(1);
    }
  }
  cache[label] = t;
  specs[label] = s;
  res.tried.push_back(t);
  planner_detail::search_progress(runs, have_best ? best.label : "", have_best ? best.step_s : 0);
  return t;
}

// Fewest checkpointed layers that make `s` fit (bisection: memory falls as n grows).
void Search::checkpointed(PlanSpec s) {
  PlanSpec all_layers = s;
  all_layers.checkpointed_layers = layers;
  s.checkpointed_layers = 0;
  if (done() || too_slow(eval(s))) return;  // checkpointing only adds recompute to it
  prefetch({s, all_layers});
  if (eval(s).fits) return;  // no layer needs checkpointing
  s.checkpointed_layers = layers;
  if (!eval(s).fits) return;
  int lo = 1, hi = layers;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    s.checkpointed_layers = mid;
    if (eval(s).fits)
      hi = mid;
    else
      lo = mid + 1;
  }
}

// Greedy: add the (type, decision) that saves the most peak bytes per second added, until the
// plan fits. Returns every prefix.
std::vector<PlanSpec> Search::greedy(PlanSpec cur_spec, const std::vector<std::string>& types,
                                     const std::vector<Decision>& decisions) {
  std::vector<PlanSpec> prefixes{cur_spec};
  PlanTried cur = eval(cur_spec);
  while (!cur.fits && !too_slow(cur) && !done()) {
    double best_score = -1;
    PlanSpec next;
    PlanTried next_t;
    std::vector<PlanSpec> round;
    for (auto& t : types)
      if (!has_type(cur_spec, t))
        for (Decision d : decisions) {
          round.push_back(cur_spec);
          round.back().types.emplace_back(t, d);
        }
    prefetch(round);
    for (auto& t : types) {
      if (has_type(cur_spec, t)) continue;
      for (Decision d : decisions) {
        PlanSpec s = cur_spec;
        s.types.emplace_back(t, d);
        PlanTried tr = eval(s);
        if (tr.peak_bytes >= cur.peak_bytes || !tiers_ok(tr)) continue;
        const double saved = double(cur.peak_bytes - tr.peak_bytes);
        const double score = saved / std::max(tr.step_s - cur.step_s, 1e-6);
        if (score > best_score) best_score = score, next = s, next_t = tr;
      }
    }
    if (best_score < 0) break;
    cur_spec = next;
    cur = next_t;
    prefixes.push_back(cur_spec);
  }
  return prefixes;
}

// Changes one per-type decision of the best plan at a time while that is faster and fits.
void Search::refine(const std::vector<Decision>& decisions) {
  for (int pass = 0; pass < 4 && have_best; ++pass) {
    const PlanSpec start = best_spec;
    if (start.checkpoint_every > 0) return;
    std::vector<PlanSpec> round;
    for (size_t i = 0; i < start.types.size(); ++i) {
      round.push_back(start);
      round.back().types.erase(round.back().types.begin() + long(i));
      for (Decision d : decisions) {
        round.push_back(start);
        round.back().types[i].second = d;
      }
    }
    prefetch(round);
    for (size_t i = 0; i < start.types.size(); ++i) {
      PlanSpec without = start;
      without.types.erase(without.types.begin() + long(i));
      eval(without);
      for (Decision d : decisions) {
        if (d == start.types[i].second) continue;
        PlanSpec s = start;
        s.types[i].second = d;
        eval(s);
      }
    }
    if (describe(best_spec) == describe(start)) return;
  }
}

}  // namespace planner_detail

}  // namespace strata
