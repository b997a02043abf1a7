// The budget planner: chooses a decision (keep, recompute, host or disk) for every saved slot
// class, and whether to page the layer weights (Plan::layer_weights: keep or page), so that one step fits the
// device-arena budget and the host and disk budgets at the lowest forecast step time. Every candidate is verified by a
// sim run (model/plan/forecast.h), so "fits" means the engine's own allocator fitted it and the host and disk tiers'
// forecast peaks stayed within their budgets.
//
// A tier with a budget of 0 is not used (the device is always used). Weight paging is tried when the
// host budget holds the paged layers: frozen ones in frozen and LoRA training, trainable ones in a full
// fine-tune (not with ZeRO), whose updates then stream through the optimizer.
//
// Search (coarse families, each point a sim run), once without and once with weight paging:
//  1. greedy over class types applied to all layers ("L*.mlp.act" -> recompute|host|disk): add the
//     (type, decision) with the most peak bytes saved per second added, until the plan fits; every
//     greedy prefix is kept as a starting point;
//  2. for every greedy prefix (and selective recompute's classes), the fewest checkpointed layers
//     (L0..L<n-1>: input kept, the rest recomputed; found by bisection) that make it fit;
//  3. gradient checkpointing every k layers (k = 1, 2, 4, ...), the lowest-memory family, and on
//     each tier with a budget, hidden_states there (layer inputs on the tier, the rest recomputed)
//     and every layer slot there;
//  4. local refinement of the fastest fitting plan: each of its per-type decisions is changed to
//     every other decision (keep included) while that is faster and still fits;
//  5. (with a host or disk budget) the persistent state's level per layer under the fastest activation
//     plans, and 6. steps 1-4 again with the state placement found fixed (docs/PLANNER.md).
// When base.plan places persistent state (Plan::places_state: a state_offloading level, layer-spread
// state or a state_plan table), every candidate keeps exactly that placement: the planner chooses the
// activations and the paging around it, and the state's tier needs a budget (ConfigError naming the
// host or disk budget otherwise). Otherwise, with a host (or disk) budget, it chooses the state's
// level, tier and layers too (step 5 below).
// The whole search, max_seq_for_budget's included, is bounded by base.plan_time_limit_s (the tools' default 60 s): past
// it no new sim run starts, and the result is the fastest plan found by then (PlanResult::stopped), with a line to
// base.plan_progress saying so; a long search reports its progress there every 10 s. The fastest fitting candidate
// wins. If none fits, the result names the smallest device budget any candidate needs (verified by a sim run at that
// budget) and what host or disk budget would have let a candidate fit the device budget.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/plan/forecast.h"

