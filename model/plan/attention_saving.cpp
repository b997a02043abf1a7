// The attention outputs of the last layers saved (step 5b of the search, docs/PLANNER.md): a plan that recomputes
// each layer from its input replays the layer's attention in backward, the costliest op at long context; saving
// attn.out and attn.lse for a layer skips that replay for the price of their bytes on a tier.
#include <fmt/format.h>

#include <algorithm>

#include "model/plan/planner_candidates.h"

namespace strata::planner_detail {

namespace {

// Whether `s` recomputes layer i's attention output (saving it would skip the replay of its attention).
bool recomputes_attention(const PlanSpec& s, int layers, int i) {
  return make_plan(s, layers).decide(fmt::format("L{}.attn.out", i)) == Decision::recompute;
}

}  // namespace

// The last layers first: backward reads them first, so what is saved there is read back soonest (on the device, or
// with the host copies running ahead of the layers before them). The most layers kept on the device that still fit
// it (bisection from none to every layer: device bytes mostly grow with the count; where they do not, as for the
// last layer, whose replay needs about what its saved outputs hold, the count found still fits), then on the host
// before them, for a few shares of the layers left (the host budget is shared with the layer inputs, so each share
// splits the inputs between host and disk again, as split_inputs does), then the most between two shares that still
// fits the host. Every candidate is evaluated: the fastest that fits becomes the search's best.
void Search::save_attention(PlanSpec s) {
  if (s.checkpoint_every > 0 || layers < 1 || s.attn_keep_layers + s.attn_host_layers > 0) return;
  if (!recomputes_attention(s, layers, layers - 1)) return;  // the last layer's is saved already (or never made)
  const auto fits = [&](const PlanSpec& c) { return eval(c).fits; };
  int lo = 0, hi = layers + 1;  // lo fits (0: the plan itself); hi does not (past every layer)
  if (s.attn_keep_layers = layers; fits(s))
    lo = layers;
  else
    hi = layers;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    s.attn_keep_layers = mid;
    (fits(s) ? lo : hi) = mid;
  }
  const int keep = lo;
  s.attn_keep_layers = keep;
  const int rest = layers - keep;
  if (rest == 0 || b.host == 0) return;
  int host_fits = 0, host_over = rest + 1;  // among the shares whose inputs stay on the host: most that fit, fewest not
  for (int m : {rest / 4, rest / 2, 3 * rest / 4, rest}) {
    if (m <= 0 || out_of_time()) continue;
    PlanSpec h = s;
    h.attn_host_layers = m;
    if (inputs_on_disk(h)) {
      split_inputs(h);
    } else if (eval(h).fits) {
      host_fits = std::max(host_fits, m);
    } else {
      host_over = std::min(host_over, m);
      // The host full: the layer inputs make room, the last layers' on the host and the rest on disk, whose reads
      // in backward overlap the layers after them (a replayed attention costs more than its input's disk read).
      if (!b.disk) continue;
      for (auto& [type, d] : h.types)
        if (type == "L*.input") d = Decision::disk;
      split_inputs(h);
    }
  }
  // Each layer saved there skips one attention replay for two copies the host lanes overlap, so the most that fit
  // is the fastest: bisect between the shares (the host peak grows with the count).
  while (host_fits > 0 && host_over <= rest && host_over - host_fits > 1 && !out_of_time()) {
    PlanSpec h = s;
    h.attn_host_layers = (host_fits + host_over) / 2;
    if (inputs_on_disk(h)) break;
    (eval(h).fits ? host_fits : host_over) = h.attn_host_layers;
  }
}

}  // namespace strata::planner_detail
