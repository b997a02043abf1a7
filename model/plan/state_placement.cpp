// The persistent state's placement (master weights, optimizer state, gradients on the device, host or disk):
// its level per layer under an activation plan (step 5 of the search, docs/PLANNER.md), and the activations
// searched again around the placement found (step 6).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "model/plan/planner_candidates.h"

namespace strata::planner_detail {

// 5. The state's level per layer, for the activation plan `act`: for each pair of adjacent levels
//    (the lower everywhere, the higher in k layers spread evenly), the fewest k whose step fits the
//    device (bisection: device bytes fall as k grows), which moves the fewest bytes over the link
//    and keeps the embedding's and head's state where the lower level puts it; then the split
//    family's host share again (the state changed the host's room).
void Search::place(PlanSpec act, const std::vector<std::string>& levels) {
  act.host_input_layers = 0;
  // Fits the device: its high-water mark too, so the placement under the budget fits as well
  // (a peak just under the budget can need more than it once fragmentation is counted).
  auto device_ok = [&](const PlanSpec& s) {
    const PlanTried t = eval(s);
    return t.peak_bytes <= b.device && t.high_water_bytes <= b.device;
  };
  for (size_t i = 0; i + 1 < levels.size(); ++i) {
    PlanSpec s = act;
    s.state_level = levels[i];
    s.layers_level = levels[i + 1];
    s.state_layers = layers;
    if (!device_ok(s)) continue;  // every layer at the higher level is not enough
    s.state_layers = 0;
    s.layers_level = "none";
    if (device_ok(s)) {  // the lower level alone fits the device
      split_inputs(s);
      continue;
    }
    s.layers_level = levels[i + 1];
    int lo = 0, hi = layers;  // hi fits the device, lo does not
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      s.state_layers = mid;
      (device_ok(s) ? hi : lo) = mid;
    }
    s.state_layers = hi;
    eval(s);
    split_inputs(s);
  }
}

// 5. The state per layer (Search::place) under the 8 fastest activation plans that fit the device
//    at some state level, ranked by their fastest step at any level (the state-on-device step, when
//    it was tried: what a placement moving less state approaches), then refine again.
void place_state_per_layer(Search& S, const std::vector<std::string>& levels, const std::vector<Decision>& all) {
  struct Act {
    PlanSpec spec;
    double step_s;
    bool fits_device;
  };
  std::vector<Act> acts;
  std::map<std::string, size_t> seen;
  for (const PlanTried& t : S.res.tried) {
    PlanSpec a = S.specs.at(t.label);
    a.state_level = a.layers_level = "none";
    a.state_layers = a.host_input_layers = 0;
    a.state_tier = Decision::host;  // place() moves state to the host tier
    const std::string key = describe(a);
    const bool fits = t.peak_bytes <= S.b.device;
    auto [it, fresh] = seen.emplace(key, acts.size());
    if (fresh) {
      acts.push_back({a, t.step_s, fits});
    } else {
      Act& e = acts[it->second];
      e.step_s = std::min(e.step_s, t.step_s);
      e.fits_device = e.fits_device || fits;
    }
  }
  std::erase_if(acts, [](const Act& a) { return !a.fits_device; });
  std::stable_sort(acts.begin(), acts.end(), [](const Act& x, const Act& y) { return x.step_s < y.step_s; });
  // Placing state off the device only adds copies to an activation plan's step.
  for (size_t i = 0; i < std::min<size_t>(acts.size(), 8) && acts[i].step_s <= S.bound() && !S.done(); ++i)
    S.place(acts[i].spec, levels);
  if (!S.done() && !S.goal.coarse) S.refine(all);
}

// 6. The activations again, around state placements: steps 1-4 chose activation plans for whole state
//    levels and step 5 placed the state under the fastest of them, by the fewest layers that fit. A
//    placement moving more layers can leave room for much faster activations, so with the placement
//    fixed (as a caller's is), steps 1-4 run again for the one found and for the higher of its two levels
//    in a quarter, half and three quarters of the layers; the fastest plan wins.
void search_around_placement(const ForecastRequest& base, const TierBudgets& budgets, const Goal& goal, PlanResult& res,
                             const PlanSpec& b) {
  const int L = base.model.num_hidden_layers;
  std::string lower = b.state_level, upper = b.layers_level;
  Decision tier = b.state_tier;
  if (b.state_layers == 0) {  // a whole level: vary the layers of it over the level below
    upper = b.state_level;
    const auto* lv = std::find(std::begin(kStateOffloadingLevels), std::end(kStateOffloadingLevels), upper);
    lower = lv == std::begin(kStateOffloadingLevels) ? std::string("none") : std::string(*(lv - 1));
    tier = Decision::host;
  }
  std::vector<Plan> placements{res.plan};
  for (int k : {L / 4, L / 2, 3 * L / 4})
    if (k > 0 && k < L && k != b.state_layers && upper != "none") {
      Plan p;
      p.set_state_offloading(lower, "planner", tier);
      p.set_state_offloading_layers(upper, k, "planner");
      placements.push_back(std::move(p));
    }
  for (const Plan& placement : placements) {
    ForecastRequest around = base;
    around.plan = Plan::keep_everything();
    around.plan.take_state(placement);
    around.plan.set_layer_weights(Decision::keep, "planner");  // the search tries paging itself
    planner_detail::Goal sub_goal;
    sub_goal.bound_s = std::min(goal.bound_s, res.forecast.step_s);  // only a faster plan replaces it
    sub_goal.coarse = goal.coarse;  // a coarse search stays coarse around its placements too
    sub_goal.paged_only = goal.paged_only;
    PlanResult sub = plan_search(around, budgets, sub_goal);
    res.sim_runs += sub.sim_runs;
    const std::string state = fmt::format(" + state: {}", around.plan.state_label());
    for (PlanTried& t : sub.tried) {
      t.label += state;
      res.tried.push_back(std::move(t));
    }
    if (sub.found && sub.forecast.step_s < res.forecast.step_s) {
      res.plan = std::move(sub.plan);
      res.label = sub.label + state;
      res.forecast = std::move(sub.forecast);
    }
  }
}

}  // namespace strata::planner_detail
