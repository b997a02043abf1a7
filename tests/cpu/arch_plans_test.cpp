// Qwen3, Qwen2, Mistral and Llama with biases on the cpu backend: every memory plan (activation
// presets, random plans over the model's real slot classes, state on the host) gives losses,
// gradients and weights bit-identical to keep-everything with clipping on; the sim forecasts the
// same device and host peaks and allocation schedule byte for byte; saving writes each
// architecture's own config.json and names and loads back exactly; adapters keep biases frozen;
// a sequence past a sliding window is refused naming the field.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "io/hf_config.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/train/trainer.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

struct ArchCase {
  std::string name;
  io::LlamaConfig cfg;
};

// The tiny shape (4 layers, GQA 4/2, head_dim 8) in each architecture's variants.
std::vector<ArchCase> arch_cases() {
  std::vector<ArchCase> v;
  io::LlamaConfig c = test_util::tiny_config();
  c.arch = io::Arch::qwen3;
  c.qk_norm = true;
  v.push_back({"qwen3", c});
  c.qkv_bias = c.o_bias = true;  // attention_bias
  c.tie_word_embeddings = true;
  v.push_back({"qwen3_bias_tied", c});
  c = test_util::tiny_config();
  c.arch = io::Arch::qwen2;
  c.qkv_bias = true;
  v.push_back({"qwen2", c});
  c = test_util::tiny_config();
  c.arch = io::Arch::mistral;
  c.sliding_window = 64;
  v.push_back({"mistral", c});
  c = test_util::tiny_config();
  c.qkv_bias = c.o_bias = c.mlp_bias = true;  // llama's attention_bias and mlp_bias
  v.push_back({"llama_biases", c});
  return v;
}

std::string fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("strata-arch-{}-{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

struct Result {
  std::vector<float> losses, norms;
  std::string weights;  // the saved model.safetensors: every weight, masters read wherever they live
};

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A checkpoint of `cfg` in dir/init: random weights, with the norms and biases (which start at one
// and zero) perturbed so that their gradients and the plans' handling of them show in the weights.
std::string initial_checkpoint(const io::LlamaConfig& cfg, const std::string& dir) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg, {});
  model.init_random(11);
  Rng rng(3);
  for (auto& p : model.params()) {
    if (p.shape.nd != 1) continue;
    std::vector<float> h(size_t(p.shape.numel()));
    for (auto& x : h) x = float(0.5 + 0.2 * rng.normal());
    be->upload_f32(p.value(), h.data());
  }
  model.save(dir + "/init");
  return dir + "/init";
}

Result run(const io::LlamaConfig& cfg, const Plan& plan, const std::string& dir, int steps = 3) {
  const std::string init = initial_checkpoint(cfg, dir);
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.state_plan = plan;
  LlamaModel model(*be, cfg, mo);
  model.load(init);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.max_grad_norm = 0.05f;  // clipping active
  to.plan = plan;
  to.tiers.offload_dir = dir;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, cfg.vocab_size, 3), 2, 19);
  Result r;
  for (int s = 0; s < steps; ++s) {
    StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
  }
  model.save(dir + "/saved");
  r.weights = file_bytes(dir + "/saved/model.safetensors");
  EXPECT_GT(r.weights.size(), model.param_count() * 4);
  return r;
}

void expect_identical(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], 4), 0) << what << ": loss of step " << i;
    EXPECT_EQ(std::memcmp(&a.norms[i], &b.norms[i], 4), 0) << what << ": grad norm of step " << i;
  }
  EXPECT_TRUE(a.weights == b.weights) << what << ": the weights differ";
}

// The planner's family with the attention outputs saved per layer (Search::save_attention): the layer inputs on
// the host, the rest recomputed, the attention outputs of the last layer kept and of the two before it on the host.
Plan attention_saved_plan(const io::LlamaConfig& cfg) {
  PlanSpec s;
  s.types = {{"L*.input", Decision::host}, {"L*", Decision::recompute}};
  s.attn_keep_layers = 1;
  s.attn_host_layers = 2;
  return make_plan(s, cfg.num_hidden_layers);
}

class ArchPlans : public ::testing::TestWithParam<ArchCase> {};

