// One preset table (engine/plan.h plan_presets) serves every place a preset is named: strata-plan's
// --preset names, strata-bench's --plan short names, the YAML keys, and plan_yaml writing a plan back.
// Each spelling of a preset gives the same plan, the YAML that selects it reads back as that plan,
// and a plan written by plan_yaml reads back with the same decisions.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "engine/plan.h"
#include "model/llama/slot_classes.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/train_config.h"
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

namespace {

// Every decision the plan holds, compared field by field (the labels aside: a written table reads back
// as "explicit").
void expect_same_decisions(const Plan& a, const Plan& b, const std::string& what) {
  EXPECT_EQ(a.rules, b.rules) << what;
  EXPECT_EQ(a.overrides, b.overrides) << what;
  EXPECT_EQ(a.checkpoint_every, b.checkpoint_every) << what;
  EXPECT_EQ(a.sync_transfers, b.sync_transfers) << what;
  EXPECT_EQ(a.state, b.state) << what;
  EXPECT_EQ(a.state_layer_rules, b.state_layer_rules) << what;
  EXPECT_EQ(a.state_layers_level, b.state_layers_level) << what;
  EXPECT_EQ(a.state_layers, b.state_layers) << what;
  EXPECT_EQ(a.layer_weights, b.layer_weights) << what;
  EXPECT_EQ(a.pages_layer_weights(), b.pages_layer_weights()) << what;
}

}  // namespace

// plan -> YAML (plan_yaml, what strata-plan --write-config writes) -> plan (strata-train's reader) gives
// the same value: the activation preset or table, the persistent state and the layer weights' paging,
// for frozen, LoRA and full fine-tune alike.
TEST(PlanPresets, PlanYamlRoundTripsEveryDecisionIncludingPaging) {
  std::vector<std::pair<std::string, Plan>> plans;
  for (const PresetInfo& p : plan_presets()) plans.emplace_back(std::string(p.name), p.make(1));
  plans.emplace_back("gc every 3", Plan::gradient_checkpointing(3));
  PlanSpec spec;  // a planner plan: an explicit table with checkpointed layers and state on the tiers
  spec.types = {{"L*.mlp.act", Decision::recompute}, {"L*.attn.q", Decision::host}};
  spec.checkpointed_layers = 2;
  spec.state_level = "optimizer";
  spec.state_tier = Decision::disk;
  spec.layers_level = "master";
  spec.state_layers = 3;
  spec.host_input_layers = 1;
  plans.emplace_back("planner table", make_plan(spec, 4));
  Plan offload_more = Plan::activation_offloading(Decision::host);  // a preset plus explicit overrides
  offload_more.overrides = {{"L0.*", Decision::keep}};
  offload_more.set_state_offloading("all", "test");
  plans.emplace_back("offload + overrides + state all", offload_more);
  for (TrainMode mode : {TrainMode::frozen, TrainMode::lora, TrainMode::full})
    for (auto& [name, base] : plans)
      for (Decision weights : {Decision::keep, Decision::page}) {
        Plan plan = base;
        plan.set_layer_weights(weights, "test");
        const std::string what =
            fmt::format("{} ({} training, layer_weights {})", name, train_mode_name(mode), decision_name(weights));
        ForecastRequest req = sim_twin::tiny_request(plan, mode);
        const std::string yaml = plan_yaml(req, plan, Forecast{}, 0);
        EXPECT_EQ(yaml.find("layer_weights: page") != std::string::npos, weights == Decision::page) << what << yaml;
        TrainConfig back;
        apply_yaml_text(back, yaml, "plan.yaml");
        expect_same_decisions(plan, back.plan, what + "\n" + yaml);
        EXPECT_EQ(back.freeze_base, mode == TrainMode::frozen) << what;
        EXPECT_EQ(back.lora.enabled(), mode == TrainMode::lora) << what;
        // The same YAML again: a second round trip changes nothing.
        TrainConfig again;
        apply_yaml_text(again, plan_yaml(req, back.plan, Forecast{}, 0), "plan2.yaml");
        expect_same_decisions(back.plan, again.plan, what + " (twice)");
      }
}

