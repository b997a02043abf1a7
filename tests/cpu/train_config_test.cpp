// strata-train's YAML config: every key family, the plan presets it builds, explicit plan tables,
// and the errors (typed, naming the file and the key) for unknown keys and bad values.
#include "model/run/train_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/plan.h"
#include "tests/cpu/expect_error.h"

namespace strata {
namespace {

const std::string kPath = "/configs/run.yaml";

using strata::test_util::catch_as;

// The decision as text, so failures print readably. "L<n>.input" stands for layer n's input, as
// the Llama model marks it on the tape (Tape::mark_layer_input); the plan itself reads the mark.
std::string decide(const Plan& p, const char* cls) {
  const std::string_view c = cls;
  int layer = -1;
  if (c.size() > 7 && c[0] == 'L' && c.ends_with(".input")) layer = std::atoi(cls + 1);
  return decision_name(p.decide(cls, layer));
}

TrainConfig load(const std::string& yaml) {
  TrainConfig c;
  apply_yaml_text(c, yaml, kPath);
  return c;
}

void expect_config_error(const std::string& yaml, const std::string& field, std::vector<std::string> words) {
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, yaml, kPath); });
  if (!e) return;
  std::string what = e->what();
  EXPECT_NE(what.find(kPath), std::string::npos) << what;
  EXPECT_EQ(e->file, kPath) << what;
  EXPECT_EQ(e->field, field) << what;
  for (auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
}

TEST(train_config, defaults) {
  TrainConfig c;
  EXPECT_EQ(c.seq, 128);
  EXPECT_EQ(c.batch, 1);
  EXPECT_FALSE(c.lora.enabled());
  EXPECT_EQ(c.plan.preset, "keep-everything");
  EXPECT_EQ(decide(c.plan, "L0.mlp.gate"), "keep");
  EXPECT_EQ(c.device_budget_bytes, 0u);  // auto: the backend picks
}

TEST(train_config, empty_document_changes_nothing) {
  TrainConfig c = load("");
  EXPECT_EQ(c.seq, 128);
  c = load("# only a comment\n");
  EXPECT_EQ(c.steps, 10);
}

TEST(train_config, axolotl_style_keys) {
  TrainConfig c = load(R"(
base_model: /models/llama-1b
dataset: /data/tokens.bin
sequence_len: 2048
micro_batch_size: 4
max_steps: 300
learning_rate: 2.0e-4
weight_decay: 0.01
adam_beta1: 0.8
adam_beta2: 0.95
adam_epsilon: 1.0e-6
max_grad_norm: 0.5
warmup_steps: 20
seed: 42
output_dir: /out/run1
loss_chunk_tokens: 256
device_memory: 20GiB
backend: cpu
)");
  EXPECT_EQ(c.model_dir, "/models/llama-1b");
  EXPECT_EQ(c.data_path, "/data/tokens.bin");
  EXPECT_EQ(c.seq, 2048);
  EXPECT_EQ(c.batch, 4);
  EXPECT_EQ(c.steps, 300);
  EXPECT_FLOAT_EQ(c.lr, 2e-4f);
  EXPECT_FLOAT_EQ(c.weight_decay, 0.01f);
  EXPECT_FLOAT_EQ(c.beta1, 0.8f);
  EXPECT_FLOAT_EQ(c.beta2, 0.95f);
  EXPECT_FLOAT_EQ(c.adam_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.max_grad_norm, 0.5f);
  EXPECT_EQ(c.warmup_steps, 20);
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(c.output_dir, "/out/run1");
  EXPECT_EQ(c.loss_chunk_tokens, 256);
  EXPECT_EQ(c.device_budget_bytes, size_t(20) << 30);
  EXPECT_EQ(c.backend, "cpu");
}

