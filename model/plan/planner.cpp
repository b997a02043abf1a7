// The budget planner's search on one rank (planner.h's steps 1-4, the diagnosis when nothing fits) and over the
// MLP's tile counts; the candidates, the layer-input split and the state placement it runs live in
// planner_candidates.cpp, input_split.cpp and state_placement.cpp.
#include "model/plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "model/plan/planner_candidates.h"

namespace strata {

using planner_detail::describe;
using planner_detail::Search;

// goal.diagnose: when nothing fits, also find the tier that would help and the minimum device budget
// (plan_for_budget's answer); without it an unfit search returns at once (max_seq_for_budget).
PlanResult planner_detail::plan_search(const ForecastRequest& base, const TierBudgets& budgets,
                                       const planner_detail::Goal& goal) {
  PlanResult res;
  res.budgets = budgets;
  const int L = base.model.num_hidden_layers;
  const Plan* fixed = base.plan.places_state() ? &base.plan : nullptr;
  Search S{base, budgets, L, res, fixed, goal, {}, {}, false, {}, {}, false, {}, {}};
  const bool diagnose = goal.diagnose;

  // The saved class types of this model and mode (the loss path stays kept: it is needed at once).
  ForecastRequest keep = base;
  keep.plan = Plan::keep_everything();
  if (fixed) {
    keep.plan.take_state(*fixed);
    keep.plan.set_layer_weights(Decision::keep, "planner");
  }
  keep.budget = 0;
  if (planner_detail::out_of_time()) return res;  // the time limit passed before this search began
  Forecast kf = forecast(keep);
  res.sim_runs++;
  planner_detail::search_progress(1);
  res.persistent_bytes = kf.persistent_bytes;
  std::vector<std::string> types;
  for (auto& row : kf.plan_rows)
    if (row.cls.rfind("L*.", 0) == 0) types.push_back(row.cls);

  // ZeRO over several ranks: each rank's own share of the state takes the plan's tiers (the host budget is
  // each rank's: a process's pinned memory).
  const bool zero_sharded = base.zero_stage >= 1 && base.gpus > 1;
  // Weight paging: the layers' matrices live in host memory, so only with a host budget that holds them;
  // trainable ones (a full fine-tune) not with ZeRO (refused: model/llama.cpp).
  const bool can_page = base.mode != TrainMode::full || !zero_sharded;
  std::vector<bool> paging{false};
  if (can_page && budgets.host > 0 && !planner_detail::out_of_time()) {
    ForecastRequest pr = keep;
    pr.plan.set_layer_weights(Decision::page, "planner");
    pr.detail = false;
    Forecast pf = forecast(pr);
    res.sim_runs++;
    if (pf.paged_host_bytes > 0 && pf.host_held_bytes() <= budgets.host) paging.push_back(true);
  }
  if (goal.paged_only) {
    if (!paging.back()) return res;  // no paged plan is possible
    paging = {true};
  }
  // Decision sets: keep/recompute alone (so the tiers never make the answer worse), then with the
  // tiers that have a budget.
  std::vector<std::vector<Decision>> decision_sets{{Decision::recompute}};
  std::vector<Decision> all{Decision::recompute};
  if (budgets.host) all.push_back(Decision::host);
  if (budgets.disk) all.push_back(Decision::disk);
  if (all.size() > 1) decision_sets.push_back(all);

  std::vector<std::string> selective;
  for (const char* t : {"L*.attn_norm.out", "L*.mlp_norm.out", "L*.mlp.act"})
    if (std::find(types.begin(), types.end(), t) != types.end()) selective.push_back(t);

  // Persistent state on the host tier (full and adapter training alike: the trainable state), each
  // level tried only with a host budget and only while keeping it on the device left something unfit.
  const std::vector<std::string> allowed = planner_detail::state_levels(base);
  std::vector<std::string> levels{"none"};  // with a fixed placement: "none" stands for it
  if (budgets.host > 0 && !fixed) levels = allowed;
  // With a disk budget, the levels on the disk tier too (their classes in the state file; "all" keeps
  // the gradients on the host, so only with a host budget).
  std::vector<std::pair<std::string, Decision>> starts;
  for (const std::string& level : levels) starts.emplace_back(level, Decision::host);
  if (budgets.disk > 0 && !fixed)
    for (const std::string& level : allowed)
      if (level != "none" && (budgets.host > 0 || level != "all")) starts.emplace_back(level, Decision::disk);
  // The lowest-memory families of a start: checkpointing every layer, and on each tier with a budget the
  // layer inputs there (the rest recomputed) and every layer slot there. When none of them fits the device,
  // nothing in the start's other families (which keep more of the same slots) is taken to fit either.
  auto floors = [&](const PlanSpec& start) {
    std::vector<PlanSpec> v(1, start);
    v[0].checkpoint_every = 1;
    for (Decision d : all)
      if (d != Decision::recompute) {
        v.push_back(start);
        v.back().types = {{"L*.input", d}, {"L*", Decision::recompute}};
        v.push_back(start);
        v.back().types = {{"L*", d}};
      }
    return v;
  };
  {
    std::vector<PlanSpec> first;
    for (const auto& [level, tier] : starts)
      for (bool paged : paging) {
        first.emplace_back();
        first.back().layer_weights = paged ? Decision::page : Decision::keep;
        first.back().state_level = level;
        first.back().state_tier = tier;
      }
    S.prefetch(first);
    std::vector<PlanSpec> low;  // every start's floors at once (a coarse first pass over the starts)
    for (const PlanSpec& st : first)
      if (!S.eval(st).fits)
        for (PlanSpec& f : floors(st)) low.push_back(std::move(f));
    S.prefetch(low);
  }
  for (const auto& [level, tier] : starts)
    for (bool paged : paging) {
      PlanSpec start;
      start.layer_weights = paged ? Decision::page : Decision::keep;
      start.state_level = level;
      start.state_tier = tier;
      if (S.done()) break;
      const PlanTried st = S.eval(start);
      if (st.fits) continue;         // keep everything fits: nothing is faster (with this paging)
      if (S.too_slow(st)) continue;  // every plan of this start is slower than one found
      size_t floor_peak = std::numeric_limits<size_t>::max();
      for (const PlanSpec& f : floors(start)) floor_peak = std::min(floor_peak, S.eval(f).peak_bytes);
      if (planner_detail::floor_excludes(floor_peak, budgets.device) || S.done())
        continue;  // nothing of this start fits the device
      // 3. (first: the low-memory families give the others a step to beat) Gradient checkpointing every k
      //    layers; on each tier with a budget, hidden_states (layer inputs there, the rest recomputed) and
      //    everything there.
      std::vector<PlanSpec> every;
      for (int k = 1; k <= std::max(1, L); k *= 2) {
        every.push_back(start);
        every.back().checkpoint_every = k;
      }
      S.prefetch(every);
      for (const PlanSpec& s : every) S.eval(s);
      for (Decision d : all)
        if (d != Decision::recompute) S.tier_families(start, d);
      if (S.done() || goal.coarse) continue;  // coarse: the families above alone
      // 1. and 2.: greedy prefixes, each with the fewest checkpointed layers that make it fit.
      std::vector<PlanSpec> prefixes;
      for (auto& ds : decision_sets) {
        auto p = S.greedy(start, types, ds);
        prefixes.insert(prefixes.end(), p.begin(), p.end());
      }
      PlanSpec sel = start;
      for (auto& t : selective) sel.types.emplace_back(t, Decision::recompute);
      if (!sel.types.empty()) S.checkpointed(sel);
      for (auto& p : prefixes) S.checkpointed(p);
    }
  // 4. Refine the fastest plan found, one decision at a time.
  if (!S.done() && !goal.coarse) S.refine(all);  // keep (dropping a type from the plan) is tried there too
  // 5. The state per layer (Search::place) under the 8 fastest activation plans that fit the device
  //    at some state level, ranked by their fastest step at any level (the state-on-device step, when
  //    it was tried: what a placement moving less state approaches), then refine again.
  if (levels.size() > 1 && !S.done()) planner_detail::place_state_per_layer(S, levels, all);
  // 5b. The attention outputs of the last layers saved, on the device and then the host, when the fastest plan
  //     recomputes them (Search::save_attention).
  if (S.have_best && !S.done() && !goal.coarse) S.save_attention(S.best_spec);
  res.found = S.have_best;
  // 6. The activations again, around state placements: steps 1-4 chose activation plans for whole state
  //    levels and step 5 placed the state under the fastest of them, by the fewest layers that fit. A
  //    placement moving more layers can leave room for much faster activations, so with the placement
  //    fixed (as a caller's is), steps 1-4 run again for the one found and for the higher of its two levels
  //    in a quarter, half and three quarters of the layers; the fastest plan wins.
  if (res.found && !fixed && res.plan.places_state() && !goal.first_fit)
    planner_detail::search_around_placement(base, budgets, goal, res, S.best_spec);
  if (res.found || !diagnose || planner_detail::search_stopped()) return res;
  if (budgets.host == 0 || (can_page && paging.size() == 1)) {
    // Would the host tier have helped? Forecast its families (and paging) unconstrained, first
    // with the state on the device, then with more of it on the host.
    for (const std::string& level : allowed) {
      for (bool paged : {false, true}) {
        if (paged && !can_page) continue;
        PlanSpec s;
        s.layer_weights = paged ? Decision::page : Decision::keep;
        s.state_level = level;
        if (paged || s.state_level != "none") S.eval(s);
        S.tier_families(s, Decision::host);
      }
      if (S.have_short || fixed)
        break;  // (a fixed placement is the only level)  // the least state on the host that lets a plan fit the device
    }
  }
  if (S.have_short) {
    const PlanTried& t = S.short_t;
    res.short_tier_label = t.label;
    if (t.host_bytes > budgets.host) {
      res.short_tier = "host";
      res.short_tier_needs = t.host_bytes;
    } else {
      res.short_tier = "disk";
      res.short_tier_needs = t.disk_bytes;
    }
  }
  // Nothing fits: the lowest-memory candidate within the tier budgets and the device budget it
  // needs, verified by a sim run.
  const PlanTried* low = nullptr;
  for (auto& t : res.tried)
    if (S.tiers_ok(t) && (!low || t.high_water_bytes < low->high_water_bytes)) low = &t;
  if (!low || planner_detail::search_stopped()) return res;  // stopped by the time limit: no diagnosis
  const PlanSpec& ls = S.specs.at(low->label);
  ForecastRequest r = base;
  r.plan = make_plan(ls, L);
  res.plan = r.plan;
  res.label = low->label;
  size_t need = low->high_water_bytes;
  for (int i = 0; i < 20; ++i) {  // placement under a tighter budget can differ: grow until it fits
    r.budget = need;
    Forecast f = forecast(r);
    res.sim_runs++;
    if (f.fits) {
      res.forecast = std::move(f);
      break;
    }
    need += std::max<size_t>(need / 100, size_t(1) << 20);
  }
  res.minimum_bytes = need;
  return res;
}

namespace {

// plan_search at one tile count; the labels say the tile count.
PlanResult plan_at_tiles(const ForecastRequest& base, const TierBudgets& budgets, int tiles,
                         const planner_detail::Goal& goal) {
  ForecastRequest r = base;
  r.mlp_tiles = tiles;
  PlanResult pr = planner_detail::plan_search(r, budgets, goal);
  pr.plan.mlp_tiles = tiles;  // the plan carries what the planner decided
  if (tiles > 1) {
    const std::string tail = fmt::format(" + MLP in {} tiles", tiles);
    if (!pr.label.empty()) pr.label += tail;
    if (!pr.short_tier_label.empty()) pr.short_tier_label += tail;
    for (auto& t : pr.tried) t.label += tail;
  }
  return pr;
}

}  // namespace

namespace planner_detail {

std::vector<std::string> state_levels(const ForecastRequest& r) {
  std::vector<std::string> v(std::begin(kStateOffloadingLevels), std::end(kStateOffloadingLevels));
  if (r.grad_accum > 1) std::erase(v, std::string("all"));
  return v;
}

// The tile count too (plan_for_budget's comment): untiled first, tiles only when needed to fit.
// Whether anything fits at a tile count is asked with first-fit searches (they end at the first plan that
// fits): the most tiles (the least memory) first, so a length nothing fits at (max-seq's bisection meets
// many) costs two searches; then the fewest tiles that fit, by bisection (fitting taken as monotone in the
// tile count). Only there, and at twice as many tiles (faster when the memory freed lets more be kept),
// does the whole search run. A first-fit goal (whether anything fits) searches the most tiles alone.
PlanResult plan_with_tiles(const ForecastRequest& base, const TierBudgets& budgets, const Goal& goal) {
  if (base.mlp_tiles > 0) return plan_at_tiles(base, budgets, base.mlp_tiles, goal);
  const std::vector<int> cands = mlp_tile_candidates(base);
  // Whether anything fits (first_fit): the most tiles alone, the least memory.
  if (goal.first_fit && !cands.empty()) return plan_at_tiles(base, budgets, cands.back(), goal);
  // Untiled when something fits untiled. With tiles possible, the coarse first-fit pass (the low-memory families)
  // asks first: where none of them fits untiled the whole untiled search is skipped (a mix it might still find
  // would be within the tiles' small cost of the tiled plan).
  PlanResult res;
  if (!cands.empty()) {
    Goal probe = goal;
    probe.diagnose = false;
    probe.first_fit = probe.coarse = true;
    res = plan_at_tiles(base, budgets, 1, probe);
  }
  if (cands.empty() || res.found) {
    const int probe_runs = res.sim_runs;
    Goal untiled = goal;
    untiled.diagnose = goal.diagnose && cands.empty();
    res = plan_at_tiles(base, budgets, 1, untiled);
    res.sim_runs += probe_runs;
    if (res.found || cands.empty()) return res;
  }
  int runs = res.sim_runs;
  std::vector<PlanTried> tried = std::move(res.tried);
  std::map<size_t, PlanResult> probes;  // first-fit searches, by index into cands
  auto keep = [&](PlanResult& pr) {
    runs += pr.sim_runs;
    tried.insert(tried.end(), pr.tried.begin(), pr.tried.end());
  };
  // `coarse`: the low-memory families alone, as the untiled probe above. The bisection's probes ask that: a "no" from
  // the whole first-fit search runs every candidate (thousands of sims on an 8B at millions of tokens), and a mix the
  // coarse pass misses at fewer tiles is within the tiles' small cost of the plan at more.
  auto probe = [&](size_t i, bool diag, bool coarse) -> const PlanResult& {
    if (auto it = probes.find(i); it != probes.end()) return it->second;
    Goal g = goal;
    g.first_fit = true;
    g.diagnose = diag;
    g.coarse = coarse;
    PlanResult pr = plan_at_tiles(base, budgets, cands[i], g);
    keep(pr);
    return probes.emplace(i, std::move(pr)).first->second;
  };
  auto finish = [&](PlanResult pr) {
    pr.sim_runs = runs;
    pr.tried = std::move(tried);
    return pr;
  };
  const size_t last = cands.size() - 1;
  if (!probe(last, goal.diagnose, goal.coarse).found) return finish(probes.at(last));  // nothing fits at any tile count
  size_t lo = 0, hi = last;                                                            // cands[hi] fits
  while (lo < hi && !search_stopped()) {
    const size_t mid = lo + (hi - lo) / 2;
    if (probe(mid, false, true).found)
      hi = mid;
    else
      lo = mid + 1;
  }
  Goal whole = goal;
  whole.diagnose = false;
  PlanResult best = plan_at_tiles(base, budgets, cands[hi], whole);
  keep(best);
  if (!best.found) best = probes.at(hi);  // the time limit passed: the plan the probe found
  if (hi < last && !search_stopped()) {
    whole.bound_s = std::min(goal.bound_s, best.forecast.step_s);  // only a faster plan replaces it
    PlanResult more = plan_at_tiles(base, budgets, cands[hi + 1], whole);
    keep(more);
    if (more.found && more.forecast.step_s < best.forecast.step_s) best = std::move(more);
  }
  return finish(std::move(best));
}

}  // namespace planner_detail

std::vector<int> mlp_tile_candidates(const ForecastRequest& base) {
  std::vector<int> v;
  if (base.mode == TrainMode::lora)
    for (const std::string& m : base.lora_targets)
      if (m == "gate_proj" || m == "up_proj" || m == "down_proj") return v;  // the tiled op has no adapters
  const int64_t n = int64_t(base.batch) * base.seq / std::max(1, base.sequence_parallel);  // this rank's rows
  for (int k = 2; k <= 64 && n / k >= 64; k *= 2) v.push_back(k);
  return v;
}

}  // namespace strata