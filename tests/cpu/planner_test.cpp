// The budget planner: its plan fits every budget on the sim and, measured, on the cpu backend;
// keep everything wins when it fits; too small a budget names the minimum and the tier that
// would help; the host and disk tiers and weight paging are used where keep/recompute cannot fit,
// and never make the answer slower.
#include "model/plan/planner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>

#include "engine/backend.h"
#include "model/plan/forecast.h"
#include "model/plan/planner_candidates.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "sim_twin.h"
#include "tiny_model.h"

using namespace strata;

namespace {

using namespace sim_twin;
using test_util::tiny_config;

TEST(Planner, ChosenPlanFitsTheBudgetOnSimAndOnCpu) {
  Forecast keep = forecast(tiny_request(Plan::keep_everything()));
  Forecast gc = forecast(tiny_request(Plan::gradient_checkpointing(1)));
  ASSERT_LT(gc.peak_bytes, keep.peak_bytes);
  for (double frac : {0.25, 0.6, 0.9}) {
    const size_t budget = gc.high_water_bytes + size_t(frac * double(keep.high_water_bytes - gc.high_water_bytes));
    PlanResult pr = plan_for_budget(tiny_request(Plan::keep_everything()), budget);
    ASSERT_TRUE(pr.found) << "budget " << budget;
    EXPECT_LE(pr.forecast.peak_bytes, budget);
    EXPECT_LE(pr.forecast.high_water_bytes, budget);
    EXPECT_LE(pr.forecast.step_s, gc.step_s + 1e-12) << "slower than plain checkpointing";
    CpuStep cpu = cpu_step(tiny_request(pr.plan), budget, pr.plan);
    EXPECT_TRUE(cpu.fits) << pr.label;
    EXPECT_LE(cpu.peak, budget) << pr.label;
    EXPECT_EQ(cpu.peak, pr.forecast.peak_bytes) << pr.label;

    // The printed YAML gives strata-train the same plan, shape and budget.
    std::string yaml = plan_yaml(tiny_request(pr.plan), pr.plan, pr.forecast, budget);
    TrainConfig tc;
    apply_yaml_text(tc, yaml, "plan.yaml");
    EXPECT_EQ(tc.seq, 19);
    EXPECT_EQ(tc.batch, 2);
    EXPECT_EQ(tc.loss_chunk_tokens, 16);
    EXPECT_EQ(tc.device_budget_bytes, budget);
    auto be = make_cpu_backend(kBudget);
    LlamaModel model(*be, tiny_config(), {});
    Trainer t(*be, model, {});
    for (auto& row : t.plan_table(2, 19)) {
      for (int l = 0; l < tiny_config().num_hidden_layers; ++l) {
        std::string cls = row.cls.rfind("L*", 0) == 0 ? fmt::format("L{}{}", l, row.cls.substr(2)) : row.cls;
        EXPECT_EQ(tc.plan.decide(cls), pr.plan.decide(cls)) << cls << "\n" << yaml;
      }
    }
    CpuStep from_yaml = cpu_step(tiny_request(tc.plan), tc.device_budget_bytes, tc.plan);
    EXPECT_TRUE(from_yaml.fits);
    EXPECT_EQ(from_yaml.peak, pr.forecast.peak_bytes);
  }
}

TEST(Planner, KeepEverythingWhenItFits) {
  Forecast keep = forecast(tiny_request(Plan::keep_everything()));
  PlanResult pr = plan_for_budget(tiny_request(Plan::keep_everything()), keep.high_water_bytes);
  ASSERT_TRUE(pr.found);
  EXPECT_EQ(pr.label, "keep everything");
  EXPECT_EQ(pr.forecast.recompute_s, 0);
}

TEST(Planner, BudgetTooSmallNamesTheMinimum) {
  Forecast keep = forecast(tiny_request(Plan::keep_everything()));
  const size_t budget = keep.persistent_bytes + 1024;
  PlanResult pr = plan_for_budget(tiny_request(Plan::keep_everything()), budget);
  ASSERT_FALSE(pr.found);
  EXPECT_GT(pr.minimum_bytes, budget);
  // The minimum is real: the lowest-memory plan fits it on the sim and on cpu.
  ForecastRequest r = tiny_request(pr.plan);
  r.budget = pr.minimum_bytes;
  EXPECT_TRUE(forecast(r).fits);
  EXPECT_TRUE(cpu_step(r, pr.minimum_bytes, pr.plan).fits);
}

// The planner's answer, checked on the cpu backend: it fits all three budgets there too, and the
// device peak is the forecast's.
void expect_fits_on_cpu(const ForecastRequest& base, const PlanResult& pr) {
  ForecastRequest r = base;
  r.plan = pr.plan;  // its layer_weights included
  r.mlp_tiles = pr.plan.mlp_tiles;
  CpuStep cpu = cpu_step(r, pr.budgets.device, pr.plan);
  ASSERT_TRUE(cpu.fits) << pr.label;
  EXPECT_EQ(cpu.peak, pr.forecast.peak_bytes) << pr.label;
  EXPECT_LE(cpu.peak, pr.budgets.device) << pr.label;
  EXPECT_LE(cpu.host_peak, pr.budgets.host) << pr.label;
  EXPECT_EQ(cpu.host_peak, pr.forecast.peak_host_bytes) << pr.label;
  EXPECT_EQ(cpu.pinned, pr.forecast.pinned_bytes) << pr.label;
  EXPECT_LE(cpu.pinned, pr.budgets.host) << pr.label;  // every pinned byte, not only the peak in use
  EXPECT_LE(cpu.disk_peak, pr.budgets.disk) << pr.label;
}

// Host and disk slots come back one at a time in backward (no prefetch distance), so moving them
// lowers the peak even at the tiny model's size.
ForecastRequest tier_request(Plan plan, TrainMode mode = TrainMode::full) {
  ForecastRequest r = tiny_request(std::move(plan), mode);
  r.tiers.prefetch_bytes = 1;
  r.tiers.max_inflight_bytes = 1;
  return r;
}

// A device budget between the lowest plan with the host tier and the lowest keep/recompute plan.
size_t budget_only_tiers_fit(const ForecastRequest& base) {
  const size_t recompute_min = plan_for_budget(base, 1).minimum_bytes;
  // The activation tiers' lowest plans, the persistent state on the device (with a host budget
  // the planner may move state too, which reaches lower still).
  size_t tiers_min = SIZE_MAX;
  for (const Plan& p : {Plan::activation_offloading(Decision::host), Plan::hidden_states()}) {
    ForecastRequest r = base;
    r.plan = p;
    tiers_min = std::min(tiers_min, forecast(r).high_water_bytes);
  }
  EXPECT_LT(tiers_min, recompute_min);
  return (tiers_min + recompute_min) / 2;
}

TEST(Planner, HostTierFitsWhereRecomputeCannot) {
  const ForecastRequest base = tier_request(Plan::keep_everything());
  const size_t budget = budget_only_tiers_fit(base);

  // Keep/recompute alone cannot fit; the planner says the host tier would, and how much it needs.
  PlanResult device_only = plan_for_budget(base, budget);
  ASSERT_FALSE(device_only.found) << device_only.label;
  EXPECT_GT(device_only.minimum_bytes, budget);
  EXPECT_EQ(device_only.short_tier, "host");
  ASSERT_GT(device_only.short_tier_needs, 0u);

  // With exactly that much host memory it fits every budget, on the sim and on cpu.
  PlanResult pr = plan_for_budget(base, TierBudgets{budget, device_only.short_tier_needs, 0});
  ASSERT_TRUE(pr.found) << pr.label;
  EXPECT_LE(pr.forecast.high_water_bytes, budget);
  EXPECT_LE(pr.forecast.peak_host_bytes, device_only.short_tier_needs);
  EXPECT_GT(pr.forecast.peak_host_bytes, 0u) << pr.label;
  expect_fits_on_cpu(base, pr);

  // A budget keep/recompute fits too: the tiers never make the planner's answer slower.
  Forecast gc = forecast(tier_request(Plan::gradient_checkpointing(1)));
  PlanResult a = plan_for_budget(base, gc.high_water_bytes);
  PlanResult b = plan_for_budget(base, TierBudgets{gc.high_water_bytes, size_t(1) << 30, size_t(1) << 30});
  ASSERT_TRUE(a.found && b.found);
  EXPECT_LE(b.forecast.step_s, a.forecast.step_s + 1e-12) << a.label << " vs " << b.label;
  expect_fits_on_cpu(base, b);
}

// A state placement given with the budget is kept: every state class of every group decides as the given
// plan does, the planner plans the activations around it (the answer fits every budget on the sim and on cpu),
// and its tier needs a budget (a ConfigError names it).
TEST(Planner, KeepsAGivenStatePlacementAndPlansAroundIt) {
  const int L = tiny_config().num_hidden_layers;
  auto expect_same_state = [&](const Plan& got, const Plan& given) {
    for (const std::string group : {"embed", "head", "final_norm", "L0", "L1"})
      for (const char* kind : {"w.master", "grad", "adam.m", "adam.v"}) {
        const int layer = group[0] == 'L' ? group[1] - '0' : -1;
        const std::string cls = group + "." + kind;
        EXPECT_EQ(got.decide_state(cls, layer, L), given.decide_state(cls, layer, L)) << cls;
      }
  };
  // A longer row than tier_request's, so the activations, not the streamed state's chunks, set the peak.
  auto longer = [](Plan p) {
    ForecastRequest r = tier_request(std::move(p));
    r.seq = 64;
    r.batch = 4;
    return r;
  };
  ForecastRequest given = longer(Plan::keep_everything());
  given.plan.set_state_offloading("optimizer", "test");
  ASSERT_TRUE(given.plan.places_state());
  ForecastRequest given_gc = longer(Plan::gradient_checkpointing(1));
  given_gc.plan.take_state(given.plan);
  Forecast keep = forecast(given), gc = forecast(given_gc);
  ASSERT_GT(keep.peak_host_bytes, 0u);
  const TierBudgets budgets{(gc.high_water_bytes + keep.high_water_bytes) / 2, size_t(1) << 30, 0};
  ASSERT_LT(budgets.device, keep.high_water_bytes) << "keep everything must not fit";
  PlanResult pr = plan_for_budget(given, budgets);
  ASSERT_TRUE(pr.found) << pr.label;
  expect_same_state(pr.plan, given.plan);
  EXPECT_NE(pr.label.find("state (fixed): optimizer"), std::string::npos) << pr.label;
  EXPECT_NE(pr.plan.decide("L0.mlp.act"), Decision::keep) << pr.label;  // something had to move
  EXPECT_GE(pr.forecast.peak_host_bytes, keep.peak_host_bytes) << pr.label;
  expect_fits_on_cpu(given, pr);

  // The layer-spread form is kept as given too (one layer's moments on the host).
  ForecastRequest spread = longer(Plan::keep_everything());
  spread.plan.set_state_offloading_layers("optimizer", 1, "test");
  PlanResult ps = plan_for_budget(spread, budgets);
  ASSERT_TRUE(ps.found) << ps.label;
  expect_same_state(ps.plan, spread.plan);
  EXPECT_EQ(ps.plan.state_layers, 1);
  expect_fits_on_cpu(spread, ps);

  // Without the placement, the same budgets let the planner choose the state too. Its step 6 searches the
  // activations around the placements given here (the level everywhere, and in half the layers), so its
  // answer is never slower than theirs.
  PlanResult free = plan_for_budget(longer(Plan::keep_everything()), budgets);
  ASSERT_TRUE(free.found);
  EXPECT_EQ(free.label.find("(fixed)"), std::string::npos) << free.label;
  EXPECT_LE(free.forecast.step_s, pr.forecast.step_s + 1e-12) << free.label << " vs " << pr.label;
  EXPECT_LE(free.forecast.step_s, ps.forecast.step_s + 1e-12) << free.label << " vs " << ps.label;
  expect_fits_on_cpu(longer(Plan::keep_everything()), free);

  // The given tier needs its budget: host, then disk.
  auto expect_names = [&](const ForecastRequest& r, const TierBudgets& b, const std::string& key) {
    try {
      plan_for_budget(r, b);
      ADD_FAILURE() << "no ConfigError for a state placement on a tier without a budget (" << key << ")";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_names(given, TierBudgets{budgets.device, 0, 0}, "host_memory_budget");
  ForecastRequest on_disk = longer(Plan::keep_everything());
  on_disk.plan.set_state_offloading("optimizer", "test", Decision::disk);
  expect_names(on_disk, TierBudgets{budgets.device, size_t(1) << 30, 0}, "disk_memory_budget");
}

TEST(Planner, DiskTierWhenTheHostBudgetOnlyHoldsStaging) {
  const ForecastRequest base = tier_request(Plan::keep_everything());
  const size_t budget = budget_only_tiers_fit(base);
  PlanResult host = plan_for_budget(base, TierBudgets{budget, size_t(1) << 30, 0});
  ASSERT_TRUE(host.found);
  // Disk slots pass through a bounded pinned staging area: give the host tier only what the disk
  // preset's staging needs, too little to hold the host plan's slots.
  const size_t staging = forecast(tier_request(Plan::activation_offloading(Decision::disk))).host_held_bytes();
  ASSERT_LT(staging, host.forecast.host_held_bytes());
  PlanResult pr = plan_for_budget(base, TierBudgets{budget, staging, size_t(1) << 30});
  ASSERT_TRUE(pr.found) << "no plan within a host budget of " << staging;
  EXPECT_GT(pr.forecast.peak_disk_bytes, 0u) << pr.label;
  EXPECT_LE(pr.forecast.host_held_bytes(), staging) << pr.label;
  expect_fits_on_cpu(base, pr);
}

// The host budget holds the pinned memory a plan takes, not only its peak use: the slot store reserves its pool
// (every host slot, and the disk slots' staging) whole at the first step. The staging is the in-flight bound, at
// least the largest disk slot and never more than the disk slots: with every layer input on disk and the default
// 512 MiB bound, the tiny model's pool is its few disk slots, not 512 MiB. Every candidate the planner counts as
// fitting, and its answer, are held to the budget, over budgets from the smallest pool to a roomy one.
TEST(Planner, TheHostBudgetHoldsThePinnedReservationsNotOnlyThePeak) {
  auto request = [](const Plan& p) {
    ForecastRequest r = tiny_request(p, TrainMode::full);
    r.mirror = SimMirror::cuda;
    r.model.num_hidden_layers = 4;
    r.seq = 1024;
    return r;
  };
  Plan on_disk;
  on_disk.add("L*.input", Decision::disk);
  on_disk.add("L*", Decision::recompute);
  const Forecast disk = forecast(request(on_disk));
  ASSERT_GT(disk.peak_disk_bytes, 0u);
  EXPECT_EQ(disk.host_reserved_bytes, disk.peak_disk_bytes) << "the staging is the disk slots, not 512 MiB";
  EXPECT_EQ(disk.pinned_bytes, disk.host_reserved_bytes + disk.paged_host_bytes + disk.state_host_bytes);
  EXPECT_GE(disk.host_held_bytes(), disk.peak_host_bytes);
  const ForecastRequest base = request(Plan::keep_everything());
  const size_t budget = disk.high_water_bytes;  // the all-on-disk plan fits it
  for (size_t host_budget : {disk.pinned_bytes, disk.pinned_bytes * 2, disk.pinned_bytes * 8}) {
    PlanResult pr = plan_for_budget(base, TierBudgets{budget, host_budget, size_t(1) << 30});
    for (const PlanTried& t : pr.tried) {
      if (t.fits) {
        EXPECT_LE(t.host_bytes, host_budget) << t.label;
      }
    }
    ASSERT_TRUE(pr.found) << "host budget " << host_budget;
    EXPECT_LE(pr.forecast.pinned_bytes, host_budget) << pr.label;
    EXPECT_LE(pr.forecast.host_held_bytes(), host_budget) << pr.label;
  }
}

// The host budget is charged every pinned byte reserved, not only the slot store's peak in use (an 8B
// plan at 322,560 tokens under --host-budget 110GiB reserved 111.58 GiB with a 109.12 GiB peak: the disk
// slots' staging, whose blocks go back when writes land, at a moment the sim's clock placed before the
// drive's). The staging counts whole in the peak, so the sim's peak is the cpu backend's byte for byte.
TEST(Planner, HostBudgetCoversThePinnedReservation) {
  const ForecastRequest base = tier_request(Plan::keep_everything());
  // Layer inputs on the host, one on disk through staging, the rest recomputed.
  Plan mixed = Plan::hidden_states();
  mixed.overrides.emplace_back("L0.input", Decision::disk);
  ForecastRequest r = base;
  r.plan = mixed;
  const Forecast f = forecast(r);
  ASSERT_TRUE(f.fits) << f.oom;
  ASSERT_GT(f.peak_disk_bytes, 0u);
  // Every host input is live at the end of forward, beside the whole staging: the peak is the pool.
  EXPECT_EQ(f.peak_host_slot_bytes, f.host_reserved_bytes);
  EXPECT_EQ(f.host_held_bytes(), f.pinned_bytes);
  const CpuStep cpu = cpu_step(r, kBudget, mixed);
  ASSERT_TRUE(cpu.fits);
  EXPECT_EQ(cpu.host_peak, f.peak_host_bytes);  // 24576 against the sim's 16384 when staging counted in use
  EXPECT_EQ(cpu.pinned, f.pinned_bytes);
  // Host budgets just under, at and over the reservation: whatever the planner gives reserves no more.
  for (const size_t host : {f.pinned_bytes - 1, f.pinned_bytes, f.pinned_bytes + 4096}) {
    const PlanResult pr = plan_for_budget(base, TierBudgets{f.high_water_bytes, host, size_t(1) << 30});
    if (!pr.found) continue;
    EXPECT_LE(pr.forecast.pinned_bytes, host) << pr.label;
    EXPECT_LE(pr.forecast.peak_host_bytes, host) << pr.label;
    expect_fits_on_cpu(base, pr);
  }
}

TEST(Planner, PagesFrozenLayersWhenTheHostBudgetHoldsThem) {
  const ForecastRequest base = tiny_request(Plan::keep_everything(), TrainMode::frozen);
  ForecastRequest paged = base;
  paged.plan = Plan::gradient_checkpointing(1);
  paged.plan.layer_weights = Decision::page;
  Forecast pf = forecast(paged);
  ForecastRequest unpaged = paged;
  unpaged.plan.layer_weights = Decision::keep;
  Forecast uf = forecast(unpaged);
  ASSERT_LT(pf.high_water_bytes, uf.high_water_bytes);
  // Below every unpaged plan: only paging fits, and only with the host memory for the layers.
  const size_t budget = (pf.high_water_bytes + uf.peak_bytes) / 2;
  PlanResult no_host = plan_for_budget(base, budget);
  ASSERT_FALSE(no_host.found);
  EXPECT_EQ(no_host.short_tier, "host");
  PlanResult pr = plan_for_budget(base, TierBudgets{budget, size_t(1) << 30, 0});
  ASSERT_TRUE(pr.found);
  EXPECT_TRUE(pr.plan.pages_layer_weights()) << pr.label;
  // The label names the paging by its YAML key (layer_offloading is the older spelling).
  EXPECT_NE(pr.label.find(" + layer_weights: page"), std::string::npos) << pr.label;
  EXPECT_EQ(pr.label.find("layer_offloading"), std::string::npos) << pr.label;
  EXPECT_GT(pr.forecast.paged_host_bytes, 0u);
  expect_fits_on_cpu(base, pr);
  // The YAML carries the paging to strata-train.
  TrainConfig tc;
  apply_yaml_text(tc, plan_yaml(base, pr.plan, pr.forecast, budget), "plan.yaml");
  EXPECT_TRUE(tc.plan.pages_layer_weights());
  EXPECT_TRUE(tc.freeze_base);
}

// The search's answer, checked with plan_for_budget itself: the plan at `seq` fits every budget and
// no plan fits the next multiple.
void expect_longest(const ForecastRequest& base, const TierBudgets& b, const MaxSeqResult& ms) {
  ASSERT_TRUE(ms.found);
  ASSERT_FALSE(ms.at_limit) << "the answer is the search limit " << ms.hi;
  EXPECT_EQ(ms.seq % ms.multiple, 0);
  EXPECT_EQ(ms.next_seq, ms.seq + ms.multiple);
  ForecastRequest r = base;
  r.seq = ms.seq;
  PlanResult at = plan_for_budget(r, b);
  ASSERT_TRUE(at.found) << ms.seq;
  EXPECT_TRUE(at.forecast.fits);
  EXPECT_LE(at.forecast.high_water_bytes, b.device);
  EXPECT_LE(at.forecast.peak_host_bytes, b.host);
  EXPECT_LE(at.forecast.peak_disk_bytes, b.disk);
  EXPECT_EQ(at.label, ms.plan.label);
  r.seq = ms.next_seq;
  EXPECT_FALSE(plan_for_budget(r, b).found) << ms.next_seq << " fits: " << plan_for_budget(r, b).label;
}

TEST(Planner, MaxSeqFitsAndTheNextMultipleDoesNot) {
  const ForecastRequest base = tier_request(Plan::keep_everything());
  ForecastRequest at256 = base;
  at256.seq = 256;
  const size_t budget = forecast(at256).high_water_bytes;  // keep everything fits 256 tokens
  const TierBudgets device_only{budget, 0, 0};
  MaxSeqResult ms = max_seq_for_budget(base, device_only, 16, 2048, 16);
  expect_longest(base, device_only, ms);
  EXPECT_GE(ms.seq, 256);
  EXPECT_EQ(ms.tried.front(), std::make_pair(16, true));
  EXPECT_GT(ms.sim_runs, 0);

  // The host tier holds what recompute cannot drop: never shorter.
  const TierBudgets with_host{budget, size_t(4) << 20, 0};
  MaxSeqResult host = max_seq_for_budget(base, with_host, 16, 2048, 16);
  expect_longest(base, with_host, host);
  EXPECT_GE(host.seq, ms.seq) << ms.plan.label << " vs " << host.plan.label;
}

TEST(Planner, MaxSeqNeverShorterUnderABiggerBudget) {
  const ForecastRequest base = tier_request(Plan::keep_everything());
  ForecastRequest at128 = base;
  at128.seq = 128;
  const size_t budget = forecast(at128).high_water_bytes;
  int prev = 0;
  for (double scale : {1.0, 1.3, 1.7, 2.5}) {
    MaxSeqResult ms = max_seq_for_budget(base, TierBudgets{size_t(scale * double(budget)), 0, 0}, 16, 2048, 16);
    ASSERT_TRUE(ms.found) << scale;
    EXPECT_GE(ms.seq, prev) << "budget x" << scale;
    prev = ms.seq;
  }
}

TEST(Planner, MaxSeqNothingFitsNamesWhatTheShortestNeeds) {
  const ForecastRequest base = tier_request(Plan::keep_everything());
  Forecast keep = forecast(base);
  const TierBudgets b{keep.persistent_bytes + 1024, 0, 0};
  MaxSeqResult ms = max_seq_for_budget(base, b, 16, 2048, 16);
  EXPECT_FALSE(ms.found);
  EXPECT_EQ(ms.seq, 0);
  ASSERT_EQ(ms.tried.size(), 1u);
  EXPECT_GT(ms.plan.minimum_bytes, b.device);  // plan_for_budget's answer at the shortest length
  // The range is rounded to multiples; none in it is refused.
  EXPECT_THROW(max_seq_for_budget(base, b, 20, 30, 16), ConfigError);
  EXPECT_THROW(max_seq_for_budget(base, b, 16, 64, 0), ConfigError);
}

// Step 5b (Search::save_attention): from a plan that recomputes every layer from its kept input, the attention
// outputs of the last layers are kept on the device for a count that fits where one more does not (or every
// layer), each saved layer skipping its attention's replay; with a host budget the layers before them are tried on
// the host, and the search's best is the fastest that fits. The chosen plans run on the cpu backend at the
// forecast's peak. (The tiny model's device bytes are not monotone in the count: the last layer's replay needs
// about what its saved outputs hold.)
TEST(Planner, SavesTheLastLayersAttentionOutputsWhereTheyFit) {
  const int L = tiny_config().num_hidden_layers;
  PlanSpec from;
  from.types = {{"L*.input", Decision::keep}, {"L*", Decision::recompute}};
  auto with = [&](int keep, int host) {
    PlanSpec s = from;
    s.attn_keep_layers = keep;
    s.attn_host_layers = host;
    return s;
  };
  ForecastRequest r = tiny_request(Plan::keep_everything());
  r.budget = 0;
  auto fc = [&](const PlanSpec& s) {
    ForecastRequest q = r;
    q.plan = make_plan(s, L);
    return forecast(q);
  };
  std::vector<Forecast> kept;
  for (int k = 0; k <= L; ++k) kept.push_back(fc(with(k, 0)));
  for (int k = 1; k <= L; ++k) ASSERT_LT(kept[k].step_s, kept[k - 1].step_s) << k << " layers' attention not replayed";
  auto search = [&](const TierBudgets& b, PlanResult& res) {
    ForecastRequest q = r;
    q.budget = b.device;
    auto S = std::make_unique<planner_detail::Search>(
        planner_detail::Search{q, b, L, res, nullptr, planner_detail::Goal{}, {}, {}, false, {}, {}, false, {}, {}});
    S->save_attention(from);
    return S;
  };
  auto expect_runs_at_forecast = [&](const PlanSpec& s, size_t budget) {
    CpuStep cpu = cpu_step(r, budget, make_plan(s, L));
    EXPECT_TRUE(cpu.fits) << planner_detail::describe(s);
    EXPECT_EQ(cpu.peak, fc(s).peak_bytes) << planner_detail::describe(s);
  };
  // Device only: the count kept fits, one more does not.
  for (int room : {1, 2, 3, L}) {
    const TierBudgets b{kept[room].high_water_bytes, 0, 0};
    PlanResult res;
    auto S = search(b, res);
    ASSERT_TRUE(S->have_best) << "budget of " << room << " layers kept";
    const int k = S->best_spec.attn_keep_layers;
    ASSERT_GE(k, 1);
    EXPECT_LE(kept[k].high_water_bytes, b.device);
    if (k < L) {
      EXPECT_GT(kept[k + 1].high_water_bytes, b.device) << k << " kept, " << k + 1 << " would fit too";
    }
    EXPECT_EQ(S->best_spec.attn_host_layers, 0);
    EXPECT_DOUBLE_EQ(S->best.step_s, kept[k].step_s);
    EXPECT_NE(S->best.label.find(fmt::format("attention outputs of the last {} layers kept", k)), std::string::npos)
        << S->best.label;
    expect_runs_at_forecast(S->best_spec, b.device);
  }
  // With a host budget the layers before the kept ones are tried on the host; the best is the fastest that fits.
  {
    const TierBudgets b{kept[1].high_water_bytes, size_t(1) << 30, 0};
    PlanResult res;
    auto S = search(b, res);
    ASSERT_TRUE(S->have_best);
    const int k = S->best_spec.attn_keep_layers;
    bool host_tried = false;
    double fastest = std::numeric_limits<double>::infinity();
    for (const auto& [label, t] : S->cache) {
      host_tried |= label.find("layers before them on host") != std::string::npos;
      if (t.fits) fastest = std::min(fastest, t.step_s);
    }
    EXPECT_TRUE(host_tried);
    EXPECT_DOUBLE_EQ(S->best.step_s, fastest);
    EXPECT_LE(S->best.step_s, kept[k].step_s);
    expect_runs_at_forecast(S->best_spec, b.device);
  }
  // A plan that saves its attention outputs already is left as it is.
  {
    PlanResult res;
    planner_detail::Search S{r,       TierBudgets{kept[0].high_water_bytes * 4, 0, 0},
                             L,       res,
                             nullptr, planner_detail::Goal{},
                             {},      {},
                             false,   {},
                             {},      false,
                             {},      {}};
    PlanSpec saved = from;
    saved.types.insert(saved.types.begin(), {"L*.attn.out", Decision::keep});
    S.save_attention(saved);
    EXPECT_EQ(res.sim_runs, 0);
  }
}

}  // namespace

// ZeRO over several ranks: each rank owns another share of the optimizer state (whole parameters), so the ranks'
// peaks differ, and here rank 0's is not the largest. Under a budget rank 0 fits keeping everything but the
// largest rank does not, the plan chosen fits every rank: each rank's forecast under it fits the budget and
// is the peak rank_peak_bytes lists, and the result's forecast is the largest rank's.
TEST(Planner, ZeroPlanFitsEveryRankNotOnlyRankZero) {
  for (int stage : {1, 2}) {
    ForecastRequest base = tiny_request(Plan::keep_everything());
    base.gpus = 3;
    base.zero_stage = stage;
    std::vector<size_t> keep;
    for (int q = 0; q < base.gpus; ++q) {
      ForecastRequest r = base;
      r.rank = q;
      r.budget = 0;
      keep.push_back(forecast(r).high_water_bytes);
    }
    const int largest = int(std::max_element(keep.begin(), keep.end()) - keep.begin());
    ASSERT_NE(largest, 0) << "stage " << stage << ": the case needs another rank than 0 to peak highest";
    ASSERT_GT(keep[size_t(largest)], keep[0]) << "stage " << stage;
    const size_t budget = keep[0];  // rank 0 keeps everything in it; the largest rank cannot
    PlanResult pr = plan_for_budget(base, budget);
    ASSERT_TRUE(pr.found) << "stage " << stage;
    EXPECT_NE(pr.label, "keep everything") << "stage " << stage << ": fitted rank 0 only";
    ASSERT_EQ(pr.rank_peak_bytes.size(), size_t(base.gpus));
    for (int q = 0; q < base.gpus; ++q) {
      ForecastRequest r = base;
      r.plan = pr.plan;
      r.mlp_tiles = pr.plan.mlp_tiles;
      r.rank = q;
      r.budget = budget;
      const Forecast f = forecast(r);
      EXPECT_TRUE(f.fits) << "stage " << stage << ", rank " << q << ": " << f.oom;
      EXPECT_LE(f.high_water_bytes, budget) << "stage " << stage << ", rank " << q;
      EXPECT_EQ(f.peak_bytes, pr.rank_peak_bytes[size_t(q)]) << "stage " << stage << ", rank " << q;
    }
    EXPECT_EQ(pr.forecast.peak_bytes, *std::max_element(pr.rank_peak_bytes.begin(), pr.rank_peak_bytes.end()));
    EXPECT_EQ(pr.forecast.peak_bytes, pr.rank_peak_bytes[size_t(pr.rank)]);
    // The result does not depend on the rank asked for: every rank plans alike (strata-train's ranks each plan).
    ForecastRequest other = base;
    other.rank = 2;
    const PlanResult again = plan_for_budget(other, budget);
    EXPECT_EQ(again.label, pr.label) << "stage " << stage;
    EXPECT_EQ(again.rank_peak_bytes, pr.rank_peak_bytes) << "stage " << stage;
    // Unsharded, the ranks are alike: no per-rank peaks.
    base.zero_stage = 0;
    EXPECT_TRUE(plan_for_budget(base, forecast(base).high_water_bytes).rank_peak_bytes.empty());
  }
}

// Past the parameters' owners, ZeRO's ranks own no state: the planner forecasts one of them for each place in a
// sequence-parallel group and lists its peak for all the others. Every rank's own forecast under the chosen plan
// agrees with the list (stages 1-3, with and without sequence parallelism), and the sims run do not grow with the
// rank count: 64 ranks and 1,048,576 ranks take the same number.
TEST(Planner, ZeroRanksOwningNothingShareOneForecast) {
  for (auto [stage, sp] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{3, 4}}) {
    ForecastRequest base = tiny_request(Plan::keep_everything());
    base.seq = 32;  // rows split evenly over a sequence-parallel group
    base.gpus = 64;
    base.zero_stage = stage;
    base.sequence_parallel = sp;
    const int owning = forecast(base).zero_owning_ranks;
    ASSERT_GT(owning, 0);
    ASSERT_LT(owning + sp, base.gpus) << "the case needs ranks that own nothing";
    const size_t budget = size_t(8) << 30;
    const PlanResult pr = plan_for_budget(base, budget);
    ASSERT_TRUE(pr.found);
    ASSERT_EQ(pr.rank_peak_bytes.size(), size_t(base.gpus));
    for (int q : {0, owning - 1, owning, owning + 1, owning + sp, base.gpus - 2, base.gpus - 1}) {
      ForecastRequest r = base;
      r.plan = pr.plan;
      r.mlp_tiles = pr.plan.mlp_tiles;
      r.rank = q;
      r.budget = budget;
      EXPECT_EQ(forecast(r).peak_bytes, pr.rank_peak_bytes[size_t(q)]) << "stage " << stage << ", rank " << q;
    }
    ForecastRequest huge = base;
    huge.gpus = kMaxForecastRanks;
    const auto t0 = std::chrono::steady_clock::now();
    const PlanResult big = plan_for_budget(huge, budget);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
    ASSERT_TRUE(big.found);
    EXPECT_EQ(big.sim_runs, pr.sim_runs) << "stage " << stage;
    ASSERT_EQ(big.rank_peak_bytes.size(), size_t(kMaxForecastRanks));
    EXPECT_EQ(big.rank_peak_bytes.back(), pr.rank_peak_bytes[size_t(owning + (kMaxForecastRanks - 1 - owning) % sp)]);
  }
  ForecastRequest over = tiny_request(Plan::keep_everything());
  over.gpus = kMaxForecastRanks + 1;
  EXPECT_THROW(plan_for_budget(over, size_t(8) << 30), ConfigError);
}

// Candidates whose plans are the same under other labels (the same types in another order) share one candidate's
// sims, with its peaks and step; where the order decides (first match wins), each runs its own.
TEST(Planner, EqualPlansUnderOtherLabelsShareTheirSims) {
  ForecastRequest r = tiny_request(Plan::keep_everything());
  r.budget = 0;
  const int L = tiny_config().num_hidden_layers;
  planner_detail::SearchClock clock(r);  // the searches under one clock share their sims
  PlanResult res, res2;
  auto search = [&](PlanResult& pr) {
    return std::make_unique<planner_detail::Search>(planner_detail::Search{r,
                                                                           TierBudgets{size_t(64) << 30, 0, 0},
                                                                           L,
                                                                           pr,
                                                                           nullptr,
                                                                           planner_detail::Goal{},
                                                                           {},
                                                                           {},
                                                                           false,
                                                                           {},
                                                                           {},
                                                                           false,
                                                                           {},
                                                                           {}});
  };
  auto swapped = [](PlanSpec s) {
    std::swap(s.types[0], s.types[1]);
    return s;
  };
  auto S = search(res);
  PlanSpec a;
  a.types = {{"L*.mlp.act", Decision::recompute}, {"L*.attn.q", Decision::recompute}};
  const PlanTried ta = S->eval(a);
  int runs = res.sim_runs;
  const PlanTried tb = S->eval(swapped(a));
  EXPECT_NE(ta.label, tb.label);
  EXPECT_EQ(res.sim_runs, runs) << "the same plan runs no sim again";
  EXPECT_EQ(ta.peak_bytes, tb.peak_bytes);
  EXPECT_EQ(ta.high_water_bytes, tb.high_water_bytes);
  EXPECT_EQ(ta.step_s, tb.step_s);
  EXPECT_EQ(ta.fits, tb.fits);
  // Every layer recomputed but its input kept; swapped, the inputs are recomputed too (one label, two plans).
  PlanSpec c;
  c.types = {{"L*.input", Decision::keep}, {"L*", Decision::recompute}};
  S->eval(c);
  auto S2 = search(res2);  // another search under the clock
  S2->eval(swapped(c));
  EXPECT_GT(res2.sim_runs, 0) << "another plan, its own sims";
  runs = res2.sim_runs;
  S2->eval(a);
  // Run by the first search: only a new best's whole forecast (its event log, breakdown and plan table) runs again.
  EXPECT_EQ(res2.sim_runs, runs + (S2->best.label == ta.label ? 1 : 0));
}

// A round's candidate sims run on several threads (Search::prefetch) and are consumed in the search's own
// order: the answer, every candidate tried (in order, with its peaks and step) and the sim-run count are the
// ones the planner gets one candidate at a time, with the host and disk tiers and with paging in play.
TEST(Planner, ThreadsDoNotChangeTheAnswer) {
  const ForecastRequest base = tier_request(Plan::keep_everything());
  const size_t budget = budget_only_tiers_fit(base);
  for (const TierBudgets& b : {TierBudgets{budget, size_t(64) << 20, 0}, TierBudgets{budget, 0, size_t(64) << 20},
                               TierBudgets{budget, size_t(64) << 20, size_t(64) << 20}}) {
    set_planner_threads(1);
    const PlanResult one = plan_for_budget(base, b);
    set_planner_threads(4);
    const PlanResult four = plan_for_budget(base, b);
    set_planner_threads(16);
    const std::string what = fmt::format("host {} disk {}", b.host, b.disk);
    EXPECT_EQ(one.found, four.found) << what;
    if (b.host) {
      EXPECT_TRUE(one.found) << what << ": the host tier fits this budget";
    }
    EXPECT_EQ(one.label, four.label) << what;
    EXPECT_EQ(one.sim_runs, four.sim_runs) << what;
    EXPECT_EQ(one.forecast.peak_bytes, four.forecast.peak_bytes) << what;
    EXPECT_EQ(one.forecast.high_water_bytes, four.forecast.high_water_bytes) << what;
    EXPECT_EQ(one.forecast.step_s, four.forecast.step_s) << what;
    ASSERT_EQ(one.tried.size(), four.tried.size()) << what;
    EXPECT_GT(one.tried.size(), 10u) << what << ": the search must try several rounds";
    for (size_t i = 0; i < one.tried.size(); ++i) {
      EXPECT_EQ(one.tried[i].label, four.tried[i].label) << what << ", candidate " << i;
      EXPECT_EQ(one.tried[i].peak_bytes, four.tried[i].peak_bytes) << what << ", " << one.tried[i].label;
      EXPECT_EQ(one.tried[i].high_water_bytes, four.tried[i].high_water_bytes) << what << ", " << one.tried[i].label;
      EXPECT_EQ(one.tried[i].step_s, four.tried[i].step_s) << what << ", " << one.tried[i].label;
      EXPECT_EQ(one.tried[i].fits, four.tried[i].fits) << what << ", " << one.tried[i].label;
    }
  }
}
