// The command-line tools end to end: strata-make-tiny writes a checkpoint that the readers accept,
// strata-train trains it (JSON lines, plan table, saving full models and PEFT adapters), and bad
// usages exit 2 (usage) or 1 (runtime) with a message naming the flag or path.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/dtype.h"
#include "engine/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/tokens.h"
#include "model/llama/llama.h"
#include "tests/cpu/spawn_util.h"
#include "tests/cpu/tool_runner.h"

namespace strata {
namespace {

using namespace tool_test;

namespace fs = std::filesystem;
using json = nlohmann::json;

class tools : public ::testing::Test {
 protected:
  // One tiny model for the whole suite (it takes a moment to write).
  static void SetUpTestSuite() { scratch_.create("strata_tools"); }
  static void TearDownTestSuite() { scratch_.remove(); }

  void SetUp() override {
    ASSERT_TRUE(scratch_.ok()) << "mkdtemp failed";
    ASSERT_TRUE(tool_test::tools_built());
    if (!tiny_made_) {
      Proc r = run(kMakeTiny + " " + quote(model()) +
                   " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 64 --tokens 5000");
      ASSERT_EQ(r.code, 0) << r.err;
      tiny_made_ = true;
    }
  }

  static std::string model() { return scratch_.path("tiny"); }
  static std::string data() { return model() + "/tokens.bin"; }
  static std::string path(const std::string& name) { return scratch_.path(name); }

  static Proc run(const std::string& cmd) { return scratch_.run(cmd); }

  static std::string train_cmd(const std::string& extra) {
    return kTrain + " --model " + quote(model()) + " --data " + quote(data()) + " --backend cpu " + extra;
  }

  static tool_test::Scratch scratch_;
  static bool tiny_made_;
};
tool_test::Scratch tools::scratch_;
bool tools::tiny_made_ = false;

TEST_F(tools, make_tiny_writes_a_loadable_checkpoint) {
  for (const char* f : {"config.json", "model.safetensors", "tokens.bin"})
    EXPECT_TRUE(fs::exists(model() + "/" + f)) << f;

  io::LlamaConfig c = io::read_llama_config(model());
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.intermediate_size, 64);
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_FALSE(c.tie_word_embeddings);

  io::Checkpoint ck = io::Checkpoint::open_dir(model());
  auto want = llama_weight_shapes(c);
  ASSERT_EQ(want.size(), 1u + 2u * 9u + 2u);  // embed, 9 per layer, final norm, lm_head
  EXPECT_EQ(ck.names().size(), want.size());
  for (auto& [name, shape] : want) {
    ASSERT_TRUE(ck.has(name)) << name;
    const io::TensorInfo& ti = ck.info(name);
    EXPECT_EQ(ti.shape, std::vector<int64_t>(shape.d.begin(), shape.d.begin() + shape.nd)) << name;
    EXPECT_EQ(ti.dtype, DType::f32) << name;
  }
  // Norms start at one, matrices are small random numbers.
  std::vector<float> norm(32), q(32 * 32);
  ck.read_f32("model.layers.0.input_layernorm.weight", {32}, norm.data());
  for (float x : norm) EXPECT_EQ(x, 1.0f);
  ck.read_f32("model.layers.0.self_attn.q_proj.weight", {32, 32}, q.data());
  float amax = 0;
  for (float x : q) amax = std::max(amax, std::fabs(x));
  EXPECT_GT(amax, 0.0f);
  EXPECT_LT(amax, 0.2f);

  std::vector<int32_t> toks = io::read_tokens(data(), c.vocab_size, 1);
  EXPECT_EQ(toks.size(), 5000u);
}

// --dtype bf16: the same generator stream, each value rounded to bf16 (nearest even); the reader
// widens them back. The f32 file (filled in parallel chunks) holds the values the bf16 one rounds.
TEST_F(tools, make_tiny_bf16_holds_the_f32_weights_rounded) {
  const std::string dims = " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 64 --tokens 5000";
  Proc r = run(kMakeTiny + " " + quote(path("tiny16")) + dims + " --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(io::read_llama_config(path("tiny16")).torch_dtype, "bfloat16");
  io::Checkpoint f32 = io::Checkpoint::open_dir(model()), b16 = io::Checkpoint::open_dir(path("tiny16"));
  size_t compared = 0;
  for (auto& [name, shape] : llama_weight_shapes(io::read_llama_config(model()))) {
    ASSERT_EQ(b16.info(name).dtype, DType::bf16) << name;
    std::vector<int64_t> d(shape.d.begin(), shape.d.begin() + shape.nd);
    std::vector<float> a(size_t(shape.numel())), b(a.size());
    f32.read_f32(name, d, a.data());
    b16.read_f32(name, d, b.data());
    for (size_t i = 0; i < a.size(); ++i, ++compared)
      ASSERT_EQ(b[i], bf16_to_f32(f32_to_bf16(a[i]))) << name << "[" << i << "]";
  }
  EXPECT_GT(compared, 10000u);
  r = run(kMakeTiny + " " + quote(path("tiny8")) + dims + " --dtype f16");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--dtype"), std::string::npos) << r.err;
}

TEST_F(tools, make_tiny_rejects_bad_usage) {
  Proc r = run(kMakeTiny + " " + quote(path("bad1")) + " --hidden 30 --heads 4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--hidden"), std::string::npos) << r.err;
  r = run(kMakeTiny);  // no output directory
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("usage"), std::string::npos) << r.err;
  r = run(kMakeTiny + " " + quote(path("bad2")) + " --layers two");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--layers"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("bad2/model.safetensors")));
}

