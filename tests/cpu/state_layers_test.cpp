// Persistent state per layer (Plan::state_layers, `state_offloading_layers`) and the planner's
// placement of it (model/plan/planner.h step 5), plus the split hidden-state family (the last layers'
// inputs on the host, the others on disk): on the cpu backend every layer-spread placement gives
// losses, norms, weights and moments bit-identical to keep-everything with clipping active; it puts
// exactly the chosen layers' classes on the host and leaves the embedding, head and final norm where
// the base level puts them; the sim forecasts the device, host and disk peaks byte for byte (the host
// peak with disk staging bounded from above, as sim_test); configs
// and flags parse it and refuse bad values naming the field; the planner chooses it when it fits
// and is faster, and its YAML runs the same decisions.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "engine/backend.h"
#include "engine/error.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;

namespace {

struct Outcome {
  std::vector<float> losses, norms;
  std::vector<std::vector<float>> weights;  // each parameter's fp32 master after the last update
  std::vector<std::vector<float>> moments;
  size_t state_host = 0;
};

Outcome train(const Plan& plan, int steps = 3) {
  auto be = make_cpu_backend(size_t(64) << 20);
  const io::LlamaConfig c = test_util::tiny_config();
  ModelOptions mo;
  mo.state_plan = plan;
  LlamaModel model(*be, c, mo);
  model.init_random(11);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.max_grad_norm = 0.05f;  // clipping active on every step
  to.plan = plan;
  to.tiers.offload_dir = ::testing::TempDir();
  to.optimizer.grad_inflight_bytes = 4096;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, c.vocab_size, 3), 2, 19);
  Outcome r;
  for (int s = 0; s < steps; ++s) {
    const StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
  }
  model.sync_state();
  r.state_host = model.state_host_bytes();
  for (auto& p : model.params()) {
    const size_t n = size_t(p.shape.numel());
    auto read = [&](size_t host_off, const Buffer& dev) {
      std::vector<float> h(n);
      std::memcpy(h.data(), host_off != Parameter::kDevice ? model.host_state(host_off) : dev.view().data, n * 4);
      return h;
    };
    r.weights.push_back(read(p.host_master, p.master));
    r.moments.push_back(read(p.host_m, p.m));
    r.moments.push_back(read(p.host_v, p.v));
  }
  return r;
}

void expect_same(const Outcome& a, const Outcome& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * 4), 0) << what;
  EXPECT_EQ(std::memcmp(a.norms.data(), b.norms.data(), a.norms.size() * 4), 0) << what;
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i)
    EXPECT_EQ(std::memcmp(a.weights[i].data(), b.weights[i].data(), a.weights[i].size() * 4), 0)
        << what << ": weights " << i;
  for (size_t i = 0; i < a.moments.size(); ++i)
    EXPECT_EQ(std::memcmp(a.moments[i].data(), b.moments[i].data(), a.moments[i].size() * 4), 0)
        << what << ": moment " << i;
}

Plan spread(const char* base, const char* level, int k, Plan p = Plan::keep_everything()) {
  p.set_state_offloading(base, "test");
  p.set_state_offloading_layers(level, k, "test");
  return p;
}

const char* const kLevels[] = {"none", "optimizer", "master", "all"};

}  // namespace

TEST(StateLayers, ChosenLayersAreExactlyKSpreadEvenly) {
  for (int n = 1; n <= 40; ++n)
    for (int k = 0; k <= n + 2; ++k) {
      int chosen = 0, run = 0, longest_run = 0;
      for (int i = 0; i < n; ++i) {
        const bool c = state_layer_chosen(i, k, n);
        chosen += c;
        run = c ? run + 1 : 0;
        longest_run = std::max(longest_run, run);
      }
      EXPECT_EQ(chosen, std::min(k, n)) << "k " << k << " of n " << n;
      // Spread: the n - k layers left out split the chosen ones into runs of at most ceil(k / (n - k)).
      if (k < n) {
        EXPECT_LE(longest_run, (k + (n - k) - 1) / (n - k)) << "k " << k << " of n " << n;
      }
    }
  EXPECT_FALSE(state_layer_chosen(-1, 4, 4)) << "a non-layer group is never chosen";
}

