// The budget planner's candidates (planner_candidates.h): their sim runs, one by one or prefetched on the host's
// cores, and the searches over them that need no tier: checkpointed layers, greedy, refinement.
#include "model/plan/planner_candidates.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "engine/parallel.h"

namespace strata {

namespace {

std::atomic<int> planner_threads{16};

// Sim runs shared by the searches under one clock (planner_search.h search_epoch): the layouts, tile counts and
// lengths of one question search many of the same candidates (a first-fit search and the diagnosis after it, a
// coarse pass and the whole search after it). A candidate's sims depend on the request's shape and layout, the
// budgets and the plan alone, which the key names; a fixed state placement's candidates are not shared.
struct SharedSims {
  long epoch = 0;
  std::map<std::string, planner_detail::Search::Sims> sims;
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

}  // namespace

Search::Sims Search::simulate(const PlanSpec& s, planner_detail::Deadline deadline) const {
  Sims o;
  if (std::chrono::steady_clock::now() > deadline) {
    o.skipped = true;
    return o;
  }
  try {
    ForecastRequest r = base;
    r.plan = make_plan(s, layers, fixed_state);
    r.budget = 0;      // the in-use peak does not depend on the budget; fitting does (placement)
    r.detail = false;  // peaks and step only; the budgeted run, which may become the answer, is whole
    o.f = forecast(r);
    if (o.f.fits && o.f.peak_bytes <= b.device && o.f.host_held_bytes() <= b.host && o.f.peak_disk_bytes <= b.disk) {
      r.budget = b.device;
      r.detail = true;
      o.fb = forecast(r);
      o.budgeted = true;
    }
  } catch (...) {
    o.error = std::current_exception();
  }
  return o;
}

// Runs the sims of the candidates not yet evaluated on the host's cores (engine/parallel.h).
void Search::prefetch(const std::vector<PlanSpec>& specs) {
  std::vector<std::pair<std::string, const PlanSpec*>> todo;
  for (const PlanSpec& s : specs) {
    std::string label = describe(s);
    if (cache.count(label) || pre.count(label) || shared(label) ||
        std::any_of(todo.begin(), todo.end(), [&](auto& e) { return e.first == label; }))
      continue;
    todo.emplace_back(std::move(label), &s);
  }
  if (todo.size() < 2 || planner_detail::out_of_time()) return;  // eval runs a single one itself
  std::vector<Sims> out(todo.size());
  const planner_detail::Deadline deadline = planner_detail::search_deadline();  // the workers' threads have no clock
  parallel_chunks(
      todo.size(), 1, [&](size_t i, size_t) { out[i] = simulate(*todo[i].second, deadline); },
      size_t(planner_threads.load()));
  for (size_t i = 0; i < todo.size(); ++i) pre.emplace(std::move(todo[i].first), std::move(out[i]));
}

std::string Search::shared_key(const std::string& label) const {
  if (fixed_state || search_epoch() == 0) return "";
  return fmt::format("{} {} {} {} {} {} {} {} {} {}|{}", base.seq, base.batch, base.gpus, base.sequence_parallel,
                     base.zero_stage, base.rank, base.mlp_tiles, b.device, b.host, b.disk, label);
}

const Search::Sims* Search::shared(const std::string& label) const {
  const std::string key = shared_key(label);
  if (key.empty() || shared_sims.epoch != search_epoch()) return nullptr;
  auto it = shared_sims.sims.find(key);
  return it == shared_sims.sims.end() ? nullptr : &it->second;
}

PlanTried Search::eval(const PlanSpec& s) {
  const std::string label = describe(s);
  if (auto it = cache.find(label); it != cache.end()) return it->second;
  // Past the time limit nothing more is tried: an untried candidate reads as not fitting, and is
  // neither cached nor listed, so the search runs out quickly to the best found so far.
  PlanTried untried{label};
  if (planner_detail::out_of_time()) return untried;
  Sims sims;
  const Sims* done = shared(label);  // another search under this clock ran them
  if (done) {
    sims = *done;
  } else if (auto it = pre.find(label); it != pre.end()) {
    sims = std::move(it->second);
    pre.erase(it);
  } else {
    sims = simulate(s, planner_detail::search_deadline());
  }
  if (sims.skipped) {  // prefetched after the limit passed
    planner_detail::out_of_time();
    return untried;
  }
  if (sims.error) std::rethrow_exception(sims.error);
  const int runs = done ? 0 : sims.budgeted ? 2 : 1;  // the sim runs this candidate took now
  if (const std::string key = shared_key(label); !done && !key.empty()) {
    if (shared_sims.epoch != search_epoch()) shared_sims = SharedSims{search_epoch(), {}};
    // Without the arena's event logs (megabytes each on an 8B): a shared budgeted forecast that becomes a
    // search's answer is run again whole.
    std::vector<ArenaEvent> f_events = std::move(sims.f.events), fb_events = std::move(sims.fb.events);
    sims.f.events.clear();
    sims.fb.events.clear();
    shared_sims.sims.emplace(key, sims);
    sims.f.events = std::move(f_events);
    sims.fb.events = std::move(fb_events);
  }
  Forecast& f = sims.f;
  res.sim_runs += runs;
  PlanTried t{label, f.peak_bytes, f.high_water_bytes, f.host_held_bytes(), f.peak_disk_bytes, f.step_s, false};
  const bool device_ok = f.fits && f.peak_bytes <= b.device;
  if (device_ok && !tiers_ok(t) && (!have_short || t.step_s < short_t.step_s)) have_short = true, short_t = t;
  if (sims.budgeted) {
    Forecast& fb = sims.fb;
    t.fits = fb.fits;
    if (fb.fits) t.high_water_bytes = fb.high_water_bytes;
    if (fb.fits &&
        (!have_best || t.step_s < best.step_s || (t.step_s == best.step_s && t.peak_bytes < best.peak_bytes))) {
      have_best = true;
      best = t;
      best_spec = s;
      res.plan = make_plan(s, layers, fixed_state);
      res.label = label;
      if (done) {  // shared without its event log: the budgeted forecast again, whole
        ForecastRequest r = base;
        r.plan = res.plan;
        r.budget = b.device;
        res.forecast = forecast(r);
        res.sim_runs++;
        planner_detail::search_progress(1);
      } else {
        res.forecast = std::move(fb);
      }
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
