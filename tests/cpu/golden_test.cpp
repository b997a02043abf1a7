// strata's cpu forward and backward against Hugging Face transformers 5.17 (LlamaForCausalLM,
// eager attention, fp32; the linear, dynamic, longrope and yarn cases 5.24) on checkpoints it saved: logits, loss
// and every parameter gradient.
// References made by tests/golden/make_golden.py on the GPU host.
// Tolerances (fp32 on both sides, different summation orders):
//   logits: max |a-b| <= 1e-5 * max|b| + 1e-6; loss: 1e-5 relative;
//   each gradient: ||a-b|| / ||b|| <= 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "engine/backend.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"
#include "tests/golden_reference.h"

using namespace strata;

namespace {

double rel_norm_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, LogitsLossAndGradientsMatchHuggingFace) {
  const std::string dir = golden::dir(GetParam());
  io::LlamaConfig cfg = io::read_llama_config(dir + "/config.json");
  auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  Batch batch = golden::batch(ref);
  ASSERT_GT(batch.B, 0);

  auto be = make_cpu_backend(size_t(256) << 20);
  ModelOptions mo;
  mo.loss_chunk_tokens = 7;  // does not divide B*T: exercises the chunk tail
  LlamaModel model(*be, cfg, mo);
  model.load(dir);
  Trainer trainer(*be, model, TrainOptions{});
  std::vector<float> logits;
  float loss = trainer.compute_gradients(batch, &logits);

  std::vector<float> ref_logits = golden::tensor(ref, "logits");
  ASSERT_EQ(logits.size(), ref_logits.size());
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    ASSERT_FALSE(std::isnan(logits[i])) << "NaN logit at " << i;
    max_ref = std::max(max_ref, std::fabs(double(ref_logits[i])));
    max_diff = std::max(max_diff, std::fabs(double(logits[i]) - ref_logits[i]));
  }
  EXPECT_LE(max_diff, 1e-5 * max_ref + 1e-6) << "max |logit diff| " << max_diff << " (max |ref| " << max_ref << ")";

  float ref_loss = golden::tensor(ref, "loss")[0];
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss)) << "loss";

  int checked = 0;
  double worst_grad = 0;
  for (auto& p : model.params()) {
    std::vector<float> g(size_t(p.shape.numel()));
    be->download_f32(g.data(), p.grad_view());
    // The vocabulary's padded rows (pad_vocab_multiple) have exactly zero gradient and no reference.
    for (size_t i = size_t(p.file_numel()); i < g.size(); ++i) ASSERT_EQ(g[i], 0.0f) << p.name << " padding";
    g.resize(size_t(p.file_numel()));
    std::vector<float> rg = golden::tensor(ref, "grad." + p.name);
    ASSERT_EQ(g.size(), rg.size()) << p.name;
    double e = rel_norm_err(g, rg);
    EXPECT_LE(e, 1e-4) << "gradient of " << p.name << ": relative error " << e;
    worst_grad = std::max(worst_grad, e);
    ++checked;
  }
  // Every reference gradient has a strata parameter (tied embeddings: one tensor).
  int ref_grads = 0;
  for (auto& t : ref.tensors()) ref_grads += t.name.rfind("grad.", 0) == 0;
  EXPECT_EQ(checked, ref_grads);
  std::printf("[ golden   ] %s: max logit diff %.3g (max |ref| %.3g), loss %.7f vs %.7f, worst grad rel err %.3g\n",
              GetParam().c_str(), max_diff, max_ref, loss, ref_loss, worst_grad);
}

INSTANTIATE_TEST_SUITE_P(Hf, Golden,
                         ::testing::Values("gqa_untied", "tied_llama3", "mha_headdim", "qwen3_tied", "qwen3_bias",
                                           "qwen2_bias", "mistral_gqa", "linear_llama", "dynamic_llama",
                                           "longrope_llama", "yarn_qwen2", "yarn_qwen3"));

}  // namespace
