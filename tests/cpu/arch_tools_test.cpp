// strata-train on the checkpoints transformers wrote for each architecture (tests/golden: Qwen3,
// Qwen2, Mistral): full fine-tune and LoRA run, the loss falls, and the saved model keeps its
// model_type, architectures, biases and q/k norms and loads again; the adapter uses PEFT's names.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/backend.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/tokens.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "tests/cpu/tool_runner.h"

using namespace strata;
using namespace strata::tool_test;
using json = nlohmann::json;

namespace {

class ArchTools : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { scratch_.create("strata-arch-tools"); }
  static void TearDownTestSuite() { scratch_.remove(); }
  static std::string path(const std::string& name) { return scratch_.path(name); }
  static Proc run(const std::string& cmd) { return scratch_.run(cmd); }
  static std::string golden(const std::string& name) { return std::string(STRATA_TEST_DATA) + "/golden/" + name; }
  // A token file over the checkpoint's vocabulary: a repeating pattern a few steps can learn.
  static std::string tokens(const io::LlamaConfig& c) {
    const std::string f = path(fmt::format("tokens-{}.bin", c.vocab_size));
    io::write_tokens(f, synthetic_tokens(3000, c.vocab_size, 7));
    return f;
  }
  static Scratch scratch_;
};
Scratch ArchTools::scratch_;

TEST_P(ArchTools, FullFineTuneSavesItsOwnArchitectureAndLoadsAgain) {
  const std::string in = golden(GetParam()), out = path(GetParam() + "-full");
  const io::LlamaConfig c = io::read_llama_config(in);
  Proc r =
      run(fmt::format("{} --model {} --data {} --backend cpu --json --steps 16 --seq 12 --batch 2 --lr 0.003 --save {}",
                      kTrain, quote(in), quote(tokens(c)), quote(out)));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto steps = lines(r.out);
  ASSERT_EQ(steps.size(), 16u) << r.out;
  auto mean_loss = [&](size_t from) {
    double s = 0;
    for (size_t i = from; i < from + 4; ++i) s += json::parse(steps[i])["loss"].get<double>();
    return s / 4;
  };
  EXPECT_LT(mean_loss(12), mean_loss(0)) << r.out;  // the last four steps against the first four
  const json src = json::parse(slurp(in + "/config.json")), saved = json::parse(slurp(out + "/config.json"));
  EXPECT_EQ(saved["model_type"], src["model_type"]);
  EXPECT_EQ(saved["architectures"], src["architectures"]);
  const io::LlamaConfig back = io::read_llama_config(out);
  EXPECT_EQ(back.qkv_bias, c.qkv_bias);
  EXPECT_EQ(back.qk_norm, c.qk_norm);
  EXPECT_EQ(back.sliding_window, c.sliding_window);
  // The same tensor names as the source checkpoint, every one of them.
  io::SafetensorsFile a = io::SafetensorsFile::open(in + "/model.safetensors"),
                      b = io::SafetensorsFile::open(out + "/model.safetensors");
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& t : a.tensors()) EXPECT_NE(b.find(t.name), nullptr) << t.name;
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, back, {});
  EXPECT_NO_THROW(m.load(out));
}

TEST_P(ArchTools, LoraSavesAPeftAdapterWithTheArchitecturesNames) {
  const std::string in = golden(GetParam()), out = path(GetParam() + "-lora");
  const io::LlamaConfig c = io::read_llama_config(in);
  Proc r =
      run(fmt::format("{} --model {} --data {} --backend cpu --steps 3 --seq 12 --batch 2 --lr 0.01 "
                      "--lora-rank 2 --save {}",
                      kTrain, quote(in), quote(tokens(c)), quote(out)));
  ASSERT_EQ(r.code, 0) << r.err;
  io::SafetensorsFile f = io::SafetensorsFile::open(out + "/adapter_model.safetensors");
  EXPECT_NE(f.find("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"), nullptr);
  for (const auto& t : f.tensors()) EXPECT_EQ(t.name.find(".bias"), std::string::npos) << t.name;
}

INSTANTIATE_TEST_SUITE_P(Golden, ArchTools, ::testing::Values("qwen3_tied", "qwen3_bias", "qwen2_bias", "mistral_gqa"));

TEST(ArchToolsLimits, TrainingPastMistralsSlidingWindowExitsNamingTheField) {
  Scratch s;
  s.create("strata-arch-window");
  const std::string in = std::string(STRATA_TEST_DATA) + "/golden/mistral_gqa", data = s.path("t.bin");
  io::write_tokens(data, synthetic_tokens(3000, 71, 7));
  Proc r = s.run(fmt::format("{} --model {} --data {} --backend cpu --steps 1 --seq 40 --batch 1", kTrain, quote(in),
                             quote(data)));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("sliding_window"), std::string::npos) << r.err;
  s.remove();
}

}  // namespace
