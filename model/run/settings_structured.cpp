#include "model/run/settings_structured.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata {

std::string format_bytes_exact(size_t bytes) {
  static const std::pair<const char*, size_t> units[] = {
      {"TiB", size_t(1) << 40}, {"GiB", size_t(1) << 30}, {"MiB", size_t(1) << 20}, {"KiB", size_t(1) << 10}};
  for (const auto& [name, size] : units)
    if (bytes >= size && bytes % size == 0) return fmt::format("{}{}", bytes / size, name);
  return std::to_string(bytes);
}

std::string yaml_quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\')
      out += '\\', out += ch;
    else if (ch == '\n')
      out += "\\n";
    else if (ch == '\t')
      out += "\\t";
    else
      out += ch;
  }
  return out + "\"";
}

namespace {

std::string rules_yaml(const std::vector<std::pair<std::string, Decision>>& rules) {
  if (rules.empty()) return "";
  std::string out;
  for (const auto& [pattern, d] : rules)
    out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", yaml_quoted(pattern), decision_name(d));
  return "{" + out + "}";
}

void expect_map(const SettingValue& v, const char* what) {
  if (!v.node().IsMap()) v.fail(fmt::format("expects {}", what));
}

}  // namespace

StateParts state_parts(const Plan& p) {
  StateParts out;
  std::string label = p.state_preset;
  if (const size_t plus = label.find(" + explicit"); plus != std::string::npos) label = label.substr(0, plus);
  Decision tier = Decision::host;
  if (label.ends_with(" on disk")) label = label.substr(0, label.size() - 8), tier = Decision::disk;
  if (label == "optimizer" || label == "master" || label == "all") {
    Plan made;
    made.set_state_offloading(label, "state_offloading", tier);
    const size_t n = made.state.size();
    if (p.state.size() >= n && std::equal(made.state.begin(), made.state.end(), p.state.end() - long(n))) {
      out.level = label;
      out.tier = tier;
      out.explicit_rules.assign(p.state.begin(), p.state.end() - long(n));
      return out;
    }
  }
  out.explicit_rules = p.state;  // no level's rules at the end: the whole table is explicit
  return out;
}

// One of axolotl's chat_template keys into `o`; false for a key that is not one.
bool set_chat_key(ChatTemplateOptions& o, const std::string& key, const SettingValue& v, const std::string& at) {
  auto strings = [&](const YAML::Node& n, const std::string& where) {
    std::vector<std::string> out;
    if (n.IsScalar()) return std::vector<std::string>{n.as<std::string>()};
    if (!n.IsSequence()) v.fail_in(where, "must be a list of strings");
    for (const auto& x : n) {
      if (!x.IsScalar()) v.fail_in(where, "must be a list of strings");
      out.push_back(x.as<std::string>());
    }
    return out;
  };
  if (key == "chat_template") {
    o.chat_template = v.text();
  } else if (key == "field_messages") {
    o.field_messages = v.text();
  } else if (key == "message_property_mappings") {
    if (!v.node().IsMap()) v.fail_in(at, "must be a mapping {role: FIELD, content: FIELD}");
    for (auto kv : v.node()) {
      const std::string k = kv.first.as<std::string>();
      if (!kv.second.IsScalar()) v.fail_in(at + "." + k, "must be a field name");
      if (k == "role")
        o.role_key = kv.second.as<std::string>();
      else if (k == "content")
        o.content_key = kv.second.as<std::string>();
      else
        v.fail_in(at + "." + k, "is an unknown key (expected role, content)");
    }
  } else if (key == "roles") {
    if (!v.node().IsMap()) v.fail_in(at, "must be a mapping {ROLE: [NAMES IN THE DATASET]}");
    o.roles.clear();
    for (auto kv : v.node()) {
      const std::string k = kv.first.as<std::string>();
      o.roles.emplace_back(k, strings(kv.second, at + "." + k));
    }
  } else if (key == "roles_to_train") {
    o.roles_to_train = strings(v.node(), at);
  } else if (key == "train_on_eos") {
    o.train_on_eos = v.text();
    if (o.train_on_eos != "turn" && o.train_on_eos != "all" && o.train_on_eos != "last" && o.train_on_eos != "none")
      v.fail_in(at, fmt::format("is '{}' (expected turn, all, last or none)", o.train_on_eos));
  } else {
    return false;
  }
  return true;
}

