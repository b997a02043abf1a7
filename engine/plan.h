// The memory plan: one value holding a decision for every tensor class. Saved activations: a small
// table from saved-slot class (glob patterns over the model's class names) to a decision, first matching
// rule wins, unmatched classes are kept. Persistent state: the state table (master weights,
// gradients, Adam moments) and the layers' weight matrices (keep or page).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata {

// keep, recompute, host and disk place saved activations (and keep, host, disk persistent state);
// page is the layer weights' other decision (Plan::layer_weights): pinned host memory, paged in.
enum class Decision : uint8_t { keep, recompute, host, disk, page };
const char* decision_name(Decision d);
// Parses "keep", "recompute", "host", "disk" (an activation or state decision; not "page");
// throws ConfigError naming `where` otherwise.
Decision parse_decision(std::string_view s, const std::string& where);
// `layer_weights`: "keep" or "page"; ConfigError naming `where` (file and field `field`) otherwise.
Decision parse_layer_weights(std::string_view s, const std::string& where, const std::string& field = "layer_weights");

// Glob match with '*' (any run of characters) and '?' (one character).
bool glob_match(std::string_view pattern, std::string_view s);

struct Plan {
  std::vector<std::pair<std::string, Decision>> overrides;  // an explicit table: checked first
  std::vector<std::pair<std::string, Decision>> rules;      // the preset's rules
  std::string preset = "keep-everything";                   // how the plan was made, for printing
  int checkpoint_every = 0;     // >0: layer n's input is kept when n % every == 0 (Value::layer_input)
  bool sync_transfers = false;  // `activation_offloading: legacy`: copies wait at once
  // Persistent state (per trainable parameter group, named by the model; kinds "w.master", "grad",
  // "adam.m", "adam.v", so classes such as "<group>.adam.m"): keep (device), host, or disk (the
  // model's state file, io_uring; not for "grad"). Its own table, so the activation presets' wide
  // patterns (every class, every layer's) never move state.
  std::vector<std::pair<std::string, Decision>> state;
  std::string state_preset = "none";  // how the state table was made, for printing
  // Layer-spread state (`state_offloading_layers: {level: L, layers: k}`): the classes a
  // state_offloading level L names go to the host in k of the model's layers, spread evenly
  // (state_layer_chosen), checked before `state`; the other layers, the embedding, the LM head and
  // the final norm follow `state` alone. So the planner moves the state whose transfers overlap the
  // next forward best (a layer's, applied just before that layer runs) and no more than the budget
  // needs; the embedding's update, needed before the first op, stays where `state` puts it.
  std::vector<std::pair<std::string, Decision>> state_layer_rules;
  std::string state_layers_level = "none";
  int state_layers = 0;
  // The layers' weight matrices (not norms, biases or adapters), frozen or trainable: keep (device
  // resident) or page (pinned host memory, paged through two device slots by the WeightPager, in
  // forward, recompute and backward order). YAML `layer_weights: page` (older spelling
  // `layer_offloading: true`). One decision for the class: every layer pages, or none does.
  Decision layer_weights = Decision::keep;
  // Each layer's MLP over this many row tiles (mlp_tiles); 0 = auto: untiled unless the budget
  // planner tiles it to fit. The planner's result carries its choice here.
  int mlp_tiles = 0;
  // Whether the plan pages the layer weights: the one place the model's bool is derived from
  // (ModelOptions::page_layers, the tools' and the library's `layer_offloading`).
  bool pages_layer_weights() const { return layer_weights == Decision::page; }
  // keep or page; anything else is a ConfigError naming `where`.
  void set_layer_weights(Decision d, const std::string& where);

  // The decision for a persistent-state class of group `cls` ("L7.adam.m"); `layer` is the group's
  // layer (-1 for the embedding, head and final norm) of `num_layers`: the layer-spread rules when
  // the layer is chosen, else the first match in `state`, else keep. `keep`, `host` and `disk` are
  // the state decisions (disk not for gradients, "*.grad"); anything else is refused (ConfigError
  // naming the class), as is state_layers above num_layers (naming state_offloading_layers).
  Decision decide_state(std::string_view cls, int layer = -1, int num_layers = 0) const;
  // The level's classes on the host in `layers` layers (0: off); ConfigError naming `where` for a
  // level other than optimizer, master or all, or layers < 0.
  void set_state_offloading_layers(std::string_view level, int layers, const std::string& where);
  // The flags' spelling "LEVEL:K" ("optimizer:28"); ConfigError naming `where` otherwise.
  void parse_state_offloading_layers(std::string_view spec, const std::string& where);
  // Copies `o`'s persistent-state fields (the table, the layer-spread rules, their labels, the layer
  // weights' decision): an activation preset chosen after a config keeps the config's state placement.
  void take_state(const Plan& o);
  // Whether the plan places any persistent state off the device (a state_offloading level other than
  // none, state_offloading_layers, or a state_plan table): the budget planner then keeps that placement
  // and chooses the rest.
  bool places_state() const { return !state.empty() || state_layers > 0; }
  // Whether any state class can go to tier `d` (host or disk) under this placement.
  bool state_uses(Decision d) const;
  // How the state's tiers were chosen, for printing: "optimizer", "none + optimizer in 28 layers".
  std::string state_label() const;