TEST(StateLayers, EveryLevelPairAndLayerCountIsBitIdenticalToKeepEverything) {
  const Outcome keep = train(Plan::keep_everything());
  const int L = test_util::tiny_config().num_hidden_layers;
  for (int b = 0; b + 1 < 4; ++b)
    for (int k : {1, L / 2, L - 1, L}) {
      const Plan p = spread(kLevels[b], kLevels[b + 1], k);
      const std::string what = fmt::format("{} + {} in {} layers", kLevels[b], kLevels[b + 1], k);
      const Outcome r = train(p);
      expect_same(keep, r, what);
      EXPECT_GT(r.state_host, 0u) << what;
    }
  // The split hidden-state family: the last two layers' inputs on the host, the others on disk.
  PlanSpec split;
  split.types = {{"L*.input", Decision::disk}, {"L*", Decision::recompute}};
  split.host_input_layers = 2;
  expect_same(keep, train(spread("none", "optimizer", 1, make_plan(split, L))), "split inputs + optimizer in 1 layer");
  // Combined with activation plans (layer inputs on the host, gradient checkpointing).
  for (const Plan& ap : {Plan::gradient_checkpointing(1), Plan::hidden_states()})
    expect_same(keep, train(spread("optimizer", "all", 2, ap)), ap.preset + " + optimizer + all in 2 layers");
}

TEST(StateLayers, OnlyTheChosenLayersTakeTheHigherLevel) {
  auto be = make_cpu_backend(size_t(64) << 20);
  const io::LlamaConfig c = test_util::tiny_config();
  const int L = c.num_hidden_layers;
  const int k = L / 2;
  ModelOptions mo;
  mo.state_plan = spread("optimizer", "all", k);
  LlamaModel m(*be, c, mo);
  int host_grad_layers = -1, seen_layer = -1;
  std::vector<bool> layer_grad(size_t(L), false);
  for (const Parameter& p : m.params()) {
    ASSERT_NE(p.host_m, Parameter::kDevice) << p.name << ": the base level puts every moment on the host";
    const int layer = LlamaModel::layer_of_param(p.name);
    if (layer < 0) {
      EXPECT_EQ(p.host_grad, Parameter::kDevice) << p.name << ": non-layer groups follow the base level";
      EXPECT_EQ(p.host_master, Parameter::kDevice) << p.name;
      continue;
    }
    EXPECT_EQ(p.host_grad != Parameter::kDevice, state_layer_chosen(layer, k, L)) << p.name;
    EXPECT_EQ(p.host_master != Parameter::kDevice, state_layer_chosen(layer, k, L)) << p.name;
    if (layer != seen_layer) layer_grad[size_t(layer)] = p.host_grad != Parameter::kDevice, seen_layer = layer;
  }
  host_grad_layers = int(std::count(layer_grad.begin(), layer_grad.end(), true));
  EXPECT_EQ(host_grad_layers, k);
}

TEST(StateLayers, SimForecastsEveryTierPeakByteForByte) {
  const int L = test_util::tiny_config().num_hidden_layers;
  for (const Plan& ap : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::hidden_states()})
    for (int b = 0; b + 1 < 4; ++b) {
      const Plan p = spread(kLevels[b], kLevels[b + 1], L / 2 + 1, ap);
      const std::string what = ap.preset + " " + p.state_label();
      const ForecastRequest req = sim_twin::tiny_request(p);
      const Forecast f = forecast(req);
      const sim_twin::CpuStep cpu = sim_twin::cpu_step(req, sim_twin::kBudget, p);
      ASSERT_TRUE(f.fits && cpu.fits) << what;
      EXPECT_EQ(f.peak_bytes, cpu.peak) << what;
      EXPECT_EQ(f.high_water_bytes, cpu.high_water) << what;
      EXPECT_EQ(f.peak_host_bytes, cpu.host_peak) << what;
      EXPECT_GT(f.state_host_bytes, 0u) << what;
    }
}

