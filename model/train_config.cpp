#include "model/train_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace strata {

size_t parse_bytes(const std::string& s, const std::string& where) {
  size_t i = 0;
  double v = 0;
  try {
    v = std::stod(s, &i);
  } catch (...) {
    STRATA_THROW(ConfigError, fmt::format("{}: '{}' is not a size (expected e.g. 20GiB, 512MiB, 1e9)", where, s), where,
                 s);
  }
  std::string unit = s.substr(i);
  unit.erase(0, unit.find_first_not_of(' '));
  double mul = 1;
  if (unit.empty() || unit == "B")
    mul = 1;
  else if (unit == "KiB" || unit == "K")
    mul = 1024.0;
  else if (unit == "MiB" || unit == "M")
    mul = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G")
    mul = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T")
    mul = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB")
    mul = 1e3;
  else if (unit == "MB")
    mul = 1e6;
  else if (unit == "GB")
    mul = 1e9;
  else if (unit == "TB")
    mul = 1e12;
  else
    STRATA_THROW(ConfigError,
                 fmt::format("{}: unknown size unit '{}' in '{}' (expected B, KiB, MiB, GiB, TiB, KB, "
                             "MB, GB or TB)",
                             where, unit, s),
                 where, s);
  if (!(v >= 0) || !std::isfinite(v))
    STRATA_THROW(ConfigError, fmt::format("{}: size '{}' must be non-negative", where, s), where, s);
  // Converting a double at or above 2^64 to size_t is undefined behaviour.
  if (v * mul >= 18446744073709551616.0)
    STRATA_THROW(ConfigError, fmt::format("{}: size '{}' is too large", where, s), where, s);
  return size_t(v * mul);
}

namespace {

template <class T>
T get(const YAML::Node& n, const std::string& path, const std::string& key, const char* expected) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    STRATA_THROW(ConfigError, fmt::format("{}: key '{}' has a bad value (expected {})", path, key, expected), path,
                 key);
  }
}

// Runs a value parser that throws ConfigError naming a free-form `where` (parse_bytes,
// parse_decision) and re-raises it with this file and key as its fields.
template <class F>
auto with_key(const std::string& path, const std::string& key, F&& f) {
  try {
    return f();
  } catch (const ConfigError& e) {
    throw ConfigError(e.what(), path, key);
  }
}

void apply_checkpointing(TrainConfig& c, const YAML::Node& v, const std::string& path) {
  if (v.IsScalar()) {
    if (get<bool>(v, path, "gradient_checkpointing", "true, false or {every: N}"))
      c.plan = Plan::gradient_checkpointing(1);
    return;
  }
  if (v.IsMap() && v["every"]) {
    int every = get<int>(v["every"], path, "gradient_checkpointing.every", "a positive integer");
    if (every < 1)
      STRATA_THROW(ConfigError, fmt::format("{}: gradient_checkpointing.every must be >= 1", path), path,
                   "gradient_checkpointing.every");
    c.plan = Plan::gradient_checkpointing(every);
    return;
  }
  STRATA_THROW(ConfigError, fmt::format("{}: gradient_checkpointing expects true, false or {{every: N}}", path), path,
               "gradient_checkpointing");
}

}  // namespace