// Issue 15: sizes that were truncated to int (--layers 4294967298 wrote 2 layers) or a seed that
// wrapped; each exits 2 naming the flag and writes nothing.
TEST_F(tools, make_tiny_out_of_range_flags_exit_2_naming_the_flag) {
  struct Case {
    std::string args, flag;
  };
  for (const Case& c : std::vector<Case>{
           {"--layers 4294967298", "--layers"},  // 2^32 + 2
           {"--hidden 4294967360", "--hidden"},
           {"--heads 4294967300", "--heads"},
           {"--kv-heads 4294967298", "--kv-heads"},
           {"--intermediate 4294967424", "--intermediate"},
           {"--vocab 4294967552", "--vocab"},
           {"--max-pos 4294969344", "--max-pos"},
           {"--layers 0", "--layers"},
           {"--seed -1", "--seed"},  // 2^64 - 1 before
           {"--tokens -5", "--tokens"},
       }) {
    const std::string out = path("tiny_bad");
    Proc r = run(kMakeTiny + " " + quote(out) + " " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.flag + " must be"), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_FALSE(fs::exists(out + "/model.safetensors")) << c.args;
    fs::remove_all(out);
  }
}

// Issue 15: strata-plan read its integers through int(), so --seq 4294967312 forecast seq 16.
TEST_F(tools, plan_out_of_range_flags_exit_2_naming_the_flag) {
  struct Case {
    std::string args, flag;
  };
  for (const Case& c : std::vector<Case>{
           {"--seq 4294967312", "--seq"},
           {"--seq 16 --batch 4294967297", "--batch"},
           {"--seq 16 --loss-chunk 4294967808", "--loss-chunk"},
           {"--seq 16 --lora-rank 4294967312", "--lora-rank"},
           {"--seq 16 --lora-rank -4", "--lora-rank"},
           {"--seq 16 --lora-alpha nan", "--lora-alpha"},
           {"--seq 16 --preset gradient_checkpointing --every 4294967297", "--every"},
           {"--seq 16 --preset gradient_checkpointing --every 0", "--every"},
       }) {
    Proc r = run(kPlan + " --model " + quote(model()) + " --mirror cpu --device-name cpu " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("strata-plan: error: " + c.flag + " must be"), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out.find("peak device memory"), std::string::npos) << c.args << " forecast:\n" << r.out;
  }
  Proc ok = run(kPlan + " --model " + quote(model()) + " --mirror cpu --device-name cpu --seq 16");
  EXPECT_EQ(ok.code, 0) << ok.err;
  Proc missing = run(kPlan + " --model " + quote(model()) + " --mirror cpu --device-name cpu");
  EXPECT_EQ(missing.code, 2) << missing.err;
  EXPECT_NE(missing.err.find("--seq"), std::string::npos) << missing.err;
}

// Issue 13: --max-seq answers the longest sequence under the budgets; strata-plan --budget agrees
// that it fits and the next multiple does not.
// strata-plan --write-config gives strata-train everything it needs: the plan and the shape, and
// base_model and data; the config then trains alone. A built-in name writes no base_model.
TEST_F(tools, plan_write_config_runs_alone_in_strata_train) {
  const std::string yaml = path("alone.yaml");
  Proc r = run(kPlan + " --model " + quote(model()) + " --mirror cpu --device-name cpu --seq 16 --batch 2 " +
               "--budget 64MiB --data " + quote(data()) + " --write-config " + quote(yaml));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string text = slurp(yaml);
  EXPECT_NE(text.find("base_model: "), std::string::npos) << text;
  EXPECT_NE(text.find("data: "), std::string::npos) << text;
  Proc t = run(kTrain + " --config " + quote(yaml) + " --backend cpu --steps 2 --json");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(lines(t.out).size(), 2u) << t.out;
  const std::string named = path("named.yaml");
  ASSERT_EQ(run(kPlan + " --model tiny --seq 16 --write-config " + quote(named)).code, 0);
  EXPECT_EQ(slurp(named).find("base_model"), std::string::npos) << slurp(named);
}

