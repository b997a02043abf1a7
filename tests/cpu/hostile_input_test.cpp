// Hostile input, second round (issue 33): each case a hostile probe found against strata-train,
// strata-plan and strata-tokenize is a clean error (a typed strata::Error in the library, exit code 1-127
// from the tools) that names the input, within seconds. docs/RELIABILITY.md lists the limits.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/cost_model.h"
#include "engine/error.h"
#include "engine/json_limits.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/data/datasets.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/tool_runner.h"
#include "text/jinja.h"
#include "text/tokenizer.h"

namespace strata {
namespace {

using namespace tool_test;
using test_util::catch_as;
namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kTokenize = std::string(STRATA_BUILD_DIR) + "/tools/strata-tokenize";
const std::string kLlama3 = std::string(STRATA_TEST_DATA) + "/tokenizer/llama3";
constexpr int kDeep = 100000;  // the probe's nesting: it overflowed every recursive reader's stack

std::string deep_array() {
  return std::string(kDeep, '[') + std::string(kDeep, ']');
}
std::string deep_object() {
  std::string s;
  for (int i = 0; i < kDeep; ++i) s += "{\"a\":";
  return s + "1" + std::string(kDeep, '}');
}

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string read(const std::string& path) {
  return slurp(path);
}

// The error's text contains every one of `parts`.
::testing::AssertionResult names(const std::string& what, std::initializer_list<std::string> parts) {
  for (const std::string& p : parts)
    if (what.find(p) == std::string::npos) return ::testing::AssertionFailure() << "'" << p << "' not in: " << what;
  return ::testing::AssertionSuccess();
}

class hostile_input : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { scratch_.create("strata_hostile"); }
  static void TearDownTestSuite() { scratch_.remove(); }

  void SetUp() override {
    ASSERT_TRUE(scratch_.ok());
    ASSERT_TRUE(tools_built());
    if (!tiny_made_) {
      Proc r = run(kMakeTiny + " " + quote(model()) +
                   " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 64 --tokens 4000");
      ASSERT_EQ(r.code, 0) << r.err;
      tiny_made_ = true;
    }
  }

  static std::string model() { return scratch_.path("tiny"); }
  static std::string path(const std::string& name) { return scratch_.path(name); }
  // A copy of the tiny checkpoint, to damage.
  static std::string copy_model(const std::string& name) {
    const std::string dir = path(name);
    fs::remove_all(dir);
    fs::copy(model(), dir, fs::copy_options::recursive);
    return dir;
  }
  // A copy of the committed llama3 tokenizer, to damage.
  static std::string copy_tokenizer(const std::string& name) {
    const std::string dir = path(name);
    fs::remove_all(dir);
    fs::copy(kLlama3, dir, fs::copy_options::recursive);
    return dir;
  }
  // Runs a command under `timeout 120` and returns its result and wall seconds.
  static Proc run(const std::string& cmd, double* seconds = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    Proc p = scratch_.run("timeout 120 " + cmd);
    if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return p;
  }

