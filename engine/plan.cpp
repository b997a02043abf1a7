#include "engine/plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/error.h"

namespace strata {

const char* decision_name(Decision d) {
  switch (d) {
    case Decision::keep:
      return "keep";
    case Decision::recompute:
      return "recompute";
    case Decision::host:
      return "host";
    case Decision::disk:
      return "disk";
  }
  return "?";
}

Decision parse_decision(std::string_view s, const std::string& where) {
  if (s == "keep") return Decision::keep;
  if (s == "recompute") return Decision::recompute;
  if (s == "host") return Decision::host;
  if (s == "disk") return Decision::disk;
  STRATA_THROW(ConfigError, fmt::format("{}: unknown decision '{}' (expected keep, recompute, host or disk)", where, s),
               where, std::string(s));
}

bool glob_match(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

Decision Plan::decide(std::string_view cls, int layer_input) const {
  for (auto& [pat, d] : overrides)
    if (glob_match(pat, cls)) return d;
  // Segment boundaries of gradient checkpointing: layer n's input kept when n % every == 0.
  if (checkpoint_every > 0 && layer_input >= 0 && layer_input % checkpoint_every == 0) return Decision::keep;
  for (auto& [pat, d] : rules)
    if (glob_match(pat, cls)) return d;
  return Decision::keep;
}

Decision Plan::decide_state(std::string_view cls) const {
  for (auto& [pat, d] : state) {
    if (!glob_match(pat, cls)) continue;
    if (d != Decision::keep && d != Decision::host && d != Decision::disk)
      STRATA_THROW(ConfigError,
                   fmt::format("state_plan: '{}' sends persistent state class '{}' to '{}'; state classes take keep "
                               "(device), host or disk",
                               pat, cls, decision_name(d)),
                   "state_plan", pat);
    if (d == Decision::disk && cls.ends_with(".grad"))
      STRATA_THROW(ConfigError,
                   fmt::format("state_plan: '{}' sends gradient class '{}' to the disk tier; gradients take keep "
                               "(device) or host (only adam.m, adam.v and w.master go to disk)",
                               pat, cls),
                   "state_plan", pat);
    return d;
  }
  return Decision::keep;
}

Decision parse_state_tier(std::string_view s, const std::string& where) {
  if (s == "host") return Decision::host;
  if (s == "disk") return Decision::disk;
  STRATA_THROW(ConfigError, fmt::format("{}: state_offloading_tier must be host or disk, got '{}'", where, s), where,
               "state_offloading_tier");
}

void Plan::set_state_offloading(std::string_view level, const std::string& where, Decision tier) {
  if (tier != Decision::host && tier != Decision::disk)
    STRATA_THROW(ConfigError,
                 fmt::format("{}: state_offloading_tier must be host or disk, got '{}'", where, decision_name(tier)),
                 where, "state_offloading_tier");
  state.clear();
  state_preset = tier == Decision::disk && level != "none" ? std::string(level) + " on disk" : std::string(level);
  if (level == "none") return;
  if (level == "optimizer" || level == "master" || level == "all") {
    state.emplace_back("*.adam.*", tier);
    if (level != "optimizer") state.emplace_back("*.w.master", tier);
    if (level == "all") state.emplace_back("*.grad", Decision::host);  // gradients have no disk tier
    return;
  }
  STRATA_THROW(ConfigError,
               fmt::format("{}: state_offloading must be none, optimizer, master or all, got '{}'", where, level),
               where, "state_offloading");
}

Plan Plan::keep_everything() {
  return Plan{};
}

Plan Plan::gradient_checkpointing(int every) {
  Plan p;
  p.preset = every == 1 ? "gradient_checkpointing" : fmt::format("gradient_checkpointing(every={})", every);
  // The loss inputs are needed at once in backward: recomputing them saves nothing.
  p.add("final_norm.*", Decision::keep);
  p.add("loss.*", Decision::keep);
  p.checkpoint_every = std::max(1, every);
  p.add("L*", Decision::recompute);
  return p;
}

Plan Plan::activation_offloading(Decision tier, bool synchronous) {
  Plan p;
  p.preset = tier == Decision::disk ? "activation_offloading: disk"
                                    : (synchronous ? "activation_offloading: legacy" : "activation_offloading: true");
  p.sync_transfers = synchronous;
  p.add("final_norm.*", Decision::keep);
  p.add("loss.*", Decision::keep);
  p.add("*", tier);
  return p;
}

Plan Plan::hidden_states() {
  Plan p;
  p.preset = "activation_offloading: hidden_states";
  p.add("final_norm.*", Decision::keep);
  p.add("loss.*", Decision::keep);
  p.add("L*.input", Decision::host);
  p.add("L*", Decision::recompute);
  return p;
}

Plan Plan::selective_recompute() {
  Plan p;
  p.preset = "selective_recompute";
  p.add("L*.attn_norm.out", Decision::recompute);
  p.add("L*.mlp_norm.out", Decision::recompute);
  p.add("L*.mlp.act", Decision::recompute);
  return p;
}

const std::vector<PresetInfo>& plan_presets() {
  static const std::vector<PresetInfo> presets = {
      {"keep", "keep", "keep-everything", "", "", [](int) { return Plan::keep_everything(); }},
      {"gradient_checkpointing", "gc", "", "gradient_checkpointing", "true",
       [](int every) { return Plan::gradient_checkpointing(every); }},
      {"selective_recompute", "selective", "", "selective_recompute", "true",
       [](int) { return Plan::selective_recompute(); }},
      {"offload", "offload", "true", "activation_offloading", "true",
       [](int) { return Plan::activation_offloading(Decision::host); }},
      {"legacy", "legacy", "", "activation_offloading", "legacy",
       [](int) { return Plan::activation_offloading(Decision::host, true); }},
      {"hidden_states", "hidden_states", "", "activation_offloading", "hidden_states",
       [](int) { return Plan::hidden_states(); }},
      {"disk", "disk", "", "activation_offloading", "disk",
       [](int) { return Plan::activation_offloading(Decision::disk); }},
  };
  return presets;
}

const PresetInfo* find_preset(std::string_view name) {
  for (const PresetInfo& p : plan_presets())
    if (name == p.name || name == p.short_name || (!p.alias.empty() && name == p.alias)) return &p;
  return nullptr;
}

std::string preset_names(bool short_names) {
  std::string out;
  for (const PresetInfo& p : plan_presets()) {
    const std::string_view n = short_names ? p.short_name : p.name;
    if (out.find(std::string(n)) != std::string::npos) continue;
    out += (out.empty() ? "" : ", ") + std::string(n);
  }
  return out;
}

Plan preset_plan(std::string_view name, int every, const std::string& what, const std::string& file,
                 const std::string& field) {
  if (const PresetInfo* p = find_preset(name)) return p->make(every);
  STRATA_THROW(
      ConfigError,
      fmt::format("{} must be one of {} (or {}), got '{}'", what, preset_names(false), preset_names(true), name), file,
      field);
}

}  // namespace strata
