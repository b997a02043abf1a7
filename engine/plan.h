// The memory plan: a small table from saved-slot class (glob patterns such as "L*.mlp.gate")
// to a decision. First matching rule wins; unmatched classes are kept.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata {

enum class Decision : uint8_t { keep, recompute, host, disk };
const char* decision_name(Decision d);
// Parses "keep", "recompute", "host", "disk"; throws ConfigError naming `where` otherwise.
Decision parse_decision(std::string_view s, const std::string& where);

// Glob match with '*' (any run of characters) and '?' (one character).
bool glob_match(std::string_view pattern, std::string_view s);

struct Plan {
  std::vector<std::pair<std::string, Decision>> overrides;  // an explicit table: checked first
  std::vector<std::pair<std::string, Decision>> rules;      // the preset's rules
  std::string preset = "keep-everything";                   // how the plan was made, for printing
  int checkpoint_every = 0;                                 // >0: "L<n>.input" is kept when n % every == 0
  bool sync_transfers = false;                              // `activation_offloading: legacy`: copies wait at once
  // Persistent state (per trainable parameter group: "L7", "embed", "head", "final_norm"; kinds
  // "w.master", "grad", "adam.m", "adam.v", so classes such as "L7.adam.m"): keep (device) or host.
  // Its own table, so the activation presets' wide patterns ("*", "L*") never move state.
  std::vector<std::pair<std::string, Decision>> state;
  std::string state_preset = "none";  // how the state table was made, for printing

  // The decision for a persistent-state class: first match in `state`, else keep. `keep` and
  // `host` are the state decisions; anything else is refused (ConfigError naming the class).
  Decision decide_state(std::string_view cls) const;

  Decision decide(std::string_view cls) const;
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
  // The state table of a `state_offloading` level: "none", "optimizer" (Adam moments on the host),
  // "master" (moments and fp32 masters), "all" (moments, masters and gradients). ConfigError otherwise.
  void set_state_offloading(std::string_view level, const std::string& where);
};

// The persistent-state kinds a state class names (its suffix after the group).
inline constexpr const char* kStateKinds[] = {"w.master", "grad", "adam.m", "adam.v"};
// The `state_offloading` levels, lowest host use first.
inline constexpr const char* kStateOffloadingLevels[] = {"none", "optimizer", "master", "all"};

}  // namespace strata