// The other way round the one table: plan_yaml finds the preset a plan was made from and writes the
// table's own YAML key and value for it.
TEST(PlanPresets, PresetOfFindsTheTableRowAPlanCameFrom) {
  for (const PresetInfo& p : plan_presets()) {
    const PresetInfo* found = preset_of(p.make(1));
    ASSERT_NE(found, nullptr) << p.name;
    EXPECT_EQ(found->name, p.name);
    EXPECT_EQ(preset_yaml(*found, 1),
              p.yaml_key.empty() ? std::string() : std::string(p.yaml_key) + ": " + std::string(p.yaml_value));
  }
  EXPECT_EQ(preset_yaml(*preset_of(Plan::gradient_checkpointing(4)), 4), "gradient_checkpointing: {every: 4}");
  Plan odd;
  odd.add("L*.mlp.act", Decision::disk);  // rules no preset makes
  EXPECT_EQ(preset_of(odd), nullptr);
  EXPECT_EQ(preset_of(Plan::keep_everything())->name, "keep");
}

// The layer weights' decision is part of the persistent state: an activation preset chosen after a
// config (strata-plan --preset, Plan::take_state) keeps it, and only keep or page are decisions for it.
TEST(PlanPresets, LayerWeightsTravelWithTheStateAndTakeKeepOrPage) {
  Plan config = Plan::keep_everything();
  config.set_layer_weights(Decision::page, "test");
  Plan chosen = Plan::gradient_checkpointing(1);
  EXPECT_FALSE(chosen.pages_layer_weights());
  chosen.take_state(config);
  EXPECT_TRUE(chosen.pages_layer_weights());
  EXPECT_EQ(chosen.checkpoint_every, 1);
  for (Decision d : {Decision::recompute, Decision::host, Decision::disk}) {
    auto e = test_util::catch_as<ConfigError>([&] { chosen.set_layer_weights(d, "--layer-weights"); });
    ASSERT_TRUE(e);
    EXPECT_NE(std::string(e->what()).find("keep"), std::string::npos) << e->what();
  }
  EXPECT_EQ(parse_layer_weights("page", "x"), Decision::page);
  EXPECT_EQ(parse_layer_weights("keep", "x"), Decision::keep);
  EXPECT_TRUE(test_util::catch_as<ConfigError>([] { parse_layer_weights("host", "x"); }));
  // "page" is no activation or state decision.
  EXPECT_TRUE(test_util::catch_as<ConfigError>([] { parse_decision("page", "plan.L*"); }));
  EXPECT_STREQ(decision_name(Decision::page), "page");
}

// The presets name roles; the classes are the model's (Llama's registered by model/llama/slot_classes.cpp):
// another model's classes make the same presets over its names.
TEST(PlanPresets, ThePresetsActOnTheClassesTheModelRegistered) {
  EXPECT_EQ(preset_classes().layer, llama_preset_classes().layer);  // the Llama model registered its own
  const PresetClasses llama = preset_classes();
  set_preset_classes({.loss_inputs = {"head.*"}, .layer = "blk*", .layer_input = "blk*.in", .cheap = {"blk*.norm"}});
  const Plan gc = Plan::gradient_checkpointing(1), hidden = Plan::hidden_states(), sel = Plan::selective_recompute();
  const Plan off = Plan::activation_offloading(Decision::host);
  set_preset_classes(llama);
  EXPECT_EQ(gc.decide("blk3.attn.q"), Decision::recompute);
  EXPECT_EQ(gc.decide("head.x"), Decision::keep);
  EXPECT_EQ(gc.decide("final_norm.out"), Decision::keep);  // not a class of that model: no rule names it
  EXPECT_EQ(gc.decide("blk2.in", 2), Decision::keep);      // the segment boundary: the layer input mark
  EXPECT_EQ(hidden.decide("blk2.in"), Decision::host);
  EXPECT_EQ(hidden.decide("blk2.mlp"), Decision::recompute);
  EXPECT_EQ(sel.decide("blk1.norm"), Decision::recompute);
  EXPECT_EQ(sel.decide("L1.mlp.act"), Decision::keep);
  EXPECT_EQ(off.decide("head.x"), Decision::keep);
  EXPECT_EQ(off.decide("blk0.anything"), Decision::host);
  // Restored: Llama's presets again.
  EXPECT_EQ(Plan::gradient_checkpointing(1).decide("L1.attn.q"), Decision::recompute);
  EXPECT_EQ(Plan::selective_recompute().decide("L1.mlp.act"), Decision::recompute);
}