TEST_F(tools, plan_max_seq_prints_the_longest_sequence) {
  // Untiled: with MLP tiling the tiny model reaches the 16384 limit under this budget.
  const std::string plan = kPlan + " --model tiny --mirror cpu --device-name cpu --budget 64MiB --mlp-tiles 1 ";
  const std::string yaml = path("max_seq.yaml");
  Proc r = run(plan + "--max-seq --seq-limit 16384 --json --write-config " + quote(yaml));
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);  // one object on stdout
  const int seq = j["max_seq"]["seq"];
  ASSERT_TRUE(j["max_seq"]["found"]) << r.out;
  EXPECT_FALSE(j["max_seq"]["at_limit"]) << r.out;
  EXPECT_EQ(seq % 1024, 0);
  EXPECT_EQ(j["seq"], seq);
  EXPECT_EQ(j["max_seq"]["next_seq"], seq + 1024);
  EXPECT_LE(j["forecast"]["high_water_bytes"].get<size_t>(), size_t(64) << 20);
  EXPECT_NE(slurp(yaml).find("sequence_len: " + std::to_string(seq) + "\n"), std::string::npos) << slurp(yaml);
  EXPECT_EQ(run(plan + "--seq " + std::to_string(seq)).code, 0);
  EXPECT_EQ(run(plan + "--seq " + std::to_string(seq + 1024)).code, 1);

  Proc text = run(plan + "--max-seq --seq-limit 16384");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("longest sequence: " + std::to_string(seq) + " tokens\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("chosen plan: "), std::string::npos) << text.out;
}

// --budget with ZeRO over 3 ranks: the ranks' shares of the state differ, so the plan must fit the largest rank's
// peak (a budget just under it, where keep-everything fits the other ranks): every rank's peak is listed, each
// within the budget, and the forecast shown is the largest rank's.
TEST_F(tools, plan_budget_with_zero_fits_every_rank) {
  const std::string plan = kPlan + " --model tiny --mirror cpu --device-name cpu --seq 256 --batch 2 --gpus 3 ";
  for (int stage : {1, 2}) {
    const std::string z = fmt::format("--zero-stage {} ", stage);
    std::vector<size_t> keep;
    for (int q = 0; q < 3; ++q) {
      Proc f = run(plan + z + fmt::format("--rank {} --json", q));
      ASSERT_EQ(f.code, 0) << f.err;
      keep.push_back(json::parse(f.out)["forecast"]["high_water_bytes"].get<size_t>());
    }
    const size_t budget = *std::max_element(keep.begin(), keep.end()) - 1;
    Proc r = run(plan + z + fmt::format("--budget {} --json", budget));
    ASSERT_EQ(r.code, 0) << r.err;
    const json j = json::parse(r.out);
    const std::vector<size_t> peaks = j["planner"]["rank_peak_bytes"];
    ASSERT_EQ(peaks.size(), 3u) << r.out;
    for (size_t q = 0; q < 3; ++q) EXPECT_LE(peaks[q], budget) << "stage " << stage << ", rank " << q;
    const size_t top = *std::max_element(peaks.begin(), peaks.end());
    EXPECT_EQ(j["planner"]["max_rank_peak_bytes"].get<size_t>(), top);
    EXPECT_EQ(j["forecast"]["peak_bytes"].get<size_t>(), top);
    EXPECT_EQ(j["rank"], j["planner"]["max_rank"]);
    EXPECT_EQ(peaks[j["planner"]["max_rank"].get<size_t>()], top);
    EXPECT_LE(j["forecast"]["high_water_bytes"].get<size_t>(), budget);
    EXPECT_NE(j["planner"]["label"], "keep everything") << r.out;
    Proc text = run(plan + z + fmt::format("--budget {}", budget));
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_NE(text.out.find("ranks: peak device rank 0 "), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("the plan fits every rank"), std::string::npos) << text.out;
  }
}