void set_datasets(TrainConfig& c, const SettingValue& v, SettingsReader&) {
  if (!v.node().IsSequence() || v.node().size() == 0)
    v.fail("expects a non-empty list of {path: FILE, type: completion|alpaca|chat}");
  std::vector<DatasetSpec> out;
  for (size_t i = 0; i < v.node().size(); ++i) {
    const YAML::Node& e = v.node()[i];
    const std::string at = fmt::format("datasets[{}]", i);
    if (!e.IsMap()) v.fail_in(at, "must be a mapping {path: FILE, type: ...}");
    DatasetSpec d;
    d.type.clear();
    std::vector<std::string> chat_keys;
    for (auto kv : e) {
      const std::string dk = yaml_key_of(kv.first, v.origin().file, at);
      const SettingValue field = v.child(kv.second, at + "." + dk);
      if (dk == "path")
        d.path = field.text();
      else if (dk == "type")
        d.type = field.text();
      else if (dk == "field")
        d.field = field.text();
      else if (set_chat_key(d.chat, dk, field, at + "." + dk))
        chat_keys.push_back(dk);
      else
        v.fail_in(at + "." + dk,
                  "is an unknown key (expected path, type, field; for type chat_template: chat_template, "
                  "field_messages, message_property_mappings, roles, roles_to_train, train_on_eos)");
    }
    if (d.path.empty()) v.fail_in(at + ".path", "is missing: each dataset needs a path");
    if (d.type.empty()) d.type = "completion";
    if (d.type != "completion" && d.type != "alpaca" && d.type != "chat" && d.type != "chat_template")
      v.fail_in(at + ".type",
                fmt::format("'{}' is not supported (expected completion, alpaca, chat or chat_template)", d.type));
    if (!d.field.empty() && d.type != "completion") v.fail_in(at + ".field", "applies to type completion only");
    if (!chat_keys.empty() && d.type != "chat_template")
      v.fail_in(at + "." + chat_keys[0], "applies to type chat_template only");
    out.push_back(std::move(d));
  }
  c.datasets = std::move(out);
}

std::string get_datasets(const TrainConfig& c) {
  std::string out;
  for (const DatasetSpec& d : c.datasets) {
    std::string e = fmt::format("path: {}, type: {}", yaml_quoted(d.path), d.type);
    if (!d.field.empty()) e += ", field: " + yaml_quoted(d.field);
    const ChatTemplateOptions& o = d.chat;
    if (d.type == "chat_template" && !(o == ChatTemplateOptions{})) {
      e += fmt::format(", chat_template: {}, field_messages: {}", yaml_quoted(o.chat_template),
                       yaml_quoted(o.field_messages));
      e += fmt::format(", message_property_mappings: {{role: {}, content: {}}}", yaml_quoted(o.role_key),
                       yaml_quoted(o.content_key));
      std::string roles;
      for (const auto& [to, from] : o.roles) {
        std::vector<std::string> q;
        for (const auto& f : from) q.push_back(yaml_quoted(f));
        roles += fmt::format("{}{}: [{}]", roles.empty() ? "" : ", ", yaml_quoted(to), fmt::join(q, ", "));
      }
      if (!roles.empty()) e += ", roles: {" + roles + "}";
      std::vector<std::string> q;
      for (const auto& r : o.roles_to_train) q.push_back(yaml_quoted(r));
      e += fmt::format(", roles_to_train: [{}], train_on_eos: {}", fmt::join(q, ", "), o.train_on_eos);
    }
    out += (out.empty() ? "{" : ", {") + e + "}";
  }
  return out.empty() ? "" : "[" + out + "]";
}

void set_resume(TrainConfig& c, const SettingValue& v, SettingsReader&) {
  if (v.is_null() && v.source() == ValueSource::yaml) {
    c.resume_from_checkpoint.clear();
    return;
  }
  const std::string s = v.scalar("true, auto or a checkpoint directory");
  bool b = false;
  // true/yes/on: the newest checkpoint; false/no/off: none (never a directory called "yes").
  if (v.source() == ValueSource::yaml && v.node().Tag() == "?" && yaml11_bool(s, &b)) {
    c.resume_from_checkpoint = b ? "auto" : "";
    return;
  }
  c.resume_from_checkpoint = parse_resume(s);
}

void set_lora_rank(TrainConfig& c, const SettingValue& v, SettingsReader& r) {
  // --lora-rank 0 (or set("lora_r", "0")) turns a config's LoRA off; a YAML file leaves adapter out for that.
  if (v.source() != ValueSource::yaml && v.scalar("an integer") == "0") {
    c.lora.rank = 0;
    return;
  }
  c.lora.rank = int(v.integer());
  r.rank_given = true;
}

