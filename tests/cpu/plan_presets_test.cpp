// One preset table (engine/plan.h plan_presets) serves every place a preset is named: strata-plan's
// --preset names, strata-bench's --plan short names, the YAML keys, and plan_yaml writing a plan back.
// Each spelling of a preset gives the same plan, the YAML that selects it reads back as that plan,
// and a plan written by plan_yaml reads back with the same decisions.
#include <gtest/gtest.h>

#include "engine/plan.h"
#include "model/forecast.h"
#include "model/planner.h"
#include "model/train_config.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/sim_twin.h"

using namespace strata;

namespace {

void expect_same(const Plan& a, const Plan& b, const std::string& what) {
  EXPECT_EQ(a.preset, b.preset) << what;
  EXPECT_EQ(a.rules, b.rules) << what;
  EXPECT_EQ(a.overrides, b.overrides) << what;
  EXPECT_EQ(a.checkpoint_every, b.checkpoint_every) << what;
  EXPECT_EQ(a.sync_transfers, b.sync_transfers) << what;
}

}  // namespace

TEST(PlanPresets, EverySpellingAndItsYamlGiveTheSamePlan) {
  ASSERT_EQ(plan_presets().size(), 7u);
  for (const PresetInfo& p : plan_presets()) {
    const std::string name(p.name);
    const Plan plan = preset_plan(p.name, 1, "--preset", "command line", "preset");
    expect_same(plan, preset_plan(p.short_name, 1, "--plan", "command line", "plan"), name + " short name");
    if (!p.alias.empty()) expect_same(plan, preset_plan(p.alias, 1, "x", "x", "x"), name + " alias");
    TrainConfig c;
    if (!p.yaml_key.empty())
      apply_yaml_text(c, std::string(p.yaml_key) + ": " + std::string(p.yaml_value) + "\n", "p.yaml");
    expect_same(plan, c.plan, name + " from its YAML");
    // plan_yaml writes it back; strata-train reads the same decisions.
    ForecastRequest req = sim_twin::tiny_request(plan);
    TrainConfig back;
    apply_yaml_text(back, plan_yaml(req, plan, forecast(req), 0), "plan.yaml");
    for (const char* cls : {"L1.attn.q", "L2.mlp.act", "L3.mlp_norm.out", "final_norm.out", "loss.lse"})
      for (int layer : {-1, 2, 3})
        EXPECT_EQ(back.plan.decide(cls, layer), plan.decide(cls, layer)) << name << " " << cls << " " << layer;
    EXPECT_EQ(back.plan.sync_transfers, plan.sync_transfers) << name;
  }
  expect_same(preset_plan("gc", 3, "--plan", "command line", "plan"), Plan::gradient_checkpointing(3), "gc every 3");
}

TEST(PlanPresets, AnUnknownNameListsTheTableNamingTheFlag) {
  auto e = test_util::catch_as<ConfigError>([] { preset_plan("checkpoint", 1, "--plan", "command line", "plan"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "plan");
  const std::string what = e->what();
  for (const PresetInfo& p : plan_presets()) EXPECT_NE(what.find(std::string(p.name)), std::string::npos) << what;
  EXPECT_NE(what.find("--plan"), std::string::npos) << what;
  auto y = test_util::catch_as<ConfigError>([] {
    TrainConfig c;
    apply_yaml_text(c, "activation_offloading: sometimes\n", "p.yaml");
  });
  ASSERT_TRUE(y);
  EXPECT_EQ(y->field, "activation_offloading");
  EXPECT_NE(std::string(y->what()).find("hidden_states"), std::string::npos) << y->what();
}