TEST(train_config, short_aliases) {
  TrainConfig c = load("model: /m\ndata: /d\nseq: 64\nbatch: 3\nsteps: 7\nlr: 0.5\narena_bytes: 512MiB\n");
  EXPECT_EQ(c.model_dir, "/m");
  EXPECT_EQ(c.data_path, "/d");
  EXPECT_EQ(c.seq, 64);
  EXPECT_EQ(c.batch, 3);
  EXPECT_EQ(c.steps, 7);
  EXPECT_FLOAT_EQ(c.lr, 0.5f);
  EXPECT_EQ(c.device_budget_bytes, size_t(512) << 20);
}

TEST(train_config, yaml_overrides_only_the_keys_it_names) {
  TrainConfig c;
  c.seq = 99;
  c.model_dir = "/from/cli";
  apply_yaml_text(c, "micro_batch_size: 5\n", kPath);
  EXPECT_EQ(c.batch, 5);
  EXPECT_EQ(c.seq, 99);
  EXPECT_EQ(c.model_dir, "/from/cli");
}

TEST(train_config, lora_keys) {
  TrainConfig c = load(R"(
adapter: lora
lora_r: 16
lora_alpha: 32
lora_target_modules: [q_proj, v_proj, gate_proj]
)");
  EXPECT_TRUE(c.lora.enabled());
  EXPECT_EQ(c.lora.rank, 16);
  EXPECT_FLOAT_EQ(c.lora.alpha, 32.0f);
  EXPECT_FLOAT_EQ(c.lora.scale(), 2.0f);
  EXPECT_EQ(c.lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj", "gate_proj"}));
}

TEST(train_config, adapter_lora_alone_enables_a_default_rank_and_keeps_an_explicit_one) {
  TrainConfig c = load("adapter: lora\n");
  EXPECT_TRUE(c.lora.enabled());
  EXPECT_EQ(c.lora.rank, 8);
  EXPECT_EQ(c.lora.target_modules, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  // lora_r before adapter: the explicit rank survives.
  TrainConfig d = load("lora_r: 4\nadapter: lora\n");
  EXPECT_EQ(d.lora.rank, 4);
}

TEST(train_config, adapter_other_than_lora_is_rejected) {
  expect_config_error("adapter: qlora\n", "adapter", {"qlora"});
}

TEST(train_config, gradient_checkpointing_true) {
  TrainConfig c = load("gradient_checkpointing: true\n");
  EXPECT_EQ(c.plan.preset, "gradient_checkpointing");
  EXPECT_EQ(decide(c.plan, "L0.input"), "keep");
  EXPECT_EQ(decide(c.plan, "L1.input"), "keep");  // every layer boundary with every = 1
  EXPECT_EQ(decide(c.plan, "L1.attn.q"), "recompute");
  EXPECT_EQ(decide(c.plan, "L0.mlp.act"), "recompute");
  EXPECT_EQ(decide(c.plan, "final_norm.out"), "keep");
  EXPECT_EQ(decide(c.plan, "final_norm.input"), "keep");
}

TEST(train_config, gradient_checkpointing_false_keeps_everything) {
  TrainConfig c = load("gradient_checkpointing: false\n");
  EXPECT_EQ(c.plan.preset, "keep-everything");
  EXPECT_EQ(decide(c.plan, "L1.attn.q"), "keep");
}

TEST(train_config, gradient_checkpointing_every_two) {
  TrainConfig c = load("gradient_checkpointing: {every: 2}\n");
  EXPECT_EQ(c.plan.checkpoint_every, 2);
  EXPECT_EQ(decide(c.plan, "L0.input"), "keep");
  EXPECT_EQ(decide(c.plan, "L1.input"), "recompute");
  EXPECT_EQ(decide(c.plan, "L2.input"), "keep");
  EXPECT_EQ(decide(c.plan, "L3.input"), "recompute");
  EXPECT_EQ(decide(c.plan, "L10.input"), "keep");
  EXPECT_EQ(decide(c.plan, "L1.attn.q"), "recompute");
  EXPECT_EQ(decide(c.plan, "L2.attn.q"), "recompute");
  EXPECT_EQ(decide(c.plan, "final_norm.out"), "keep");
  EXPECT_EQ(decide(c.plan, "loss.lse"), "keep");
}

TEST(train_config, gradient_checkpointing_bad_values) {
  expect_config_error("gradient_checkpointing: {every: 0}\n", "gradient_checkpointing.every", {">= 1"});
  expect_config_error("gradient_checkpointing: {every: two}\n", "gradient_checkpointing.every", {"every"});
  expect_config_error("gradient_checkpointing: {often: 2}\n", "gradient_checkpointing", {"every"});
  expect_config_error("gradient_checkpointing: sometimes\n", "gradient_checkpointing", {"gradient_checkpointing"});
}

TEST(train_config, selective_recompute) {
  TrainConfig c = load("selective_recompute: true\n");
  EXPECT_EQ(c.plan.preset, "selective_recompute");
  EXPECT_EQ(decide(c.plan, "L3.attn_norm.out"), "recompute");
  EXPECT_EQ(decide(c.plan, "L3.mlp_norm.out"), "recompute");
  EXPECT_EQ(decide(c.plan, "L3.mlp.act"), "recompute");
  EXPECT_EQ(decide(c.plan, "L3.mlp.gate"), "keep");  // GEMM inputs stay
  EXPECT_EQ(decide(c.plan, "L3.attn.q"), "keep");
  TrainConfig off = load("selective_recompute: false\n");
  EXPECT_EQ(decide(off.plan, "L3.mlp.act"), "keep");
}

TEST(train_config, explicit_plan_table) {
  TrainConfig c = load(R"(
plan:
  "L*.mlp.gate": recompute
  "L?.attn.k": keep
)");
  EXPECT_EQ(decide(c.plan, "L3.mlp.gate"), "recompute");
  EXPECT_EQ(decide(c.plan, "L12.mlp.gate"), "recompute");
  EXPECT_EQ(decide(c.plan, "L3.mlp.up"), "keep");  // unmatched classes are kept
  EXPECT_EQ(decide(c.plan, "L3.attn.k"), "keep");
  EXPECT_EQ(c.plan.preset, "explicit");
}

TEST(train_config, explicit_plan_goes_before_the_preset_in_either_order) {
  for (const char* yaml : {"gradient_checkpointing: true\nplan: {\"L*.mlp.gate\": keep}\n",
                           "plan: {\"L*.mlp.gate\": keep}\ngradient_checkpointing: true\n"}) {
    TrainConfig c = load(yaml);
    EXPECT_EQ(decide(c.plan, "L3.mlp.gate"), "keep") << yaml;     // the explicit rule wins
    EXPECT_EQ(decide(c.plan, "L3.mlp.up"), "recompute") << yaml;  // the preset still applies
    EXPECT_EQ(decide(c.plan, "L3.input"), "keep") << yaml;        // segment boundaries survive the merge
    EXPECT_EQ(c.plan.checkpoint_every, 1) << yaml;
    EXPECT_EQ(c.plan.preset, "gradient_checkpointing + explicit") << yaml;
  }
}

TEST(train_config, plan_with_a_bad_decision) {
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, "plan: {\"L*.mlp.gate\": sometimes}\n", kPath); });
  ASSERT_TRUE(e);
  std::string what = e->what();
  EXPECT_NE(what.find(kPath), std::string::npos) << what;
  EXPECT_NE(what.find("L*.mlp.gate"), std::string::npos) << what;
  EXPECT_NE(what.find("sometimes"), std::string::npos) << what;
  EXPECT_EQ(e->file, kPath) << what;
  EXPECT_EQ(e->field, "plan.L*.mlp.gate") << what;
}

