// Weight paging on the cuda backend (frozen layers, and a full fine-tune's trainable ones at the end):
// the frozen layer weights (bf16) live in
// one pinned host block and page through two device slots on the copy stream, the compute
// stream waiting on each upload's event. Same kernels on the same bytes as without paging: the
// same loss, gradients equal up to the order of fp32 atomic adds (NMSE < 1e-10), the device peak
// lower by the frozen layer weights less two layers, and the double buffer's upload count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "gpu_test_util.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"
#include "small_llama.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/backend_cuda.h"

using namespace strata;

namespace {

constexpr int kLayers = 4;

struct Result {
  std::vector<float> losses;
  std::vector<float> grads;  // every trainable gradient after the first step, concatenated
  std::vector<long> uploads;
  size_t peak = 0, frozen_layer_bytes = 0, layer_bytes = 0;
  bool pinned = false;
  std::string note;
};

Result run(bool lora, bool page, const Plan& plan) {
  auto be = make_cuda_backend(size_t(2) << 30);
  ModelOptions mo;
  mo.train_base = false;
  mo.train_norms = !lora;
  if (lora) {
    mo.lora.rank = 8;
    mo.lora.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  }
  mo.page_layers = page;
  LlamaModel model(*be, gpu_test::small_llama_config(kLayers), mo);
  model.init_random(4);
  TrainOptions to;
  to.plan = plan;
  to.adam.lr = 1e-3f;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(40000, 1000, 2), 2, 256);
  Result r;
  for (auto& p : model.params())
    if (!p.trainable && p.shape.nd == 2 && LlamaModel::layer_of_param(p.name) >= 0)
      r.frozen_layer_bytes += size_t(p.shape.numel()) * 2;  // bf16
  r.layer_bytes = r.frozen_layer_bytes / kLayers;
  for (int s = 0; s < 3; ++s) {
    StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.uploads.push_back(st.paged_uploads);
    r.peak = std::max(r.peak, st.peak_device_bytes);
    if (s > 0) continue;
    for (auto& p : model.params()) {
      if (!p.trainable) continue;
      std::vector<float> g(size_t(p.shape.numel()));
      be->download_f32(g.data(), p.grad_view());
      r.grads.insert(r.grads.end(), g.begin(), g.end());
    }
  }
  if (WeightPager* pg = model.pager()) {
    r.pinned = pg->host_pinned();
    r.note = pg->host_note();
    for (int s = 0; s < pg->slot_count(); ++s)
      EXPECT_EQ(pg->slot_state(s), WeightPager::SlotState::EMPTY) << "slot " << s << " after the last step";
  }
  return r;
}

TEST(PagingGpu, MatchesUnpagedTrainingWithALowerPeak) {
  STRATA_REQUIRE_GPU();
  for (bool lora : {false, true})
    for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::hidden_states()}) {
      const std::string what = std::string(lora ? "lora" : "frozen base") + " / " + plan.preset;
      Result ref = run(lora, false, plan);
      Result pg = run(lora, true, plan);
      // The first step runs the same kernels on the same bytes: the same loss. Later steps follow
      // the trainable weights, whose gradients may differ in the last bits (fp32 atomics).
      EXPECT_EQ(pg.losses[0], ref.losses[0]) << what;
      for (size_t s = 1; s < ref.losses.size(); ++s)
        EXPECT_NEAR(pg.losses[s], ref.losses[s], 1e-4 * std::fabs(ref.losses[s])) << what << " step " << s;
      EXPECT_TRUE(gpu_test::close(pg.grads, ref.grads, 1e-10, what + ": gradients"));
      EXPECT_EQ(pg.uploads, std::vector<long>(3, 2 * kLayers - 2)) << what;
      EXPECT_TRUE(pg.pinned) << what << ": the host block should be pinned (" << pg.note << ")";
      const size_t saved = pg.frozen_layer_bytes - 2 * pg.layer_bytes, slack = size_t(64) << 10;
      EXPECT_LT(pg.peak + saved, ref.peak + slack) << what << ": peak " << pg.peak << " vs " << ref.peak;
      std::printf("[ paging gpu ] %s: loss %.6f, peak %zu -> %zu bytes (frozen layer weights %zu)\n", what.c_str(),
                  double(pg.losses[0]), ref.peak, pg.peak, pg.frozen_layer_bytes);
    }
}

TEST(PagingGpu, AnExceptionMidStepLeavesNothingInFlight) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(size_t(2) << 30);
  ModelOptions mo;
  mo.train_base = false;
  mo.train_norms = true;
  mo.page_layers = true;
  LlamaModel model(*be, gpu_test::small_llama_config(kLayers), mo);
  model.init_random(4);
  Trainer tr(*be, model, TrainOptions{});
  WeightPager& pg = *model.pager();
  TokenBatcher data(synthetic_tokens(40000, 1000, 2), 2, 256);
  Batch b1 = data.next(), b2 = data.next();
  tr.step(b1);
  const size_t base = be->arena().in_use();
  int n = 0;
  tr.tape().set_node_hook([&](int node, TapePhase phase) {
    pg.on_node(node, phase);
    if (phase == TapePhase::backward && ++n == 25) throw std::runtime_error("injected failure in backward");
  });
  EXPECT_THROW(tr.step(b2), std::runtime_error);
  for (int s = 0; s < pg.slot_count(); ++s) EXPECT_EQ(pg.slot_state(s), WeightPager::SlotState::EMPTY);
  EXPECT_EQ(be->arena().in_use(), base);
  pg.install(tr.tape());
  StepStats st = tr.step(b2);
  EXPECT_TRUE(std::isfinite(st.loss));
  EXPECT_EQ(st.paged_uploads, 2 * kLayers - 2);
}

