#include "model/run/train_config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/arena.h"
#include "io/regular_file.h"

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

DatasetOptions dataset_options(const TrainConfig& c) {
  return DatasetOptions{c.datasets, c.seq, c.train_on_inputs, c.drop_excess, c.sample_packing};
}

float check_number(double v, NumberRule rule, const Origin& o) {
  const char* want = rule == NumberRule::positive       ? "a positive finite number"
                     : rule == NumberRule::non_negative ? "a finite number >= 0"
                                                        : "a number in [0, 1)";
  const bool ok = std::isfinite(v) && std::fabs(v) <= double(std::numeric_limits<float>::max()) &&
                  (rule == NumberRule::positive       ? v > 0
                   : rule == NumberRule::non_negative ? v >= 0
                                                      : v >= 0 && v < 1);
  // The float conversion would round a tiny positive value to 0.
  if (!ok || (v > 0 && float(v) == 0.0f))
    throw ConfigError(fmt::format("{} must be {}, got {}", o.where, want, v), o.file, o.field);
  return float(v);
}

int check_int(long long v, int lo, const Origin& o) {
  constexpr long long hi = std::numeric_limits<int>::max();
  if (v < lo || v > hi)
    throw ConfigError(fmt::format("{} must be an integer >= {} (at most {}), got {}", o.where, lo, hi, v), o.file,
                      o.field);
  return int(v);
}

int parse_zero_stage(long long v, const Origin& o) {
  if (v < 0 || v > 3)
    throw ConfigError(fmt::format("{} must be 0 (no sharding), 1 (optimizer state sharded), 2 (gradients too) or 3 "
                                  "(layer weights too), got {}",
                                  o.where, v),
                      o.file, o.field);
  return int(v);
}

void check_grad_reduce(const TrainConfig& c) {
  if (c.recipe.gradients != GradPrecision::bf16 || c.grad_reduce != DType::f32 || c.grad_reduce_origin.where.empty())
    return;
  throw ConfigError(fmt::format("{} is fp32, but gradients: bf16 keeps the gradients in bf16 and the ranks sum them in "
                                "bf16 as they are (there is no fp32 gradient to sum); drop grad_reduce_dtype "
                                "(--grad-reduce), or set gradients: fp32",
                                c.grad_reduce_origin.where),
                    c.grad_reduce_origin.file, c.grad_reduce_origin.field);
}

DType effective_grad_reduce(const TrainConfig& c) {
  return c.recipe.gradients == GradPrecision::bf16 ? DType::bf16 : c.grad_reduce;
}

DType parse_grad_reduce(const std::string& s, const Origin& o) {
  if (s == "fp32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  throw ConfigError(fmt::format("{} must be fp32 or bf16, got '{}'", o.where, s), o.file, o.field);
}

int check_pad_vocab(long long v, const Origin& o) {
  if (v < 1 || v > 65536)
    throw ConfigError(fmt::format("{} must be an integer from 1 (no padding) to 65536, got {}", o.where, v), o.file,
                      o.field);
  return int(v);
}

int parse_mlp_tiles(const std::string& s, const Origin& o) {
  if (s == "auto") return 0;
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || v < 1 || v > (1 << 20))
    throw ConfigError(
        fmt::format("{} must be auto or a whole number of tiles from 1 (untiled) to {}, got '{}'", o.where, 1 << 20, s),
        o.file, o.field);
  return int(v);
}

LrScheduler parse_lr_scheduler(const std::string& s, const Origin& o) {
  if (s == "constant") return LrScheduler::constant;
  if (s == "linear") return LrScheduler::linear;
  if (s == "cosine") return LrScheduler::cosine;
  throw ConfigError(fmt::format("{}: unknown scheduler '{}' (expected constant, linear or cosine)", o.where, s), o.file,
                    o.field);
}

std::string parse_resume(const std::string& s) {
  if (s == "true" || s == "True" || s == "auto") return "auto";
  if (s == "false" || s == "False") return "";
  return s;
}

