// The streamed update during backward (Optimizer::begin_update_in_backward): without clipping, each chunk of
// host-tier state is updated once every parameter in it has its final gradient. On the cpu backend it gives
// losses, weights and moments bit-identical to the update after backward and to keep-everything, for every
// state level, the layer-spread placement and each state precision, with tied embeddings and with gradient
// accumulation; every chunk is updated in backward (small chunks, so most come while backward still runs); it
// is not used with clipping or with host-tier gradients; a backward that fails after some chunks were updated
// makes the next step refuse, naming the torn update.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/error.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/plan/forecast.h"
#include "model/train/trainer.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;

namespace {

struct Recipe {
  Plan plan = Plan::keep_everything();
  StateRecipe recipe;
  bool tied = false;
  int micro = 1;  // micro-batches a step
  bool in_backward = true;
  float max_norm = 0.0f;
};

struct Outcome {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights, moments;
  std::vector<long> chunks, in_backward;  // per step
};

// Wider than tiny_config, so the state spans many of the optimizer's smallest chunks (1 MiB of staging).
io::LlamaConfig config(bool tied) {
  io::LlamaConfig c = test_util::tiny_config();
  c.hidden_size = 256;
  c.head_dim = 64;
  c.intermediate_size = 512;
  c.vocab_size = 1001;
  c.tie_word_embeddings = tied;
  return c;
}

Outcome train(const Recipe& s, int steps = 3) {
  auto be = make_cpu_backend(size_t(512) << 20);
  const io::LlamaConfig c = config(s.tied);
  ModelOptions mo;
  mo.state_plan = s.plan;
  mo.recipe = s.recipe;
  LlamaModel model(*be, c, mo);
  model.init_random(7);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.adam.weight_decay = 0.1f;
  to.max_grad_norm = s.max_norm;
  to.plan = s.plan;
  to.optimizer.chunk_bytes = size_t(1) << 20;  // the least: most chunks are updated while backward runs
  to.optimizer.update_in_backward = s.in_backward;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, c.vocab_size, 3), 2, 19);
  Outcome r;
  for (int i = 0; i < steps; ++i) {
    std::vector<Batch> micro;
    for (int k = 0; k < s.micro; ++k) micro.push_back(data.next());
    const StepStats st = tr.step(std::span<const Batch>(micro), to.adam.lr);
    r.losses.push_back(st.loss);
    r.chunks.push_back(tr.optimizer().stats().chunks);
    r.in_backward.push_back(tr.optimizer().stats().chunks_in_backward);
  }
  model.sync_state();
  for (auto& p : model.params()) {
    std::vector<float> w(size_t(p.shape.numel()));
    be->download_f32(w.data(), p.value());
    r.weights.push_back(std::move(w));
    if (!p.trainable) continue;
    const size_t elem = s.recipe.moments == OptimizerState::fp32 ? 4 : s.recipe.moments == OptimizerState::bf16 ? 2 : 1;
    const size_t bytes = size_t(p.shape.numel()) * elem;
    for (auto [host, dev] : {std::pair{p.host_m, &p.m}, std::pair{p.host_v, &p.v}}) {
      std::vector<float> m((bytes + 3) / 4);
      const void* src = host != Parameter::kDevice ? static_cast<const void*>(model.host_state(host))
                                                   : static_cast<const void*>(dev->view().data);
      if (src) std::memcpy(m.data(), src, bytes);
      r.moments.push_back(std::move(m));
    }
  }
  return r;
}

void expect_same(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * 4), 0) << what << ": losses";
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (size_t i = 0; i < a.weights.size(); ++i)
    EXPECT_EQ(std::memcmp(a.weights[i].data(), b.weights[i].data(), a.weights[i].size() * 4), 0)
        << what << ": weights of parameter " << i;
  ASSERT_EQ(a.moments.size(), b.moments.size()) << what;
  for (size_t i = 0; i < a.moments.size(); ++i)
    EXPECT_EQ(std::memcmp(a.moments[i].data(), b.moments[i].data(), a.moments[i].size() * 4), 0)
        << what << ": moment " << i;
}

Plan level(const char* l) {
  Plan p;
  p.set_state_offloading(l, "test");
  return p;
}

Plan spread(int k) {
  Plan p;
  p.set_state_offloading_layers("optimizer", k, "test");
  return p;
}

// Every step updated every chunk during backward (and there were chunks to update).
void expect_all_in_backward(const Outcome& o, const std::string& what) {
  for (size_t i = 0; i < o.chunks.size(); ++i) {
    EXPECT_GT(o.chunks[i], 1) << what << ": step " << i;
    EXPECT_EQ(o.in_backward[i], o.chunks[i]) << what << ": step " << i;
  }
}

TEST(UpdateInBackward, BitIdenticalToTheUpdateAfterBackwardForEveryLevelAndPrecision) {
  StateRecipe bf16;
  bf16.moments = OptimizerState::bf16;
  bf16.master = MasterWeights::none;
  StateRecipe q8;
  q8.moments = OptimizerState::q8;
  for (const auto& [name, plan] : std::vector<std::pair<std::string, Plan>>{
           {"optimizer", level("optimizer")}, {"master", level("master")}, {"optimizer in 2 layers", spread(2)}})
    for (const auto& [rname, recipe] :
         std::vector<std::pair<std::string, StateRecipe>>{{"fp32", {}}, {"bf16, no master", bf16}, {"8-bit", q8}}) {
      const std::string what = name + ", " + rname;
      Recipe s;
      s.plan = plan;
      s.recipe = recipe;
      const Outcome during = train(s);
      expect_all_in_backward(during, what);
      s.in_backward = false;
      const Outcome after = train(s);
      for (long n : after.in_backward) EXPECT_EQ(n, 0) << what;
      expect_same(during, after, what + ": during backward vs after it");
      Recipe keep;  // every state on the device
      keep.recipe = recipe;
      expect_same(during, train(keep), what + ": during backward vs keep everything");
    }
}