TEST(StateLayers, YamlAndFlagsParseItAndRefuseBadValuesNamingTheField) {
  TrainConfig a;
  apply_yaml_text(a, "state_offloading: optimizer\nstate_offloading_layers: {level: all, layers: 3}\n", "s.yaml");
  EXPECT_EQ(a.plan.state_layers, 3);
  EXPECT_EQ(a.plan.state_layers_level, "all");
  EXPECT_EQ(a.plan.state_label(), "optimizer + all in 3 layers");
  EXPECT_EQ(a.plan.decide_state("L0.grad", 0, 4), state_layer_chosen(0, 3, 4) ? Decision::host : Decision::keep);
  EXPECT_EQ(a.plan.decide_state("embed.grad", -1, 4), Decision::keep);
  EXPECT_EQ(a.plan.decide_state("embed.adam.m", -1, 4), Decision::host);
  // The order of the keys does not matter.
  TrainConfig b;
  apply_yaml_text(b, "state_offloading_layers:\n  layers: 3\n  level: all\nstate_offloading: optimizer\n", "s.yaml");
  EXPECT_EQ(b.plan.state_label(), a.plan.state_label());
  for (const char* bad :
       {"state_offloading_layers: 3\n", "state_offloading_layers: {level: all}\n",
        "state_offloading_layers: {layers: 2}\n", "state_offloading_layers: {level: most, layers: 2}\n",
        "state_offloading_layers: {level: none, layers: 2}\n", "state_offloading_layers: {level: all, layers: -1}\n",
        "state_offloading_layers: {level: all, layers: two}\n",
        "state_offloading_layers: {level: all, layers: 2, tier: disk}\n"}) {
    TrainConfig c;
    try {
      apply_yaml_text(c, bad, "s.yaml");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("s.yaml"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("state_offloading_layers"), std::string::npos) << e.what();
    }
  }
  Plan f;
  f.parse_state_offloading_layers("master:12", "--state-offloading-layers");
  EXPECT_EQ(f.state_layers, 12);
  EXPECT_EQ(f.state_layers_level, "master");
  for (const char* bad : {"master", "master:", ":3", "master:x", "master:-2", "everything:3", "master:99999999999"})
    EXPECT_THROW(f.parse_state_offloading_layers(bad, "--state-offloading-layers"), ConfigError) << bad;
  // More layers than the model has: refused when the model is built, naming the key.
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.state_plan = spread("none", "optimizer", test_util::tiny_config().num_hidden_layers + 1);
  try {
    LlamaModel m(*be, test_util::tiny_config(), mo);
    ADD_FAILURE() << "more layers than the model has were accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("state_offloading_layers"), std::string::npos) << e.what();
  }
}

// A budget that the moments fit only partly: below the device peak with every moment on the device,
// above the one with every layer's moments on the host. The planner moves some layers' moments only
// (fewer bytes over the link than every group's), its forecast equals the cpu step's peaks, and its
// YAML reads back the same decision for every class.
TEST(StateLayers, PlannerMovesOnlyTheLayersTheBudgetNeedsAndItsYamlRunsTheSame) {
  const int L = test_util::tiny_config().num_hidden_layers;
  const Plan gc = Plan::gradient_checkpointing(1);
  const Forecast on_device = forecast(sim_twin::tiny_request(gc));
  const Forecast layers_on_host = forecast(sim_twin::tiny_request(spread("none", "optimizer", L, gc)));
  Plan every_group = gc;
  every_group.set_state_offloading("optimizer", "test");
  const Forecast all_on_host = forecast(sim_twin::tiny_request(every_group));
  ASSERT_LT(layers_on_host.peak_bytes, on_device.peak_bytes);
  const size_t budget = (layers_on_host.peak_bytes + on_device.peak_bytes) / 2;
  ForecastRequest base = sim_twin::tiny_request(Plan::keep_everything());
  const PlanResult pr = plan_for_budget(base, TierBudgets{budget, size_t(1) << 30, 0});
  ASSERT_TRUE(pr.found) << pr.label;
  EXPECT_LE(pr.forecast.peak_bytes, budget);
  // Either a layer-spread placement, or no state on the host at all (an activation plan alone fit).
  if (pr.forecast.state_host_bytes > 0) {
    EXPECT_GT(pr.plan.state_layers, 0) << pr.label;
    EXPECT_LT(pr.forecast.state_bytes_moved, all_on_host.state_bytes_moved) << pr.label;
  }
  ForecastRequest chosen = sim_twin::tiny_request(pr.plan);
  chosen.mlp_tiles = pr.plan.mlp_tiles;
  const sim_twin::CpuStep cpu = sim_twin::cpu_step(chosen, budget, pr.plan);
  ASSERT_TRUE(cpu.fits) << pr.label;
  EXPECT_EQ(cpu.peak, pr.forecast.peak_bytes);
  EXPECT_EQ(cpu.host_peak, pr.forecast.peak_host_bytes);
  TrainConfig tc;
  apply_yaml_text(tc, plan_yaml(chosen, pr.plan, pr.forecast, budget), "plan.yaml");
  for (int l = -1; l < L; ++l)
    for (const char* kind : kStateKinds) {
      const std::string cls = (l < 0 ? std::string("embed") : fmt::format("L{}", l)) + "." + kind;
      EXPECT_EQ(tc.plan.decide_state(cls, l, L), pr.plan.decide_state(cls, l, L)) << cls;
    }
}