void check_lora_targets(const std::vector<std::string>& modules, const Origin& o) {
  static const std::vector<std::string> known = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  const std::string list = "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj or down_proj";
  if (modules.empty())
    throw ConfigError(fmt::format("{} is empty: LoRA would train nothing (expected some of {})", o.where, list), o.file,
                      o.field);
  for (size_t i = 0; i < modules.size(); ++i) {
    if (std::find(known.begin(), known.end(), modules[i]) == known.end())
      throw ConfigError(fmt::format("{}: unknown module '{}' (expected {})", o.where, modules[i], list), o.file,
                        o.field);
    if (std::find(modules.begin(), modules.begin() + long(i), modules[i]) != modules.begin() + long(i))
      throw ConfigError(fmt::format("{}: module '{}' is listed twice", o.where, modules[i]), o.file, o.field);
  }
}

void check_save_dir(const std::string& dir, size_t bytes, const std::vector<std::string>& files) {
  auto fail = [&](const std::string& why) {
    throw IoError(fmt::format("{}: cannot save the trained model there: {} (checked before training, so no run "
                              "is lost; choose another --save / output_dir)",
                              dir, why),
                  dir);
  };
  if (dir.empty()) fail("the directory name is empty");
  // The nearest existing ancestor: the directory itself, or where create_directories starts.
  std::error_code ec;
  const std::filesystem::path full = std::filesystem::absolute(dir, ec);
  std::filesystem::path cur = ec ? std::filesystem::path(dir) : full;
  struct stat st {};
  while (::stat(cur.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) fail(fmt::format("{}: {}", cur.string(), std::strerror(errno)));
    if (!cur.has_relative_path()) fail("no part of the path exists");
    cur = cur.parent_path();
  }
  if (!S_ISDIR(st.st_mode))
    fail(cur == full ? std::string("it is not a directory")
                     : fmt::format("{} is not a directory, so it cannot be created", cur.string()));
  const std::string probe = (cur / fmt::format(".strata-save-probe.{}", ::getpid())).string();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) fail(fmt::format("cannot create a file in {}: {}", cur.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs vfs {};
  if (::statvfs(cur.c_str(), &vfs) == 0) {
    const double avail = double(vfs.f_bavail) * double(vfs.f_frsize);
    if (avail < double(bytes))
      fail(fmt::format("the checkpoint needs about {} and {} has {} free", format_bytes(bytes), cur.string(),
                       format_bytes(size_t(avail))));
  }
  if (cur != full) return;  // the directory will be created: nothing in it yet
  for (const std::string& name : files) {
    struct stat fs {};
    const std::string p = (cur / name).string();
    if (::lstat(p.c_str(), &fs) == 0 && !S_ISREG(fs.st_mode))
      fail(fmt::format("{} is there and is not a regular file, so it cannot be replaced", p));
  }
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

// A mapping key as a string; a key that is a sequence, a mapping or null (`[a, b]: 1`,
// `? {a: 1}`, `~: 1`) is a ConfigError naming the file, the line and the key as written.
std::string key_of(const YAML::Node& k, const std::string& path, const std::string& parent) {
  if (k.IsScalar()) return k.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << k;
  std::string shown = e.good() ? e.c_str() : "?";
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  const char* kind = k.IsSequence() ? "a sequence" : k.IsMap() ? "a mapping" : "null";
  const std::string in = parent.empty() ? "" : fmt::format(" in '{}'", parent);
  STRATA_THROW(ConfigError,
               fmt::format("{}: line {}: the key {}{} is {}; expected a plain string key", path, k.Mark().line + 1,
                           shown, in, kind),
               path, parent.empty() ? shown : parent + "." + shown);
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

// The preset a YAML key and value select, from the one preset table (engine/plan.h), or null.
const PresetInfo* yaml_preset(std::string_view key, std::string_view value) {
  for (const PresetInfo& p : plan_presets())
    if (p.yaml_key == key && p.yaml_value == value) return &p;
  return nullptr;
}

void apply_checkpointing(TrainConfig& c, const YAML::Node& v, const std::string& path) {
  const std::string key = "gradient_checkpointing";
  if (v.IsScalar()) {
    if (get<bool>(v, path, key, "true, false or {every: N}")) c.plan = yaml_preset(key, "true")->make(1);
    return;
  }
  if (v.IsMap() && v.size() == 1 && key_of(v.begin()->first, path, key) == "every") {
    const std::string field = key + ".every";
    int every =
        check_int(get<long long>(v.begin()->second, path, field, "a positive integer"), 1, Origin::yaml(path, field));
    c.plan = yaml_preset(key, "true")->make(every);
    return;
  }
  STRATA_THROW(ConfigError, fmt::format("{}: gradient_checkpointing expects true, false or {{every: N}}", path), path,
               key);
}

// datasets: a list of {path, type, field}; each entry's keys checked as the top-level ones are.
std::vector<DatasetSpec> parse_datasets(const YAML::Node& v, const std::string& path) {
  if (!v.IsSequence() || v.size() == 0)
    STRATA_THROW(
        ConfigError,
        fmt::format("{}: datasets expects a non-empty list of {{path: FILE, type: completion|alpaca|chat}}", path),
        path, "datasets");
  std::vector<DatasetSpec> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const YAML::Node& e = v[i];
    const std::string at = fmt::format("datasets[{}]", i);
    if (!e.IsMap())
      STRATA_THROW(ConfigError, fmt::format("{}: {} must be a mapping {{path: FILE, type: ...}}", path, at), path, at);
    DatasetSpec d;
    d.type.clear();
    for (auto kv : e) {
      const std::string dk = key_of(kv.first, path, at);
      const std::string field = at + "." + dk;
      const std::string val = get<std::string>(kv.second, path, field, "a string");
      if (dk == "path")
        d.path = val;
      else if (dk == "type")
        d.type = val;
      else if (dk == "field")
        d.field = val;
      else
        STRATA_THROW(ConfigError, fmt::format("{}: {}: unknown key '{}' (expected path, type, field)", path, at, dk),
                     path, field);
    }
    if (d.path.empty()) STRATA_THROW(ConfigError, fmt::format("{}: {} has no path", path, at), path, at + ".path");
    if (d.type.empty()) d.type = "completion";
    if (d.type != "completion" && d.type != "alpaca" && d.type != "chat")
      STRATA_THROW(
          ConfigError,
          fmt::format("{}: {}.type '{}' is not supported (expected completion, alpaca or chat)", path, at, d.type),
          path, at + ".type");
    if (!d.field.empty() && d.type != "completion")
      STRATA_THROW(ConfigError, fmt::format("{}: {}.field applies to type completion only", path, at), path,
                   at + ".field");
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

void apply_yaml_text(TrainConfig& c, const std::string& text, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    STRATA_THROW(ConfigError, fmt::format("{}: not valid YAML: {}", path, e.what()), path, "");
  }
  c.config_file = path;
  if (root.IsNull()) return;
  if (!root.IsMap()) STRATA_THROW(ConfigError, fmt::format("{}: expected a mapping of keys", path), path, "");
  // The state table goes in after the presets (YAML keys come in any order).
  Plan explicit_plan, state_plan;
  std::string state_level = "none";
  Decision state_tier = Decision::host;  // state_offloading_tier: where the level's classes go
  std::vector<std::pair<std::string, Decision>> explicit_state;
  bool has_state = false;
  bool has_explicit = false, adapter_lora = false, rank_given = false;
  // The layer weights' decision (layer_weights, or its older spelling layer_offloading) and the key
  // that set it; a preset key later in the file replaces c.plan, so it goes in at the end.
  Decision weights = c.plan.layer_weights;
  std::string weights_key;
  std::string key;  // the key being read, for a YAML error that escapes the checks below
  try {
    for (auto it : root) {
      key = key_of(it.first, path, "");
      const YAML::Node& v = it.second;
      const Origin here = Origin::yaml(path, key);
      auto S = [&] { return get<std::string>(v, path, key, "a string"); };
      auto Int = [&](int lo) { return check_int(get<long long>(v, path, key, "an integer"), lo, here); };
      auto Num = [&](NumberRule r) { return check_number(get<double>(v, path, key, "a number"), r, here); };
      auto Bool = [&] { return get<bool>(v, path, key, "true or false"); };
      auto Bytes = [&] { return with_key(path, key, [&] { return parse_bytes(S(), path + ": " + key); }); };
      if (key == "base_model" || key == "model")
        c.model_dir = S();
      else if (key == "data" || key == "dataset")
        c.data_path = S();
      else if (key == "datasets")
        c.datasets = parse_datasets(v, path);
      else if (key == "tokenizer")
        c.tokenizer_dir = S();
      else if (key == "train_on_inputs")
        c.train_on_inputs = Bool();
      else if (key == "excess_length_strategy") {
        const std::string s = S();
        if (s != "truncate" && s != "drop")
          STRATA_THROW(ConfigError,
                       fmt::format("{}: excess_length_strategy '{}' is unknown (expected truncate or drop)", path, s),
                       path, key);
        c.drop_excess = s == "drop";
      } else if (key == "sample_packing")
        c.sample_packing = Bool();
      else if (key == "backend")
        c.backend = S();
      else if (key == "sequence_len" || key == "seq")
        c.seq = Int(1);
      else if (key == "micro_batch_size" || key == "batch")
        c.batch = Int(1);
      else if (key == "max_steps" || key == "steps") {
        c.steps = Int(0);
        c.steps_given = true;
      } else if (key == "num_epochs")
        c.num_epochs = Num(NumberRule::positive);
      else if (key == "gradient_accumulation_steps")
        c.grad_accum = Int(1);
      else if (key == "lr_scheduler")
        c.lr_scheduler = parse_lr_scheduler(S(), here);
      else if (key == "warmup_ratio")
        c.warmup_ratio = Num(NumberRule::unit_open);
      else if (key == "val_set_size")
        c.val_set_size = Num(NumberRule::non_negative);
      else if (key == "eval_steps")
        c.eval_steps = Int(0);
      else if (key == "logging_steps")
        c.logging_steps = Int(1);
      else if (key == "metrics_file")
        c.metrics_file = S();
      else if (key == "save_steps")
        c.save_steps = Int(0);
      else if (key == "save_total_limit")
        c.save_total_limit = Int(0);
      else if (key == "resume_from_checkpoint")
        c.resume_from_checkpoint = v.IsNull() ? std::string() : parse_resume(S());
      else if (key == "learning_rate" || key == "lr")
        c.lr = Num(NumberRule::positive);
      else if (key == "weight_decay")
        c.weight_decay = Num(NumberRule::non_negative);
      else if (key == "adam_beta1")
        c.beta1 = Num(NumberRule::unit_open);
      else if (key == "adam_beta2")
        c.beta2 = Num(NumberRule::unit_open);
      else if (key == "adam_epsilon")
        c.adam_eps = Num(NumberRule::positive);
      else if (key == "max_grad_norm")
        c.max_grad_norm = Num(NumberRule::non_negative);
      else if (key == "warmup_steps")
        c.warmup_steps = Int(0);
      else if (key == "seed")
        c.seed = get<uint64_t>(v, path, key, "a non-negative integer");
      else if (key == "output_dir")
        c.output_dir = S();
      else if (key == "loss_chunk_tokens")
        c.loss_chunk_tokens = Int(1);
      else if (key == "mlp_tiles")
        c.mlp_tiles = parse_mlp_tiles(S(), here);
      else if (key == "grad_reduce_dtype") {
        c.grad_reduce = parse_grad_reduce(S(), here);
        c.grad_reduce_origin = here;
      } else if (key == "sequence_parallel")
        c.sequence_parallel = Int(1);
      else if (key == "zero_stage")
        c.zero_stage = parse_zero_stage(get<long long>(v, path, key, "an integer"), here);
      else if (key == "pad_vocab_multiple")
        c.pad_vocab_multiple = check_pad_vocab(get<long long>(v, path, key, "an integer"), here);
      else if (key == "freeze_base")
        c.freeze_base = Bool();
      else if (key == "device_memory" || key == "arena_bytes")
        c.device_budget_bytes = Bytes();
      else if (key == "adapter") {
        if (S() != "lora")
          STRATA_THROW(ConfigError, fmt::format("{}: adapter '{}' is not supported (expected lora)", path, S()), path,
                       key);
        adapter_lora = true;
      } else if (key == "lora_r") {
        c.lora.rank = Int(1);
        rank_given = true;
      } else if (key == "lora_alpha")
        c.lora.alpha = Num(NumberRule::positive);
      else if (key == "lora_target_modules") {
        c.lora.target_modules = get<std::vector<std::string>>(v, path, key, "a list of module names");
        check_lora_targets(c.lora.target_modules, here);
      } else if (key == "gradient_checkpointing")
        apply_checkpointing(c, v, path);
      else if (key == "selective_recompute") {
        if (Bool()) c.plan = yaml_preset(key, "true")->make(1);
      } else if (key == "activation_offloading") {
        // The presets this key selects, from the one preset table (engine/plan.h).
        const std::string mode = S();
        const PresetInfo* hit = nullptr;
        std::string expected;
        for (const PresetInfo& p : plan_presets()) {
          if (p.yaml_key != key) continue;
          expected += std::string(p.yaml_value) + ", ";
          if (p.yaml_value == mode) hit = &p;
        }
        if (hit)
          c.plan = hit->make(1);
        else if (mode != "false")
          STRATA_THROW(
              ConfigError,
              fmt::format("{}: activation_offloading '{}' is unknown (expected {}or false)", path, mode, expected),
              path, key);
      } else if (key == "offload_dir") {
        c.offload_dir = S();
      } else if (key == "layer_weights" || key == "layer_offloading") {
        // One decision, two spellings: layer_weights: keep|page, and the older layer_offloading: false|true.
        const Decision d = key == "layer_weights"
                               ? with_key(path, key, [&] { return parse_layer_weights(S(), path + ": " + key); })
                               : (Bool() ? Decision::page : Decision::keep);
        if (weights_key.empty() || weights == d) {
          weights = d;
          weights_key = key;
        } else {
          const bool alias = key == "layer_offloading";
          STRATA_THROW(
              ConfigError,
              fmt::format("{}: {}: {} contradicts {}: {} (layer_offloading: true is layer_weights: page, false is "
                          "keep); expected {}: {}, or one of the two keys",
                          path, key, alias ? (d == Decision::page ? "true" : "false") : decision_name(d), weights_key,
                          weights_key == "layer_offloading" ? (weights == Decision::page ? "true" : "false")
                                                            : decision_name(weights),
                          key, alias ? (weights == Decision::page ? "true" : "false") : decision_name(weights)),
              path, key);
        }
      } else if (key == "memory_budget") {
        c.memory_budget_bytes = Bytes();
        if (!c.memory_budget_bytes)
          STRATA_THROW(
              ConfigError,
              fmt::format("{}: memory_budget must be above 0 (leave it out to run the config's own plan)", path), path,
              key);
      } else if (key == "host_memory_budget") {
        c.host_budget_bytes = Bytes();
      } else if (key == "disk_memory_budget") {
        c.disk_budget_bytes = Bytes();
      } else if (key == "master_weights") {
        c.recipe.master = parse_master_weights(S(), path);
      } else if (key == "optimizer_state") {
        c.recipe.moments = parse_optimizer_state(S(), path);
      } else if (key == "gradients") {
        c.recipe.gradients = parse_gradients(S(), path);
      } else if (key == "state_offloading") {
        state_level = S();
        state_plan.set_state_offloading(state_level, path);  // checks the level now, naming the file
        has_state = true;
      } else if (key == "state_offloading_tier") {
        state_tier = with_key(path, key, [&] { return parse_state_tier(S(), path); });
        has_state = true;
      } else if (key == "state_offloading_layers") {
        if (!v.IsMap())
          STRATA_THROW(ConfigError,
                       fmt::format("{}: state_offloading_layers expects a mapping {{level: optimizer|master|all, "
                                   "layers: N}}",
                                   path),
                       path, key);
        std::string level;
        int layers = -1;
        for (auto r : v) {
          const std::string sub = key_of(r.first, path, key);
          const std::string field = key + "." + sub;
          if (sub == "level")
            level = get<std::string>(r.second, path, field, "optimizer, master or all");
          else if (sub == "layers")
            layers = check_int(get<long long>(r.second, path, field, "an integer"), 0, Origin::yaml(path, field));
          else
            STRATA_THROW(ConfigError, fmt::format("{}: unknown key '{}' (expected level and layers)", path, field),
                         path, field);
        }
        if (level.empty() || layers < 0)
          STRATA_THROW(ConfigError, fmt::format("{}: state_offloading_layers needs both level and layers", path), path,
                       key);
        state_plan.set_state_offloading_layers(level, layers, path);
        has_state = true;
      } else if (key == "state_plan") {
        if (!v.IsMap())
          STRATA_THROW(ConfigError,
                       fmt::format("{}: state_plan expects a mapping state class -> keep, host or disk", path), path,
                       key);
        for (auto r : v) {
          std::string pat = key_of(r.first, path, key);
          const std::string field = "state_plan." + pat;
          const std::string d = get<std::string>(r.second, path, field, "keep, host or disk");
          const Decision dec = with_key(path, field, [&] { return parse_decision(d, path + ": " + field); });
          if (dec != Decision::keep && dec != Decision::host && dec != Decision::disk)
            STRATA_THROW(
                ConfigError,
                fmt::format("{}: {}: state classes take keep (device), host or disk, got '{}'", path, field, d), path,
                field);
          if (dec == Decision::disk && pat.ends_with(".grad"))
            STRATA_THROW(ConfigError,
                         fmt::format("{}: {}: gradients have no disk tier (keep or host); adam.m, adam.v and w.master "
                                     "take disk",
                                     path, field),
                         path, field);
          explicit_state.emplace_back(pat, dec);
        }
        has_state = true;
      } else if (key == "plan") {
        if (!v.IsMap())
          STRATA_THROW(ConfigError, fmt::format("{}: plan expects a mapping class -> decision", path), path, key);
        for (auto r : v) {
          std::string pat = key_of(r.first, path, key);
          const std::string field = "plan." + pat;
          const std::string d = get<std::string>(r.second, path, field, "a decision");
          explicit_plan.add(pat, with_key(path, field, [&] { return parse_decision(d, path + ": " + field); }));
        }
        has_explicit = true;
      } else {
        STRATA_THROW(ConfigError, fmt::format("{}: unknown key '{}'", path, key), path, key);
      }
    }
  } catch (const YAML::Exception& e) {
    // Every conversion above is checked; this keeps any other yaml-cpp error a ConfigError too.
    STRATA_THROW(ConfigError, fmt::format("{}: key '{}': {}", path, key, e.what()), path, key);
  }
  check_grad_reduce(c);  // a file that sets both keys contradicting each other
  // `adapter: lora` alone means rank 8; with lora_r (which must be >= 1) the rank given.
  if (adapter_lora && !rank_given && c.lora.rank == 0) c.lora.rank = 8;
  if (has_state) {
    state_plan.set_state_offloading(state_level, path, state_tier);  // the tier key may follow the level's
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
  c.plan.layer_weights = weights;  // this file's decision, else the one before it
  if (has_explicit) {
    // An explicit table goes before the preset's rules: first match wins.
    c.plan.overrides = explicit_plan.rules;
    c.plan.preset = c.plan.preset == "keep-everything" ? "explicit" : c.plan.preset + " + explicit";
  }
}

void apply_yaml(TrainConfig& c, const std::string& path) {
  // A directory, FIFO, device or socket is refused at once (a FIFO's open() would wait for a
  // writer); at most 16 MiB is read.
  apply_yaml_text(c, io::read_regular_file(path, "the config file", size_t(16) << 20), path);
}

}  // namespace strata