namespace strata {

struct TierBudgets {
  size_t device = 0;  // the arena budget (required)
  size_t host = 0;    // peak host-tier bytes (slot store + weight pager); 0 = no host tier
  size_t disk = 0;    // peak disk-tier bytes; 0 = no disk tier
};

// A plan in the family the planner searches, as explicit rules (what strata-train's `plan:` holds).
struct PlanSpec {
  std::vector<std::pair<std::string, Decision>> types;  // folded classes ("L*.mlp.act") -> decision in every layer
  int checkpointed_layers = 0;                          // L0..L<n-1>: keep the input, recompute the rest
  int checkpoint_every = 0;                 // >0: gradient checkpointing every k layers (overrides the rest)
  Decision layer_weights = Decision::keep;  // Plan::layer_weights: keep or page
  std::string state_level = "none";         // Plan::set_state_offloading: persistent state off the device
  Decision state_tier = Decision::host;     // ... on the host or the disk tier (state_offloading_tier)
  // Plan::set_state_offloading_layers: a higher level's classes on the host in state_layers layers too
  std::string layers_level = "none";
  int state_layers = 0;
  // The inputs of the last host_input_layers layers on the host (overriding `types`, which put the
  // other layers' inputs on disk): the split hidden-state family when neither tier holds them all.
  int host_input_layers = 0;
  // The attention outputs (attn.out, attn.lse: what its backward reads) of the last attn_keep_layers layers kept
  // on the device and of the attn_host_layers layers before them on the host (overriding `types`, which
  // recompute them): a backward that replays those layers skips their attention.
  int attn_keep_layers = 0;
  int attn_host_layers = 0;
};
// With `fixed_state`, its persistent-state placement (Plan::take_state) replaces the spec's state fields
// (state_level, state_tier, layers_level, state_layers); the spec's layer_weights stays.
Plan make_plan(const PlanSpec& s, int layers, const Plan* fixed_state = nullptr);

struct PlanTried {
  std::string label;
  size_t peak_bytes = 0, high_water_bytes = 0, host_bytes = 0, disk_bytes = 0;
  double step_s = 0;
  bool fits = false;
};

struct PlanResult {
  bool found = false;
  Plan plan;  // the chosen plan (found), else the lowest-memory one; plan.pages_layer_weights(): it pages
  std::string label;
  Forecast forecast;  // its forecast under the budget (found), else unbounded
  TierBudgets budgets;
  size_t minimum_bytes = 0;     // !found: the smallest device budget a candidate was verified to fit in
  size_t persistent_bytes = 0;  // weights, gradients, optimizer state, workspaces: no plan lowers these
  // !found: the fastest candidate that fit the device budget but not a tier budget, and what that
  // tier would need ("host" or "disk"; empty when no candidate fit the device budget).
  std::string short_tier;
  size_t short_tier_needs = 0;
  std::string short_tier_label;
  std::vector<PlanTried> tried;
  int sim_runs = 0;
  // ZeRO over several ranks (zero_stage >= 1, gpus > 1), where the ranks' shares and so their peaks differ:
  // the chosen plan fits every rank; `forecast` is rank `rank`'s, the largest peak, and rank_peak_bytes each
  // rank's peak (bytes) under the plan. Empty otherwise (every rank's forecast is the same).
  std::vector<size_t> rank_peak_bytes;
  int rank = 0;
  // The search stopped at its time limit (ForecastRequest::plan_time_limit_s): `plan` is the fastest found by
  // then (found), or none was found by then (no diagnosis: minimum_bytes and short_tier are 0 and empty).
  bool stopped = false;
};

// With ZeRO over several ranks the plan must fit every rank (PlanResult::rank_peak_bytes): the search runs on
// the rank with the largest peak under base.plan (base.rank is not used), every rank is forecast under the
// chosen plan, and a shortfall on any rank searches again under a device budget lowered by it.
// The MLP's tile count: base.mlp_tiles (the request's plan.mlp_tiles) when set (> 0); when 0 (auto) the search runs
// untiled first, and only when nothing fits untiled tries 2, 4, ... 64 tiles (while a tile keeps at least 64 rows;
// never with LoRA adapters on the MLP): the most tiles first (nothing fitting is diagnosed there,
// the least memory), then the fewest tiles that fit by bisection, or twice that many when faster.
PlanResult plan_for_budget(const ForecastRequest& base, const TierBudgets& budgets);
// The threads the budget planner runs a round's candidate sims on (default 16, capped by the host's
// cores; 1: one at a time). The answer does not depend on it, only the wall time.
void set_planner_threads(int threads);
// plan_for_budget that stops at once when nothing fits, with no diagnosis (what max_seq_for_budget runs
// per length).
PlanResult plan_for_budget_undiagnosed(const ForecastRequest& base, const TierBudgets& budgets);
// Whether some plan fits: the search ends at the first plan that fits every budget (found; not the fastest),
// with no diagnosis when none does (what max_seq_for_budget asks at each length it tries).
PlanResult plan_first_fit(const ForecastRequest& base, const TierBudgets& budgets);
// The tile counts plan_for_budget tries for an auto base (empty: tiling is not possible).
std::vector<int> mlp_tile_candidates(const ForecastRequest& base);
inline PlanResult plan_for_budget(const ForecastRequest& base, size_t device_budget) {
  return plan_for_budget(base, TierBudgets{device_budget, 0, 0});
}

// The longest sequence that trains under the budgets: the largest multiple of `multiple` in
// [lo, hi] at which plan_for_budget finds a plan (lo is raised to `multiple` and rounded up to a
// multiple, hi rounded down). Fitting is taken as monotone in the sequence length, so the search
// bisects: it verifies the endpoints, and ends on a length that fits whose next multiple does not
// (or on hi, when hi fits: longer lengths are not tried). A length tried is asked only whether a plan
// fits: its lowest-memory plans against the device budget, then the coarse first-fit pass (low-memory
// families and per-layer state placement, the most MLP tiles); the whole search runs once, at the answer.
struct MaxSeqResult {
  bool found = false;                       // some length in [lo, hi] fits
  int seq = 0;                              // found: the longest length found to fit
  int next_seq = 0;                         // found and !at_limit: seq + multiple, verified not to fit
  bool at_limit = false;                    // seq == hi: the search range, not the budgets, ended it
  int lo = 0, hi = 0, multiple = 0;         // the range searched, after rounding
  PlanResult plan;                          // plan_for_budget at seq (found), else at lo (what lo would need)
  std::vector<std::pair<int, bool>> tried;  // (length, fits) in the order the search tried them
  int sim_runs = 0;                         // forecasts over the whole search
  // The time limit (ForecastRequest::plan_time_limit_s) stopped the search: `seq` is the longest length
  // verified by then (next_seq 0: longer ones were not decided).
  bool stopped = false;
};
MaxSeqResult max_seq_for_budget(const ForecastRequest& base, const TierBudgets& budgets, int lo, int hi,
                                int multiple = 1024);
// The upper end of the search when none is given: the longest length the budgets could hold. Every rank keeps a
// whole bf16 hidden state of its tokens [T/sp, hidden] and the batch's ids (3 x 4 bytes a token) on the device at
// once (no plan moves them off: the layers run on whole rows), so longer rows cannot fit the device budget; and
// at most what a forecast runs (kMaxForecastSeq, kMaxForecastTokens). `why` says which bounded it. The model's
// max_position_embeddings does not: RoPE runs past it (strata-train warns).
struct SeqLimit {
  int seq = 0;
  std::string why;
};
SeqLimit max_seq_upper_bound(const ForecastRequest& r, const TierBudgets& budgets);

// A YAML file strata-train --config accepts unchanged: the forecast's shape and mode, the arena
// budget and the plan as explicit rules; comments carry the forecast.
std::string plan_yaml(const ForecastRequest& r, const Plan& plan, const Forecast& f, size_t budget);

}  // namespace strata