TEST_P(ArchPlans, EveryPresetAndRandomPlansAreBitIdenticalWithClipping) {
  const io::LlamaConfig& cfg = GetParam().cfg;
  const std::string dir = fresh_dir(GetParam().name);
  const Result keep = run(cfg, Plan::keep_everything(), dir);
  for (const Plan& p : {Plan::gradient_checkpointing(1), Plan::gradient_checkpointing(2), Plan::selective_recompute(),
                        Plan::hidden_states(), Plan::activation_offloading(Decision::host),
                        Plan::activation_offloading(Decision::disk)})
    expect_identical(keep, run(cfg, p, dir), p.preset);
  expect_identical(keep, run(cfg, attention_saved_plan(cfg), dir), "attention outputs saved in the last layers");
  // Random decisions over the model's own slot classes, the new ones (q_norm, biased projections)
  // included.
  std::vector<std::string> classes;
  {
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel model(*be, cfg, {});
    Trainer tr(*be, model, {});
    for (const PlanRow& row : tr.plan_table(2, 19))
      if (row.cls.rfind("L*.", 0) == 0) classes.push_back(row.cls.substr(3));
  }
  // Saved for backward: the projection outputs the q/k norms read, and their rstd.
  auto has = [&](const char* c) { return std::find(classes.begin(), classes.end(), c) != classes.end(); };
  EXPECT_EQ(has("attn.q_norm.rstd"), cfg.qk_norm) << fmt::format("{}", fmt::join(classes, " "));
  EXPECT_EQ(has("attn.k_proj"), cfg.qk_norm);
  const Decision all[] = {Decision::keep, Decision::recompute, Decision::host, Decision::disk};
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Rng rng(seed * 31 + cfg.num_hidden_layers);
    Plan p;
    for (int l = 0; l < cfg.num_hidden_layers; ++l)
      for (const std::string& c : classes) p.add(fmt::format("L{}.{}", l, c), all[rng.below(4)]);
    expect_identical(keep, run(cfg, p, dir), fmt::format("random plan {}", seed));
  }
  fs::remove_all(dir);
}

TEST_P(ArchPlans, StateOnTheHostIsBitIdentical) {
  const io::LlamaConfig& cfg = GetParam().cfg;
  const std::string dir = fresh_dir(GetParam().name + "-state");
  const Result dev = run(cfg, Plan::gradient_checkpointing(1), dir);
  for (const char* level : {"optimizer", "all"}) {
    Plan p = Plan::gradient_checkpointing(1);
    p.set_state_offloading(level, "test");
    expect_identical(dev, run(cfg, p, dir), fmt::format("state_offloading {}", level));
  }
  fs::remove_all(dir);
}

TEST_P(ArchPlans, SimForecastsThePeaksAndScheduleByteForByte) {
  struct Case {
    Plan plan;
    TrainMode mode;
    bool paged;
    int mlp_tiles = 1;  // the MLP over row tiles: biases included (llama_biases)
  } cases[] = {{Plan::keep_everything(), TrainMode::full, false},
               {Plan::gradient_checkpointing(1), TrainMode::full, false, 3},
               {Plan::activation_offloading(Decision::host), TrainMode::full, false, 4},
               {Plan::gradient_checkpointing(1), TrainMode::full, false},
               {Plan::hidden_states(), TrainMode::full, false},
               {Plan::activation_offloading(Decision::host), TrainMode::full, false},
               {Plan::gradient_checkpointing(1), TrainMode::lora, true},  // biases and norms stay resident
               {attention_saved_plan(GetParam().cfg), TrainMode::full, false}};
  for (const auto& [plan, mode, paged, tiles] : cases) {
    ForecastRequest r = sim_twin::tiny_request(plan, mode);
    r.model = GetParam().cfg;
    r.plan.layer_weights = paged ? Decision::page : Decision::keep;
    r.mlp_tiles = tiles;
    Forecast f = forecast(r);
    ASSERT_TRUE(f.fits) << plan.preset << ": " << f.oom;
    sim_twin::CpuStep cpu = sim_twin::cpu_step(r, sim_twin::kBudget, plan);
    ASSERT_TRUE(cpu.fits) << plan.preset;
    EXPECT_EQ(f.peak_bytes, cpu.peak) << plan.preset;
    EXPECT_EQ(f.high_water_bytes, cpu.high_water) << plan.preset;
    EXPECT_EQ(f.peak_host_bytes, cpu.host_peak) << plan.preset;
    ASSERT_EQ(f.events.size(), cpu.events.size()) << plan.preset;
    for (size_t i = 0; i < f.events.size(); ++i) {
      EXPECT_EQ(f.events[i].tag, cpu.events[i].tag) << plan.preset << " event " << i;
      EXPECT_EQ(f.events[i].delta, cpu.events[i].delta) << plan.preset << " event " << i;
    }
    EXPECT_GT(f.step_s, 0);
  }
}

