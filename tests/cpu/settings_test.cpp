// The settings table (model/run/settings.h): its rows are complete, every key round-trips through
// --write-config's YAML and the public SessionConfig, and its errors are ones a user can act on
// (file:line, a suggestion, both lines of a duplicate, the range and the value).
#include "model/run/settings.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "api/convert.h"
#include "expect_error.h"
#include "strata/strata.h"
#include "tool_runner.h"

namespace strata {
namespace {

using test_util::catch_as;

const std::string kPath = "run.yaml";

TrainConfig load(const std::string& yaml) {
  TrainConfig c;
  apply_yaml_text(c, yaml, kPath);
  return c;
}

// The ConfigError `yaml` raises, checked to name the file and `field`, with each of `words`.
std::string refused(const std::string& yaml, const std::string& field, const std::vector<std::string>& words) {
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, yaml, kPath); });
  if (!e) return "";
  const std::string what = e->what();
  EXPECT_EQ(e->file, kPath) << what;
  EXPECT_EQ(e->field, field) << what;
  for (const std::string& w : words) EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
  EXPECT_EQ(what.find(".cpp:"), std::string::npos) << "a user's error names no source file: " << what;
  return what;
}

// A value in range and unlike the default, from the row's type, range and choices; the structured
// rows' examples are written out.
std::string sample(const Setting& s) {
  static const std::map<std::string, std::string> structured = {
      {"datasets", R"([{path: "a.jsonl", type: alpaca}, {path: "b.txt", type: completion, field: body}])"},
      {"lora_target_modules", "[q_proj, down_proj]"},
      {"gradient_checkpointing", "{every: 2}"},
      {"plan", R"({"L*.mlp.gate": recompute, "L1.*": host})"},
      {"state_plan", R"({"L*.adam.m": host, "embed.grad": host})"},
      {"state_offloading_layers", "{level: optimizer, layers: 2}"},
  };
  const std::string def = s.get(TrainConfig{});
  auto unlike = [&](std::vector<std::string> options) {
    for (const std::string& o : options)
      if (o != def) return o;
    return std::string();
  };
  switch (s.type) {
    case SettingType::boolean:
      return def == "true" ? "false" : "true";
    case SettingType::integer:
      return s.key == "seed" ? "4294967312"
                             : unlike({std::to_string(int64_t(s.range.lo) + (s.range.lo_open ? 1 : 0)),
                                       std::to_string(int64_t(s.range.lo) + 2)});
    case SettingType::number:
      return unlike({"0.25", "0.5"});
    case SettingType::bytes:
      return "1GiB";
    case SettingType::text:
      return "some dir/x";
    case SettingType::choice: {
      std::vector<std::string> choices;
      std::string_view rest = s.choices;
      while (!rest.empty()) {
        const size_t comma = rest.find(", ");
        choices.emplace_back(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
      }
      return unlike(choices);
    }
    case SettingType::structured:
      return structured.at(std::string(s.key));
  }
  return "";
}

// Settings whose sample alone leaves the config as it was, and why.
const std::set<std::string> kNoEffectAlone = {
    "state_offloading_tier",  // a tier places nothing without a state_offloading level
};

TEST(settings, every_row_is_declared_completely_and_once) {
  std::set<std::string> names, flags;
  for (const Setting& s : settings()) {
    SCOPED_TRACE(std::string(s.key));
    EXPECT_FALSE(s.help.empty());
    EXPECT_FALSE(s.def.empty());
    EXPECT_TRUE(s.set && s.get);
    EXPECT_TRUE(names.insert(std::string(s.key)).second) << "key twice";
    for (std::string_view a : s.aliases) EXPECT_TRUE(names.insert(std::string(a)).second) << a << " twice";
    if (!s.flag.empty()) {
      EXPECT_TRUE(flags.insert(std::string(s.flag)).second) << s.flag << " twice";
      EXPECT_NE(s.tools, 0u) << "a flag no tool takes";
    }
    const bool ranged = s.type == SettingType::integer || s.type == SettingType::number || s.type == SettingType::bytes;
    EXPECT_TRUE(!ranged || s.range.lo < s.range.hi) << "no range";
    EXPECT_TRUE(s.type != SettingType::choice || !s.choices.empty());
    EXPECT_EQ(find_setting(s.key), &s);
  }
  EXPECT_GE(settings().size(), 60u);
  std::printf("settings table: %zu rows, %zu names with aliases, %zu flags\n", settings().size(), names.size(),
              flags.size());
}

TEST(settings, every_key_round_trips_through_write_config_and_the_public_config) {
  for (const Setting& s : settings()) {
    SCOPED_TRACE(std::string(s.key));
    const std::string value = sample(s);
    ASSERT_FALSE(value.empty());
    TrainConfig direct;
    apply_setting(direct, std::string(s.key), value, "test");
    EXPECT_TRUE(kNoEffectAlone.count(std::string(s.key)) || s.get(direct) != s.get(TrainConfig{}))
        << "the sample " << value << " changed nothing";

    // --write-config's YAML reads back to the same settings.
    const std::string yaml = write_config(direct);
    TrainConfig back = load(yaml);
    EXPECT_TRUE(same_settings(back, direct)) << yaml;
    EXPECT_EQ(write_config(back), yaml);

    // The public config: the default, then the sample, by key; through to_train_config and back.
    SessionConfig cfg;
    const std::string def = cfg.get(std::string(s.key));
    EXPECT_EQ(def, s.get(api::to_train_config(SessionConfig{})));
    if (!def.empty()) {
      cfg.set(std::string(s.key), def);
      EXPECT_EQ(cfg.get(std::string(s.key)), def);
    }
    cfg.set(std::string(s.key), value);
    EXPECT_EQ(cfg.get(std::string(s.key)), s.get(direct));
    const SessionConfig again = api::from_train_config(api::to_train_config(cfg));
    EXPECT_EQ(again.get(std::string(s.key)), s.get(direct));
    EXPECT_TRUE(same_settings(api::to_train_config(again), api::to_train_config(cfg)));
  }
}

TEST(settings, write_config_of_many_settings_reads_back_the_same) {
  const TrainConfig c = load(
      "base_model: /m\ndatasets: [{path: a.jsonl, type: chat}]\nsequence_len: 4096\nmax_steps: 10\nnum_epochs: 2\n"
      "gradient_accumulation_steps: 4\nlr_scheduler: cosine\nlearning_rate: 2e-5\nseed: 4294967312\n"
      "adapter: lora\nlora_target_modules: [q_proj, up_proj]\ngradient_checkpointing: {every: 3}\n"
      "plan: {\"L*.mlp.act\": host}\nstate_offloading: optimizer\nstate_offloading_tier: disk\n"
      "state_plan: {\"embed.grad\": host}\nstate_offloading_layers: {level: master, layers: 3}\n"
      "layer_offloading: true\nmemory_budget: 20GiB\nhost_memory_budget: 1e9\ngrad_reduce_dtype: fp32\n"
      "zero_stage: 2\nmlp_tiles: 4\noutput_dir: \"yes\"\nresume_from_checkpoint: true\n");
  const std::string yaml = write_config(c);
  const TrainConfig back = load(yaml);
  EXPECT_TRUE(same_settings(back, c)) << yaml;
  EXPECT_EQ(back.lora.rank, 8);
  EXPECT_TRUE(back.steps_given);
  EXPECT_EQ(back.seed, 4294967312u);
  EXPECT_EQ(back.plan.state, c.plan.state);
  EXPECT_EQ(back.plan.state_preset, c.plan.state_preset);
  EXPECT_EQ(back.plan.overrides, c.plan.overrides);
  EXPECT_EQ(back.plan.checkpoint_every, 3);
  EXPECT_TRUE(back.plan.pages_layer_weights());
  EXPECT_EQ(back.output_dir, "yes");
  EXPECT_EQ(back.resume_from_checkpoint, "auto");
  EXPECT_EQ(write_config(TrainConfig{}), "");  // nothing differs from the defaults
}

TEST(settings, an_unknown_key_names_the_file_line_and_the_nearest_key) {
  refused("sequence_len: 8\nlerning_rate: 1e-4\n", "lerning_rate",
          {"run.yaml:2:", "unknown key 'lerning_rate'", "did you mean `learning_rate`?"});
  refused("lora_rank: 8\n", "lora_rank", {"run.yaml:1:", "did you mean `lora_r`?"});
  const std::string far = refused("completely_unrelated: 1\n", "completely_unrelated", {"unknown key"});
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  auto e = catch_as<ConfigError>([] { SessionConfig().set("gradient_acumulation_steps", "4"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "gradient_acumulation_steps");
  EXPECT_NE(std::string(e->what()).find("did you mean `gradient_accumulation_steps`?"), std::string::npos);
  EXPECT_TRUE(catch_as<ConfigError>([] { (void)SessionConfig().get("no_such_key"); }));
}

TEST(settings, a_duplicate_key_names_both_lines) {
  refused("sequence_len: 8\nbatch: 2\nsequence_len: 16\n", "sequence_len", {"run.yaml:3:", "given twice", "line 1"});
  refused("seq: 8\nsequence_len: 16\n", "sequence_len", {"run.yaml:2:", "line 1 as seq"});
}

TEST(settings, yaml_1_1_booleans_are_booleans_or_refused) {
  EXPECT_TRUE(load("train_on_inputs: yes\n").train_on_inputs);
  EXPECT_FALSE(load("sample_packing: off\n").sample_packing);
  EXPECT_TRUE(load("freeze_base: On\n").freeze_base);
  EXPECT_TRUE(load("layer_offloading: on\n").plan.pages_layer_weights());
  EXPECT_EQ(load("resume_from_checkpoint: yes\n").resume_from_checkpoint, "auto");  // not a directory "yes"
  EXPECT_EQ(load("resume_from_checkpoint: no\n").resume_from_checkpoint, "");
  EXPECT_EQ(load("gradient_checkpointing: yes\n").plan.preset, load("gradient_checkpointing: true\n").plan.preset);
  EXPECT_EQ(load("activation_offloading: on\n").plan.preset, load("activation_offloading: true\n").plan.preset);
  EXPECT_EQ(load("activation_offloading: off\n").plan.preset, TrainConfig{}.plan.preset);
  refused("output_dir: yes\n", "output_dir", {"run.yaml:1:", "YAML boolean", "quote"});
  refused("base_model: off\n", "base_model", {"YAML boolean"});
  EXPECT_EQ(load("output_dir: \"yes\"\n").output_dir, "yes");
  refused("train_on_inputs: maybe\n", "train_on_inputs", {"true or false", "maybe"});
  refused("output_dir:\n", "output_dir", {"no value"});
}

TEST(settings, out_of_range_values_name_the_key_the_range_and_the_value) {
  EXPECT_EQ(load("seed: 4294967312\n").seed, 4294967312u);  // 64 bits: no wrap to 16
  EXPECT_EQ(load("seed: 18446744073709551615\n").seed, 18446744073709551615u);
  refused("seed: 18446744073709551616\n", "seed", {"64 bits", "18446744073709551616"});
  refused("seed: -1\n", "seed", {"-1"});
  refused("device_memory: 0\n", "device_memory", {"run.yaml:1: device_memory", "above 0", "default"});
  refused("host_memory_budget: 0\n", "host_memory_budget", {"above 0", "no host tier"});
  refused("disk_memory_budget: 0GiB\n", "disk_memory_budget", {"above 0"});
  refused("zero_stage: 4\n", "zero_stage", {"run.yaml:1: zero_stage must be 0", "3 (layer weights too)", "got 4"});
  refused("warmup_ratio: 1\n", "warmup_ratio", {"[0, 1)", "got 1"});
  refused("pad_vocab_multiple: 65537\n", "pad_vocab_multiple", {"65536", "65537"});
  refused("gradient_checkpointing: {every: 0}\n", "gradient_checkpointing.every", {">= 1", "got 0"});
  refused("state_offloading_layers: {level: all, layers: -1}\n", "state_offloading_layers.layers", {"got -1"});
  refused("micro_batch_size: 4294967297\n", "micro_batch_size", {"in [1, 16777216]", "4294967297"});
  refused("excess_length_strategy: cut\n", "excess_length_strategy", {"truncate, drop", "cut"});
  refused("backend: gpu\n", "backend", {"auto, cpu, cuda, sim", "gpu"});
}

TEST(settings, flags_come_from_the_table_and_name_the_flag) {
  TrainConfig c;
  apply_flags(c, {{"seq", "64"}, {"grad-accum", "3"}, {"state-offloading", "optimizer"}, {"freeze-base", "1"}},
              Tool::train);
  EXPECT_EQ(c.seq, 64);
  EXPECT_EQ(c.grad_accum, 3);
  EXPECT_TRUE(c.freeze_base);
  EXPECT_EQ(c.plan.state_preset, "optimizer");
  auto e = catch_as<ConfigError>([] {
    TrainConfig d;
    apply_flags(d, {{"seq", "4294967312"}}, Tool::train);
  });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "seq");
  EXPECT_NE(std::string(e->what()).find("--seq must be an integer in [1, 16777216], got 4294967312"),
            std::string::npos);
  TrainConfig b;
  apply_flags(b, {{"seq", "64"}, {"loss-chunk", "256"}}, Tool::bench);  // --seq is strata-bench's own
  EXPECT_EQ(b.seq, TrainConfig{}.seq);
  EXPECT_EQ(b.loss_chunk_tokens, 256);
  const std::vector<std::string> train = setting_flags(Tool::train, false);
  EXPECT_NE(std::find(train.begin(), train.end(), "grad-accum"), train.end());
  EXPECT_NE(settings_usage(Tool::train).find("--grad-accum K"), std::string::npos);
  EXPECT_NE(settings_markdown().find("| `--seq N` | `sequence_len` (or `seq`) |"), std::string::npos);
}

TEST(settings, the_public_config_keeps_every_key_of_a_yaml_file) {
  SessionConfig cfg;
  apply_yaml_text(cfg,
                  "zero_stage: 2\nmlp_tiles: 4\ngradient_accumulation_steps: 4\nlr_scheduler: linear\n"
                  "datasets: [{path: a.jsonl, type: alpaca}]\nsequence_len: 256\n",
                  "pub.yaml");
  EXPECT_EQ(cfg.seq, 256);
  EXPECT_EQ(cfg.get("zero_stage"), "2");
  EXPECT_EQ(cfg.get("mlp_tiles"), "4");
  EXPECT_EQ(cfg.get("gradient_accumulation_steps"), "4");
  EXPECT_EQ(cfg.get("lr_scheduler"), "linear");
  const TrainConfig t = api::to_train_config(cfg);
  EXPECT_EQ(t.zero_stage, 2);
  EXPECT_EQ(t.grad_accum, 4);
  ASSERT_EQ(t.datasets.size(), 1u);
  EXPECT_EQ(t.datasets[0].type, "alpaca");
  cfg.set("seq", "512");  // an alias, and a typed field
  EXPECT_EQ(cfg.seq, 512);
  EXPECT_EQ(SessionConfig::keys().size(), settings().size());
  auto e = catch_as<ConfigError>([&] { cfg.set("zero_stage", "5"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "zero_stage");
}

// strata-train --write-config: the effective settings (YAML, then flags) as YAML that reads back the same.
TEST(settings, strata_train_write_config_reads_back_the_same) {
  ASSERT_TRUE(tool_test::tools_built());
  tool_test::Scratch dir;
  dir.create("strata_settings");
  ASSERT_TRUE(dir.ok());
  const std::string yaml = dir.path("in.yaml"), out = dir.path("out.yaml");
  std::ofstream(yaml) << "base_model: /nowhere\nzero_stage: 1\ngradient_checkpointing: {every: 2}\n";
  tool_test::Proc r =
      dir.run(tool_test::kTrain + " --config " + tool_test::quote(yaml) +
              " --seq 64 --grad-accum 2 --state-offloading master --write-config " + tool_test::quote(out));
  ASSERT_EQ(r.code, 0) << r.err;
  TrainConfig expected;
  expected.backend = "auto";
  apply_yaml(expected, yaml);
  apply_flags(expected, {{"seq", "64"}, {"grad-accum", "2"}, {"state-offloading", "master"}}, Tool::train);
  TrainConfig back;
  apply_yaml(back, out);
  EXPECT_TRUE(same_settings(back, expected)) << tool_test::slurp(out);
  EXPECT_EQ(back.grad_accum, 2);
  EXPECT_EQ(back.zero_stage, 1);
  // A bad key: one error line naming the file and line, one hint line.
  std::ofstream(yaml) << "sequence_len: 8\nlerning_rate: 1\n";
  r = dir.run(tool_test::kTrain + " --config " + tool_test::quote(yaml) + " --model x --data y");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "strata-train: error: " + yaml +
                       ":2: unknown key 'lerning_rate' (did you mean `learning_rate`?)\nsee strata-train --help\n");
  dir.remove();
}

}  // namespace
}  // namespace strata
