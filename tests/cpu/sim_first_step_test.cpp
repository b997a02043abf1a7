// The first step's setup as the sim forecasts it (Forecast::setup_s): the kernels' first-call tuning once per
// problem, cuDNN's attention plan builds once per shape, and the pinned host reservations at the profile's rate, none
// of it in the step. (The sim's peaks and schedules: sim_test.cpp.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine/cost_model.h"
#include "engine/error.h"
#include "kernels/attention_workspace.h"
#include "kernels/tune_costs.h"
#include "model/plan/forecast.h"
#include "sim_twin.h"

using namespace strata;

namespace {

using namespace sim_twin;

// The first step's tuning, forecast per problem as the cuda kernels tune (kernels/tune_costs.h): once for each GEMM
// and attention problem however many layers and steps run it, none on the cpu mirror, and past kAttentionTuneMaxT
// tokens at the stand-in's length whatever the sequence's.
TEST(Sim, FirstCallTuningIsForecastOncePerProblem) {
  ForecastRequest r = tiny_cuda_request(Plan::keep_everything());
  const Forecast f = forecast(r);
  ASSERT_TRUE(f.fits) << f.oom;
  const double fixed = r.profile.first_step_tuning_s;
  EXPECT_GT(f.setup_tuning_s, fixed);
  EXPECT_DOUBLE_EQ(forecast(tiny_request(Plan::keep_everything())).setup_tuning_s, fixed) << "cpu tunes nothing";

  ForecastRequest deeper = r;  // more layers run the same problems: nothing more to tune
  deeper.model.num_hidden_layers *= 2;
  EXPECT_DOUBLE_EQ(forecast(deeper).setup_tuning_s, f.setup_tuning_s);

  // One more eligible backward plan: one more plan's runs of the one attention shape, at that shape's cost.
  const auto one_more_bwd_plan = [](ForecastRequest q) {
    const double before = forecast(q).setup_tuning_s;
    q.profile.attention_tune_candidates_bwd += 1;
    return forecast(q).setup_tuning_s - before;
  };
  const CostModel cost(r.profile);
  const int hq = r.model.num_attention_heads, d = r.model.head_dim;
  EXPECT_NEAR(one_more_bwd_plan(r), cost.attention(r.batch, r.seq, hq, d, true) * (1 + kAttentionTuneReps), 1e-12);
  for (int seq : {kAttentionTuneMaxT + 512, 3 * kAttentionTuneMaxT}) {
    ForecastRequest longer = r;
    longer.seq = seq;
    longer.batch = 1;
    longer.loss_chunk_tokens = 4096;
    EXPECT_NEAR(one_more_bwd_plan(longer),
                cost.attention(1, kAttentionTuneMaxT, hq, d, true) * (1 + kAttentionTuneReps), 1e-12)
        << "seq " << seq << " is tuned at the stand-in's length";
  }
}

// cuDNN builds each attention shape's plans once (the profile's attention_plan_build_s a shape): one shape within the
// tuning length; past it also the stand-in's (attention_stand_in_build_s), which every longer length of those heads
// shares. Both read back from a profile's JSON, and a negative value refused naming the field.
TEST(Sim, AttentionPlanBuildsAreForecastOncePerShape) {
  const auto build_cost = [](ForecastRequest q) {
    q.profile.attention_plan_build_s = q.profile.attention_stand_in_build_s = 0;
    const double before = forecast(q).setup_tuning_s;
    q.profile.attention_plan_build_s = 1.75;
    q.profile.attention_stand_in_build_s = 0.5;
    return forecast(q).setup_tuning_s - before;
  };
  ForecastRequest r = tiny_cuda_request(Plan::keep_everything());
  EXPECT_NEAR(build_cost(r), 1.75, 1e-12) << "one shape, built at its first call";
  ForecastRequest deeper = r;
  deeper.model.num_hidden_layers *= 2;
  EXPECT_NEAR(build_cost(deeper), 1.75, 1e-12) << "more layers of the same shape build nothing more";
  for (int seq : {kAttentionTuneMaxT + 512, 3 * kAttentionTuneMaxT}) {
    ForecastRequest longer = r;
    longer.seq = seq;
    longer.batch = 1;
    longer.loss_chunk_tokens = 4096;
    EXPECT_NEAR(build_cost(longer), 1.75 + 0.5, 1e-12) << "seq " << seq << ": its own plans and its stand-in's";
  }
  EXPECT_DOUBLE_EQ(build_cost(tiny_request(Plan::keep_everything())), 0.0) << "the cpu mirror builds nothing";

  DeviceProfile p = find_profile("h200");
  p.attention_plan_build_s = 0.625;
  p.attention_stand_in_build_s = 0.25;
  EXPECT_EQ(profile_from_json(profile_to_json(p), "p.json").attention_plan_build_s, 0.625);
  EXPECT_EQ(profile_from_json(profile_to_json(p), "p.json").attention_stand_in_build_s, 0.25);
  p.attention_plan_build_s = -1;
  try {
    profile_from_json(profile_to_json(p), "p.json");
    ADD_FAILURE() << "a negative attention_plan_build_s was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("attention_plan_build_s"), std::string::npos) << e.what();
  }
}

// The first step's setup is its own figure: the pinned host reservations at the profile's rate plus the tuning
// time, none of it in the step; without a host tier only the tuning is left.
TEST(Sim, FirstStepSetupIsSeparateFromTheStep) {
  ForecastRequest r = tiny_request(Plan::activation_offloading(Decision::host));
  r.mirror = SimMirror::cuda;
  r.profile = find_profile("h100_80gb");
  const Forecast f = forecast(r);
  ASSERT_TRUE(f.fits) << f.oom;
  ASSERT_GT(f.host_reserved_bytes, 0u);
  EXPECT_EQ(f.pinned_bytes, f.host_reserved_bytes + f.paged_host_bytes + f.state_host_bytes);
  EXPECT_DOUBLE_EQ(f.setup_pinned_s, double(f.pinned_bytes) / (r.profile.pinned_alloc_gbps * 1e9));
  EXPECT_GT(f.setup_tuning_s, r.profile.first_step_tuning_s) << "the kernels' tuning comes on top (mirror cuda)";
  EXPECT_DOUBLE_EQ(f.setup_s, f.setup_pinned_s + f.setup_tuning_s);

  ForecastRequest fast = r;  // a faster allocation shortens the setup, not the step
  fast.profile.pinned_alloc_gbps *= 4;
  fast.profile.first_step_tuning_s = 0;
  const Forecast g = forecast(fast);
  EXPECT_DOUBLE_EQ(g.setup_pinned_s, f.setup_pinned_s / 4);
  EXPECT_NEAR(g.setup_tuning_s, f.setup_tuning_s - r.profile.first_step_tuning_s, 1e-12);
  EXPECT_DOUBLE_EQ(g.setup_s, g.setup_pinned_s + g.setup_tuning_s);
  EXPECT_DOUBLE_EQ(g.step_s, f.step_s);

  const Forecast none = forecast(tiny_request(Plan::keep_everything()));
  EXPECT_EQ(none.pinned_bytes, 0u);
  EXPECT_EQ(none.setup_pinned_s, 0.0);

  // A profile's rate is read back from its JSON, and a rate of 0 is refused naming the field.
  DeviceProfile p = find_profile("h200");
  p.pinned_alloc_gbps = 3.25;
  p.first_step_tuning_s = 0.5;
  const DeviceProfile back = profile_from_json(profile_to_json(p), "p.json");
  EXPECT_EQ(back.pinned_alloc_gbps, 3.25);
  EXPECT_EQ(back.first_step_tuning_s, 0.5);
  EXPECT_EQ(back.pinned_first_touch_gbps, p.pinned_first_touch_gbps);
  p.pinned_alloc_gbps = 0;
  try {
    profile_from_json(profile_to_json(p), "p.json");
    ADD_FAILURE() << "a pinned_alloc_gbps of 0 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pinned_alloc_gbps"), std::string::npos) << e.what();
  }
}