TEST_P(ArchPlans, SavesItsOwnConfigAndNamesAndLoadsBackExactly) {
  const io::LlamaConfig& cfg = GetParam().cfg;
  const std::string dir = fresh_dir(GetParam().name + "-save");
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel a(*be, cfg, {});
  a.init_random(7);
  a.save(dir);
  const io::LlamaConfig back = io::read_llama_config(dir);
  EXPECT_EQ(back.arch, cfg.arch);
  EXPECT_EQ(back.qkv_bias, cfg.qkv_bias);
  EXPECT_EQ(back.o_bias, cfg.o_bias);
  EXPECT_EQ(back.mlp_bias, cfg.mlp_bias);
  EXPECT_EQ(back.qk_norm, cfg.qk_norm);
  EXPECT_EQ(back.sliding_window, cfg.sliding_window);
  const auto j = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  EXPECT_EQ(j["model_type"], io::arch_model_type(cfg.arch));
  EXPECT_EQ(j["architectures"][0], io::arch_architecture(cfg.arch));
  LlamaModel b(*be, back, {});
  b.load(dir);
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t i = 0; i < a.params().size(); ++i) {
    const Parameter &pa = a.params()[i], &pb = b.params()[i];
    EXPECT_EQ(pa.name, pb.name);
    EXPECT_EQ(std::memcmp(pa.value().data, pb.value().data, pa.value().bytes()), 0) << pa.name;
  }
  // The names transformers uses: biases beside their weights, Qwen3's norms inside self_attn.
  EXPECT_EQ(a.find("model.layers.0.self_attn.q_proj.bias") != nullptr, cfg.qkv_bias);
  EXPECT_EQ(a.find("model.layers.3.self_attn.o_proj.bias") != nullptr, cfg.o_bias);
  EXPECT_EQ(a.find("model.layers.1.mlp.down_proj.bias") != nullptr, cfg.mlp_bias);
  EXPECT_EQ(a.find("model.layers.2.self_attn.k_norm.weight") != nullptr, cfg.qk_norm);
  fs::remove_all(dir);
}

TEST_P(ArchPlans, AdaptersAndTrainedNormsLeaveBiasesFrozen) {
  const io::LlamaConfig& cfg = GetParam().cfg;
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.train_base = false;
  mo.train_norms = true;
  mo.lora.rank = 2;
  mo.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  LlamaModel m(*be, cfg, mo);
  m.init_random(2);
  for (auto& p : m.params()) {
    const bool norm = p.name.find("norm.weight") != std::string::npos;
    EXPECT_EQ(p.trainable, p.is_lora || norm) << p.name;
  }
  Trainer tr(*be, m, {});
  TokenBatcher data(synthetic_tokens(2000, cfg.vocab_size, 5), 2, 19);
  const float first = tr.step(data.next()).loss;
  EXPECT_TRUE(std::isfinite(first));
  const std::string dir = fresh_dir(GetParam().name + "-lora");
  m.save_lora(dir, "base");
  EXPECT_TRUE(fs::exists(dir + "/adapter_model.safetensors"));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Archs, ArchPlans, ::testing::ValuesIn(arch_cases()),
                         [](const ::testing::TestParamInfo<ArchCase>& i) { return i.param.name; });

TEST(ArchLimits, ASequencePastTheSlidingWindowIsRefusedNamingTheField) {
  io::LlamaConfig c = test_util::tiny_config();
  c.arch = io::Arch::mistral;
  c.sliding_window = 16;
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, c, {});
  m.init_random(1);
  Trainer tr(*be, m, {});
  TokenBatcher data(synthetic_tokens(2000, c.vocab_size, 5), 1, 17);
  auto e = test_util::catch_as<UnsupportedError>([&] { tr.step(data.next()); });
  ASSERT_TRUE(e);
  const std::string what = e->what();
  for (const char* w : {"sliding_window", "16", "17", "mistral"})
    EXPECT_NE(what.find(w), std::string::npos) << w << " not in: " << what;
  TokenBatcher fits(synthetic_tokens(2000, c.vocab_size, 5), 1, 16);
  EXPECT_TRUE(std::isfinite(tr.step(fits.next()).loss));
}

}  // namespace