void set_lora_targets(TrainConfig& c, const SettingValue& v, SettingsReader&) {
  if (!v.node().IsSequence()) v.fail("expects a list of module names");
  std::vector<std::string> modules;
  for (size_t i = 0; i < v.node().size(); ++i)
    modules.push_back(v.child(v.node()[i], fmt::format("lora_target_modules[{}]", i)).text());
  check_lora_targets(modules, v.origin());
  c.lora.target_modules = std::move(modules);
}

std::string get_lora_targets(const TrainConfig& c) {
  std::string out;
  for (const std::string& m : c.lora.target_modules) out += (out.empty() ? "" : ", ") + m;
  return "[" + out + "]";
}

void set_plan_table(TrainConfig&, const SettingValue& v, SettingsReader& r) {
  expect_map(v, "a mapping class -> decision");
  for (auto kv : v.node()) {
    const std::string pattern = yaml_key_of(kv.first, v.origin().file, "plan");
    const SettingValue d = v.child(kv.second, "plan." + pattern);
    const std::string s = d.text();
    r.explicit_plan.add(pattern, relocated(d, [&] { return parse_decision(s, d.at() + ": plan." + pattern); }));
  }
  r.has_explicit = true;
}

std::string get_plan_table(const TrainConfig& c) {
  std::vector<std::pair<std::string, Decision>> table = c.plan.overrides;
  if (!preset_of(c.plan)) table.insert(table.end(), c.plan.rules.begin(), c.plan.rules.end());
  return rules_yaml(table);
}

void set_state_level(TrainConfig&, const SettingValue& v, SettingsReader& r) {
  r.state_level = v.text();
  r.state_where = v.at();
  relocated(v, [&] { r.state_plan.set_state_offloading(r.state_level, v.at()); });  // checks the level now
  r.has_state = true;
}

void set_state_tier(TrainConfig&, const SettingValue& v, SettingsReader& r) {
  const std::string s = v.text();
  r.state_tier = relocated(v, [&] { return parse_state_tier(s, v.at()); });
  r.has_state = true;
}

void set_state_layers(TrainConfig&, const SettingValue& v, SettingsReader& r) {
  if (v.node().IsScalar() && v.source() != ValueSource::yaml) {  // the flags' LEVEL:K
    const std::string spec = v.scalar("LEVEL:K");
    relocated(v, [&] { r.state_plan.parse_state_offloading_layers(spec, v.at()); });
    r.has_state = true;
    return;
  }
  expect_map(v, "a mapping {level: optimizer|master|all, layers: N}");
  std::string level;
  int layers = -1;
  for (auto kv : v.node()) {
    const std::string sub = yaml_key_of(kv.first, v.origin().file, "state_offloading_layers");
    const SettingValue f = v.child(kv.second, "state_offloading_layers." + sub);
    if (sub == "level")
      level = f.text();
    else if (sub == "layers")
      layers = int(f.integer_in(Range{0, 2147483647}));
    else
      v.fail_in("state_offloading_layers." + sub, "is an unknown key (expected level and layers)");
  }
  if (level.empty() || layers < 0) v.fail("needs both level and layers");
  relocated(v, [&] { r.state_plan.set_state_offloading_layers(level, layers, v.at()); });
  r.has_state = true;
}

std::string get_state_layers(const TrainConfig& c) {
  if (c.plan.state_layers <= 0) return "";
  return fmt::format("{{level: {}, layers: {}}}", c.plan.state_layers_level, c.plan.state_layers);
}

void set_state_table(TrainConfig&, const SettingValue& v, SettingsReader& r) {
  expect_map(v, "a mapping state class -> keep, host or disk");
  for (auto kv : v.node()) {
    const std::string pattern = yaml_key_of(kv.first, v.origin().file, "state_plan");
    const std::string field = "state_plan." + pattern;
    const SettingValue d = v.child(kv.second, field);
    const std::string s = d.text();
    const Decision dec = relocated(d, [&] { return parse_decision(s, d.at() + ": " + field); });
    if (dec != Decision::keep && dec != Decision::host && dec != Decision::disk)
      d.fail(fmt::format("state classes take keep (device), host or disk, got '{}'", s));
    if (dec == Decision::disk && pattern.ends_with(".grad"))
      d.fail("gradients have no disk tier (keep or host); adam.m, adam.v and w.master take disk");
    r.explicit_state.emplace_back(pattern, dec);
  }
  r.has_state = true;
}

std::string get_state_table(const TrainConfig& c) {
  return rules_yaml(state_parts(c.plan).explicit_rules);
}

}  // namespace strata
