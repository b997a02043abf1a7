// The public API (include/strata/strata.h) against the engine it wraps: configs through the
// mirror structs train as the engine's own, a session trains the tiny model, and forecasts and
// plans match the engine's. The installed package itself is tested by scripts/examples.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "api/convert.h"
#include "model/plan/forecast.h"
#include "model/run/plan_answer.h"
#include "model/run/train_config.h"
#include "strata/strata.h"

namespace {

std::string temp_dir(const char* name) {
  auto d = std::filesystem::temp_directory_path() / (std::string(name) + "." + std::to_string(getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

TEST(Api, VersionAndBackends) {
  EXPECT_STREQ(strata::version(), STRATA_EXPECTED_VERSION);
  EXPECT_EQ(strata::make_backend("cpu")->backend(), "cpu");
  auto sim = strata::make_backend("sim", {.memory_bytes = size_t(1) << 30});
  EXPECT_EQ(sim->backend(), "sim");
  EXPECT_EQ(sim->arena_budget_bytes(), size_t(1) << 30);
  EXPECT_THROW(strata::make_backend("tpu"), strata::ConfigError);
}

TEST(Api, YamlThroughTheMirrorIsTheEnginesConfig) {
  const std::string yaml =
      "sequence_len: 256\nmicro_batch_size: 2\nlearning_rate: 0.0002\nlora_r: 8\ngradient_checkpointing: {every: 2}\n"
      "state_offloading: optimizer\noptimizer_state: 8bit\nplan:\n  \"L*.mlp.act\": host\n";
  strata::SessionConfig pub;
  strata::apply_yaml_text(pub, yaml, "run.yaml");
  strata::TrainConfig eng;
  strata::apply_yaml_text(eng, yaml, "run.yaml");
  EXPECT_EQ(pub.seq, 256);
  EXPECT_EQ(pub.lora_rank, 8);
  EXPECT_EQ(pub.optimizer_state, "8bit");
  EXPECT_EQ(pub.plan.checkpoint_every, 2);
  const strata::Plan back = strata::api::to_plan(pub.plan, "test");
  for (const char* cls : {"L0.input", "L1.input", "L2.input", "L3.mlp.act", "L3.attn.q", "head.input"})
    EXPECT_EQ(back.decide(cls), eng.plan.decide(cls)) << cls;
  EXPECT_EQ(back.decide_state("L3.adam.m"), eng.plan.decide_state("L3.adam.m"));
  EXPECT_EQ(back.preset, eng.plan.preset);
  try {
    strata::apply_yaml_text(pub, "no_such_key: 1\n", "run.yaml");
    FAIL() << "no ConfigError";
  } catch (const strata::ConfigError& e) {
    EXPECT_EQ(e.file, "run.yaml");
    EXPECT_EQ(e.field, "no_such_key");
  }
}

TEST(Api, SessionTrainsTheTinyModel) {
  const std::string dir = temp_dir("strata_api_test");
  strata::SessionConfig cfg;
  cfg.model_dir = dir;
  cfg.data_path = strata::write_tiny_checkpoint(dir, {}, 0, 5000);
  cfg.seq = 32;
  cfg.batch = 2;
  cfg.lr = 3e-3f;
  strata::Session s(strata::make_backend("cpu"), cfg);
  EXPECT_EQ(s.model().layers, 2);
  EXPECT_EQ(s.parameters(), s.model().parameters);
  int calls = 0;
  s.on_step([&](const strata::StepMetrics& m) { EXPECT_EQ(m.step, ++calls); });
  const strata::StepMetrics first = s.step();
  strata::StepMetrics last;
  for (int i = 0; i < 7; ++i) last = s.step();
  EXPECT_EQ(calls, 8);
  EXPECT_EQ(s.steps_done(), 8);
  EXPECT_LT(last.loss, first.loss);
  EXPECT_GT(last.peak_device_bytes, 0u);

  strata::TokenBatch b{1, 4, {1, 2, 3, 4}, {2, 3, 4, 5}};
  EXPECT_TRUE(std::isfinite(s.evaluate(b)));
  b.targets.pop_back();
  EXPECT_THROW(s.step(b), strata::ConfigError);

  s.save(dir + "/out");
  EXPECT_EQ(strata::model_shape(dir + "/out").hidden, 64);
  std::filesystem::remove_all(dir);
}

// MemoryPlan::set_state_offloading_layers is the YAML's state_offloading_layers: a session whose plan is set
// this way places the state as one read from the YAML (the same host bytes, the same class decisions as the
// engine's TrainConfig), on part of the layers only; bad input is a ConfigError naming the expected values.
TEST(Api, StateOffloadingLayersIsTheYamlKey) {
  const std::string dir = temp_dir("strata_api_state_layers");
  strata::ModelShape shape;
  shape.layers = 4;
  strata::SessionConfig base;
  base.model_dir = dir;
  base.data_path = strata::write_tiny_checkpoint(dir, shape, 0, 5000);
  base.seq = 16;
  base.batch = 2;
  const std::string yaml = "state_offloading_layers: {level: optimizer, layers: 2}\n";
  strata::SessionConfig by_method = base;
  EXPECT_EQ(&by_method.plan.set_state_offloading_layers("optimizer", 2), &by_method.plan);
  EXPECT_EQ(by_method.plan.state_layers_level, "optimizer");
  EXPECT_EQ(by_method.plan.state_layers, 2);
  strata::SessionConfig by_yaml = base;
  strata::apply_yaml_text(by_yaml, yaml, "run.yaml");
  EXPECT_EQ(by_yaml.plan.state_layers_level, "optimizer");
  EXPECT_EQ(by_yaml.plan.state_layers, 2);
  strata::TrainConfig eng;
  strata::apply_yaml_text(eng, yaml, "run.yaml");
  const strata::Plan mine = strata::api::to_plan(by_method.plan, "test");
  for (const char* group : {"L0", "L1", "L2", "L3", "embed", "head", "final_norm"})
    for (const char* kind : strata::kStateKinds) {
      const std::string cls = std::string(group) + "." + kind;
      const int layer = group[0] == 'L' ? group[1] - '0' : -1;
      EXPECT_EQ(mine.decide_state(cls, layer, 4), eng.plan.decide_state(cls, layer, 4)) << cls;
    }
  EXPECT_EQ(mine.decide_state("L3.adam.m", 3, 4), strata::Decision::host);  // the spread chose L1 and L3
  EXPECT_EQ(mine.decide_state("L0.adam.m", 0, 4), strata::Decision::keep);

  strata::SessionConfig whole = base;
  whole.plan.set_state_offloading("optimizer");
  const auto host_bytes = [](const strata::SessionConfig& c) {
    strata::Session s(strata::make_backend("cpu"), c);
    return s.step().state_host_bytes;
  };
  const size_t method_bytes = host_bytes(by_method), yaml_bytes = host_bytes(by_yaml);
  EXPECT_EQ(method_bytes, yaml_bytes);
  EXPECT_GT(method_bytes, 0u);
  EXPECT_LT(method_bytes, host_bytes(whole)) << "two of the four layers' moments, not all of them";
  EXPECT_EQ(host_bytes(base), 0u);

  // Off again with 0 layers (any level); bad input names what is expected.
  strata::MemoryPlan off = by_method.plan;
  off.set_state_offloading_layers("none", 0);
  EXPECT_EQ(off.state_layers, 0);
  EXPECT_EQ(off.state_layers_level, "none");
  for (const auto& [level, layers] : std::vector<std::pair<std::string, int>>{{"sometimes", 2}, {"none", 2}}) {
    try {
      strata::MemoryPlan p;
      p.set_state_offloading_layers(level, layers);
      ADD_FAILURE() << "accepted " << level << " in " << layers << " layers";
    } catch (const strata::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("optimizer, master or all"), std::string::npos) << e.what();
    }
  }
  try {
    strata::MemoryPlan p;
    p.set_state_offloading_layers("optimizer", -1);
    ADD_FAILURE() << "accepted -1 layers";
  } catch (const strata::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("0 or more"), std::string::npos) << e.what();
  }
  // More layers than the model has: refused when the session is built, naming the key.
  strata::SessionConfig too_many = base;
  too_many.plan.set_state_offloading_layers("optimizer", 5);
  try {
    strata::Session s(strata::make_backend("cpu"), too_many);
    ADD_FAILURE() << "5 of 4 layers accepted";
  } catch (const strata::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("state_offloading_layers"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Api, ForecastAndPlanAreTheEngines) {
  strata::ForecastSpec spec;
  spec.model = "Llama-3.2-1B";
  spec.seq = 1024;
  const strata::ForecastReport f = strata::forecast(spec);
  const strata::Forecast eng = strata::forecast(strata::api::to_request(spec));
  EXPECT_EQ(f.peak_bytes, eng.peak_bytes);
  EXPECT_EQ(f.step_s, eng.step_s);

  const size_t budget = f.persistent_bytes + (f.peak_bytes - f.persistent_bytes) / 2;  // half the activations
  const strata::PlanReport p = strata::plan_for_budget(spec, {budget});
  ASSERT_TRUE(p.found);
  EXPECT_LE(p.forecast.peak_bytes, budget);
  // The plan it found forecasts the same through the mirror.
  spec.plan = p.plan;
  EXPECT_EQ(p.layer_offloading, p.plan.layer_weights == "page");  // the older field mirrors the plan
  EXPECT_EQ(strata::forecast(spec).peak_bytes, p.forecast.peak_bytes);
  // Its YAML reads back into a config.
  strata::SessionConfig c;
  strata::apply_yaml_text(c, strata::plan_yaml(spec, p), "plan.yaml");
  EXPECT_EQ(c.seq, 1024);
}

}  // namespace

// SessionConfig::layer_offloading (and ForecastSpec's) stay the older spelling of
// MemoryPlan::layer_weights = "page": either one pages, and the config mirrors both.
TEST(Api, LayerOffloadingIsTheOlderSpellingOfLayerWeightsPage) {
  strata::SessionConfig c;
  EXPECT_EQ(c.plan.layer_weights, "keep");
  strata::apply_yaml_text(c, "layer_weights: page\n", "a.yaml");
  EXPECT_EQ(c.plan.layer_weights, "page");
  EXPECT_TRUE(c.layer_offloading);
  strata::SessionConfig old;
  old.layer_offloading = true;  // source written before layer_weights
  strata::apply_yaml_text(old, "seq: 64\n", "b.yaml");
  EXPECT_EQ(old.plan.layer_weights, "page");
  EXPECT_TRUE(old.layer_offloading);
  strata::SessionConfig bad;
  bad.plan.layer_weights = "host";
  EXPECT_THROW(strata::apply_yaml_text(bad, "seq: 64\n", "c.yaml"), strata::ConfigError);
  // A forecast pages the same way under either spelling.
  strata::ForecastSpec a;
  a.model = "tiny";
  a.seq = 32;
  a.mode = "frozen";
  a.mirror = "cpu";
  a.layer_offloading = true;
  strata::ForecastSpec b = a;
  b.layer_offloading = false;
  b.plan.layer_weights = "page";
  strata::ForecastSpec none = b;
  none.plan.layer_weights = "keep";
  const auto fa = strata::forecast(a), fb = strata::forecast(b), fn = strata::forecast(none);
  EXPECT_EQ(fa.peak_bytes, fb.peak_bytes);
  EXPECT_EQ(fa.persistent_bytes, fb.persistent_bytes);
  EXPECT_GT(fa.peak_host_bytes, fn.peak_host_bytes);  // the paged layers live in host memory
}

// ForecastSpec takes every training setting by its YAML key (the settings table), and its forecast is
// the one strata-plan answers for the same settings.
TEST(Api, ForecastSpecTakesEverySettingAsStrataPlanDoes) {
  strata::ForecastSpec spec;
  spec.model = "tiny";
  spec.set("sequence_len", "64");  // a typed field's setting sets the field
  EXPECT_EQ(spec.seq, 64);
  EXPECT_EQ(spec.get("micro_batch_size"), "1");
  spec.gpus = 2;
  const size_t ddp_peak = strata::forecast(spec).peak_bytes;
  spec.set("zero_stage", "1");  // no typed field: kept in `more`, read by the forecast
  EXPECT_EQ(spec.get("zero_stage"), "1");
  ASSERT_EQ(spec.more.size(), 1u);
  const strata::ForecastReport zero = strata::forecast(spec);
  EXPECT_LT(zero.peak_bytes, ddp_peak);  // rank 0 holds half the optimizer state

  strata::PlanQuestion q;  // strata-plan --model tiny --seq 64 --gpus 2 --zero-stage 1
  q.model = "tiny";
  q.seq = 64;
  q.gpus = 2;
  q.cfg.zero_stage = 1;
  const strata::PlanAnswer a = strata::answer_plan(strata::plan_request(q));
  EXPECT_EQ(zero.peak_bytes, a.forecast.peak_bytes);
  EXPECT_EQ(zero.step_s, a.forecast.step_s);

  spec.set("lora_r", "8");  // the mode follows the settings
  EXPECT_EQ(spec.mode, "lora");
  EXPECT_EQ(spec.lora_rank, 8);
  try {
    spec.set("zero_stages", "1");
    ADD_FAILURE() << "an unknown key was accepted";
  } catch (const strata::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_stage"), std::string::npos) << e.what();  // the suggestion
  }
  strata::ForecastSpec lora;
  lora.model = "tiny";
  lora.seq = 64;
  lora.mode = "lora";
  lora.lora_rank = 0;
  EXPECT_THROW(strata::forecast(lora), strata::ConfigError);  // not silently a full fine-tune
}
