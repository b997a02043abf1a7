// The budget planner's per-search state (model/plan/planner.cpp plan_search): the candidates tried, their sim runs
// (each candidate's forecasts, cached by label; its sims by what they depend on, sim_key) and the fastest that fits.
// Its searches live beside the concept they search: candidates (planner_candidates.cpp), the layer inputs on the tiers
// (input_split.cpp) and the persistent state's placement (state_placement.cpp).
#pragma once
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "model/plan/planner_search.h"

namespace strata::planner_detail {

// A PlanSpec's label: what the planner's results and the tried list call it.
std::string describe(const PlanSpec& s);

struct Search {
  const ForecastRequest& base;
  TierBudgets b;
  int layers;
  PlanResult& res;
  const Plan* fixed_state;  // base.plan when it places state (every candidate keeps it), else null
  Goal goal;
  std::map<std::string, PlanTried> cache;
  std::map<std::string, PlanSpec> specs;
  bool have_best = false;
  PlanTried best;
  PlanSpec best_spec;
  bool have_short = false;
  PlanTried short_t;

  bool tiers_ok(const PlanTried& t) const { return t.host_bytes <= b.host && t.disk_bytes <= b.disk; }
  // first_fit: a plan fits, so the search is over.
  bool done() const { return goal.first_fit && have_best; }
  // A plan must be faster than this to matter (the goal's bound, the best found). Adding recompute, tier
  // decisions or state moves to a candidate only adds work to its step, so what starts slower is skipped.
  double bound() const { return std::min(goal.bound_s, have_best ? best.step_s : goal.bound_s); }
  bool too_slow(const PlanTried& t) const { return t.step_s > bound(); }

  // A candidate's sim runs: unbounded (its in-use peak), then, when that fits the device and the
  // tiers, under the device budget (placement). They depend on the candidate alone, so prefetch runs
  // many at once and eval consumes them in the search's own order: the same answer as one by one.
  struct Sims {
    Forecast f, fb;
    bool budgeted = false;
    bool f_known = false;  // f was another search's (the same plan under other budgets): not run again
    bool skipped = false;  // not run: the search's time limit had passed
    std::exception_ptr error;
  };
  std::map<std::string, Sims> pre;  // by sim_key

  // `known`: the candidate's unbounded forecast when a search under this clock ran it (budget_free_key), else null.
  Sims simulate(const PlanSpec& s, Deadline deadline, const Forecast* known = nullptr) const;
  // What the candidate's sims depend on: equal keys, equal sims (planner_candidates.cpp SharedSims).
  std::string sim_key(const PlanSpec& s) const;
  // What its unbounded forecast depends on: sim_key less the budgets (ZeRO's rounds search again under a lower
  // device budget; the same plans' in-use peaks and steps do not change).
  std::string budget_free_key(const PlanSpec& s) const;
  // The sims of `key` when a search under this clock ran them (null otherwise).
  const Sims* shared(const std::string& key) const;
  // The unbounded forecast of budget_free_key `key` when a search under this clock ran it (null otherwise).
  const Forecast* shared_unbounded(const std::string& key) const;
  // Runs the sims of the candidates not yet evaluated on the host's cores (engine/parallel.h).
  void prefetch(const std::vector<PlanSpec>& specs);
  // A candidate's forecasts, as the search compares them; the fastest that fits becomes the best.
  PlanTried eval(const PlanSpec& s);

  // Fewest checkpointed layers that make `s` fit (bisection: memory falls as n grows).
  void checkpointed(PlanSpec s);
  // Greedy: add the (type, decision) that saves the most peak bytes per second added, until the
  // plan fits. Returns every prefix.
  std::vector<PlanSpec> greedy(PlanSpec cur_spec, const std::vector<std::string>& types,
                               const std::vector<Decision>& decisions);
  // Changes one per-type decision of the best plan at a time while that is faster and fits.
  void refine(const std::vector<Decision>& decisions);

  // input_split.cpp: hidden_states on tier d (layer inputs there, the rest of each layer recomputed), and every
  // layer slot there; with both tiers, hidden_states split over them (split_inputs).
  void tier_families(const PlanSpec& start, Decision d);
  static bool inputs_on_disk(const PlanSpec& s);
  // The last n layers' inputs on the host, the others' on disk: n the most the host budget holds.
  void split_inputs(PlanSpec s);

  // attention_saving.cpp: the attention outputs of the last layers saved, on the device and then on the host
  // (step 5b), for a plan `s` that recomputes them.
  void save_attention(PlanSpec s);

  // state_placement.cpp: the state's level per layer under the activation plan `act` (step 5).
  void place(PlanSpec act, const std::vector<std::string>& levels);
};

// plan_search (planner.cpp): one rank's search at one tile count; state_placement.cpp runs it again around
// the state placement found.
PlanResult plan_search(const ForecastRequest& base, const TierBudgets& budgets, const Goal& goal);
// Step 5: the state per layer under the fastest activation plans tried, then refinement (`all`: the decisions).
void place_state_per_layer(Search& S, const std::vector<std::string>& levels, const std::vector<Decision>& all);
// Step 6: the activations again around the state placement found (res.plan places state).
void search_around_placement(const ForecastRequest& base, const TierBudgets& budgets, const Goal& goal, PlanResult& res,
                             const PlanSpec& best);

}  // namespace strata::planner_detail
