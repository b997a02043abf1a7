// The run's settings, each declared once (docs/USER_GUIDE.md's option table is generated from it):
// YAML key and aliases, flag, type and range, default, help, and how it reads and writes
// TrainConfig. The YAML reader, the tools' flags and usage, --write-config, the guide's table and
// the public SessionConfig's set/get all walk this one table (settings_table.cpp).
#pragma once
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/run/train_config.h"

namespace strata {

enum class SettingType { text, boolean, integer, number, bytes, choice, structured };
const char* setting_type_name(SettingType t);

// The tools whose command line takes a setting's flag.
enum class Tool : unsigned { train = 1, plan = 2, bench = 4 };
const char* tool_name(Tool t);  // "strata-train", ...

// A value range: integers, numbers and byte sizes are checked against it as they are read.
struct Range {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  std::string text() const;  // "[1, 2147483647]", "(0, inf)", "[0, 1)"
  bool contains(double v) const;
};

class SettingValue;    // the value being set: a YAML node or a flag's text (settings_value.h)
class SettingsReader;  // what one source (a file, the command line) carries from key to key

struct Setting {
  std::string_view key;                   // the YAML key (axolotl's name where it has one)
  std::vector<std::string_view> aliases;  // other YAML spellings accepted on reading
  std::string_view flag;                  // the command-line flag without "--" ("" = none)
  std::string_view metavar;               // the flag's value in usage texts ("" for a switch)
  SettingType type = SettingType::text;
  Range range;               // integer, number, bytes
  std::string_view choices;  // choice: "constant, linear, cosine"
  std::string_view def;      // the default as the docs show it
  std::string_view help;     // one line
  void (*set)(TrainConfig&, const SettingValue&, SettingsReader&) = nullptr;
  std::string (*get)(const TrainConfig&) = nullptr;  // YAML text of the value; "" = not set
  unsigned tools = 0;                                // Tool bits whose flags include this one
  bool written = true;                               // false: an older spelling another key writes
  bool takes(Tool t) const { return !flag.empty() && (tools & unsigned(t)); }
};

// Every setting, in the order the docs and --write-config list them.
const std::vector<Setting>& settings();
// The setting whose key or alias is `key`, or null.
const Setting* find_setting(std::string_view key);
// "did you mean `learning_rate`?" for the nearest key or alias within a small edit distance, else "".
std::string suggest_setting(std::string_view key);

// Sets each (key, YAML text) in order, as one YAML file named `source` with those keys would.
void apply_settings(TrainConfig& c, const std::vector<std::pair<std::string, std::string>>& values,
                    const std::string& source);
// Sets `key` (a key or alias) from its YAML text ("4", "{every: 2}") as a one-key YAML file named
// `source` would: ConfigError naming the key, the rule and the value; ConfigError with a
// suggestion for an unknown key.
void apply_setting(TrainConfig& c, const std::string& key, const std::string& value, const std::string& source);
// The YAML text of `key`'s value in `c` ("" = not set); ConfigError for an unknown key.
std::string get_setting(const TrainConfig& c, const std::string& key);
// Whether every setting of `a` and `b` has the same value (their getters agree).
bool same_settings(const TrainConfig& a, const TrainConfig& b);

// The command line: the flags `tool` takes from the table, valued and switches.
std::vector<std::string> setting_flags(Tool tool, bool switches);
// Applies the given flags (name without "--", value; a switch's value "1" or "true"/"false") of
// `tool` on top of `c`, each checked by its row's rules; errors name the flag.
void apply_flags(TrainConfig& c, const std::vector<std::pair<std::string, std::string>>& flags, Tool tool);
// A tool's own integer flag (strata-plan's and strata-bench's --seq, --batch, --gpus, ...) checked as strata-train
// checks its flags: a flag that is also a setting's (--seq: sequence_len, --batch: micro_batch_size) by that
// setting's range, any other by [lo, hi]; ConfigError "--seq must be an integer >= 1 (at most 16777216), got ..."
// naming the flag. `def` when absent.
int tool_flag_int(const std::optional<long long>& v, const std::string& flag, int def, int lo = 1,
                  int hi = std::numeric_limits<int>::max());
// ConfigError, naming `source`, when a micro-batch of `batch` rows of `seq` tokens is more than strata runs
// (kMaxForecastTokens): each may be in range while their product, what is allocated, is not.
void check_micro_batch_tokens(int batch, int seq, const std::string& source);
// The usage lines of `tool`'s setting flags: "  --seq N  tokens per row (sequence_len; 128)".
std::string settings_usage(Tool tool);

// The YAML of every setting of `c` whose value differs from TrainConfig{}'s, in table order;
// apply_yaml_text of it on a TrainConfig{} gives `c`'s settings back.
std::string write_config(const TrainConfig& c, const std::string& header = "");
// The user guide's option table (markdown), between its settings markers.
std::string settings_markdown();

}  // namespace strata