TEST(train_config, plan_must_be_a_mapping) {
  expect_config_error("plan: [recompute]\n", "plan", {"mapping"});
}

TEST(train_config, plan_tier_decisions_parse) {
  // host/disk parse here; the tape rejects them later (no such tiers yet).
  TrainConfig c = load("plan: {\"L*.attn.q\": host, \"L*.attn.k\": disk}\n");
  EXPECT_EQ(decide(c.plan, "L0.attn.q"), "host");
  EXPECT_EQ(decide(c.plan, "L0.attn.k"), "disk");
}

TEST(train_config, unknown_key_names_the_file_and_the_key) {
  expect_config_error("sequence_len: 64\nsequence_length: 64\n", "sequence_length", {"unknown key", "sequence_length"});
}

TEST(train_config, wrong_types_name_the_key) {
  expect_config_error("sequence_len: abc\n", "sequence_len", {"sequence_len", "integer"});
  expect_config_error("micro_batch_size: 1.5\n", "micro_batch_size", {"micro_batch_size"});
  expect_config_error("learning_rate: fast\n", "learning_rate", {"learning_rate", "number"});
  expect_config_error("freeze_base: maybe\n", "freeze_base", {"freeze_base"});
  expect_config_error("lora_target_modules: q_proj\n", "lora_target_modules", {"lora_target_modules"});
  expect_config_error("base_model: [a, b]\n", "base_model", {"base_model"});
  expect_config_error("selective_recompute: 3\n", "selective_recompute", {"selective_recompute"});
}