TEST_F(tools, plan_max_seq_and_recipe_flag_errors_exit_2_naming_the_flags) {
  const std::string plan = kPlan + " --model tiny --mirror cpu --device-name cpu ";
  Proc both = run(plan + "--max-seq --seq 10 --budget 64MiB");
  EXPECT_EQ(both.code, 2) << both.err;
  EXPECT_NE(both.err.find("--max-seq and --seq"), std::string::npos) << both.err;
  EXPECT_EQ(both.out.find("longest sequence"), std::string::npos) << both.out;
  Proc no_budget = run(plan + "--max-seq");
  EXPECT_EQ(no_budget.code, 2) << no_budget.err;
  EXPECT_NE(no_budget.err.find("--budget"), std::string::npos) << no_budget.err;
  Proc q = run(plan + "--seq 16 --optimizer-state int4");
  EXPECT_EQ(q.code, 2) << q.err;
  EXPECT_NE(q.err.find("--optimizer-state"), std::string::npos) << q.err;
  Proc m = run(plan + "--seq 16 --master-weights fp16");
  EXPECT_EQ(m.code, 2) << m.err;
  EXPECT_NE(m.err.find("--master-weights"), std::string::npos) << m.err;
  // The recipe reaches the forecast: 8-bit moments take less than fp32 ones.
  Proc q8 = run(plan + "--seq 16 --json --optimizer-state 8bit --master-weights none");
  ASSERT_EQ(q8.code, 0) << q8.err;
  Proc fp32 = run(plan + "--seq 16 --json");
  ASSERT_EQ(fp32.code, 0) << fp32.err;
  json a = json::parse(q8.out), b = json::parse(fp32.out);
  EXPECT_EQ(a["optimizer_state"], "8bit");
  EXPECT_EQ(a["master_weights"], "none");
  EXPECT_LT(a["forecast"]["persistent_bytes"].get<size_t>(), b["forecast"]["persistent_bytes"].get<size_t>());
}

