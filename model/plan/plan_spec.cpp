// A PlanSpec (the family the planner searches) as a label and as a Plan.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "model/plan/planner.h"
#include "model/plan/planner_candidates.h"

namespace strata {

namespace planner_detail {

std::string describe(const PlanSpec& s) {
  std::string out;
  if (s.checkpoint_every > 0) {
    out = s.checkpoint_every == 1 ? "gradient checkpointing"
                                  : fmt::format("gradient checkpointing every {} layers", s.checkpoint_every);
  } else {
    for (Decision d : {Decision::recompute, Decision::host, Decision::disk}) {
      std::string part;
      for (auto& [t, dt] : s.types)
        if (dt == d) part += (part.empty() ? "" : ", ") + t;
      if (!part.empty()) out += fmt::format("{}{} {}", out.empty() ? "" : "; ", decision_name(d), part);
    }
    if (s.checkpointed_layers > 0)
      out += fmt::format(
          "{}checkpoint {}", out.empty() ? "" : " + ",
          s.checkpointed_layers == 1 ? std::string("L0") : fmt::format("L0-L{}", s.checkpointed_layers - 1));
    if (out.empty()) out = "keep everything";
  }
  if (s.host_input_layers > 0) out += fmt::format(" + inputs of the last {} layers on host", s.host_input_layers);
  if (s.attn_keep_layers > 0) out += fmt::format(" + attention outputs of the last {} layers kept", s.attn_keep_layers);
  if (s.attn_host_layers > 0)
    out += s.attn_keep_layers > 0
               ? fmt::format(" + attention outputs of the {} layers before them on host", s.attn_host_layers)
               : fmt::format(" + attention outputs of the last {} layers on host", s.attn_host_layers);
  if (s.state_level != "none") out += fmt::format(" + state on {}: {}", decision_name(s.state_tier), s.state_level);
  if (s.state_layers > 0) out += fmt::format(" + {} in {} layers", s.layers_level, s.state_layers);
  return s.layer_weights == Decision::page ? out + " + layer_weights: page" : out;
}

}  // namespace planner_detail

Plan make_plan(const PlanSpec& s, int layers, const Plan* fixed_state) {
  auto state = [&](Plan& p) {
    if (fixed_state) {
      p.take_state(*fixed_state);
    } else {
      p.set_state_offloading(s.state_level, "planner", s.state_tier);
      p.set_state_offloading_layers(s.layers_level, s.state_layers, "planner");
    }
    p.set_layer_weights(s.layer_weights, "planner");
  };
  if (s.checkpoint_every > 0) {
    Plan p = Plan::gradient_checkpointing(s.checkpoint_every);
    state(p);
    return p;
  }
  PlanSpec body = s;
  body.layer_weights = Decision::keep;  // not in the activation preset's label (the plan's layer_weights)
  Plan p;
  state(p);
  p.preset = "auto: " + planner_detail::describe(body);
  // The last host_input_layers layers' inputs on the host, before the types (which put the others' on disk).
  for (int i = std::max(0, layers - s.host_input_layers); i < layers && s.host_input_layers > 0; ++i)
    p.overrides.emplace_back(fmt::format("L{}.input", i), Decision::host);
  // The attention outputs of the last layers: on the device for the last attn_keep_layers, on the host before them.
  const int keep_from = std::max(0, layers - s.attn_keep_layers),
            host_from = std::max(0, keep_from - s.attn_host_layers);
  for (int i = host_from; i < layers && s.attn_keep_layers + s.attn_host_layers > 0; ++i)
    for (const char* part : {"out", "lse"})
      p.overrides.emplace_back(fmt::format("L{}.attn.{}", i, part), i >= keep_from ? Decision::keep : Decision::host);
  for (int i = 0; i < std::min(s.checkpointed_layers, layers); ++i) {
    p.overrides.emplace_back(fmt::format("L{}.input", i), Decision::keep);
    p.overrides.emplace_back(fmt::format("L{}.*", i), Decision::recompute);
  }
  for (auto& [t, d] : s.types) p.overrides.emplace_back(t, d);
  return p;
}

}  // namespace strata