TEST(train_config, bad_device_memory_names_the_key) {
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, "device_memory: 20 parsecs\n", kPath); });
  ASSERT_TRUE(e);
  std::string what = e->what();
  EXPECT_NE(what.find(kPath), std::string::npos) << what;
  EXPECT_NE(what.find("device_memory"), std::string::npos) << what;
  EXPECT_NE(what.find("parsecs"), std::string::npos) << what;
  EXPECT_EQ(e->file, kPath);
  EXPECT_EQ(e->field, "device_memory");
  TrainConfig d;
  auto huge = catch_as<ConfigError>([&] { apply_yaml_text(d, "arena_bytes: 1e30\n", kPath); });
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->field, "arena_bytes");
}

TEST(train_config, invalid_yaml) {
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, "sequence_len: [64\nbatch: 2\n", kPath); });
  ASSERT_TRUE(e);
  EXPECT_NE(std::string(e->what()).find(kPath), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find("YAML"), std::string::npos) << e->what();
}

TEST(train_config, top_level_must_be_a_mapping) {
  expect_config_error("- sequence_len\n- 64\n", "", {"mapping"});
  expect_config_error("just a string\n", "", {"mapping"});
}

TEST(train_config, offloading_presets_and_dir) {
  struct Case {
    const char* yaml;
    Decision input, gate;
    bool sync;
  } cases[] = {{"activation_offloading: true\n", Decision::host, Decision::host, false},
               {"activation_offloading: legacy\n", Decision::host, Decision::host, true},
               {"activation_offloading: disk\n", Decision::disk, Decision::disk, false},
               {"activation_offloading: hidden_states\n", Decision::host, Decision::recompute, false}};
  for (auto& k : cases) {
    TrainConfig c;
    apply_yaml_text(c, k.yaml, kPath);
    EXPECT_EQ(c.plan.decide("L2.input", 2), k.input) << k.yaml;  // layer 2's input, as the model marks it
    EXPECT_EQ(c.plan.decide("L2.mlp.gate"), k.gate) << k.yaml;
    EXPECT_EQ(c.plan.decide("final_norm.out"), Decision::keep) << k.yaml;
    EXPECT_EQ(c.plan.sync_transfers, k.sync) << k.yaml;
  }
  TrainConfig c;
  apply_yaml_text(c, "offload_dir: /nvme/strata\n", kPath);
  EXPECT_EQ(c.offload_dir, "/nvme/strata");
  EXPECT_TRUE(catch_as<ConfigError>([&] { apply_yaml_text(c, "activation_offloading: sometimes\n", kPath); }));
}