TEST(UpdateInBackward, TiedEmbeddingsAndGradientAccumulation) {
  for (bool tied : {false, true})
    for (int micro : {1, 3}) {
      const std::string what = fmt::format("tied {}, {} micro-batches", tied, micro);
      Recipe s;
      s.plan = level("optimizer");
      s.tied = tied;
      s.micro = micro;
      const Outcome during = train(s);
      expect_all_in_backward(during, what);
      s.in_backward = false;
      expect_same(during, train(s), what);
    }
}

TEST(UpdateInBackward, NotWithClippingNorWithHostTierGradients) {
  Recipe clipped;
  clipped.plan = level("optimizer");
  clipped.max_norm = 0.05f;
  for (long n : train(clipped).in_backward) EXPECT_EQ(n, 0) << "clipping needs the global norm first";
  Recipe host_grads;
  host_grads.plan = level("all");
  const Outcome o = train(host_grads);
  for (long n : o.in_backward) EXPECT_EQ(n, 0) << "host-tier gradients";
  host_grads.in_backward = false;
  expect_same(o, train(host_grads), "host-tier gradients");
}

// The forecast runs the update where the run does (ForecastRequest::max_grad_norm): the sim mirroring the cpu
// backend gives the cpu step's device and host peaks byte for byte, with clipping and without, and without
// clipping no update is left pending for the next forward.
TEST(UpdateInBackward, SimForecastsItsPeaksByteForByte) {
  for (float max_norm : {0.0f, 1.0f})
    for (const char* l : {"optimizer", "master"}) {
      const std::string what = fmt::format("{}, max_grad_norm {}", l, max_norm);
      ForecastRequest r;
      r.model = config(false);
      r.seq = 19;
      r.batch = 2;
      r.plan = level(l);
      r.max_grad_norm = max_norm;
      r.profile = find_profile("h100_80gb");
      r.mirror = SimMirror::cpu;
      r.budget = size_t(512) << 20;
      const Forecast f = forecast(r);
      ASSERT_TRUE(f.fits) << what << ": " << f.oom;

      auto be = make_cpu_backend(r.budget);
      ModelOptions mo;
      mo.state_plan = r.plan;
      LlamaModel model(*be, r.model, mo);
      model.init_random(7);
      TrainOptions to;
      to.plan = r.plan;
      to.max_grad_norm = max_norm;
      Trainer tr(*be, model, to);
      TokenBatcher data(synthetic_tokens(4000, r.model.vocab_size, 3), r.batch, r.seq);
      size_t peak = tr.step(data.next()).peak_device_bytes;
      EXPECT_EQ(tr.optimizer().pending(), max_norm > 0) << what;
      const StepStats st = tr.step(data.next());
      peak = std::max(peak, st.peak_device_bytes);
      EXPECT_EQ(peak, f.peak_bytes) << what;
      EXPECT_EQ(st.peak_host_bytes + st.state_host_bytes, f.peak_host_bytes) << what;
    }
}

// A backward that fails once some chunks were updated (the arena too small for a later allocation of it): the
// next step refuses, naming the torn update; one that fails before any chunk was updated trains on.
// The moments on the host, no clipping, the smallest chunks, on an arena of `budget`.
struct Rig {
  std::unique_ptr<Backend> be;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<TokenBatcher> data;
  explicit Rig(size_t budget) : be(make_cpu_backend(budget)) {
    const io::LlamaConfig c = config(false);
    ModelOptions mo;
    mo.state_plan = level("optimizer");
    model = std::make_unique<LlamaModel>(*be, c, mo);
    model->init_random(7);
    TrainOptions to;
    to.max_grad_norm = 0;
    to.plan = mo.state_plan;
    to.optimizer.chunk_bytes = size_t(1) << 20;
    trainer = std::make_unique<Trainer>(*be, *model, to);
    data = std::make_unique<TokenBatcher>(synthetic_tokens(4000, c.vocab_size, 3), 2, 19);
  }
  StepStats step() { return trainer->step(data->next()); }
};

TEST(UpdateInBackward, AFailedBackwardAfterSomeChunksMakesTheNextStepRefuse) {
  const size_t peak = Rig(size_t(512) << 20).step().peak_device_bytes;
  bool torn_seen = false;
  for (size_t budget = peak - 256; budget > peak / 2 && !torn_seen; budget -= 1024) {
    Rig rig(budget);
    Trainer& tr = *rig.trainer;
    try {
      rig.step();
      continue;  // fits this budget
    } catch (const OutOfMemoryError&) {
    }
    const long updated = tr.optimizer().stats().chunks_in_backward;
    try {
      rig.step();
      EXPECT_EQ(updated, 0) << "a step after a torn update trained on (budget " << budget << ")";
    } catch (const OutOfMemoryError&) {
      EXPECT_EQ(updated, 0) << "a torn update must be refused before any allocation";
    } catch (const Error& e) {
      EXPECT_GT(updated, 0) << e.what();
      EXPECT_NE(std::string(e.what()).find("load a checkpoint"), std::string::npos) << e.what();
      torn_seen = true;
    }
  }
  EXPECT_TRUE(torn_seen) << "no budget failed backward after a chunk was updated";
}

}  // namespace
