// Gradient accumulation in the forecast and the planner (ForecastRequest::grad_accum): the sim runs every
// micro-batch of a step as the trainer does, so its peaks equal the cpu backend's byte for byte, its step is every
// micro-batch and one update, and the planner keeps the gradients on the device, where the micro-batches are summed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "expect_error.h"
#include "model/llama/llama.h"
#include "model/plan/planner.h"
#include "model/run/forecast_request.h"
#include "sim_twin.h"

using namespace strata;

namespace {

// A ConfigError from f naming `field` and `words`.
template <class F>
void expect_setting_error(F&& f, const std::string& field, const std::string& words) {
  auto e = test_util::catch_as<ConfigError>(f);
  if (!e) return;
  EXPECT_EQ(e->field, field) << e->what();
  EXPECT_NE(std::string(e->what()).find(words), std::string::npos) << e->what();
}

Plan with_state(Plan p, const char* level) {
  p.set_state_offloading(level, "test");
  return p;
}

}  // namespace

TEST(GradAccumForecast, SimPeaksEqualTheCpuBackendsWithMicroBatches) {
  for (int k : {2, 3})
    for (const char* level : {"none", "optimizer", "master"})
      for (const Plan& ap : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::hidden_states(),
                             Plan::activation_offloading(Decision::host)}) {
        const Plan p = with_state(ap, level);
        ForecastRequest req = sim_twin::tiny_request(p);
        req.grad_accum = k;
        const Forecast f = forecast(req);
        const sim_twin::CpuStep cpu = sim_twin::cpu_step(req, sim_twin::kBudget, p);
        const std::string what = std::to_string(k) + " micro-batches, " + level + " + " + ap.preset;
        ASSERT_TRUE(f.fits && cpu.fits) << what;
        EXPECT_EQ(f.peak_bytes, cpu.peak) << what;
        EXPECT_EQ(f.high_water_bytes, cpu.high_water) << what;
        EXPECT_EQ(f.peak_host_bytes, cpu.host_peak) << what;
        EXPECT_EQ(f.peak_disk_bytes, cpu.disk_peak) << what;
      }
}

TEST(GradAccumForecast, TheStepIsEveryMicroBatchAndOneUpdate) {
  // Mirroring cuda at a size where the update costs something against a micro-batch.
  ForecastRequest one = sim_twin::tiny_cuda_request(Plan::keep_everything());
  one.model.hidden_size = 512;
  one.model.intermediate_size = 1024;
  const Forecast f1 = forecast(one);
  ForecastRequest three = one;
  three.grad_accum = 3;
  const Forecast f3 = forecast(three);
  ASSERT_TRUE(f1.fits && f3.fits);
  // Three forwards and backwards, one update: more than one step's, less than three steps'.
  EXPECT_GT(f3.step_s, 2.0 * (f1.step_s - f1.optimizer_s));
  EXPECT_LT(f3.step_s, 3.0 * f1.step_s);
  EXPECT_NEAR(f3.optimizer_s, f1.optimizer_s, 1e-3 * f1.optimizer_s);
  // Every micro-batch's tokens count, and their forwards are forward time, not recompute.
  EXPECT_DOUBLE_EQ(f3.tokens_per_s, 3.0 * one.batch * one.seq / f3.step_s);
  EXPECT_GT(f3.tokens_per_s, f1.tokens_per_s) << "the update is paid once for three micro-batches";
  EXPECT_EQ(f3.recompute_s, 0.0) << "keep everything recomputes nothing";
  EXPECT_NEAR(f3.forward_s, 3.0 * f1.forward_s, 0.02 * f3.forward_s);
  EXPECT_NEAR(f3.forward_s + f3.backward_s + f3.optimizer_s, f3.step_s, 1e-9 * f3.step_s);
  // Gradient checkpointing's recompute is counted once per micro-batch.
  ForecastRequest gc = three;
  gc.plan = Plan::gradient_checkpointing(1);
  ForecastRequest gc1 = one;
  gc1.plan = gc.plan;
  const Forecast g3 = forecast(gc), g1 = forecast(gc1);
  ASSERT_GT(g1.recompute_s, 0.0);
  EXPECT_NEAR(g3.recompute_s, 3.0 * g1.recompute_s, 0.02 * g3.recompute_s);
}

TEST(GradAccumForecast, GradientsOnTheHostAreRefusedNamingTheSetting) {
  ForecastRequest req = sim_twin::tiny_request(with_state(Plan::keep_everything(), "all"));
  req.grad_accum = 2;
  expect_setting_error([&] { forecast(req); }, "grad-accum", "summed on the host");
  req.grad_accum = 0;
  expect_setting_error([&] { forecast(req); }, "grad-accum", "1 to 1024");
  req.grad_accum = kMaxForecastMicroBatches + 1;
  expect_setting_error([&] { forecast(req); }, "grad-accum", "1 to 1024");
}

TEST(GradAccumForecast, TheRunsRequestCarriesTheMicroBatchesWhileTheGradientsStayOnTheDevice) {
  TrainConfig cfg;
  cfg.seq = 64;
  cfg.grad_accum = 4;
  const io::LlamaConfig mc = test_util::tiny_config();
  EXPECT_EQ(train_forecast_request(cfg, mc, SimMirror::cpu, find_profile("h100_80gb")).grad_accum, 4);
  cfg.plan.set_state_offloading("master", "test");
  EXPECT_FALSE(plan_moves_grads_off_device(cfg.plan, mc));
  EXPECT_EQ(train_forecast_request(cfg, mc, SimMirror::cpu, find_profile("h100_80gb")).grad_accum, 4);
  // The gradients on the host: summed there, which is not forecast (one micro-batch's step).
  cfg.plan.set_state_offloading("all", "test");
  EXPECT_TRUE(plan_moves_grads_off_device(cfg.plan, mc));
  EXPECT_EQ(train_forecast_request(cfg, mc, SimMirror::cpu, find_profile("h100_80gb")).grad_accum, 1);
  Plan one_layer;
  one_layer.set_state_offloading_layers("all", 1, "test");
  EXPECT_TRUE(plan_moves_grads_off_device(one_layer, mc));
}

TEST(GradAccumForecast, ThePlannerKeepsTheGradientsOnTheDevice) {
  ForecastRequest req = sim_twin::tiny_request(Plan::keep_everything());
  req.grad_accum = 2;
  req.budget = 0;
  const Forecast keep = forecast(req);
  ASSERT_TRUE(keep.fits);
  // Under keep-everything's peak, with a host budget: the state may move, the gradients may not.
  const TierBudgets budgets{keep.peak_bytes - keep.persistent_bytes / 3, size_t(1) << 30, 0};
  const PlanResult pr = plan_for_budget(req, budgets);
  ASSERT_TRUE(pr.found) << pr.label;
  EXPECT_FALSE(plan_moves_grads_off_device(pr.plan, req.model)) << pr.label;
  for (const PlanTried& t : pr.tried) EXPECT_EQ(t.label.find("all"), std::string::npos) << t.label;
  EXPECT_LE(pr.forecast.peak_bytes, budgets.device);
  // One micro-batch a step: the same search tries the gradients on the host too.
  ForecastRequest one = req;
  one.grad_accum = 1;
  const PlanResult pr1 = plan_for_budget(one, budgets);
  EXPECT_TRUE(std::any_of(pr1.tried.begin(), pr1.tried.end(),
                          [](const PlanTried& t) { return t.label.find("all") != std::string::npos; }));
  EXPECT_DOUBLE_EQ(pr.forecast.tokens_per_s, 2.0 * req.batch * req.seq / pr.forecast.step_s);
}
