// The layer inputs on a tier: the hidden-state families, and their split over the host and disk tiers when
// neither holds every layer's input.
#include <algorithm>

#include "model/plan/planner_candidates.h"

namespace strata::planner_detail {

// hidden_states on tier d (layer inputs there, the rest of each layer recomputed), and every
// layer slot there; with both tiers, hidden_states split over them (split_inputs).
void Search::tier_families(const PlanSpec& start, Decision d) {
  PlanSpec hs = start;
  hs.types = {{"L*.input", d}, {"L*", Decision::recompute}};
  eval(hs);
  if (d == Decision::disk) split_inputs(hs);
  PlanSpec all = start;
  all.types = {{"L*", d}};
  eval(all);
}

bool Search::inputs_on_disk(const PlanSpec& s) {
  return s.checkpoint_every == 0 && std::any_of(s.types.begin(), s.types.end(), [](auto& e) {
           return e.first == "L*.input" && e.second == Decision::disk;
         });
}

// Layer inputs on disk with a host budget too: the last n layers' inputs on the host instead (read
// back first in backward, so the host's faster copies sit where the wait would be shortest), n the
// most that keeps the host tier within its budget (bisection: host bytes grow with n). For when
// neither tier holds every layer's input.
void Search::split_inputs(PlanSpec s) {
  if (!b.host || !b.disk || !inputs_on_disk(s)) return;
  s.host_input_layers = 0;
  if (eval(s).host_bytes > b.host) return;  // the state alone leaves no room
  int lo = 0, hi = layers;
  s.host_input_layers = hi;
  if (eval(s).host_bytes <= b.host) return;  // every input fits the host
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    s.host_input_layers = mid;
    (eval(s).host_bytes <= b.host ? lo : hi) = mid;
  }
  s.host_input_layers = lo;
  eval(s);
}

}  // namespace strata::planner_detail
