#include "engine/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "engine/error.h"
#include "engine/names.h"

namespace strata {

namespace {
constexpr EnumName<Decision> kDecisions[] = {{Decision::keep, "keep"},
                                             {Decision::recompute, "recompute"},
                                             {Decision::host, "host"},
                                             {Decision::disk, "disk"},
                                             {Decision::page, "page"}};
constexpr std::initializer_list<Decision> kPlaced = {Decision::keep, Decision::recompute, Decision::host,
                                                     Decision::disk};
constexpr std::initializer_list<Decision> kTiers = {Decision::host, Decision::disk};
}  // namespace

const char* decision_name(Decision d) {
  return name_of(kDecisions, d);
}

Decision parse_decision(std::string_view s, const std::string& where) {
  if (auto d = parse_name(kDecisions, s, kPlaced)) return *d;
  STRATA_THROW(ConfigError,
               fmt::format("{}: unknown decision '{}' (expected {})", where, s, name_choices(kDecisions, kPlaced)),
               where, std::string(s));
}

Decision parse_layer_weights(std::string_view s, const std::string& where, const std::string& field) {
  if (auto d = parse_name(kDecisions, s, {Decision::keep, Decision::page})) return *d;
  STRATA_THROW(ConfigError,
               fmt::format("{}: layer_weights must be keep (on the device) or page (paged from host memory), got '{}'",
                           where, s),
               where, field);
}

void Plan::set_layer_weights(Decision d, const std::string& where) {
  if (d != Decision::keep && d != Decision::page)
    STRATA_THROW(
        ConfigError,
        fmt::format("{}: layer_weights must be keep (on the device) or page (paged from host memory), got '{}'", where,
                    decision_name(d)),
        where, "layer_weights");
  layer_weights = d;
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

bool state_layer_chosen(int layer, int k, int num_layers) {
  if (layer < 0 || k <= 0 || num_layers <= 0) return false;
  if (k >= num_layers) return true;
  const long n = num_layers, i = layer;
  return (i + 1) * k / n > i * k / n;
}

namespace {

// The rules of a state_offloading level (`none`: none); ConfigError naming `where` otherwise.
// `tier`: where the classes go (host or disk; gradients have no disk tier: host).
std::vector<std::pair<std::string, Decision>> level_rules(std::string_view level, const std::string& where,
                                                          const char* field, Decision tier = Decision::host) {
  std::vector<std::pair<std::string, Decision>> r;
  if (level == "none") return r;
  if (level == "optimizer" || level == "master" || level == "all") {
    r.emplace_back("*.adam.*", tier);
    if (level != "optimizer") r.emplace_back("*.w.master", tier);
    if (level == "all") r.emplace_back("*.grad", Decision::host);
    return r;
  }
  STRATA_THROW(ConfigError,
               fmt::format("{}: {} must be {}optimizer, master or all, got '{}'", where, field,
                           std::string_view(field) == "state_offloading" ? "none, " : "", level),
               where, field);
}

Decision checked_state(const std::string& pat, std::string_view cls, Decision d) {
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

}  // namespace

Decision Plan::decide_state(std::string_view cls, int layer, int num_layers) const {
  if (state_layers > 0 && num_layers > 0 && state_layers > num_layers)
    STRATA_THROW(
        ConfigError,
        fmt::format("state_offloading_layers: {} layers asked for, but the model has {}", state_layers, num_layers),
        "state_offloading_layers", "layers");
  if (state_layer_chosen(layer, state_layers, num_layers))
    for (auto& [pat, d] : state_layer_rules)
      if (glob_match(pat, cls)) return checked_state(pat, cls, d);
  for (auto& [pat, d] : state)
    if (glob_match(pat, cls)) return checked_state(pat, cls, d);
  return Decision::keep;
}

Decision parse_state_tier(std::string_view s, const std::string& where) {
  if (auto d = parse_name(kDecisions, s, kTiers)) return *d;
  STRATA_THROW(
      ConfigError,
      fmt::format("{}: state_offloading_tier must be {}, got '{}'", where, name_choices(kDecisions, kTiers), s), where,
      "state_offloading_tier");
}

void Plan::set_state_offloading(std::string_view level, const std::string& where, Decision tier) {
  if (tier != Decision::host && tier != Decision::disk)
    STRATA_THROW(ConfigError,
                 fmt::format("{}: state_offloading_tier must be {}, got '{}'", where, name_choices(kDecisions, kTiers),
                             decision_name(tier)),
                 where, "state_offloading_tier");
  state = level_rules(level, where, "state_offloading", tier);
  state_preset = tier == Decision::disk && level != "none" ? std::string(level) + " on disk" : std::string(level);
}

void Plan::set_state_offloading_layers(std::string_view level, int layers, const std::string& where) {
  if (layers < 0)
    STRATA_THROW(ConfigError,
                 fmt::format("{}: state_offloading_layers.layers must be 0 or more, got {}", where, layers), where,
                 "state_offloading_layers");
  if (layers > 0 && level == "none")
    STRATA_THROW(ConfigError,
                 fmt::format("{}: state_offloading_layers.level must be optimizer, master or all, got 'none'", where),
                 where, "state_offloading_layers.level");
  state_layer_rules = layers > 0 ? level_rules(level, where, "state_offloading_layers.level")
                                 : std::vector<std::pair<std::string, Decision>>{};
  state_layers_level = layers > 0 ? std::string(level) : "none";
  state_layers = layers;
}

void Plan::parse_state_offloading_layers(std::string_view spec, const std::string& where) {
  const size_t colon = spec.find(':');
  int layers = -1;
  if (colon != std::string_view::npos && colon + 1 < spec.size() && spec.size() - colon <= 8) {
    layers = 0;
    for (char ch : spec.substr(colon + 1)) {
      if (ch < '0' || ch > '9') {
        layers = -1;
        break;
      }
      layers = layers * 10 + (ch - '0');
    }
  }
  if (layers < 0)
    STRATA_THROW(ConfigError,
                 fmt::format("{}: expected LEVEL:LAYERS (e.g. optimizer:28; LEVEL optimizer, master or all), got '{}'",
                             where, spec),
                 where, "state_offloading_layers");
  set_state_offloading_layers(spec.substr(0, colon), layers, where);
}

void Plan::take_state(const Plan& o) {
  state = o.state;
  state_preset = o.state_preset;
  state_layer_rules = o.state_layer_rules;
  state_layers_level = o.state_layers_level;
  state_layers = o.state_layers;
  layer_weights = o.layer_weights;
}

bool Plan::state_uses(Decision d) const {
  auto in = [d](const std::vector<std::pair<std::string, Decision>>& t) {
    return std::any_of(t.begin(), t.end(), [d](const auto& e) { return e.second == d; });
  };
  return in(state) || (state_layers > 0 && in(state_layer_rules));
}

std::string Plan::state_label() const {
  if (state_layers <= 0) return state_preset;
  return fmt::format("{} + {} in {} layers", state_preset, state_layers_level, state_layers);
}

Plan Plan::keep_everything() {
  return Plan{};
}

namespace {

std::optional<PresetClasses>& registered_classes() {
  static std::optional<PresetClasses> c;
  return c;
}

// The loss inputs are needed at once in backward: recomputing or moving them saves nothing.
void keep_loss_inputs(Plan& p, const PresetClasses& c) {
  for (const std::string& cls : c.loss_inputs) p.add(cls, Decision::keep);
}

}  // namespace

const PresetClasses& preset_classes() {
  const std::optional<PresetClasses>& c = registered_classes();
  STRATA_CHECK(c.has_value(), "no model registered the slot classes the activation presets act on");
  return *c;
}

void set_preset_classes(PresetClasses classes) {
  registered_classes() = std::move(classes);
}

Plan Plan::gradient_checkpointing(int every) {
  const PresetClasses& c = preset_classes();
  Plan p;
  p.preset = every == 1 ? "gradient_checkpointing" : fmt::format("gradient_checkpointing(every={})", every);
  keep_loss_inputs(p, c);
  p.checkpoint_every = std::max(1, every);
  p.add(c.layer, Decision::recompute);
  return p;
}

Plan Plan::activation_offloading(Decision tier, bool synchronous) {
  Plan p;
  p.preset = tier == Decision::disk ? "activation_offloading: disk"
                                    : (synchronous ? "activation_offloading: legacy" : "activation_offloading: true");
  p.sync_transfers = synchronous;
  keep_loss_inputs(p, preset_classes());
  p.add("*", tier);
  return p;
}

Plan Plan::hidden_states() {
  const PresetClasses& c = preset_classes();
  Plan p;
  p.preset = "activation_offloading: hidden_states";
  keep_loss_inputs(p, c);
  p.add(c.layer_input, Decision::host);
  p.add(c.layer, Decision::recompute);
  return p;
}

Plan Plan::selective_recompute() {
  Plan p;
  p.preset = "selective_recompute";
  for (const std::string& cls : preset_classes().cheap) p.add(cls, Decision::recompute);
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

const PresetInfo* preset_of(const Plan& p) {
  for (const PresetInfo& info : plan_presets()) {
    const Plan made = info.make(std::max(1, p.checkpoint_every));
    if (made.rules == p.rules && made.checkpoint_every == p.checkpoint_every && made.sync_transfers == p.sync_transfers)
      return &info;
  }
  return nullptr;
}

std::string preset_yaml(const PresetInfo& preset, int every) {
  if (preset.yaml_key.empty()) return "";
  if (every > 1 && preset.make(every).checkpoint_every == every)  // gradient checkpointing's segments
    return fmt::format("{}: {{every: {}}}", preset.yaml_key, every);
  return fmt::format("{}: {}", preset.yaml_key, preset.yaml_value);
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
