// The default arena follows the plan (model/plan/arena_sizing.h): the forecast's high-water offset is
// exactly the arena the step needs (the cpu twin runs in an arena of that size and fails in one
// 4 KiB smaller), the reservation adds the stated headroom, and the request carries the run's
// plan, recipe, mode and paging so a leaner plan reserves less.
#include "model/plan/arena_sizing.h"

#include <gtest/gtest.h>

#include "engine/error.h"
#include "model/run/forecast_request.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;

namespace {

TEST(ArenaSizing, TheForecastHighWaterIsExactlyTheArenaTheStepNeeds) {
  for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::hidden_states()}) {
    ForecastRequest r = sim_twin::tiny_request(plan);  // mirrors the cpu backend
    const ArenaSizing a = arena_for_plan(r);
    ASSERT_GT(a.high_water, 0u);
    EXPECT_TRUE(sim_twin::cpu_step(r, a.high_water, plan).fits) << plan.preset;
    EXPECT_FALSE(sim_twin::cpu_step(r, a.high_water - 4096, plan).fits) << plan.preset;
    EXPECT_EQ(a.headroom, std::max(kArenaHeadroomMin, size_t(double(a.high_water) * kArenaHeadroomFraction)));
    EXPECT_GE(a.bytes, a.high_water + a.headroom);
    EXPECT_LT(a.bytes, a.high_water + a.headroom + (size_t(2) << 20));
    EXPECT_EQ(a.bytes % (size_t(2) << 20), 0u);
  }
}

TEST(ArenaSizing, TheRequestIsTheRunsAndALeanerPlanReservesLess) {
  TrainConfig cfg;
  cfg.seq = 64;
  cfg.batch = 2;
  cfg.loss_chunk_tokens = 32;
  cfg.recipe.moments = OptimizerState::q8;
  cfg.plan = Plan::gradient_checkpointing(2);
  const io::LlamaConfig mc = test_util::tiny_config();
  const DeviceProfile p = find_profile("h100_80gb");
  ForecastRequest r = train_forecast_request(cfg, mc, SimMirror::cuda, p);
  EXPECT_EQ(r.seq, 64);
  EXPECT_EQ(r.batch, 2);
  EXPECT_EQ(r.loss_chunk_tokens, 32);
  EXPECT_EQ(r.recipe.moments, OptimizerState::q8);
  EXPECT_EQ(r.plan.preset, cfg.plan.preset);
  EXPECT_EQ(r.mode, TrainMode::full);
  cfg.lora.rank = 4;
  EXPECT_EQ(train_forecast_request(cfg, mc, SimMirror::cuda, p).mode, TrainMode::lora);
  cfg.lora.rank = 0;
  cfg.plan = Plan::keep_everything();
  const size_t keep = arena_for_plan(train_forecast_request(cfg, mc, SimMirror::cuda, p)).high_water;
  cfg.plan = Plan::gradient_checkpointing(1);
  const size_t gc = arena_for_plan(train_forecast_request(cfg, mc, SimMirror::cuda, p)).high_water;
  EXPECT_LT(gc, keep);
}

}  // namespace