TEST_F(tools, train_json_prints_one_object_per_step) {
  Proc r = run(train_cmd("--json --steps 5 --seq 16 --batch 2"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 5u) << "stdout must carry only the JSON lines:\n" << r.out;
  for (size_t i = 0; i < ls.size(); ++i) {
    json j;
    try {
      j = json::parse(ls[i]);
    } catch (const json::exception& e) {
      FAIL() << "line " << i << " is not JSON: " << ls[i] << " (" << e.what() << ")";
    }
    ASSERT_TRUE(j.is_object()) << ls[i];
    for (const char* k : {"step", "loss", "tokens_per_s", "peak_device_bytes"})
      ASSERT_TRUE(j.contains(k)) << k << " missing in " << ls[i];
    EXPECT_EQ(j["step"].get<int>(), int(i) + 1);
    double loss = j["loss"].get<double>();
    EXPECT_TRUE(std::isfinite(loss)) << ls[i];
    EXPECT_GT(loss, 0.0) << ls[i];
    EXPECT_LT(loss, 2.0 * std::log(64.0)) << ls[i];  // near ln(vocab) for a fresh tiny model
    EXPECT_GT(j["peak_device_bytes"].get<double>(), 0.0) << ls[i];
    EXPECT_GE(j["tokens_per_s"].get<double>(), 0.0) << ls[i];
  }
  // The human-readable summary and the plan table go to stderr in JSON mode.
  EXPECT_NE(r.err.find("plan ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("done: 5 steps"), std::string::npos) << r.err;
  // Without a config the plan keeps everything.
  EXPECT_EQ(r.err.find("recompute"), std::string::npos) << r.err;
}

// strata-bench on the cpu backend with a plan config whose path needs escaping: one JSON object
// on stdout naming the config and its plan, the setup line and the summary on stderr.
TEST_F(tools, bench_with_a_config_prints_one_json_object_naming_it) {
  const std::string cfg = path("plan \"gc\" \\ 1.yaml");
  {
    std::ofstream f(cfg);
    f << "gradient_checkpointing: true\nloss_chunk_tokens: 8\nmax_grad_norm: 0\n";
  }
  Proc r = run(kBench + " --backend cpu --seq 16 --steps 2 --warmup 1 --config " + quote(cfg));
  ASSERT_EQ(r.code, 0) << r.err;
  auto ls = lines(r.out);
  ASSERT_EQ(ls.size(), 1u) << r.out;
  json j;
  ASSERT_NO_THROW(j = json::parse(ls[0])) << ls[0];
  EXPECT_EQ(j["engine"], "strata");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["seq"].get<int>(), 16);
  EXPECT_EQ(j["plan"].get<std::string>(), "config:" + cfg + " (gradient_checkpointing)");
  EXPECT_GT(j["step_s"].get<double>(), 0.0);
  EXPECT_GT(j["peak_arena_bytes"].get<double>(), 0.0);
  EXPECT_TRUE(std::isfinite(j["loss"].get<double>()));
  EXPECT_EQ(j["max_grad_norm"].get<double>(), 0.0) << "the config's max_grad_norm applies";
  EXPECT_NE(r.err.find("strata-bench: setup "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" tok/s, step "), std::string::npos) << r.err;
  // --plan and --config exclude each other: a usage error naming both.
  Proc bad = run(kBench + " --backend cpu --seq 16 --plan gc --config " + quote(cfg));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--plan and --config exclude each other"), std::string::npos) << bad.err;
}

TEST_F(tools, train_with_gradient_checkpointing_config_shows_recompute) {
  const std::string yaml = path("gc.yaml");
  std::ofstream(yaml) << "gradient_checkpointing: true\n";
  Proc j = run(train_cmd("--config " + quote(yaml) + " --json --steps 2 --seq 16 --batch 2"));
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_NE(j.err.find("plan (gradient_checkpointing)"), std::string::npos) << j.err;
  EXPECT_NE(j.err.find("recompute"), std::string::npos) << j.err;
  EXPECT_EQ(j.out.find("plan ("), std::string::npos) << "plan table leaked into JSON stdout:\n" << j.out;
  // Replays happened: the recompute decision is real, not just printed.
  auto ls = lines(j.out);
  ASSERT_EQ(ls.size(), 2u) << j.out;
  EXPECT_GT(json::parse(ls[0])["recomputed_nodes"].get<long>(), 0) << ls[0];

  Proc t = run(train_cmd("--config " + quote(yaml) + " --steps 1 --seq 16 --batch 2"));
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("recompute"), std::string::npos) << t.out;  // text mode: plan on stdout
  EXPECT_NE(t.out.find("step    1/1"), std::string::npos) << t.out;
}

TEST_F(tools, train_bad_usage_exits_2_naming_the_flag) {
  struct Case {
    std::string args, flag;
  };
  for (const Case& c : std::vector<Case>{
           {"--data " + quote(data()) + " --steps 1", "--model"},
           {"--model " + quote(model()) + " --data " + quote(data()) + " --seq abc", "--seq"},
           {"--model " + quote(model()) + " --data " + quote(data()) + " --foo 3", "--foo"},
           {"--model " + quote(model()) + " --steps 1", "--data"},
           {"--model " + quote(model()) + " --data " + quote(data()) + " --lr fast", "--lr"},
           {"--model " + quote(model()) + " --data " + quote(data()) + " --batch 0", "--batch"},
           {"--model " + quote(model()) + " --data " + quote(data()) + " --device-memory 3parsecs", "--device-memory"},
           {"--model " + quote(model()) + " --data " + quote(data()) + " --seq", "--seq"},
       }) {
    Proc r = run(kTrain + " " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << c.args << "\n" << r.err;
    // One line for the error, one for the hint: not the whole usage.
    EXPECT_EQ(r.err.rfind("strata-train: error: ", 0), 0u) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("\nsee strata-train --help\n"), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

// Issue 15: values that were truncated or silently accepted; each exits 2 naming the flag.
TEST_F(tools, train_out_of_range_flags_exit_2_naming_the_flag) {
  struct Case {
    std::string args, flag;
  };
  for (const Case& c : std::vector<Case>{
           {"--seq 4294967312", "--seq"},  // 2^32 + 16: trained with seq 16 before
           {"--steps 4294967312", "--steps"},
           {"--batch 4294967312", "--batch"},
           {"--lora-rank -1", "--lora-rank"},  // a full fine-tune before
           {"--weight-decay inf", "--weight-decay"},
           {"--weight-decay -0.5", "--weight-decay"},
           {"--max-grad-norm nan", "--max-grad-norm"},
           {"--warmup-steps -3", "--warmup-steps"},
           {"--loss-chunk 0", "--loss-chunk"},
           {"--lr inf", "--lr"},
           {"--lora-alpha nan", "--lora-alpha"},
           {"--seed -1", "--seed"},
       }) {
    Proc r = run(train_cmd("--steps 1 " + c.args));
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out.find("step"), std::string::npos) << c.args << " trained:\n" << r.out;
  }
}

// A YAML value's error names the file and the key, not the flag that would override it.
TEST_F(tools, train_config_errors_name_the_yaml_file_and_key) {
  struct Case {
    std::string yaml, key;
  };
  for (const Case& c : std::vector<Case>{
           {"[a, b]: 1\n", "[a, b]"},  // SIGABRT before
           {"plan: {[a, b]: keep}\n", "plan"},
           {"? {a: 1}\n: 2\n", "{a: 1}"},
           {"sequence_len: 0\n", "sequence_len"},
           {"learning_rate: -1\n", "learning_rate"},
           {"lora_r: -8\n", "lora_r"},
           {"lora_target_modules: []\n", "lora_target_modules"},
           {"memory_budget: 0\n", "memory_budget"},
           {"loss_chunk_tokens: 0\n", "loss_chunk_tokens"},
           {"adam_beta2: 1\n", "adam_beta2"},
       }) {
    const std::string cfg = path("bad.yaml");
    std::ofstream(cfg) << c.yaml;
    Proc r = run(train_cmd("--steps 1 --config " + quote(cfg)));
    EXPECT_EQ(r.code, 2) << c.yaml << "\n" << r.err;
    EXPECT_NE(r.err.find("strata-train: error: " + cfg + ":"), std::string::npos) << c.yaml << "\n" << r.err;
    EXPECT_NE(r.err.find(c.key), std::string::npos) << c.yaml << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(".cpp:"), std::string::npos) << "a source location: " << r.err;
    const std::string first = r.err.substr(0, r.err.find('\n'));  // the hint line follows
    EXPECT_EQ(first.find("--"), std::string::npos) << "names a flag: " << first;
  }
}

TEST_F(tools, bench_config_errors_name_the_yaml_file) {
  const std::string cfg = path("bench_bad.yaml");
  std::ofstream(cfg) << "[a, b]: 1\n";
  Proc r = run(kBench + " --shape tiny --seq 8 --steps 1 --warmup 0 --backend cpu --config " + quote(cfg));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(cfg), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("plain string key"), std::string::npos) << r.err;
  Proc s = run(kBench + " --shape tiny --seq 4294967312 --backend cpu");
  EXPECT_EQ(s.code, 2) << s.err;
  EXPECT_NE(s.err.find("--seq must be an integer >= 1 (at most 16777216), got 4294967312"), std::string::npos) << s.err;
}

TEST_F(tools, train_config_that_is_a_directory_is_refused) {
  Proc r = run(train_cmd("--steps 1 --config " + quote(path(""))));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("step"), std::string::npos) << r.out;
}