// The planner's own search space must produce a layer-spread placement when it is the only way to
// fit: every activation plan is pinned to checkpointing (a budget a hair above gc with the layers'
// moments on the host, below gc with every moment on the device or on the host with the embedding's
// on the device too). Checked through Search::place's output: the found plan is layer-spread.
TEST(StateLayers, PlannerFindsTheLayerSpreadPlacementWhenOnlyItFits) {
  const int L = test_util::tiny_config().num_hidden_layers;
  const Plan gc = Plan::gradient_checkpointing(1);
  // The fewest layers whose moments must leave for gc to fit a budget just under k = L - 1's peak.
  const Forecast k1 = forecast(sim_twin::tiny_request(spread("none", "optimizer", L - 1, gc)));
  const Forecast kL = forecast(sim_twin::tiny_request(spread("none", "optimizer", L, gc)));
  ASSERT_LT(kL.peak_bytes, k1.peak_bytes);
  ForecastRequest base = sim_twin::tiny_request(Plan::keep_everything());
  const PlanResult pr = plan_for_budget(base, TierBudgets{k1.peak_bytes, size_t(1) << 30, 0});
  ASSERT_TRUE(pr.found) << pr.label;
  EXPECT_LE(pr.forecast.peak_bytes, k1.peak_bytes);
  bool any_spread = false;
  for (const PlanTried& t : pr.tried) any_spread = any_spread || t.label.find(" layers") != std::string::npos;
  EXPECT_TRUE(any_spread) << "the planner never tried a layer-spread placement";
}

