// The settings table's readers: a value checked by its row's type and range, the YAML walk, the
// command line, and one key at a time (SessionConfig::set).
#include "model/run/settings.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_set>
#include <vector>

#include "io/regular_file.h"
#include "model/plan/forecast.h"
#include "model/run/settings_value.h"

namespace strata {

namespace {

// yaml-cpp's parser refuses nesting past this depth (its DepthGuard) with YAML::DeepRecursion.
constexpr int kMaxYamlDepth = 2000;

// Loads YAML text; a parse error or nesting past kMaxYamlDepth is a ConfigError naming `path` and the line.
YAML::Node load_yaml(const std::string& text, const std::string& path, const std::string& key) {
  try {
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    throw ConfigError(fmt::format("{}:{}: YAML nested deeper than {} levels (strata reads at most {})", path,
                                  e.mark.line + 1, kMaxYamlDepth, kMaxYamlDepth),
                      path, key);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}:{}: not valid YAML: {}", path, e.mark.line + 1, e.msg), path, key);
  }
}

// A mapping anywhere under `root` that repeats a key (`plan: {L*.mlp.act: keep, L*.mlp.act: host}`): yaml-cpp
// keeps both and a reader would silently take one. ConfigError naming the file, the key and both lines. The
// walk keeps its own stack (the nesting is yaml-cpp's up to kMaxYamlDepth) and visits each collection once, by
// where it starts: an alias is the node it names, and aliases of aliases (`&b [*a, *a, ...]`, "billion laughs")
// would otherwise expand exponentially. 2^22 values at most, whatever the document.
void refuse_duplicate_keys(const YAML::Node& root, const std::string& path, const std::string& field) {
  constexpr size_t kMaxValues = size_t(1) << 22;
  std::vector<YAML::Node> todo{root};
  std::unordered_set<int> seen;  // Mark().pos of the collections walked
  for (size_t visited = 0; !todo.empty(); ++visited) {
    if (visited > kMaxValues)
      throw ConfigError(fmt::format("{}: {}: the value expands to more than {} YAML values (aliases of aliases?)", path,
                                    field, kMaxValues),
                        path, field);
    const YAML::Node n = todo.back();
    todo.pop_back();
    if ((n.IsSequence() || n.IsMap()) && !seen.insert(n.Mark().pos).second) continue;
    if (n.IsSequence()) {
      for (const YAML::Node& e : n) todo.push_back(e);
    } else if (n.IsMap()) {
      std::map<std::string, int> lines;
      for (auto kv : n) {
        if (kv.first.IsScalar()) {
          const int line = kv.first.Mark().line + 1;
          auto [it, fresh] = lines.try_emplace(kv.first.Scalar(), line);
          if (!fresh)
            throw ConfigError(fmt::format("{}:{}: {}: key '{}' is given twice (lines {} and {}); keep one", path, line,
                                          field, kv.first.Scalar(), it->second, line),
                              path, field);
        }
        todo.push_back(kv.second);
      }
    }
  }
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string fmt_bound(double v) {
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v >= 18446744073709551615.0) return "2^64-1";
  if (v == std::floor(v) && std::fabs(v) < 1e18) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{}", v);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const char* setting_type_name(SettingType t) {
  switch (t) {
    case SettingType::text:
      return "string";
    case SettingType::boolean:
      return "bool";
    case SettingType::integer:
      return "integer";
    case SettingType::number:
      return "number";
    case SettingType::bytes:
      return "bytes";
    case SettingType::choice:
      return "choice";
    case SettingType::structured:
      return "mapping";
  }
  return "?";
}

const char* tool_name(Tool t) {
  return t == Tool::train ? "strata-train" : t == Tool::plan ? "strata-plan" : "strata-bench";
}

std::string Range::text() const {
  return fmt::format("{}{}, {}{}", lo_open ? "(" : "[", fmt_bound(lo), fmt_bound(hi), hi_open ? ")" : "]");
}

bool Range::contains(double v) const {
  return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

bool yaml11_bool(const std::string& s, bool* value) {
  static const char* yes[] = {"true", "yes", "on", "y"};
  static const char* no[] = {"false", "no", "off", "n"};
  // YAML 1.1 spells each word lower case, Capitalised or UPPER case.
  auto spelled = [&](const char* w) {
    std::string cap = w, up = w;
    cap[0] = char(std::toupper(static_cast<unsigned char>(cap[0])));
    for (char& ch : up) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    return s == w || s == cap || s == up;
  };
  for (const char* w : yes)
    if (spelled(w)) return value ? (*value = true, true) : true;
  for (const char* w : no)
    if (spelled(w)) return value ? (*value = false, true) : true;
  return false;
}

std::string yaml_key_of(const YAML::Node& k, const std::string& path, const std::string& parent) {
  if (k.IsScalar()) return k.Scalar();
  // Shown as written when small: an alias of aliases would expand without bound in the emitter.
  size_t values = 0;
  for (std::vector<YAML::Node> todo{k}; !todo.empty() && values <= 64; ++values) {
    const YAML::Node n = todo.back();
    todo.pop_back();
    if (n.IsSequence())
      for (const YAML::Node& e : n) todo.push_back(e);
    else if (n.IsMap())
      for (auto kv : n) todo.push_back(kv.first), todo.push_back(kv.second);
  }
  std::string shown = k.IsSequence() ? "[...]" : k.IsMap() ? "{...}" : "?";
  if (values <= 64) {
    YAML::Emitter e;
    e << YAML::Flow << k;
    if (e.good()) shown = e.c_str();
  }
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  const char* kind = k.IsSequence() ? "a sequence" : k.IsMap() ? "a mapping" : "null";
  const std::string in = parent.empty() ? "" : fmt::format(" in '{}'", parent);
  throw ConfigError(
      fmt::format("{}:{}: the key {}{} is {}; expected a plain string key", path, k.Mark().line + 1, shown, in, kind),
      path, parent.empty() ? shown : parent + "." + shown);
}

// ---- SettingValue ------------------------------------------------------------------------------

void SettingValue::fail(const std::string& what) const {
  throw ConfigError(fmt::format("{} {}", origin_.where, what), origin_.file, origin_.field);
}

void SettingValue::fail_in(const std::string& field, const std::string& what) const {
  throw ConfigError(fmt::format("{}: {} {}", at(), field, what), origin_.file, field);
}

SettingValue SettingValue::child(const YAML::Node& n, const std::string& field) const {
  const int line = n.Mark().line >= 0 && src_ == ValueSource::yaml ? n.Mark().line + 1 : line_;
  const std::string file_at = line > 0 ? fmt::format("{}:{}", origin_.file, line) : origin_.file;
  Origin o{src_ == ValueSource::flag ? origin_.where : fmt::format("{}: {}", file_at, field), origin_.file, field};
  SettingValue v(row_, n, o, src_);
  v.set_line(line);
  return v;
}

std::string SettingValue::scalar(const char* expected) const {
  if (node_.IsScalar()) return node_.Scalar();
  if (node_.IsNull() && src_ != ValueSource::yaml) return "";
  fail(fmt::format("expects {}, got {}", expected,
                   node_.IsNull()       ? "no value"
                   : node_.IsSequence() ? "a list"
                                        : "a mapping"));
}

std::string SettingValue::text() const {
  const std::string s = scalar("a string");
  // A plain `yes` in YAML 1.1 is a boolean: never read it as the text "yes" (quote it for that).
  if (src_ == ValueSource::yaml && node_.Tag() == "?" && yaml11_bool(s))
    fail(fmt::format("is the YAML boolean `{}`, not text; quote it (\"{}\") if you mean the word", s, s));
  if (src_ == ValueSource::yaml && node_.Tag() == "?" && (s == "~" || lower(s) == "null"))
    fail("has no value (null); leave the key out for the default");
  return s;
}

bool SettingValue::boolean() const {
  const std::string s = scalar("true or false");
  bool b = false;
  if (yaml11_bool(s, &b)) return b;
  if (src_ != ValueSource::yaml && (s == "1" || s == "0")) return s == "1";
  fail(fmt::format("expects true or false, got '{}'", s));
}

long long SettingValue::integer_in(const Range& r) const {
  const std::string s = scalar("an integer");
  long long v = 0;
  const char* b = s.data() + (s.starts_with('+') ? 1 : 0);
  auto [end, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (s.empty() || end != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    fail(fmt::format("expects an integer, got '{}'", s));
  if (ec == std::errc::result_out_of_range || !r.contains(double(v))) {
    if (!r.lo_open && !r.hi_open && r.lo >= 0 && r.hi > 1024)  // a count: its floor first, the cap after
      fail(fmt::format("must be an integer >= {} (at most {}), got {}", fmt_bound(r.lo), fmt_bound(r.hi), s));
    fail(fmt::format("must be an integer in {}, got {}", r.text(), s));
  }
  return v;
}

uint64_t SettingValue::uint64() const {
  const std::string s = scalar("an integer");
  unsigned long long v = 0;
  const char* b = s.data() + (s.starts_with('+') ? 1 : 0);
  auto [end, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (s.empty() || end != s.data() + s.size() || ec != std::errc())
    fail(fmt::format("must be a non-negative integer of at most 64 bits (18446744073709551615), got {}", s));
  return v;
}

float SettingValue::number() const {
  const std::string s = scalar("a number");
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(s, &used);
    if (used != s.size()) throw std::invalid_argument(s);
  } catch (const std::out_of_range&) {
    v = std::numeric_limits<double>::infinity();
  } catch (const std::exception&) {
    // YAML spells the infinities and NaN .inf and .nan: refused below as any non-finite value is.
    const std::string l = lower(s);
    if (l == ".inf" || l == "+.inf" || l == "-.inf" || l == ".nan")
      v = l == ".nan" ? std::nan("") : l[0] == '-' ? -HUGE_VAL : HUGE_VAL;
    else
      fail(fmt::format("expects a number, got '{}'", s));
  }
  const Range& r = row_.range;
  const bool fits_float = std::fabs(v) <= double(std::numeric_limits<float>::max()) && !(v != 0 && float(v) == 0.0f);
  if (!r.contains(v) || !fits_float) {
    if (r.lo == 0 && r.lo_open && std::isinf(r.hi)) fail(fmt::format("must be a positive finite number, got {}", s));
    if (r.lo == 0 && !r.lo_open && std::isinf(r.hi)) fail(fmt::format("must be a finite number >= 0, got {}", s));
    if (r.lo == 0 && r.lo_open && !r.hi_open)
      fail(fmt::format("must be a positive finite number at most {}, got {}", fmt_bound(r.hi), s));
    if (r.lo == 0 && !r.lo_open && !r.hi_open && r.hi > 1)
      fail(fmt::format("must be a finite number >= 0 and at most {}, got {}", fmt_bound(r.hi), s));
    fail(fmt::format("must be a number in {}, got {}", r.text(), s));
  }
  return float(v);
}

size_t SettingValue::bytes() const {
  const std::string s = text();
  size_t v = 0;
  try {
    v = parse_bytes(s, origin_.where);
  } catch (const ConfigError& e) {
    throw ConfigError(e.what(), origin_.file, origin_.field);
  }
  if (v == 0 && row_.range.lo > 0)
    fail(fmt::format("must be above 0, got {} (leave the key out for the default: {})", s, row_.def));
  if (!row_.range.contains(double(v))) fail(fmt::format("must be a size in {} bytes, got {}", row_.range.text(), s));
  return v;
}

std::string SettingValue::choice() const {
  const std::string s = text();
  std::string_view rest = row_.choices;
  while (!rest.empty()) {
    const size_t comma = rest.find(", ");
    if (rest.substr(0, comma) == s) return s;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
  }
  fail(fmt::format("must be one of {}, got '{}'", row_.choices, s));
}

// ---- the reader ----------------------------------------------------------------------------------

void SettingsReader::finish(TrainConfig& c) {
  check_grad_reduce(c);  // a source that sets both keys contradicting each other
  check_micro_batch_tokens(c.batch, c.seq, source);
  // `adapter: lora` alone means rank 8; with lora_r (which must be >= 1) the rank given.
  if (adapter_lora && !rank_given && c.lora.rank == 0) c.lora.rank = 8;
  if (has_state) {
    state_plan.set_state_offloading(state_level, state_where.empty() ? source : state_where,
                                    state_tier);  // the tier key may follow the level's
    // An explicit state table goes before the state_offloading level's rules: first match wins.
    c.plan.state = explicit_state;
    c.plan.state.insert(c.plan.state.end(), state_plan.state.begin(), state_plan.state.end());
    c.plan.state_layer_rules = state_plan.state_layer_rules;
    c.plan.state_layers_level = state_plan.state_layers_level;
    c.plan.state_layers = state_plan.state_layers;
    c.plan.state_preset = explicit_state.empty()
                              ? state_plan.state_preset
                              : (state_plan.state.empty() ? "explicit" : state_plan.state_preset + " + explicit");
  }
  c.plan.layer_weights = weights;  // this source's decision, else the one before it
  c.plan.mlp_tiles = mlp_tiles;
  if (has_explicit) {
    // An explicit table goes before the preset's rules: first match wins.
    c.plan.overrides = explicit_plan.rules;
    c.plan.preset = c.plan.preset == "keep-everything" ? "explicit" : c.plan.preset + " + explicit";
  }
}

// ---- lookups -------------------------------------------------------------------------------------

const Setting* find_setting(std::string_view key) {
  for (const Setting& s : settings()) {
    if (s.key == key) return &s;
    for (std::string_view a : s.aliases)
      if (a == key) return &s;
  }
  return nullptr;
}

std::string suggest_setting(std::string_view key) {
  std::string_view best;
  size_t best_d = std::string_view::npos;
  auto consider = [&](std::string_view k) {
    const size_t d = edit_distance(key, k);
    if (d < best_d) best_d = d, best = k;
  };
  for (const Setting& s : settings()) {
    consider(s.key);
    for (std::string_view a : s.aliases) consider(a);
  }
  // Within a third of the word (at least 2 edits): `lerning_rate`, `sequence_length`, `lora_rank`.
  if (best.empty() || best_d > std::max<size_t>(2, key.size() / 3)) return "";
  return fmt::format("did you mean `{}`?", best);
}

// ---- a YAML file ---------------------------------------------------------------------------------

void apply_yaml_text(TrainConfig& c, const std::string& text, const std::string& path) {
  const YAML::Node root = load_yaml(text, path, "");
  c.config_file = path;
  if (root.IsNull()) return;
  if (!root.IsMap()) throw ConfigError(fmt::format("{}: expected a mapping of keys", path), path, "");
  SettingsReader reader(c, path);
  std::map<const Setting*, std::pair<std::string, int>> seen;  // each setting once, under any spelling
  std::string key;  // the key being read, for a YAML error that escapes the checks below
  int line = 0;
  try {
    for (auto it : root) {
      key = yaml_key_of(it.first, path, "");
      line = it.first.Mark().line + 1;
      const Setting* s = find_setting(key);
      if (!s) {
        const std::string hint = suggest_setting(key);
        throw ConfigError(
            fmt::format("{}:{}: unknown key '{}'{}", path, line, key, hint.empty() ? "" : " (" + hint + ")"), path,
            key);
      }
      auto [prev, fresh] = seen.try_emplace(s, key, line);
      if (!fresh)
        throw ConfigError(
            fmt::format("{}:{}: {} is given twice (line {}{}); keep one", path, line, key, prev->second.second,
                        prev->second.first == key ? "" : " as " + prev->second.first),
            path, key);
      refuse_duplicate_keys(it.second, path, key);  // inside the value (the keys above are checked by setting)
      SettingValue v(*s, it.second, Origin{fmt::format("{}:{}: {}", path, line, key), path, key}, ValueSource::yaml);
      v.set_line(line);
      s->set(c, v, reader);
    }
  } catch (const YAML::Exception& e) {
    // Every conversion is checked; this keeps any other yaml-cpp error a ConfigError too.
    throw ConfigError(fmt::format("{}:{}: {}: {}", path, line, key, e.msg), path, key);
  }
  reader.finish(c);
}

void apply_yaml(TrainConfig& c, const std::string& path) {
  // A directory, FIFO, device or socket is refused at once (a FIFO's open() would wait for a
  // writer); at most 16 MiB is read.
  apply_yaml_text(c, io::read_regular_file(path, "the config file", size_t(16) << 20), path);
}

// ---- one key, the command line -----------------------------------------------------------------

void apply_settings(TrainConfig& c, const std::vector<std::pair<std::string, std::string>>& values,
                    const std::string& source) {
  SettingsReader reader(c, source);
  for (const auto& [key, value] : values) {
    const Setting* s = find_setting(key);
    if (!s) {
      const std::string hint = suggest_setting(key);
      throw ConfigError(fmt::format("{}: unknown setting '{}'{}", source, key, hint.empty() ? "" : " (" + hint + ")"),
                        source, key);
    }
    try {
      // A structured value is YAML ("{every: 2}"); any other is the text as given, as a flag's is.
      const YAML::Node node = s->type == SettingType::structured ? load_yaml(value, source, key) : YAML::Node(value);
      refuse_duplicate_keys(node, source, key);
      s->set(c, SettingValue(*s, node, Origin{source + ": " + key, source, key}, ValueSource::api), reader);
    } catch (const YAML::Exception& e) {
      throw ConfigError(fmt::format("{}: {}: not valid YAML: {}", source, key, e.msg), source, key);
    }
  }
  reader.finish(c);
}

void apply_setting(TrainConfig& c, const std::string& key, const std::string& value, const std::string& source) {
  apply_settings(c, {{key, value}}, source);
}

std::string get_setting(const TrainConfig& c, const std::string& key) {
  const Setting* s = find_setting(key);
  if (!s) {
    const std::string hint = suggest_setting(key);
    throw ConfigError(fmt::format("unknown setting '{}'{}", key, hint.empty() ? "" : " (" + hint + ")"), "", key);
  }
  return s->get(c);
}

bool same_settings(const TrainConfig& a, const TrainConfig& b) {
  for (const Setting& s : settings())
    if (s.get(a) != s.get(b)) return false;
  return true;
}

std::vector<std::string> setting_flags(Tool tool, bool switches) {
  std::vector<std::string> out;
  for (const Setting& s : settings())
    if (s.takes(tool) && (s.metavar.empty() == switches)) out.emplace_back(s.flag);
  return out;
}

void check_micro_batch_tokens(int batch, int seq, const std::string& source) {
  // Each in range, but their product is what is allocated (the batch's ids alone are 8 bytes a token).
  if (int64_t(seq) * batch > kMaxForecastTokens)
    throw ConfigError(fmt::format("{}: micro_batch_size {} x sequence_len {} is {} tokens a micro-batch, more than "
                                  "strata runs (at most {})",
                                  source, batch, seq, int64_t(seq) * batch, kMaxForecastTokens),
                      source, "micro_batch_size");
}

int tool_flag_int(const std::optional<long long>& v, const std::string& flag, int def, int lo, int hi) {
  if (!v) return def;
  static const Setting own_flag{};  // a tool's own flag: no row, its range from lo and hi
  const Setting* row = &own_flag;
  Range range{double(lo), double(hi)};
  for (const Setting& s : settings())
    if (s.flag == flag && s.type == SettingType::integer) row = &s, range = s.range;
  const SettingValue value(*row, YAML::Node(std::to_string(*v)), Origin::flag(flag), ValueSource::flag);
  return int(value.integer_in(range));
}

void apply_flags(TrainConfig& c, const std::vector<std::pair<std::string, std::string>>& flags, Tool tool) {
  SettingsReader reader(c, "command line");
  for (const auto& [name, value] : flags) {
    const Setting* row = nullptr;
    for (const Setting& s : settings())
      if (s.takes(tool) && s.flag == name) row = &s;
    if (!row) continue;  // the tool's own flag
    YAML::Node node(row->metavar.empty() && value == "1" ? std::string("true") : value);
    SettingValue v(*row, node, Origin::flag(name), ValueSource::flag);
    try {
      row->set(c, v, reader);
    } catch (const YAML::Exception& e) {
      throw ConfigError(fmt::format("--{}: {}", name, e.msg), "command line", name);
    }
  }
  reader.finish(c);
}

}  // namespace strata
