// The budget planner: chooses keep or recompute for every saved slot class so that one step fits
// a device-arena budget at the lowest forecast step time. Every candidate is verified by a sim
// run (model/forecast.h), so "fits" means the engine's own allocator fitted it.
//
// Only keep/recompute: the host and disk tiers do not exist yet.
//
// Search (coarse families, each point a sim run):
//  1. greedy over class types applied to all layers ("L*.mlp.act", ...): add the type with the
//     most peak bytes saved per second of recompute added, until the plan fits; at every round the
//     cheapest single addition that fits is also a candidate;
//  2. for every greedy prefix (and selective recompute's classes), the fewest checkpointed layers (L0..L<n-1>: input
//  kept, the rest
//     recomputed; found by bisection) that make it fit;
//  3. gradient checkpointing every k layers (k = 1, 2, 4, ...), the lowest-memory family.
// The fastest fitting candidate wins. If none fits, the result names the smallest budget any
// candidate needs (verified by a sim run at that budget).
#pragma once
#include <string>
#include <vector>

#include "model/forecast.h"

namespace strata {

// A plan in the family the planner searches, as explicit rules (what strata-train's `plan:` holds).
struct PlanSpec {
  std::vector<std::string> recompute_types;  // folded classes ("L*.mlp.act") recomputed in every layer
  int checkpointed_layers = 0;               // L0..L<n-1>: keep the input, recompute the rest
  int checkpoint_every = 0;                  // >0: gradient checkpointing every k layers (overrides the rest)
};
Plan make_plan(const PlanSpec& s, int layers);

struct PlanTried {
  std::string label;
  size_t peak_bytes = 0, high_water_bytes = 0;
  double step_s = 0;
  bool fits = false;
};

struct PlanResult {
  bool found = false;
  Plan plan;  // the chosen plan (found), else the lowest-memory one
  std::string label;
  Forecast forecast;  // its forecast under the budget (found), else unbounded
  size_t budget = 0;
  size_t minimum_bytes = 0;     // !found: the smallest budget a candidate was verified to fit in
  size_t persistent_bytes = 0;  // weights, gradients, optimizer state, workspaces: no plan lowers these
  std::vector<PlanTried> tried;
  int sim_runs = 0;
};

PlanResult plan_for_budget(const ForecastRequest& base, size_t budget);

// A YAML file strata-train --config accepts unchanged: the forecast's shape and mode, the arena
// budget and the plan as explicit rules; comments carry the forecast.
std::string plan_yaml(const ForecastRequest& r, const Plan& plan, const Forecast& f, size_t budget);

}  // namespace strata