// A SIGTERM or SIGINT mid-run ends strata-train as the signal does (the exit status says so) once
// the step in progress is done and a checkpoint is saved: one complete checkpoint-<step> in --save's
// directory, no save temp, no offload file of the disk tier (resume: resume_test). (A second
// signal mid-save: io_signals_test, through the same unlinking of temps.)
TEST_F(tools, train_stopped_by_sigterm_or_sigint_saves_a_checkpoint_and_leaves_no_temp) {
  const std::string cfg = path("disk_tier.yaml");
  std::ofstream(cfg) << "activation_offloading: disk\n";
  for (int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string out = path("killed_out"), offload = path("killed_offload");
    fs::create_directories(offload);
    test_util::Child c({kTrain, "--model", model(), "--data", data(), "--backend", "cpu", "--steps", "1000000", "--seq",
                        "8", "--config", cfg, "--offload-dir", offload, "--save", out});
    ASSERT_TRUE(c.ok());
    std::string line;
    bool stepping = false;
    while (!stepping && c.read_line(line, std::chrono::seconds(60))) stepping = line.starts_with("step ");
    ASSERT_TRUE(stepping) << "strata-train did not reach its first step";
    ASSERT_EQ(::kill(c.pid(), sig), 0);
    const int status = c.wait(std::chrono::seconds(20));
    ASSERT_NE(status, -1) << "strata-train did not end on the signal";
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "wait status " << status;
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
    ASSERT_EQ(names.size(), 2u) << out << ": a checkpoint and metrics.jsonl";
    std::sort(names.begin(), names.end());
    EXPECT_TRUE(names[0].starts_with("checkpoint-")) << names[0];
    EXPECT_EQ(names[1], "metrics.jsonl");
    EXPECT_TRUE(fs::is_regular_file(out + "/" + names[0] + "/trainer_state.json")) << names[0];
    EXPECT_TRUE(fs::is_empty(offload)) << offload;
    fs::remove_all(out);
    fs::remove_all(offload);
  }
}

// Before: open() waited for a writer; `timeout` turns a hang into exit 124.
TEST_F(tools, train_config_that_is_a_fifo_is_refused_at_once) {
  const std::string fifo = path("config_fifo.yaml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << fifo;
  Proc r = run("timeout 20 " + train_cmd("--steps 1 --config " + quote(fifo)));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(fifo + ": the config file is a named pipe (FIFO)"), std::string::npos) << r.err;
  ::unlink(fifo.c_str());
}