// A fresh machine's pinning (memory never touched since it started): the machine's ranks at once at the profile's
// machine-wide first-touch rate, beside the warm figure, which it leaves as it is; none without the rate. The rate
// is read back from a profile's JSON and a negative one refused, naming the field.
TEST(Sim, FreshMachinePinningIsForecastBesideTheWarmOne) {
  ForecastRequest r = tiny_request(Plan::activation_offloading(Decision::host));
  r.mirror = SimMirror::cuda;
  r.profile = find_profile("h100_80gb");
  r.profile.pinned_first_touch_gbps = 0;
  const Forecast warm = forecast(r);
  ASSERT_TRUE(warm.fits) << warm.oom;
  ASSERT_GT(warm.pinned_bytes, 0u);
  EXPECT_EQ(warm.setup_fresh_pinned_s, 0.0) << "no first-touch rate, no fresh-machine figure";

  r.profile.pinned_first_touch_gbps = 4.5;
  const Forecast fresh = forecast(r);
  EXPECT_DOUBLE_EQ(fresh.setup_fresh_pinned_s, double(fresh.pinned_bytes) / 4.5e9);
  EXPECT_DOUBLE_EQ(fresh.setup_pinned_s, warm.setup_pinned_s);
  EXPECT_DOUBLE_EQ(fresh.setup_s, warm.setup_s);
  EXPECT_DOUBLE_EQ(fresh.step_s, warm.step_s);
  r.gpus = 2;  // two ranks of one machine pin at once, sharing the rate
  const Forecast two = forecast(r);
  ASSERT_TRUE(two.fits) << two.oom;
  EXPECT_DOUBLE_EQ(two.setup_fresh_pinned_s, 2.0 * double(two.pinned_bytes) / 4.5e9);

  DeviceProfile p = find_profile("h200");
  p.pinned_first_touch_gbps = 5.25;
  EXPECT_EQ(profile_from_json(profile_to_json(p), "p.json").pinned_first_touch_gbps, 5.25);
  p.pinned_first_touch_gbps = 0;
  EXPECT_EQ(profile_to_json(p).find("pinned_first_touch_gbps"), std::string::npos) << "0 (not measured) not written";
  nlohmann::json j = nlohmann::json::parse(profile_to_json(p));
  j["pinned_first_touch_gbps"] = -1;
  try {
    profile_from_json(j.dump(), "p.json");
    ADD_FAILURE() << "a negative pinned_first_touch_gbps was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pinned_first_touch_gbps"), std::string::npos) << e.what();
  }
}

}  // namespace
