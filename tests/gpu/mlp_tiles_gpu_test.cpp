// Sequence tiling of the MLP (ModelOptions::mlp_tiles, ops::mlp_tiled) on the cuda backend.
// Tiled against untiled on an odd row count (the last tile short, tile rows not a multiple of 8):
// the loss within 1e-3 relative and every gradient within NMSE 2e-4. Not bit-exact as on cpu: a
// tile's GEMMs have another M, for which cuBLASLt may pick another algorithm (a bf16 rounding apart
// on some elements, 2^-8 relative), and the weight gradients add the tiles' partial sums in fp32.
// Then the sim mirroring cuda forecasts the tiled step's allocation schedule and peak byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "engine/ops.h"
#include "gpu_test_util.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/plan/forecast.h"
#include "model/train/trainer.h"
#include "small_llama.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/backend_cuda.h"

using namespace strata;

namespace {

struct Grads {
  float loss = 0;
  std::vector<std::vector<float>> g;  // per parameter, in the model's order
};

Grads gradients(const io::LlamaConfig& cfg, int tiles, const Plan& plan, int B, int T) {
  auto be = make_cuda_backend(size_t(2) << 30);
  ModelOptions mo;
  mo.mlp_tiles = tiles;
  mo.loss_chunk_tokens = 100;
  LlamaModel model(*be, cfg, mo);
  model.init_random(4);
  TrainOptions to;
  to.plan = plan;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(size_t(B) * T * 2 + 16, cfg.vocab_size, 9), B, T);
  Grads out;
  out.loss = tr.compute_gradients(data.next());
  for (auto& p : model.params()) {
    out.g.emplace_back(size_t(p.shape.numel()));
    be->download_f32(out.g.back().data(), p.grad_view());
  }
  return out;
}

TEST(MlpTilesGpu, TiledGradientsMatchUntiled) {
  STRATA_REQUIRE_GPU();
  const io::LlamaConfig cfg = gpu_test::small_llama_config(2);
  const int B = 2, T = 193;  // 386 rows: 3 tiles of 192, 192 and 2 rows; 5 tiles of 128 and a last of 2
  ASSERT_EQ(ops::mlp_tile_count(B * T, 3), 3);
  for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1)}) {
    const Grads ref = gradients(cfg, 1, plan, B, T);
    for (int tiles : {3, 4}) {
      const Grads got = gradients(cfg, tiles, plan, B, T);
      EXPECT_NEAR(got.loss, ref.loss, 1e-3 * std::fabs(ref.loss)) << plan.preset << " tiles " << tiles;
      ASSERT_EQ(got.g.size(), ref.g.size());
      for (size_t i = 0; i < ref.g.size(); ++i)
        EXPECT_TRUE(gpu_test::close(got.g[i], ref.g[i], 2e-4, plan.preset + " grad " + std::to_string(i)));
      std::printf("[ mlp tiles gpu ] %s, %d tiles: loss %.6f vs %.6f untiled\n", plan.preset.c_str(), tiles, got.loss,
                  ref.loss);
    }
  }
}

TEST(MlpTilesGpu, SimForecastsTheTiledScheduleByteForByte) {
  STRATA_REQUIRE_GPU();
  for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::selective_recompute()}) {
    ForecastRequest r;
    r.model = gpu_test::small_llama_config(2);
    r.seq = 193;
    r.batch = 2;
    r.mlp_tiles = 3;
    r.plan = plan;
    r.profile = find_profile("h100_80gb");
    r.mirror = SimMirror::cuda;
    r.budget = size_t(2) << 30;
    const Forecast f = forecast(r);
    ASSERT_TRUE(f.fits) << f.oom;
    auto be = make_cuda_backend(r.budget);
    be->arena().set_logging(true);  // after the cuBLASLt workspace: the sim's log starts before it
    LlamaModel model(*be, r.model, forecast_model_options(r));
    model.init_random(1);
    TrainOptions to;
    to.plan = plan;
    to.adam.lr = 1e-5f;
    Trainer tr(*be, model, to);
    TokenBatcher data(synthetic_tokens(size_t(r.batch) * r.seq * 2 + 16, r.model.vocab_size, 3), r.batch, r.seq);
    const StepStats st = tr.step(data.next());
    EXPECT_EQ(f.peak_bytes, st.peak_device_bytes) << plan.preset;
    const std::vector<ArenaEvent> ev = be->arena().events();
    ASSERT_FALSE(f.events.empty());
    ASSERT_EQ(f.events[0].tag, "workspace.cublaslt");
    ASSERT_EQ(f.events.size(), ev.size() + 1) << plan.preset;
    bool tile_blocks = false;
    for (size_t i = 0; i < ev.size(); ++i) {
      ASSERT_EQ(f.events[i + 1].tag, ev[i].tag) << plan.preset << " event " << i;
      ASSERT_EQ(f.events[i + 1].delta, ev[i].delta) << plan.preset << " event " << i << " " << ev[i].tag;
      tile_blocks = tile_blocks || ev[i].tag == "L0.mlp.gate.tile";
    }
    EXPECT_TRUE(tile_blocks) << plan.preset << ": no tile block in the cuda backend's log";
  }
}

}  // namespace

#else
TEST(MlpTilesGpu, NeedsTheCudaBuild) {
  GTEST_SKIP() << "SKIPPED (gpu): built without CUDA";
}
#endif