// Layer inputs that fit neither the host budget nor the disk budget alone, but split over both: the
// planner puts the last layers' inputs on the host and the others on disk, and the forecast's three
// peaks equal the cpu step's.
TEST(StateLayers, PlannerSplitsLayerInputsOverHostAndDiskWhenNeitherHoldsThemAll) {
  // Long rows over 8 layers: the layer inputs are most of the activations (1 MiB a layer, against
  // 0.2 MiB of a layer's frozen weights that paging could move instead).
  // A frozen base: the state is a few norms, so moving it cannot stand in for the split.
  auto request = [](const Plan& p) {
    ForecastRequest r = sim_twin::tiny_request(p, TrainMode::frozen);
    r.model.num_hidden_layers = 8;
    r.seq = 2048;
    r.mlp_tiles = 1;                           // untiled: tiling is not what the test is about
    r.tiers.prefetch_bytes = size_t(2) << 20;  // two layers' inputs loaded ahead, not all of them
    // Disk staging (reserved whole: max(in flight, the largest disk slot)) of one layer's input, not the
    // default 512 MiB, so all inputs on disk need less host than all on the host.
    r.tiers.max_inflight_bytes = size_t(512) << 10;
    return r;
  };
  const int L = 8;
  const Forecast hs_host = forecast(request(Plan::hidden_states()));
  Plan on_disk;
  on_disk.add("L*.input", Decision::disk);
  on_disk.add("L*", Decision::recompute);
  const Forecast hs_disk = forecast(request(on_disk));
  const Forecast gc = forecast(request(Plan::gradient_checkpointing(1)));
  ASSERT_LT(hs_host.peak_bytes, gc.peak_bytes) << "the test wants the layer inputs to matter";
  ASSERT_GT(hs_host.peak_host_bytes, 0u);
  ASSERT_GT(hs_disk.peak_disk_bytes, 0u);
  // Device: hidden_states' high-water mark (nothing keeping the inputs on the device fits). Host: the disk
  // tier's staging (all inputs on disk) and 60% of the inputs. Disk: 60% of the inputs.
  ASSERT_LT(hs_disk.peak_host_bytes, hs_host.peak_host_bytes);
  const TierBudgets tb{std::max(hs_host.high_water_bytes, hs_disk.high_water_bytes),
                       hs_disk.peak_host_bytes + hs_host.peak_host_bytes * 6 / 10, hs_disk.peak_disk_bytes * 6 / 10};
  ForecastRequest base = request(Plan::keep_everything());
  const PlanResult pr = plan_for_budget(base, tb);
  ASSERT_TRUE(pr.found) << pr.label;
  EXPECT_NE(pr.label.find("inputs of the last"), std::string::npos) << pr.label;
  EXPECT_LE(pr.forecast.host_held_bytes(), tb.host);
  EXPECT_LE(pr.forecast.peak_disk_bytes, tb.disk);
  ForecastRequest chosen = request(pr.plan);
  chosen.mlp_tiles = pr.plan.mlp_tiles;  // the planner may tile the MLP
  const sim_twin::CpuStep cpu = sim_twin::cpu_step(chosen, tb.device, pr.plan);
  ASSERT_TRUE(cpu.fits) << pr.label;
  EXPECT_EQ(cpu.peak, pr.forecast.peak_bytes);
  EXPECT_EQ(cpu.disk_peak, pr.forecast.peak_disk_bytes);
  // The host peak holds the disk writes' staging whole (when its blocks go back depends on each backend's
  // clock; the reservation does not): equal with the disk tier too.
  EXPECT_EQ(cpu.host_peak, pr.forecast.peak_host_bytes);
  EXPECT_EQ(cpu.pinned, pr.forecast.pinned_bytes);
  // The split itself was a fitting candidate, using both tiers (refinement may have found a faster
  // variant of it: the same host layers, the others recomputed instead of read from disk).
  bool split_fit = false;
  for (const PlanTried& t : pr.tried)
    split_fit =
        split_fit || (t.fits && t.label.find("disk L*.input") != std::string::npos &&
                      t.label.find("inputs of the last") != std::string::npos && t.host_bytes > 0 && t.disk_bytes > 0);
  EXPECT_TRUE(split_fit);
  // A split plan's decisions and its three peaks against the cpu step.
  PlanSpec split;
  split.types = {{"L*.input", Decision::disk}, {"L*", Decision::recompute}};
  split.host_input_layers = 3;
  const Plan sp = make_plan(split, L);
  for (int l = 0; l < L; ++l)
    EXPECT_EQ(sp.decide(fmt::format("L{}.input", l), l), l >= L - 3 ? Decision::host : Decision::disk) << l;
  EXPECT_EQ(sp.decide("L0.mlp.up"), Decision::recompute);
  const Forecast f = forecast(request(sp));
  const sim_twin::CpuStep c = sim_twin::cpu_step(request(sp), sim_twin::kBudget, sp);
  ASSERT_TRUE(f.fits && c.fits);
  EXPECT_EQ(f.peak_bytes, c.peak);
  EXPECT_EQ(f.high_water_bytes, c.high_water);
  EXPECT_GE(f.peak_host_bytes, c.host_peak);  // disk staging: timeline-dependent, as above
  EXPECT_EQ(f.peak_disk_bytes, c.disk_peak);
  EXPECT_GT(f.peak_disk_bytes, 0u);
  EXPECT_LT(f.peak_disk_bytes, hs_disk.peak_disk_bytes);
}