TEST(train_config, layer_weights_page_and_its_older_spelling_layer_offloading) {
  TrainConfig c;
  EXPECT_FALSE(c.plan.pages_layer_weights());
  apply_yaml_text(c, "layer_weights: page\n", kPath);
  EXPECT_EQ(c.plan.layer_weights, Decision::page);
  apply_yaml_text(c, "layer_weights: keep\n", kPath);
  EXPECT_EQ(c.plan.layer_weights, Decision::keep);
  // The older key sets the same decision (configs in use keep working).
  TrainConfig old;
  apply_yaml_text(old, "layer_offloading: true\n", kPath);
  EXPECT_TRUE(old.plan.pages_layer_weights());
  apply_yaml_text(old, "layer_offloading: false\n", kPath);
  EXPECT_FALSE(old.plan.pages_layer_weights());
  // Both spellings agreeing are fine; a later file without either key leaves the decision alone.
  TrainConfig both;
  apply_yaml_text(both, "layer_offloading: true\nlayer_weights: page\n", kPath);
  EXPECT_TRUE(both.plan.pages_layer_weights());
  apply_yaml_text(both, "seq: 64\n", kPath);
  EXPECT_TRUE(both.plan.pages_layer_weights());
  // A preset key after it replaces the activation plan, not the paging (YAML keys come in any order).
  for (const char* preset : {"gradient_checkpointing: true\n", "activation_offloading: hidden_states\n",
                             "selective_recompute: true\n", "plan: {\"L*.mlp.act\": recompute}\n"}) {
    TrainConfig p;
    apply_yaml_text(p, std::string("layer_weights: page\n") + preset, kPath);
    EXPECT_TRUE(p.plan.pages_layer_weights()) << preset;
    TrainConfig q;
    apply_yaml_text(q, std::string(preset) + "layer_offloading: true\n", kPath);
    EXPECT_TRUE(q.plan.pages_layer_weights()) << preset;
  }
  // Bad values name the file and the key.
  for (const char* bad : {"layer_offloading: sometimes\n", "layer_weights: host\n", "layer_weights: true\n"}) {
    auto e = catch_as<ConfigError>([&] {
      TrainConfig t;
      apply_yaml_text(t, bad, kPath);
    });
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(e->file, kPath) << bad;
    EXPECT_EQ(e->field, std::string(bad).substr(0, std::string(bad).find(':'))) << bad;
  }
  // "page" is the layer weights' decision only, not an activation's or a state class's.
  EXPECT_TRUE(catch_as<ConfigError>([&] { apply_yaml_text(c, "plan: {\"L*\": page}\n", kPath); }));
  EXPECT_TRUE(catch_as<ConfigError>([&] { apply_yaml_text(c, "state_plan: {\"*.adam.*\": page}\n", kPath); }));
}

TEST(train_config, layer_weights_contradicting_layer_offloading_is_refused) {
  struct Case {
    const char* yaml;
    const char* field;     // the later key, the one named
    const char* expected;  // what it would have to say to agree
  } cases[] = {
      {"layer_offloading: true\nlayer_weights: keep\n", "layer_weights", "layer_weights: page"},
      {"layer_weights: page\nlayer_offloading: false\n", "layer_offloading", "layer_offloading: true"},
      {"layer_weights: keep\nlayer_offloading: true\n", "layer_offloading", "layer_offloading: false"},
      {"layer_offloading: false\nlayer_weights: page\n", "layer_weights", "layer_weights: keep"},
  };
  for (const Case& k : cases) {
    auto e = catch_as<ConfigError>([&] {
      TrainConfig t;
      apply_yaml_text(t, k.yaml, kPath);
    });
    ASSERT_TRUE(e) << k.yaml;
    EXPECT_EQ(e->file, kPath) << k.yaml;
    EXPECT_EQ(e->field, k.field) << k.yaml;
    const std::string what = e->what();
    EXPECT_NE(what.find(kPath), std::string::npos) << what;
    EXPECT_NE(what.find(std::string("expected ") + k.expected), std::string::npos) << what;
    EXPECT_NE(what.find("contradicts"), std::string::npos) << what;
  }
}

