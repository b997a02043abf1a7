// Inside the settings table (settings.cpp, settings_table.cpp): the value a row's setter reads,
// checked by the row's type and range, and the state one source carries from key to key.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/run/settings.h"

namespace strata {

// Where a value comes from: a YAML file (YAML 1.1 words checked, null refused), a flag or
// SessionConfig::set (the text as given).
enum class ValueSource { yaml, flag, api };

class SettingValue {
 public:
  SettingValue(const Setting& row, YAML::Node node, Origin origin, ValueSource src)
      : row_(row), node_(std::move(node)), origin_(std::move(origin)), src_(src) {}
  const Setting& row() const { return row_; }
  const Origin& origin() const { return origin_; }
  const YAML::Node& node() const { return node_; }
  ValueSource source() const { return src_; }
  bool from_flag() const { return src_ == ValueSource::flag; }
  bool is_null() const { return node_.IsNull(); }

  std::string text() const;  // a string (a YAML boolean or null word unquoted is refused)
  bool boolean() const;      // true/false/yes/no/on/off (any case)
  long long integer() const { return integer_in(row_.range); }  // a whole number in row().range
  long long integer_in(const Range& r) const;
  uint64_t uint64() const;     // a whole number in [0, 2^64 - 1]
  float number() const;        // a finite number in row().range
  size_t bytes() const;        // "20GiB", "1e9", in row().range
  std::string choice() const;  // one of row().choices
  // The scalar as written, or a ConfigError saying a scalar was expected.
  std::string scalar(const char* expected) const;
  // ConfigError "<where> <what>" naming this value's file and key.
  [[noreturn]] void fail(const std::string& what) const;
  // ConfigError for a nested field ("datasets[0].type"): "<file>:<line>: <field> <what>".
  [[noreturn]] void fail_in(const std::string& field, const std::string& what) const;
  // "run.yaml:12", "--seq" or "SessionConfig": where the value is, for messages that name the key after it.
  std::string at() const {
    if (src_ == ValueSource::flag) return origin_.where;
    return line_ > 0 ? origin_.file + ":" + std::to_string(line_) : origin_.file;
  }
  void set_line(int line) { line_ = line; }
  // A nested value of this one (a datasets entry's path), with the same source and file.
  SettingValue child(const YAML::Node& n, const std::string& field) const;

 private:
  const Setting& row_;
  YAML::Node node_;
  Origin origin_;
  ValueSource src_;
  int line_ = 0;
};

// What one source (a YAML file, the command line, one SessionConfig::set) carries across its keys:
// the state table goes in after the presets, adapter: lora means rank 8 unless lora_r is given,
// layer_weights and layer_offloading must agree. finish() applies it.
class SettingsReader {
 public:
  SettingsReader(const TrainConfig& c, std::string source)
      : source(std::move(source)), weights(c.plan.layer_weights), mlp_tiles(c.plan.mlp_tiles) {}
  std::string source;
  Plan explicit_plan, state_plan;
  std::string state_level = "none", state_where;
  Decision state_tier = Decision::host;
  std::vector<std::pair<std::string, Decision>> explicit_state;
  bool has_state = false, has_explicit = false, adapter_lora = false, rank_given = false;
  Decision weights;         // layer_weights (or layer_offloading) as this source gives it
  std::string weights_key;  // the key (or flag) that gave it, with its value as written
  std::string weights_shown;
  int mlp_tiles;  // mlp_tiles: a preset key later in the source replaces the plan, so it goes in at the end
  void finish(TrainConfig& c);
};

// A mapping key as a string; a sequence, mapping or null key is a ConfigError naming the line.
std::string yaml_key_of(const YAML::Node& k, const std::string& path, const std::string& parent);
// A YAML 1.1 boolean word (yes, No, ON, ...) and its value, else false.
bool yaml11_bool(const std::string& s, bool* value = nullptr);

}  // namespace strata