void apply_yaml_text(TrainConfig& c, const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    STRATA_THROW(ConfigError, fmt::format("{}: not valid YAML: {}", path, e.what()), path, "");
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) STRATA_THROW(ConfigError, fmt::format("{}: expected a mapping of keys", path), path, "");
  Plan explicit_plan;
  bool has_explicit = false;
  for (auto it : root) {
    const std::string key = it.first.as<std::string>();
    const YAML::Node& v = it.second;
    auto S = [&] { return get<std::string>(v, path, key, "a string"); };
    auto Int = [&] { return get<int>(v, path, key, "an integer"); };
    auto Flt = [&] { return get<float>(v, path, key, "a number"); };
    auto Bool = [&] { return get<bool>(v, path, key, "true or false"); };
    if (key == "base_model" || key == "model")
      c.model_dir = S();
    else if (key == "data" || key == "dataset")
      c.data_path = S();
    else if (key == "backend")
      c.backend = S();
    else if (key == "sequence_len" || key == "seq")
      c.seq = Int();
    else if (key == "micro_batch_size" || key == "batch")
      c.batch = Int();
    else if (key == "max_steps" || key == "steps")
      c.steps = Int();
    else if (key == "learning_rate" || key == "lr")
      c.lr = Flt();
    else if (key == "weight_decay")
      c.weight_decay = Flt();
    else if (key == "adam_beta1")
      c.beta1 = Flt();
    else if (key == "adam_beta2")
      c.beta2 = Flt();
    else if (key == "adam_epsilon")
      c.adam_eps = Flt();
    else if (key == "max_grad_norm")
      c.max_grad_norm = Flt();
    else if (key == "warmup_steps")
      c.warmup_steps = Int();
    else if (key == "seed")
      c.seed = get<uint64_t>(v, path, key, "a non-negative integer");
    else if (key == "output_dir")
      c.output_dir = S();
    else if (key == "loss_chunk_tokens")
      c.loss_chunk_tokens = Int();
    else if (key == "freeze_base")
      c.freeze_base = Bool();
    else if (key == "device_memory" || key == "arena_bytes")
      c.device_budget_bytes = with_key(path, key, [&] { return parse_bytes(S(), path + ": " + key); });
    else if (key == "adapter") {
      if (S() != "lora")
        STRATA_THROW(ConfigError, fmt::format("{}: adapter '{}' is not supported (expected lora)", path, S()), path,
                     key);
      if (c.lora.rank == 0) c.lora.rank = 8;
    } else if (key == "lora_r")
      c.lora.rank = Int();
    else if (key == "lora_alpha")
      c.lora.alpha = Flt();
    else if (key == "lora_target_modules")
      c.lora.target_modules = get<std::vector<std::string>>(v, path, key, "a list of module names");
    else if (key == "gradient_checkpointing")
      apply_checkpointing(c, v, path);
    else if (key == "selective_recompute") {
      if (Bool()) c.plan = Plan::selective_recompute();
    } else if (key == "activation_offloading") {
      const std::string mode = S();
      if (mode == "true")
        c.plan = Plan::activation_offloading(Decision::host);
      else if (mode == "legacy")
        c.plan = Plan::activation_offloading(Decision::host, true);
      else if (mode == "disk")
        c.plan = Plan::activation_offloading(Decision::disk);
      else if (mode == "hidden_states")
        c.plan = Plan::hidden_states();
      else if (mode != "false")
        STRATA_THROW(ConfigError,
                     fmt::format("{}: activation_offloading '{}' is unknown (expected true, legacy, disk, "
                                 "hidden_states or false)",
                                 path, mode),
                     path, key);
    } else if (key == "offload_dir") {
      c.offload_dir = S();
    } else if (key == "layer_offloading") {
      c.layer_offloading = Bool();
    } else if (key == "memory_budget") {
      c.memory_budget_bytes = with_key(path, key, [&] { return parse_bytes(S(), path + ": " + key); });
    } else if (key == "host_memory_budget") {
      c.host_budget_bytes = with_key(path, key, [&] { return parse_bytes(S(), path + ": " + key); });
    } else if (key == "disk_memory_budget") {
      c.disk_budget_bytes = with_key(path, key, [&] { return parse_bytes(S(), path + ": " + key); });
    } else if (key == "plan") {
      if (!v.IsMap())
        STRATA_THROW(ConfigError, fmt::format("{}: plan expects a mapping class -> decision", path), path, key);
      for (auto r : v) {
        std::string pat = r.first.as<std::string>();
        const std::string field = "plan." + pat;
        const std::string d = get<std::string>(r.second, path, field, "a decision");
        explicit_plan.add(pat, with_key(path, field, [&] { return parse_decision(d, path + ": " + field); }));
      }
      has_explicit = true;
    } else {
      STRATA_THROW(ConfigError, fmt::format("{}: unknown key '{}'", path, key), path, key);
    }
  }
  if (has_explicit) {
    // An explicit table goes before the preset's rules: first match wins.
    c.plan.overrides = explicit_plan.rules;
    c.plan.preset = c.plan.preset == "keep-everything" ? "explicit" : c.plan.preset + " + explicit";
  }
}

void apply_yaml(TrainConfig& c, const std::string& path) {
  std::ifstream f(path);
  if (!f) STRATA_THROW(IoError, fmt::format("{}: cannot open the config file", path), path);
  std::stringstream ss;
  ss << f.rdbuf();
  apply_yaml_text(c, ss.str(), path);
}

}  // namespace strata