TEST(train_config, memory_budget_sets_the_planner_budget) {
  TrainConfig c;
  EXPECT_EQ(c.memory_budget_bytes, 0u);
  apply_yaml_text(c, "memory_budget: 20GiB\n", kPath);
  EXPECT_EQ(c.memory_budget_bytes, size_t(20) << 30);
  EXPECT_EQ(c.device_budget_bytes, 0u);  // strata-train defaults the arena to the budget, not the config
  EXPECT_EQ(c.plan.preset, Plan::keep_everything().preset);  // the plan is chosen by strata-train
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, "memory_budget: lots\n", kPath); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, kPath);
  EXPECT_EQ(e->field, "memory_budget");
}

TEST(train_config, apply_yaml_reads_a_file) {
  std::string dir = ::testing::TempDir() + "strata_cfg_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/train.yaml";
  std::ofstream(path) << "sequence_len: 32\ngradient_checkpointing: {every: 2}\nbogus: 1\n";
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml(c, path); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, path);
  EXPECT_EQ(e->field, "bogus");
  EXPECT_NE(std::string(e->what()).find(path), std::string::npos) << e->what();

  std::ofstream(path) << "sequence_len: 32\ngradient_checkpointing: {every: 2}\n";
  TrainConfig ok;
  apply_yaml(ok, path);
  EXPECT_EQ(ok.seq, 32);
  EXPECT_EQ(decide(ok.plan, "L1.input"), "recompute");

  TrainConfig missing;
  auto io = catch_as<IoError>([&] { apply_yaml(missing, dir + "/nope.yaml"); });
  ASSERT_TRUE(io);
  EXPECT_NE(std::string(io->what()).find("nope.yaml"), std::string::npos) << io->what();
}

// ---- parse_bytes

TEST(parse_bytes, units) {
  EXPECT_EQ(parse_bytes("20GiB", "x"), size_t(20) << 30);
  EXPECT_EQ(parse_bytes("512MiB", "x"), size_t(512) << 20);
  EXPECT_EQ(parse_bytes("1e9", "x"), size_t(1000000000));
  EXPECT_EQ(parse_bytes("4096", "x"), size_t(4096));
  EXPECT_EQ(parse_bytes("4096B", "x"), size_t(4096));
  EXPECT_EQ(parse_bytes("2KiB", "x"), size_t(2048));
  EXPECT_EQ(parse_bytes("1.5GiB", "x"), size_t(3) << 29);
  EXPECT_EQ(parse_bytes("16 GiB", "x"), size_t(16) << 30);
  EXPECT_EQ(parse_bytes("2G", "x"), size_t(2) << 30);
  EXPECT_EQ(parse_bytes("1TiB", "x"), size_t(1) << 40);
  EXPECT_EQ(parse_bytes("3GB", "x"), size_t(3000000000));
  EXPECT_EQ(parse_bytes("5MB", "x"), size_t(5000000));
  EXPECT_EQ(parse_bytes("0", "x"), size_t(0));
}

TEST(parse_bytes, errors_name_where_and_the_value) {
  for (const char* bad : {"20XB", "20gib", "abc", "", "GiB", "-1GiB", "nan", "inf", "1e30", "2e19", "1e400"}) {
    auto e = catch_as<ConfigError>([&] { parse_bytes(bad, "--device-memory"); });
    if (!e) {
      ADD_FAILURE() << "'" << bad << "' was accepted";
      continue;
    }
    std::string what = e->what();
    EXPECT_NE(what.find("--device-memory"), std::string::npos) << what;
    EXPECT_NE(what.find(std::string("'") + bad), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace strata