// A full fine-tune with its layer matrices paged (trainable: the optimizer streams their bf16 compute
// copies from the pinned host block and writes the update back), against the same run unpaged: the
// same first loss and gradients (fp32 atomics aside), the later losses and the weights close, the
// double buffer's uploads, and a persistent device footprint lower by the paged copies less two slots.
struct FtResult {
  std::vector<float> losses, grads, weights;  // gradients of the first step; compute weights after the last
  std::vector<long> uploads;
  size_t peak = 0, persistent = 0, paged_bytes = 0, slot_bytes = 0;
};

FtResult run_full(bool page, const Plan& plan, const char* state_level, StateRecipe recipe = {}) {
  auto be = make_cuda_backend(size_t(2) << 30);
  ModelOptions mo;
  mo.page_layers = page;
  Plan p = plan;
  p.set_state_offloading(state_level, "test");
  mo.state_plan = p;
  mo.recipe = recipe;
  LlamaModel model(*be, gpu_test::small_llama_config(kLayers), mo);
  model.init_random(4);
  FtResult r;
  r.persistent = be->arena().in_use();
  if (WeightPager* pg = model.pager()) {
    r.slot_bytes = pg->slot_bytes();
    EXPECT_TRUE(pg->host_pinned()) << pg->host_note();
  }
  for (auto& q : model.params())
    if (q.page >= 0) r.paged_bytes += size_t(q.shape.numel()) * 2;  // bf16
  TrainOptions to;
  to.plan = p;
  to.adam.lr = 1e-3f;
  to.max_grad_norm = 0.5f;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(40000, 1000, 2), 2, 256);
  for (int s = 0; s < 3; ++s) {
    StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.uploads.push_back(st.paged_uploads);
    r.peak = std::max(r.peak, st.peak_device_bytes);
    if (s > 0) continue;
    for (auto& q : model.params()) {
      if (!q.trainable) continue;
      std::vector<float> g(size_t(q.shape.numel()));
      tr.optimizer().download_grad(q, g.data());
      r.grads.insert(r.grads.end(), g.begin(), g.end());
    }
  }
  model.sync_state();
  for (auto& q : model.params()) {
    std::vector<float> w(size_t(q.shape.numel()));
    if (q.page >= 0)
      model.pager()->read_host(size_t(q.page), w.data());
    else
      be->download_f32(w.data(), q.value());
    r.weights.insert(r.weights.end(), w.begin(), w.end());
  }
  if (WeightPager* pg = model.pager()) {
    for (int s = 0; s < pg->slot_count(); ++s)
      EXPECT_EQ(pg->slot_state(s), WeightPager::SlotState::EMPTY) << "slot " << s << " after the last step";
  }
  return r;
}

TEST(PagingGpu, FullFinetuneMatchesUnpagedTraining) {
  STRATA_REQUIRE_GPU();
  for (const char* level : {"none", "master", "all"})
    for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1)}) {
      const std::string what = std::string("full fine-tune, state ") + level + " / " + plan.preset;
      FtResult ref = run_full(false, plan, level);
      FtResult pg = run_full(true, plan, level);
      EXPECT_EQ(pg.losses[0], ref.losses[0]) << what;
      for (size_t s = 1; s < ref.losses.size(); ++s)
        EXPECT_NEAR(pg.losses[s], ref.losses[s], 1e-4 * std::fabs(ref.losses[s])) << what << " step " << s;
      EXPECT_TRUE(gpu_test::close(pg.grads, ref.grads, 1e-10, what + ": gradients"));
      EXPECT_TRUE(gpu_test::close(pg.weights, ref.weights, 1e-8, what + ": weights after 3 steps"));
      EXPECT_EQ(pg.uploads, std::vector<long>(3, 2 * kLayers - 2)) << what;
      // The device no longer holds the paged bf16 copies, only two slots (slack: arena alignment).
      EXPECT_LT(pg.persistent + pg.paged_bytes, ref.persistent + 2 * pg.slot_bytes + (size_t(64) << 10)) << what;
      std::printf("[ paging gpu ] %s: loss %.6f, persistent %zu -> %zu, peak %zu -> %zu bytes\n", what.c_str(),
                  double(pg.losses[0]), ref.persistent, pg.persistent, ref.peak, pg.peak);
    }  // master_weights: none (the bf16 weights are the state: updated in staging, written back as they are) and
  // 8-bit moments on the host.
  StateRecipe none;
  none.master = MasterWeights::none;
  none.moments = OptimizerState::q8;
  const FtResult ref = run_full(false, Plan::gradient_checkpointing(1), "optimizer", none);
  const FtResult pg = run_full(true, Plan::gradient_checkpointing(1), "optimizer", none);
  EXPECT_EQ(pg.losses[0], ref.losses[0]);
  for (size_t s = 1; s < ref.losses.size(); ++s)
    EXPECT_NEAR(pg.losses[s], ref.losses[s], 1e-4 * std::fabs(ref.losses[s])) << "master none, step " << s;
  EXPECT_TRUE(gpu_test::close(pg.weights, ref.weights, 1e-8, "master none: weights after 3 steps"));
}

}  // namespace

#else
TEST(PagingGpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without CUDA";
}
#endif