  // The decision for a saved slot of class `cls`; `layer_input` >= 0 when the slot is that
  // layer's input (Value::layer_input, marked by the model): checkpoint_every keeps every k-th.
  Decision decide(std::string_view cls, int layer_input = -1) const;
  void add(std::string pattern, Decision d) { rules.emplace_back(std::move(pattern), d); }

  static Plan keep_everything();
  // Keep every `every`-th layer's input and the loss inputs; recompute everything else.
  static Plan gradient_checkpointing(int every = 1);
  // Recompute only the cheap tensors (norm outputs, SwiGLU activation); keep GEMM inputs.
  static Plan selective_recompute();
  // Every saved slot to the host tier (stream-overlapped; synchronous for `legacy`) or to disk.
  static Plan activation_offloading(Decision tier, bool synchronous = false);
  // ALST-style: each layer's input to the host (streamed), everything else recomputed.
  static Plan hidden_states();
  // The state table of a `state_offloading` level: "none", "optimizer" (Adam moments off the device),
  // "master" (moments and fp32 masters), "all" (moments, masters and gradients). ConfigError otherwise.
  // `tier` (`state_offloading_tier`): where those classes go, host or disk; gradients have no disk
  // tier, so "all" on disk sends them to the host. (The layer-spread rules above stay on the host.)
  void set_state_offloading(std::string_view level, const std::string& where, Decision tier = Decision::host);
};

// The saved-slot classes the activation presets act on, by role (glob patterns over slot classes). The
// class names are the model's: it registers them (model/llama/slot_classes.cpp); the engine names roles.
struct PresetClasses {
  std::vector<std::string> loss_inputs;  // read at once by the loss's backward: every preset keeps them
  std::string layer;                     // every saved slot of every layer: what checkpointing recomputes
  std::string layer_input;               // a layer's input (the hidden state between layers)
  std::vector<std::string> cheap;        // cheap to recompute (norm outputs, the MLP's activation)
};
// The registered model's classes; strata::Error when no model registered any.
const PresetClasses& preset_classes();
// Registers the model's classes (once, before the first preset is made).
void set_preset_classes(PresetClasses classes);

// The named activation presets: one table for every place a preset is named (strata-plan --preset,
// strata-bench --plan, the YAML keys gradient_checkpointing / selective_recompute /
// activation_offloading) and for writing a plan back as YAML (model/plan/planner.cpp plan_yaml).
struct PresetInfo {
  std::string_view name;        // strata-plan --preset: "keep", "gradient_checkpointing", ...
  std::string_view short_name;  // strata-bench --plan: "keep", "gc", "selective", "offload", ...
  std::string_view alias;       // an older spelling still accepted ("" if none)
  std::string_view yaml_key;    // the YAML that selects it ("" for keep: the default)
  std::string_view yaml_value;
  Plan (*make)(int every);  // `every`: gradient checkpointing's segment length (others ignore it)
};
const std::vector<PresetInfo>& plan_presets();
// The preset called `name` (its name, short name or alias), or null.
const PresetInfo* find_preset(std::string_view name);
// The other way: the preset whose activation rules `p` holds (its rules, checkpoint_every and
// sync_transfers as the preset makes them; `p.overrides` may add to them), or null. `keep` for a
// plan without preset rules (an explicit table alone, or nothing).
const PresetInfo* preset_of(const Plan& p);
// The preset's YAML line ("activation_offloading: legacy", "gradient_checkpointing: {every: 2}"
// for `every` > 1); "" for keep.
std::string preset_yaml(const PresetInfo& preset, int every);
// The preset called `name`; otherwise a ConfigError "<what> must be one of ..." listing the names,
// with the error's file and field set to `file` and `field`.
Plan preset_plan(std::string_view name, int every, const std::string& what, const std::string& file,
                 const std::string& field);
// "keep, gradient_checkpointing, ..." (or the short names), for messages and usage texts.
std::string preset_names(bool short_names);

// Layer-spread state: whether layer `layer` of `num_layers` is one of the `k` chosen, spread evenly
// (the k layers where floor((i + 1) k / n) steps up; k >= n: every layer).
bool state_layer_chosen(int layer, int k, int num_layers);

// The persistent-state kinds a state class names (its suffix after the group).
inline constexpr const char* kStateKinds[] = {"w.master", "grad", "adam.m", "adam.v"};
// `state_offloading_tier`: "host" or "disk"; ConfigError naming `where` otherwise.
Decision parse_state_tier(std::string_view s, const std::string& where);
// The `state_offloading` levels, lowest host use first.
inline constexpr const char* kStateOffloadingLevels[] = {"none", "optimizer", "master", "all"};

}  // namespace strata