// --profile naming a FIFO blocked forever in open() (strata-plan, strata-train --budget): refused at once.
TEST_F(tools, profile_that_is_a_fifo_is_refused_at_once) {
  const std::string fifo = path("profile_fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << fifo;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& cmd : {train_cmd("--steps 1 --budget 1GiB --profile " + quote(fifo)),
                                 kPlan + " --model " + quote(model()) + " --seq 16 --profile " + quote(fifo)}) {
    Proc r = run("timeout 20 " + cmd);
    EXPECT_GE(r.code, 1) << cmd << "\n" << r.err;
    EXPECT_LE(r.code, 2) << cmd << "\n" << r.err;  // not 124: timeout's
    EXPECT_NE(r.err.find(fifo + ": the device profile is not a regular file"), std::string::npos) << r.err;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15.0);
  ::unlink(fifo.c_str());
}

// Before: the run trained to the end, then failed to save and lost its work.
TEST_F(tools, train_save_into_an_impossible_dir_fails_before_the_first_step) {
  const std::string file = path("a_file");
  std::ofstream(file) << "x";
  for (const std::string& out : {file + "/out", std::string("/proc/strata_no_such/out")}) {
    for (const std::string& mode : {std::string(""), std::string("--lora-rank 2 ")}) {
      Proc r = run(train_cmd(mode + "--steps 3 --seq 8 --save " + quote(out)));
      EXPECT_EQ(r.code, 1) << out << "\n" << r.err;
      EXPECT_NE(r.err.find(out + ": cannot save"), std::string::npos) << r.err;
      EXPECT_EQ(r.out.find("step "), std::string::npos) << "trained before failing:\n" << r.out;
    }
  }
}

TEST_F(tools, train_missing_model_dir_exits_1_naming_the_path) {
  const std::string missing = path("no_such_model");
  Proc r = run(kTrain + " --model " + quote(missing) + " --data " + quote(data()) + " --backend cpu --steps 1");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find(missing), std::string::npos) << r.err;
}

TEST_F(tools, train_bad_token_file_exits_1_naming_the_file) {
  const std::string toks = path("big_ids.bin");
  io::write_tokens(toks, std::vector<int32_t>(100, 64));  // id 64 == vocab_size
  Proc r = run(kTrain + " --model " + quote(model()) + " --data " + quote(toks) + " --backend cpu --steps 1 --seq 8");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find(toks), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("vocab_size"), std::string::npos) << r.err;
}

TEST_F(tools, train_save_writes_a_model_that_loads_again) {
  const std::string out = path("saved_full");
  Proc r = run(train_cmd("--steps 3 --seq 16 --batch 2 --lr 0.01 --save " + quote(out)));
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(fs::exists(out + "/config.json"));
  ASSERT_TRUE(fs::exists(out + "/model.safetensors"));

  io::LlamaConfig orig = io::read_llama_config(model());
  io::LlamaConfig c = io::read_llama_config(out);
  EXPECT_EQ(c.num_hidden_layers, orig.num_hidden_layers);
  EXPECT_EQ(c.hidden_size, orig.hidden_size);
  EXPECT_EQ(c.num_key_value_heads, orig.num_key_value_heads);
  EXPECT_EQ(c.vocab_size, orig.vocab_size);

  // The whole model loads through the same path strata-train uses.
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, c, ModelOptions{});
  EXPECT_NO_THROW(m.load(out));

  // ... and training changed the weights (the save is not a copy of the input).
  io::Checkpoint a = io::Checkpoint::open_dir(model()), b = io::Checkpoint::open_dir(out);
  std::vector<float> wa(64 * 32), wb(64 * 32);
  a.read_f32("model.layers.0.mlp.gate_proj.weight", {64, 32}, wa.data());
  b.read_f32("model.layers.0.mlp.gate_proj.weight", {64, 32}, wb.data());
  double diff = 0;
  for (size_t i = 0; i < wa.size(); ++i) diff = std::max(diff, double(std::fabs(wa[i] - wb[i])));
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.1);  // three small AdamW steps
}