  static Scratch scratch_;
  static bool tiny_made_;
};
Scratch hostile_input::scratch_;
bool hostile_input::tiny_made_ = false;

// ---- JSON nested 100k deep: every JSON reader refuses it by its depth limit, naming the file

TEST_F(hostile_input, json_nesting_scan_skips_strings_and_finds_the_depth) {
  EXPECT_FALSE(json_nesting_error(R"({"a": [[1], {"b": "[[[[[[[[[[[[[[[[[[[[\"[[[["}]})", 3));
  EXPECT_TRUE(json_nesting_error("[[[[1]]]]", 3));
  EXPECT_FALSE(json_nesting_error("[[[1]]]", 3));
  EXPECT_FALSE(json_nesting_error(std::string(kMaxJsonDepth, '[')));
  EXPECT_TRUE(json_nesting_error(std::string(kMaxJsonDepth + 1, '[')));
}

TEST_F(hostile_input, deep_json_in_config_json_is_refused_by_reader_and_plan) {
  const std::string dir = copy_model("deep_config");
  json cfg = json::parse(read(dir + "/config.json"));
  cfg["passthrough"] = "@DEEP@";
  std::string text = cfg.dump();
  text.replace(text.find("\"@DEEP@\""), 8, deep_array());
  write(dir + "/config.json", text);
  auto e = catch_as<ConfigError>([&] { io::read_llama_config(dir); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {dir + "/config.json", "nested deeper than 128"}));
  double s = 0;
  Proc r = run(kPlan + " --model " + quote(dir) + " --seq 16", &s);
  EXPECT_GE(r.code, 1);
  EXPECT_LE(r.code, 127) << r.err;
  EXPECT_TRUE(names(r.err, {"config.json", "nested deeper"}));
  EXPECT_LT(s, 20);
}

TEST_F(hostile_input, deep_json_in_tokenizer_files_is_refused_naming_the_file) {
  struct Case {
    std::string name, file, text;
  };
  json tj = json::parse(read(kLlama3 + "/tokenizer.json"));
  tj["normalizer"] = "@DEEP@";
  std::string deep_normalizer = tj.dump();
  deep_normalizer.replace(deep_normalizer.find("\"@DEEP@\""), 8, deep_object());
  const std::vector<Case> cases = {
      {"tok_deep_whole", "tokenizer.json", deep_array()},
      {"tok_deep_normalizer", "tokenizer.json", deep_normalizer},
      {"tok_deep_eos", "tokenizer_config.json", "{\"eos_token\": " + deep_array() + "}"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = copy_tokenizer(c.name);
    write(dir + "/" + c.file, c.text);
    auto e = catch_as<Error>([&] { text::Tokenizer::load(dir); });
    ASSERT_TRUE(e);
    EXPECT_TRUE(names(e->what(), {dir + "/" + c.file, "nested deeper than 128"}));
    Proc r = run("echo hi | " + kTokenize + " --tokenizer " + quote(dir));
    EXPECT_GE(r.code, 1);
    EXPECT_LE(r.code, 127) << r.err;
    EXPECT_TRUE(names(r.err, {c.file, "nested deeper"}));
  }
}

TEST_F(hostile_input, deep_json_in_safetensors_header_index_dataset_and_profile) {
  // A safetensors header: 8-byte length, then the JSON.
  const std::string dir = copy_model("deep_header");
  const std::string header = "{\"__metadata__\": " + deep_array() + "}";
  const uint64_t n = header.size();
  write(dir + "/model.safetensors", std::string(reinterpret_cast<const char*>(&n), 8) + header);
  auto e = catch_as<FormatError>([&] { io::Checkpoint::open_dir(dir); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {dir + "/model.safetensors", "nested deeper"}));

  const std::string idx = copy_model("deep_index");
  fs::rename(idx + "/model.safetensors", idx + "/s1.safetensors");
  write(idx + "/model.safetensors.index.json",
        "{\"weight_map\": {\"model.norm.weight\": \"s1.safetensors\"}, \"metadata\": " + deep_object() + "}");
  e = catch_as<FormatError>([&] { io::Checkpoint::open_dir(idx); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {"model.safetensors.index.json", "nested deeper"}));

  const std::string data = path("deep.jsonl");
  write(data, "{\"text\": \"fine\"}\n{\"text\": \"x\", \"extra\": " + deep_array() + "}\n");
  const text::Tokenizer tok = text::Tokenizer::load(kLlama3);
  DatasetSpec d{data, "completion", ""};
  auto fe = catch_as<FormatError>([&] { tokenize_dataset(d, read(data), tok); });
  ASSERT_TRUE(fe);
  EXPECT_TRUE(names(fe->what(), {data, "line 2", "nested deeper"}));

  auto pe = catch_as<ConfigError>([&] { profile_from_json(deep_array(), "deep_profile.json"); });
  ASSERT_TRUE(pe);
  EXPECT_TRUE(names(pe->what(), {"deep_profile.json", "nested deeper"}));
}

// ---- YAML: depth, duplicate keys and YAML 1.1 booleans

TEST_F(hostile_input, deep_yaml_is_refused_naming_the_file_and_the_limit) {
  for (const std::string& text : {"plan: " + deep_array() + "\n", "datasets:\n" + [] {
                                    std::string s;
                                    for (int i = 0; i < kDeep; ++i) s += "- ";
                                    return s + "x\n";
                                  }()}) {
    TrainConfig c;
    auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, text, "deep.yaml"); });
    ASSERT_TRUE(e);
    EXPECT_TRUE(names(e->what(), {"deep.yaml", "nested deeper than 2000"}));
  }
}

TEST_F(hostile_input, yaml_aliases_of_aliases_do_not_expand_without_bound) {
  // "Billion laughs": 10 aliases of 10 aliases ... nine levels deep, 10^9 values from 1 KB.
  std::string text = "plan: [&a0 [x, x, x, x, x, x, x, x, x, x]";
  for (int i = 1; i < 9; ++i) {
    text += fmt::format(", &a{} [", i);
    for (int k = 0; k < 10; ++k) text += fmt::format("{}*a{}", k ? ", " : "", i - 1);
    text += "]";
  }
  text += "]\n";
  TrainConfig c;
  double s = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, text, "laughs.yaml"); });
  s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {"laughs.yaml", "plan", "expects a mapping"}));
  EXPECT_LT(s, 20);
  // The same as a key: the error shows it with its anchors and aliases (or as [...]), not 10^9 values.
  const auto t1 = std::chrono::steady_clock::now();
  e = catch_as<ConfigError>([&] { apply_yaml_text(c, "? " + text.substr(6) + ": 1\n", "laughs.yaml"); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {"laughs.yaml", "plain string key"}));
  EXPECT_LT(std::string(e->what()).size(), 400u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 20);
}

TEST_F(hostile_input, duplicate_yaml_keys_are_errors_naming_both_lines) {
  TrainConfig c;
  auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, "seed: 1\nlr: 0.1\nseed: 2\n", "dup.yaml"); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {"dup.yaml:3", "seed", "line 1"}));
  // Inside a value: yaml-cpp keeps both, and a reader would take one silently.
  for (const std::string& text : {std::string("max_steps: 1\nplan:\n  L*.mlp.act: keep\n  L*.mlp.act: host\n"),
                                  std::string("max_steps: 1\ndatasets:\n  - path: a.jsonl\n    path: b.jsonl\n"),
                                  std::string("max_steps: 1\ngradient_checkpointing: {every: 2, every: 3}\n")}) {
    SCOPED_TRACE(text);
    TrainConfig d;
    e = catch_as<ConfigError>([&] { apply_yaml_text(d, text, "dup.yaml"); });
    ASSERT_TRUE(e);
    EXPECT_TRUE(names(e->what(), {"dup.yaml", "given twice", "lines "}));
  }
}

TEST_F(hostile_input, yaml11_booleans_are_booleans_or_refused) {
  TrainConfig c;
  apply_yaml_text(c, "train_on_inputs: on\nsample_packing: Yes\n", "b.yaml");
  EXPECT_TRUE(c.train_on_inputs);
  EXPECT_TRUE(c.sample_packing);
  apply_yaml_text(c, "train_on_inputs: OFF\nsample_packing: no\n", "b.yaml");
  EXPECT_FALSE(c.train_on_inputs);
  EXPECT_FALSE(c.sample_packing);
  for (const char* text : {"output_dir: yes\n", "base_model: off\n", "metrics_file: On\n"}) {
    TrainConfig d;
    auto e = catch_as<ConfigError>([&] { apply_yaml_text(d, text, "b.yaml"); });
    ASSERT_TRUE(e) << text;
    EXPECT_TRUE(names(e->what(), {"b.yaml", "YAML boolean"}));
  }
}

// ---- the settings table: every value in range, errors naming key and range

TEST_F(hostile_input, every_numeric_setting_has_a_range) {
  for (const Setting& s : settings()) {
    if (s.type != SettingType::integer && s.type != SettingType::number && s.type != SettingType::bytes) continue;
    EXPECT_LT(s.range.lo, s.range.hi) << s.key;
    if (s.type == SettingType::integer) {
      EXPECT_TRUE(std::isfinite(s.range.hi)) << s.key;
    }
  }
}

TEST_F(hostile_input, settings_out_of_range_name_the_key_and_range) {
  struct Case {
    std::string yaml, key, range;
  };
  const std::vector<Case> cases = {
      {"device_memory: 0\n", "device_memory", "above 0"},
      {"host_memory_budget: 0\n", "host_memory_budget", "above 0"},
      {"num_epochs: 1e-30\n", "num_epochs", "[1e-06, 1000000]"},
      {"output_dir: ''\n", "output_dir", "empty"},
      {"sequence_len: 2147483647\n", "sequence_len", "at most 16777216"},
      {"plan_time_limit: -1\n", "plan_time_limit", "at most 86400"},
  };
  for (const Case& c : cases) {
    TrainConfig t;
    auto e = catch_as<ConfigError>([&] { apply_yaml_text(t, c.yaml, "r.yaml"); });
    ASSERT_TRUE(e) << c.yaml;
    EXPECT_TRUE(names(e->what(), {"r.yaml", c.key, c.range}));
  }
  // Each in range, their product not: refused before anything is allocated for it.
  TrainConfig big;
  auto eb = catch_as<ConfigError>(
      [&] { apply_yaml_text(big, "sequence_len: 16777216\nmicro_batch_size: 1048576\n", "r.yaml"); });
  ASSERT_TRUE(eb);
  EXPECT_TRUE(names(eb->what(), {"r.yaml", "micro_batch_size 1048576 x sequence_len 16777216", "at most 33554432"}));
  // The seed is 64 bits end to end: 2^32 + 16 stays itself (it wrapped to 16 once), 2^64 is refused.
  TrainConfig t;
  apply_yaml_text(t, "seed: 4294967312\n", "r.yaml");
  EXPECT_EQ(t.seed, 4294967312ull);
  EXPECT_EQ(get_setting(t, "seed"), "4294967312");
  EXPECT_TRUE(catch_as<ConfigError>([&] { apply_yaml_text(t, "seed: 18446744073709551616\n", "s.yaml"); }));
  EXPECT_EQ(get_setting(TrainConfig{}, "plan_time_limit"), "60");
}

TEST_F(hostile_input, train_flags_out_of_range_exit_2_naming_the_flag) {
  const std::string base =
      kTrain + " --model " + quote(model()) + " --data " + quote(model() + "/tokens.bin") + " --backend cpu ";
  for (auto [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--epochs 1e-30", "epochs"}, {"--save ''", "save"}, {"--device-memory 0", "device-memory"}}) {
    double s = 0;
    Proc r = run(base + args, &s);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_TRUE(names(r.err, {want}));
    EXPECT_LT(s, 20);
  }
  // Epochs in range but under one row: refused rather than rounded up to a whole step.
  Proc r = run(base + "--epochs 1e-5 --seq 16");
  EXPECT_GE(r.code, 1);
  EXPECT_TRUE(names(r.err, {"num_epochs", "less than one row"}));
}

// ---- strata-plan: absurd shapes refused before allocating, searches bounded in time

TEST_F(hostile_input, plan_refuses_absurd_shapes_and_endless_files_at_once) {
  struct Case {
    std::string args, want;
  };
  const std::vector<Case> cases = {
      {"--seq 2147483647", "seq"},
      {"--seq 2147483647 --budget 40GiB", "seq"},
      {"--seq 16777216 --batch 64", "batch"},
      {"--max-seq --budget 40GiB --seq-limit 2147483647", "seq-limit"},
      {"--seq 1024 --profile /dev/zero", "/dev/zero"},
  };
  for (const Case& c : cases) {
    double s = 0;
    Proc r = run(kPlan + " --model Llama-3.2-1B " + c.args, &s);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
    EXPECT_TRUE(names(r.err, {c.want})) << c.args;
    EXPECT_LT(s, 20) << c.args;
  }
  // A deep profile names itself too.
  write(path("deep_profile.json"), deep_array());
  Proc r = run(kPlan + " --model Llama-3.2-1B --seq 1024 --profile " + quote(path("deep_profile.json")));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(names(r.err, {"deep_profile.json", "nested deeper"}));
}

TEST_F(hostile_input, plan_searches_stop_at_their_time_limit_and_say_so) {
  // Each of these ran for minutes with no output; under --plan-time-limit 3 each answers or stops and
  // says so within the limit plus the sims in flight.
  const std::vector<std::string> cases = {
      "--model Llama-3.2-1B --seq 1048576 --budget 80GiB --host-budget 1TiB --disk-budget 10TiB",
      "--model Llama-3-70B --seq 1048576 --budget 80GiB --host-budget 2TiB",
      "--model Llama-3-8B --max-seq --budget 40GiB --host-budget 100GiB --seq-limit 1048576",
  };
  for (const std::string& c : cases) {
    double s = 0;
    Proc r = run(kPlan + " " + c + " --plan-time-limit 3", &s);
    EXPECT_GE(r.code, 0) << c;
    EXPECT_LE(r.code, 1) << c << ": " << r.err;
    // Stopped at the limit and saying so, or a definite answer before it (the planner's pruning may rule every
    // plan out in a few sims: "nothing fits ... needs at least"; on an idle machine the max-seq search can end in
    // time: "longest sequence: N tokens").
    EXPECT_TRUE(names(r.out + r.err, {"time limit of 3 s"}) ||
                names(r.out + r.err, {"nothing fits", "needs at least"}) ||
                (r.code == 0 && names(r.out + r.err, {"longest sequence: ", "tokens"})))
        << c << "\n"
        << r.out << r.err;
    EXPECT_LT(s, 60) << c;
  }
  // strata-train's budget planner keeps the same limit: stopped before any plan, it says so.
  Proc r = run(kTrain + " --model " + quote(model()) + " --data " + quote(model() + "/tokens.bin") +
               " --backend cpu --seq 16 --steps 1 --budget 1GiB --plan-time-limit 0.000001");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(names(r.err, {"stopped at its time limit", "within plan_time_limit"})) << r.err;
}

// ZeRO over any rank count strata-train accepts (WORLD_SIZE up to 2^20) answers in seconds: the ranks past the
// parameters' owners own nothing and share one forecast (it ran to the time limit before). More ranks than that,
// or none, are refused by range before any search, naming --gpus and the range.
TEST_F(hostile_input, plan_over_absurd_rank_counts_answers_in_seconds_or_refuses_by_range) {
  // The yardstick is measured in the same test, so the bound holds on a slow or loaded machine: 146 ranks, where every
  // rank owns parameters and has its own forecast. Simulating each of 10^5 ranks would cost ~700 times that; sharing
  // the owner-less ranks' forecast keeps it within a few times.
  const std::string plan = kPlan + " --model Llama-3.2-1B --seq 1024 --zero-stage 1 --budget 40GiB --json --gpus ";
  double yardstick = 0;
  ASSERT_EQ(run(plan + "146", &yardstick).code, 0);
  for (const std::string gpus : {"100000", "1048576"}) {
    double s = 0;
    Proc r = run(plan + gpus, &s);
    ASSERT_EQ(r.code, 0) << gpus << ": " << r.err;
    const json j = json::parse(r.out);
    EXPECT_TRUE(j["planner"]["found"].get<bool>()) << gpus;
    EXPECT_EQ(j["planner"]["rank_peak_bytes"].size(), std::stoul(gpus));
    EXPECT_TRUE(names(r.err, {"ranks 146-" + std::to_string(std::stoul(gpus) - 1)})) << r.err.substr(0, 2000);
    EXPECT_LT(s, 6 * yardstick + 2) << gpus << " ranks against " << yardstick << " s for 146";
  }
  for (const std::string args : {"--gpus 1048577 --zero-stage 1", "--gpus 4294967312", "--gpus 0", "--gpus -3"}) {
    double s = 0;
    Proc r = run(kPlan + " --model Llama-3.2-1B --seq 1024 --budget 40GiB " + args, &s);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_TRUE(names(r.err, {"--gpus must be an integer >= 1 (at most 1048576)"})) << args << ": " << r.err;
    EXPECT_LT(s, 5) << args;
  }
}

// strata-bench's --seq and --batch are read as strata-train's (the settings' sequence_len and micro_batch_size rows):
// the same ranges and messages, and their product's limit, before anything is allocated for them.
TEST_F(hostile_input, bench_shape_flags_are_checked_as_strata_train_checks_them) {
  struct Case {
    std::string args, want;
  };
  const std::vector<Case> cases = {
      {"--seq 2147483647", "--seq must be an integer >= 1 (at most 16777216), got 2147483647"},
      {"--seq 16777217", "--seq must be an integer >= 1 (at most 16777216), got 16777217"},
      {"--seq 0", "--seq must be an integer >= 1 (at most 16777216), got 0"},
      {"--seq 4294967312", "got 4294967312"},
      {"--seq 1e3", "--seq expects an integer, got '1e3'"},
      {"--batch 2000000", "--batch must be an integer >= 1 (at most 1048576), got 2000000"},
      {"--seq 16777216 --batch 4", "micro_batch_size 4 x sequence_len 16777216 is 67108864 tokens"},
  };
  for (const Case& c : cases) {
    double s = 0;
    Proc b = run(kBench + " --shape tiny --backend cpu --steps 0 --warmup 0 " + c.args, &s);
    EXPECT_EQ(b.code, 2) << c.args << ": " << b.err;
    EXPECT_TRUE(names(b.err, {c.want})) << c.args;
    EXPECT_LT(s, 5) << c.args;
    if (c.args.find("--batch") != std::string::npos) continue;
    // strata-train and strata-plan say the same of --seq.
    Proc t = run(kTrain + " --model " + quote(model()) + " --data " + quote(model() + "/tokens.bin") +
                 " --backend cpu --steps 1 " + c.args);
    Proc p = run(kPlan + " --model tiny " + c.args);
    EXPECT_EQ(t.code, 2) << c.args << ": " << t.err;
    EXPECT_EQ(p.code, 2) << c.args << ": " << p.err;
    EXPECT_TRUE(names(t.err, {c.want})) << c.args << ": " << t.err;
    EXPECT_TRUE(names(p.err, {c.want})) << c.args << ": " << p.err;
  }
}

// ---- checkpoints: shard names stay inside the directory; weights are floating point

TEST_F(hostile_input, index_shard_names_are_plain_files_in_the_checkpoint) {
  const std::string root = path("escape");
  fs::remove_all(root);
  fs::create_directories(root + "/outside");
  const std::string dir = root + "/a/ckpt";
  fs::create_directories(dir);
  fs::copy(model() + "/config.json", dir + "/config.json");
  fs::copy(model() + "/model.safetensors", root + "/outside/stolen.safetensors");
  fs::copy(model() + "/model.safetensors", dir + "/s1.safetensors");
  const std::string nul = std::string("s1.safetensors") + '\0' + "junk";
  for (const std::string& shard :
       {std::string("../../outside/stolen.safetensors"), root + "/outside/stolen.safetensors",
        std::string("sub/s1.safetensors"), std::string(".."), nul}) {
    SCOPED_TRACE(shard);
    write(dir + "/model.safetensors.index.json", json{{"weight_map", {{"model.norm.weight", shard}}}}.dump());
    auto e = catch_as<FormatError>([&] { io::Checkpoint::open_dir(dir); });
    ASSERT_TRUE(e);
    EXPECT_TRUE(names(e->what(), {"model.safetensors.index.json", "plain file name"}));
  }
  // A shard that is a symlink (as the Hugging Face cache makes them) still loads.
  fs::remove(dir + "/s1.safetensors");
  fs::create_symlink(root + "/outside/stolen.safetensors", dir + "/s1.safetensors");
  write(dir + "/model.safetensors.index.json", json{{"weight_map", {{"model.norm.weight", "s1.safetensors"}}}}.dump());
  io::Checkpoint ck = io::Checkpoint::open_dir(dir);
  EXPECT_TRUE(ck.has("model.norm.weight"));
}

TEST_F(hostile_input, a_weight_stored_as_integers_is_refused) {
  const std::string dir = path("i32_norm");
  fs::create_directories(dir);
  const int32_t ones[4] = {1, 1, 1, 1};
  io::save_safetensors(dir + "/model.safetensors", {{"model.norm.weight", DType::i32, {4}, ones}}, {});
  io::Checkpoint ck = io::Checkpoint::open_dir(dir);
  std::vector<float> out(4);
  auto e = catch_as<FormatError>([&] { ck.read_f32("model.norm.weight", {4}, out.data()); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {dir + "/model.safetensors", "model.norm.weight", "I32", "floating-point"}));
}

// ---- tokenizers and datasets

TEST_F(hostile_input, a_tokenizer_without_tokens_is_refused) {
  auto e = catch_as<Error>([&] {
    text::Tokenizer::parse(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})", "empty/tokenizer.json", nullptr,
                           "");
  });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {"empty/tokenizer.json", "model.vocab", "empty"}));
}

TEST_F(hostile_input, tokenize_decode_refuses_ids_that_overflow) {
  for (const std::string ids : {"1 99999999999999999999", "99999999999999999999", "1 -1", "2 x 3", "4294967297"}) {
    Proc r = run("printf '%s' " + quote(ids) + " | " + kTokenize + " --tokenizer " + quote(kLlama3) + " --decode");
    EXPECT_EQ(r.code, 2) << ids << ": " << r.out << r.err;
    EXPECT_TRUE(names(r.err, {"stdin"})) << ids;
    EXPECT_TRUE(r.out.empty()) << ids << ": decoded " << r.out;
  }
  // stdin is bounded: an endless stream is refused at 256 MiB (a --jsonl line at 64 MiB), not read until memory
  // runs out.
  double s = 0;
  Proc z = run("head -c 300M /dev/zero | " + kTokenize + " --tokenizer " + quote(kLlama3), &s);
  EXPECT_EQ(z.code, 2) << z.err;
  EXPECT_TRUE(names(z.err, {"stdin", "256 MiB"}));
  Proc zl = run("head -c 100M /dev/zero | " + kTokenize + " --tokenizer " + quote(kLlama3) + " --jsonl", &s);
  EXPECT_EQ(zl.code, 2) << zl.err;
  EXPECT_TRUE(names(zl.err, {"stdin line 1", "64 MiB"}));
  Proc ok = run("printf '100 200' | " + kTokenize + " --tokenizer " + quote(kLlama3) + " --decode --no-special");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_FALSE(ok.out.empty());
}

TEST_F(hostile_input, a_dataset_of_empty_examples_is_refused) {
  const text::Tokenizer tok = text::Tokenizer::load(kLlama3);
  const std::string jsonl = path("empty.jsonl");
  write(jsonl, "{\"text\": \"\"}\n{\"text\": \"\"}\n\n{\"text\": \"\"}\n");
  auto e = catch_as<ConfigError>([&] { tokenize_dataset(DatasetSpec{jsonl, "completion", ""}, read(jsonl), tok); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {jsonl, "every one of its 3 examples is empty"}));
  const std::string txt = path("blank.txt");
  write(txt, "");
  auto e2 = catch_as<ConfigError>([&] { tokenize_dataset(DatasetSpec{txt, "completion", ""}, "", tok); });
  ASSERT_TRUE(e2);
  EXPECT_TRUE(names(e2->what(), {txt, "no token"}));
  // One example with text is enough.
  write(jsonl, "{\"text\": \"\"}\n{\"text\": \"hi\"}\n");
  EXPECT_EQ(tokenize_dataset(DatasetSpec{jsonl, "completion", ""}, read(jsonl), tok).size(), 2u);
}

// ---- metrics and logs on a full disk

TEST_F(hostile_input, metrics_and_logs_on_a_full_disk_warn_and_exit_nonzero_but_the_model_is_saved) {
  ASSERT_TRUE(fs::is_character_file("/dev/full"));
  const std::string base = kTrain + " --model " + quote(model()) + " --data " + quote(model() + "/tokens.bin") +
                           " --backend cpu --seq 16 "
                           "--steps 3 ";
  {
    const std::string save = path("full_metrics");
    const std::string cfg = path("full_metrics.yaml");
    write(cfg, "metrics_file: /dev/full\n");
    Proc r = run(base + "--config " + quote(cfg) + " --save " + quote(save));
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(names(r.err, {"warning", "metrics file /dev/full", "No space left on device"}));
    EXPECT_TRUE(fs::exists(save + "/model.safetensors")) << r.err;
    EXPECT_NO_THROW(io::Checkpoint::open_dir(save));
    EXPECT_TRUE(fs::is_character_file("/dev/full")) << "the metrics file replaced the device";
  }
  {
    const std::string save = path("full_stdout");
    Proc r = scratch_.run("( timeout 120 " + base + "--save " + quote(save) + " >/dev/full )");
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(names(r.err, {"warning", "writing failed"}));
    EXPECT_TRUE(fs::exists(save + "/model.safetensors")) << r.err;
  }
  {  // A named pipe nothing reads: refused at once, not waited on.
    const std::string fifo = path("metrics.fifo"), cfg = path("fifo_metrics.yaml");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    write(cfg, "metrics_file: " + fifo + "\n");
    double s = 0;
    Proc r = run(base + "--config " + quote(cfg), &s);
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_TRUE(names(r.err, {fifo, "nothing reads from it"}));
    EXPECT_LT(s, 20);
  }
  // The same run with room to write succeeds.
  Proc ok = run(base + "--save " + quote(path("room")));
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// A chat template from a checkpoint is input too: the parser and the evaluator recurse per level of parentheses,
// operator of a chain and open block, so a hostile template is refused by its size before it could overflow the stack.
TEST_F(hostile_input, deep_chat_templates_are_refused_naming_the_template_and_line) {
  using text::jinja::Template;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "more than 1024 tokens"},
      {"{{ 1" +
           [] {
             std::string s;
             for (int i = 0; i < 100000; ++i) s += " + 1";
             return s;
           }() +
           " }}",
       "more than 1024 tokens"},
      {[] {
         std::string s;
         for (int i = 0; i < 1000; ++i) s += "{% if true %}";
         return s + "x";
       }(),
       "nested deeper than 100 levels"},
  };
  for (const auto& [source, why] : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    auto e = catch_as<ConfigError>([&] { Template::parse(source, "hostile.jinja"); });
    ASSERT_TRUE(e) << why;
    EXPECT_TRUE(names(e->what(), {"hostile.jinja", "line 1", why})) << e->what();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  }
  // Real templates are far inside both limits: 99 nested blocks and a tag of 601 tokens still render.
  std::string ok;
  for (int i = 0; i < 99; ++i) ok += "{% if true %}";
  ok += "{{ 1";
  for (int i = 0; i < 300; ++i) ok += " + 0";
  ok += " }}";
  for (int i = 0; i < 99; ++i) ok += "{% endif %}";
  EXPECT_EQ(Template::parse(ok, "ok.jinja").render(nlohmann::ordered_json::object()).text, "1");
}

// Hostile chat templates render to a clean error naming the template, the line and the limit, within seconds and
// without exhausting memory: huge loops and ranges, recursion and fan-out through macros, giant repetition, text
// that doubles, lists grown one item at a time, values nested without end, a namespace holding itself, and
// integers past 64 bits. The same templates are seeds of fuzz_chat_template (tests/fuzz/make_corpus.py).
TEST_F(hostile_input, hostile_chat_templates_end_in_a_clean_error_within_seconds) {
  using text::jinja::Template;
  struct Case {
    std::string source, why;
  };
  const std::vector<Case> cases = {
      {"{% for i in range(10**12) %}x{% endfor %}", "range() of more than 100000 numbers"},
      {"{% for i in range(100000) %}\n{% for j in range(100000) %}{% endfor %}{% endfor %}",
       "more work than a chat template does"},
      {"{{ 'a' * 10**12 }}", "more than 64 MiB"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       "more work than a chat template does"},
      {"{{ ('a' * 40000000) ~ ('a' * 40000000) }}", "more than 64 MiB"},
      {"{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
       "more work than a chat template does"},
      {"{% set s = 'x' * 1000000 %}{{ ([s] * 1000000) | length }}", "more work than a chat template does"},
      {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recurses too deep"},
      {"{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
       "more work than a chat template does"},
      {"{{ 2 ** 10**18 }}", "integer overflow"},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
      {"{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow"},
      {"{{ range(100000) | join('y' * 10000000) }}", "more than 64 MiB"},
      {"{{ ('a' * 1000000).replace('a', 'b' * 1000000) }}", "more than 64 MiB"},
      {"{{ 'a\nb' | indent(10**12) }}", "indent() width must be 0 to 4096"},
      {"{{ [[1]] | tojson(indent=10**9) }}", "tojson indent must be at most 4096"},
      {"{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}",
       "nested deeper than 1000 levels"},
      {"{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}", "a namespace inside a namespace"},
      {"{{ '%d' % 1e300 }}", "integers are 64-bit"},
      {"{{ (-9223372036854775808 - 1) // -1 }}", "is past 64 bits"},  // fuzz_chat_template's first finding
      {"{{ '{99999999999999999999}'.format(1) }}", "is past 64 bits"},
      {"{{ (',' * 60000000).split(',') | length }}", "more work than a chat template does"},
      {"{{ 'a\\xtz' }}", "2 hex digits expected"},  // std::stoul threw out of the lexer (fuzz_chat_template)
      {"{{ '\\U00110000' }}", "past U+10FFFF"},
      {"{{ ('a' * 60000000) | list | length }}", "more work than a chat template does"},
      {"{{ ('a' * 60000000)[::-1] | length }}", "more work than a chat template does"},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    auto e = catch_as<ConfigError>(
        [&] { Template::parse(c.source, "hostile.jinja").render(nlohmann::ordered_json::object()); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(e) << c.source;
    EXPECT_TRUE(names(e->what(), {"hostile.jinja, line ", c.why})) << c.source << "\n" << e->what();
    EXPECT_LT(s, 10.0) << c.source;
  }
  // A needle that almost matches everywhere is found (or not) in linear time, as Python finds it.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string found =
      Template::parse(
          "{% set h = 'a' * 10000000 %}{{ ('a' * 1000000 ~ 'b') in h }} {{ h.find('a' * 999999 ~ 'b') }} "
          "{{ h.rfind('b' ~ 'a' * 999999) }} {{ h.count('a' * 5000000) }}",
          "needle.jinja")
          .render(nlohmann::ordered_json::object())
          .text;
  EXPECT_EQ(found, "False -1 -1 2");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  // The line is the one that did the work: the inner loop of the nested pair is on line 2.
  auto e = catch_as<ConfigError>(
      [&] { Template::parse(cases[1].source, "hostile.jinja").render(nlohmann::ordered_json::object()); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(names(e->what(), {"hostile.jinja, line 2:"})) << e->what();
}

}  // namespace
}  // namespace strata
