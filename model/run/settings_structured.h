// The settings table's structured rows (datasets, the plan and state tables, LoRA targets) and the
// rows whose reading spans keys (adapter, lora_r, layer_weights, resume); settings_structured.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/run/settings_value.h"

namespace strata {

// Runs a parser that throws ConfigError naming its own `where` and re-raises the error with
// `v`'s file and key as its fields.
template <class F>
auto relocated(const SettingValue& v, F&& f) {
  try {
    return f();
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    // The engine's parsers are given "" as `where`: their ": key must be ..." goes after v's place.
    if (msg.starts_with(": ")) msg = v.at() + msg;
    throw ConfigError(msg, v.origin().file, v.origin().field);
  }
}

// "20GiB" where exact, else the byte count.
std::string format_bytes_exact(size_t bytes);
// A string as a double-quoted YAML scalar.
std::string yaml_quoted(const std::string& s);

// A plan's persistent-state table taken apart: the state_offloading level and tier that made its
// rules, and the explicit state_plan rules before them.
struct StateParts {
  std::string level = "none";
  Decision tier = Decision::host;
  std::vector<std::pair<std::string, Decision>> explicit_rules;
};
StateParts state_parts(const Plan& p);

void set_datasets(TrainConfig& c, const SettingValue& v, SettingsReader& r);
std::string get_datasets(const TrainConfig& c);
void set_resume(TrainConfig& c, const SettingValue& v, SettingsReader& r);
void set_lora_rank(TrainConfig& c, const SettingValue& v, SettingsReader& r);
void set_lora_targets(TrainConfig& c, const SettingValue& v, SettingsReader& r);
std::string get_lora_targets(const TrainConfig& c);
void set_plan_table(TrainConfig& c, const SettingValue& v, SettingsReader& r);
std::string get_plan_table(const TrainConfig& c);
void set_state_level(TrainConfig& c, const SettingValue& v, SettingsReader& r);
void set_state_tier(TrainConfig& c, const SettingValue& v, SettingsReader& r);
void set_state_layers(TrainConfig& c, const SettingValue& v, SettingsReader& r);
std::string get_state_layers(const TrainConfig& c);
void set_state_table(TrainConfig& c, const SettingValue& v, SettingsReader& r);
std::string get_state_table(const TrainConfig& c);

}  // namespace strata