// pad_vocab_multiple end to end: a 67-token vocabulary trains padded to 128 (the default) and
// unpadded (--pad-vocab 1) to the same saved file, byte for byte, of 67 rows; strata-bench reports
// the padded count it ran; a bad --pad-vocab exits 2 naming the flag.
TEST_F(tools, pad_vocab_trains_to_the_unpadded_files_and_is_checked) {
  const std::string tiny = path("tiny67");
  Proc mk = run(kMakeTiny + " " + quote(tiny) +
                " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 67 --tokens 3000");
  ASSERT_EQ(mk.code, 0) << mk.err;
  auto train = [&](const std::string& out, const std::string& extra) {
    return run(kTrain + " --model " + quote(tiny) + " --data " + quote(tiny + "/tokens.bin") +
               " --backend cpu --steps 3 --seq 16 --batch 2 --lr 0.01 --save " + quote(out) + " " + extra);
  };
  Proc padded = train(path("pad67_on"), ""), unpadded = train(path("pad67_off"), "--pad-vocab 1");
  ASSERT_EQ(padded.code, 0) << padded.err;
  ASSERT_EQ(unpadded.code, 0) << unpadded.err;
  EXPECT_NE((padded.out + padded.err).find("vocab 67 (padded to 128 in memory)"), std::string::npos) << padded.out;
  EXPECT_EQ((unpadded.out + unpadded.err).find("padded to"), std::string::npos) << unpadded.out;
  const std::string a = slurp(path("pad67_on") + "/model.safetensors"),
                    b = slurp(path("pad67_off") + "/model.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the padded run's saved model differs from the unpadded run's";
  io::SafetensorsFile f = io::SafetensorsFile::open(path("pad67_on") + "/model.safetensors");
  EXPECT_EQ(f.find("model.embed_tokens.weight")->shape, (std::vector<int64_t>{67, 32}));

  Proc bench = run(kBench + " --shape tiny --seq 16 --steps 1 --warmup 0 --backend cpu --pad-vocab 100");
  ASSERT_EQ(bench.code, 0) << bench.err;
  const json j = json::parse(bench.out);
  EXPECT_EQ(j["vocab"], 256);
  EXPECT_EQ(j["padded_vocab"], 300);

  for (const std::string& tool : {kTrain, kPlan, kBench}) {
    Proc bad = run(tool + " --model " + quote(tiny) + " --seq 16 --pad-vocab 0");
    EXPECT_EQ(bad.code, 2) << tool << ": " << bad.err;
    EXPECT_NE(bad.err.find("--pad-vocab"), std::string::npos) << tool << ": " << bad.err;
  }
}

TEST_F(tools, train_lora_saves_a_peft_adapter) {
  const std::string out = path("saved_lora");
  Proc r = run(train_cmd("--lora-rank 4 --steps 3 --seq 16 --batch 2 --lr 0.01 --save " + quote(out)));
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(fs::exists(out + "/adapter_config.json"));
  ASSERT_TRUE(fs::exists(out + "/adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));  // the base is frozen: not written

  json cfg = json::parse(slurp(out + "/adapter_config.json"));
  EXPECT_EQ(cfg["r"].get<int>(), 4);
  EXPECT_EQ(cfg["peft_type"].get<std::string>(), "LORA");
  ASSERT_TRUE(cfg["target_modules"].is_array());
  std::vector<std::string> targets = cfg["target_modules"].get<std::vector<std::string>>();
  EXPECT_EQ(targets, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  EXPECT_EQ(cfg["base_model_name_or_path"].get<std::string>(), model());

  io::SafetensorsFile f = io::SafetensorsFile::open(out + "/adapter_model.safetensors");
  EXPECT_EQ(f.tensors().size(), 2u * 4u * 2u);  // layers x modules x {A, B}
  const int64_t r4 = 4, C = 32;
  const std::map<std::string, int64_t> out_dim = {{"q_proj", 32}, {"k_proj", 16}, {"v_proj", 16}, {"o_proj", 32}};
  const std::map<std::string, int64_t> in_dim = {{"q_proj", C}, {"k_proj", C}, {"v_proj", C}, {"o_proj", 32}};
  for (int l = 0; l < 2; ++l)
    for (auto& [mod, od] : out_dim) {
      std::string base = "base_model.model.model.layers." + std::to_string(l) + ".self_attn." + mod;
      const io::TensorInfo* a = f.find(base + ".lora_A.weight");
      const io::TensorInfo* b = f.find(base + ".lora_B.weight");
      ASSERT_NE(a, nullptr) << base;
      ASSERT_NE(b, nullptr) << base;
      EXPECT_EQ(a->shape, (std::vector<int64_t>{r4, in_dim.at(mod)})) << base;  // [r, in]
      EXPECT_EQ(b->shape, (std::vector<int64_t>{od, r4})) << base;              // [out, r]
      // B starts at zero (PEFT init); after training it must have moved.
      ASSERT_EQ(b->dtype, DType::f32);
      const float* bv = reinterpret_cast<const float*>(f.data(*b));
      float bmax = 0;
      for (int64_t i = 0; i < od * r4; ++i) bmax = std::max(bmax, std::fabs(bv[i]));
      EXPECT_GT(bmax, 0.0f) << base << " was not trained";
    }
  EXPECT_NE(f.find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), nullptr);
  for (auto& t : f.tensors()) EXPECT_EQ(t.name.rfind("base_model.model.model.layers.", 0), 0u) << t.name;
}

}  // namespace
}  // namespace strata
