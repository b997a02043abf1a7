// Training end to end on the cpu backend: a 50-step loss curve that falls, LoRA that leaves the
// base untouched, and a frozen base that trains only the norms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/backend.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"

using namespace strata;

namespace {

io::LlamaConfig cfg() {
  io::LlamaConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 128;
  c.rms_norm_eps = 1e-5f;
  return c;
}

std::vector<float> train(ModelOptions mo, int steps, float lr, LlamaModel** keep = nullptr) {
  static std::unique_ptr<Backend> be;
  be = make_cpu_backend(size_t(128) << 20);
  auto* model = new LlamaModel(*be, cfg(), mo);
  model->init_random(1);
  TrainOptions to;
  to.adam.lr = lr;
  Trainer tr(*be, *model, to);
  TokenBatcher data(synthetic_tokens(50000, 128, 7), 4, 32);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(tr.step(data.next()).loss);
  if (keep)
    *keep = model;
  else
    delete model;
  return losses;
}

double mean(const std::vector<float>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + long(from), v.begin() + long(to), 0.0) / double(to - from);
}

TEST(Train, FiftyStepLossCurveFalls) {
  std::vector<float> l = train({}, 50, 3e-3f);
  ASSERT_EQ(l.size(), 50u);
  for (float x : l) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NEAR(l[0], std::log(128.0f), 0.3f) << "an untrained model starts near ln(vocab)";
  double first = mean(l, 0, 5), last = mean(l, 45, 50);
  EXPECT_LT(last, first - 1.0) << "loss fell only from " << first << " to " << last;
  EXPECT_LT(mean(l, 25, 30), first) << "the curve falls through the middle too";
}

TEST(Train, LoraTrainsAdaptersAndLeavesTheBaseUntouched) {
  ModelOptions mo;
  mo.train_base = false;
  mo.lora.rank = 8;
  mo.lora.alpha = 16;
  mo.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  LlamaModel* m = nullptr;
  std::vector<float> l = train(mo, 10, 3e-2f, &m);
  std::unique_ptr<LlamaModel> model(m);
  for (float x : l) ASSERT_TRUE(std::isfinite(x));
  // Same init, no training: the base weights must be bit-identical.
  auto be2 = make_cpu_backend(size_t(128) << 20);
  LlamaModel fresh(*be2, cfg(), mo);
  fresh.init_random(1);
  int lora_params = 0;
  for (size_t i = 0; i < model->params().size(); ++i) {
    auto& p = model->params()[i];
    if (p.is_lora) {
      ++lora_params;
      EXPECT_TRUE(p.trainable);
      if (p.name.find("lora_B") != std::string::npos) {
        const float* b = static_cast<const float*>(p.value().data);
        bool moved = false;
        for (int64_t j = 0; j < p.shape.numel(); ++j) moved = moved || b[j] != 0.0f;
        EXPECT_TRUE(moved) << p.name << " never left its zero init";
      }
      continue;
    }
    EXPECT_FALSE(p.trainable) << p.name;
    std::vector<float> a(size_t(p.shape.numel())), b(a.size());
    // Both models live on cpu backends: the views are host memory.
    std::memcpy(a.data(), p.value().data, a.size() * 4);
    std::memcpy(b.data(), fresh.params()[i].value().data, b.size() * 4);
    EXPECT_EQ(a, b) << p.name << " changed under LoRA";
  }
  EXPECT_EQ(lora_params, 2 * 7 * cfg().num_hidden_layers);
}

// LoRA gradients through the whole model against central finite differences of the loss.
TEST(Train, LoraGradientsMatchFiniteDifferences) {
  auto be = make_cpu_backend(size_t(128) << 20);
  ModelOptions mo;
  mo.train_base = false;
  mo.lora.rank = 3;
  mo.lora.alpha = 6;
  mo.lora.target_modules = {"q_proj", "v_proj", "up_proj", "down_proj"};
  io::LlamaConfig c = cfg();
  c.vocab_size = 32;
  LlamaModel model(*be, c, mo);
  model.init_random(3);
  // Non-zero B so that A has a gradient too.
  for (auto& p : model.params())
    if (p.is_lora) {
      float* w = static_cast<float*>(p.value().data);
      for (int64_t j = 0; j < p.shape.numel(); ++j) w[j] = 0.3f * std::sin(float(j) * 1.7f + float(p.shape[0]));
    }
  Trainer tr(*be, model, {});
  TokenBatcher data(synthetic_tokens(2000, 32, 5), 2, 9);
  Batch b = data.next();
  tr.compute_gradients(b);
  int checked = 0;
  for (auto& p : model.params()) {
    if (!p.is_lora) continue;
    std::vector<float> g(size_t(p.shape.numel()));
    std::memcpy(g.data(), p.grad_view().data, g.size() * 4);
    size_t best = 0;
    for (size_t j = 0; j < g.size(); ++j)
      if (std::fabs(g[j]) > std::fabs(g[best])) best = j;
    float* w = static_cast<float*>(p.value().data);
    const float h = 1e-2f, orig = w[best];
    w[best] = orig + h;
    double up = tr.evaluate(b);
    w[best] = orig - h;
    double down = tr.evaluate(b);
    w[best] = orig;
    double fd = (up - down) / (2.0 * h);
    EXPECT_GT(std::fabs(fd), 1e-4) << p.name << ": too small a gradient to check";
    EXPECT_NEAR(g[best], fd, 0.03 * std::fabs(fd) + 2e-5) << p.name << "[" << best << "]";
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 4 * c.num_hidden_layers);
}

TEST(Train, FrozenBaseTrainsOnlyTheNorms) {
  ModelOptions mo;
  mo.train_base = false;
  mo.train_norms = true;
  LlamaModel* m = nullptr;
  train(mo, 3, 1e-2f, &m);
  std::unique_ptr<LlamaModel> model(m);
  for (auto& p : model->params()) EXPECT_EQ(p.trainable, p.shape.nd == 1) << p.name;
}

}  // namespace
