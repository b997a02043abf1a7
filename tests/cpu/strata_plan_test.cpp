// strata-plan end to end (split from sim_test.cpp): it forecasts the built-in shapes without a GPU, plans under
// budgets and writes configs strata-train accepts, takes the host and disk tiers' presets and layer paging, and
// reports bad input clearly. The sim and the planner underneath: sim_test.cpp, planner_test.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/cost_model.h"
#include "model/run/plan_answer.h"
#include "model/run/train_config.h"
#include "tool_runner.h"

using namespace strata;

namespace {

using tool_test::Proc;
using tool_test::slurp;

// A tool's run, its output captured in a scratch directory of this process (tests run in parallel).
Proc run_tool(const std::string& command) {
  static struct Dir {
    tool_test::Scratch s;
    Dir() { s.create("strata_plan_test"); }
    ~Dir() { s.remove(); }
  } dir;
  return dir.s.run(command);
}

Proc run_plan(const std::string& args) {
  return run_tool(tool_test::kPlan + " " + args);
}

TEST(StrataPlan, ForecastsABuiltInShapeWithoutAGpu) {
  const std::string svg = ::testing::TempDir() + "strata_plan_test_1b.svg";
  Proc p = run_plan("--model Llama-3.2-1B --seq 4096 --batch 1 --json --svg " + svg);
  ASSERT_EQ(p.code, 0) << p.err;
  auto j = nlohmann::json::parse(p.out);
  const auto& f = j["forecast"];
  EXPECT_GT(f["peak_bytes"].get<size_t>(), size_t(20) << 30);  // 1.24B params: weights + grads + Adam alone
  EXPECT_GT(f["tokens_per_s"].get<double>(), 0);
  EXPECT_FALSE(j["profile"]["calibrated"].get<bool>());
  EXPECT_EQ(slurp(svg).rfind("<svg", 0), 0u);
}

// --grad-accum K in strata-plan and strata-bench: K micro-batches a step, forecast and measured; the written config
// carries it, and strata-bench runs it from there.
TEST(StrataPlan, GradAccumIsForecastWrittenAndBenched) {
  const std::string plan = "--model tiny --mirror cpu --device-name cpu --seq 32 --batch 2 --json ";
  Proc one = run_plan(plan);
  const std::string yaml = ::testing::TempDir() + "strata_plan_test_accum.yaml";
  Proc three = run_plan(plan + "--grad-accum 3 --write-config " + tool_test::quote(yaml));
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(three.code, 0) << three.err;
  const auto j1 = nlohmann::json::parse(one.out), j3 = nlohmann::json::parse(three.out);
  EXPECT_EQ(j1["grad_accum"], 1);
  EXPECT_EQ(j3["grad_accum"], 3);
  EXPECT_EQ(j3["forecast"]["peak_bytes"], j1["forecast"]["peak_bytes"]) << "micro-batches run one after another";
  const double step1 = j1["forecast"]["step_s"], step3 = j3["forecast"]["step_s"];
  EXPECT_GT(step3, 2.0 * step1 - j1["forecast"]["optimizer_s"].get<double>());
  EXPECT_DOUBLE_EQ(j3["forecast"]["tokens_per_s"].get<double>(), 3.0 * 2 * 32 / step3);
  EXPECT_NE(three.err.find("x 3 micro-batches (gradient accumulation)"), std::string::npos) << three.err;
  EXPECT_NE(slurp(yaml).find("gradient_accumulation_steps: 3\n"), std::string::npos) << slurp(yaml);
  Proc bench = run_tool(tool_test::kBench + " --backend cpu --seq 16 --batch 2 --steps 1 --warmup 0 --config " +
                        tool_test::quote(yaml));
  ASSERT_EQ(bench.code, 0) << bench.err;
  const auto b = nlohmann::json::parse(tool_test::lines(bench.out).at(0));
  EXPECT_EQ(b["grad_accum"], 3);
  // Every micro-batch's tokens (step_s is printed to 10 us, a few tenths of a percent of this step).
  EXPECT_NEAR(b["tokens_per_s"].get<double>() * b["step_s"].get<double>(), 3.0 * 2 * 16, 0.01 * 3 * 2 * 16);
  Proc bad = run_plan(plan + "--grad-accum 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("grad-accum"), std::string::npos) << bad.err;
}

TEST(StrataPlan, BudgetPrintsAConfigStrataTrainAccepts) {
  const std::string cfg = ::testing::TempDir() + "strata_plan_test.yaml";
  Proc p = run_plan("--model Llama-3.2-1B --seq 8192 --budget 40GiB --write-config " + cfg);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("plan:"), std::string::npos) << p.out;
  TrainConfig tc;
  apply_yaml(tc, cfg);
  EXPECT_EQ(tc.seq, 8192);
  EXPECT_EQ(tc.device_budget_bytes, size_t(40) << 30);
  // Forecasting the written config again fits the same budget.
  Proc again = run_plan("--model Llama-3.2-1B --config " + cfg + " --json");
  ASSERT_EQ(again.code, 0) << again.err;
  auto j = nlohmann::json::parse(again.out);
  EXPECT_LE(j["forecast"]["high_water_bytes"].get<size_t>(), size_t(40) << 30);
}

TEST(StrataPlan, HostBudgetLetsThePlannerOffloadAndSaysWhatIsShort) {
  // 1B at 32768 tokens under 21 GiB: only plans that use the host tier fit (device-only needs 21.95 GiB).
  const std::string common = "--model Llama-3.2-1B --seq 32768 --profile h200 --budget 21GiB";
  Proc device_only = run_plan(common);
  EXPECT_EQ(device_only.code, 1) << device_only.out << device_only.err;
  EXPECT_NE(device_only.err.find("with more host memory it would fit"), std::string::npos) << device_only.err;
  const std::string cfg = ::testing::TempDir() + "strata_plan_test_host.yaml";
  Proc p = run_plan(common + " --host-budget 64GiB --write-config " + cfg);
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  TrainConfig tc;
  apply_yaml(tc, cfg);
  bool to_host = false;
  for (auto& [pat, d] : tc.plan.overrides) to_host = to_host || d == Decision::host;
  EXPECT_TRUE(to_host || tc.plan.places_state()) << "activations or state on the host: " << slurp(cfg);
  Proc again = run_plan("--model Llama-3.2-1B --profile h200 --config " + cfg + " --json");
  ASSERT_EQ(again.code, 0) << again.err;
  auto j = nlohmann::json::parse(again.out);
  EXPECT_LE(j["forecast"]["high_water_bytes"].get<size_t>(), size_t(21) << 30);
  EXPECT_GT(j["forecast"]["peak_host_bytes"].get<size_t>(), 0u);
  EXPECT_LE(j["forecast"]["peak_host_bytes"].get<size_t>(), size_t(64) << 30);
}

TEST(StrataPlan, BadInput) {
  Proc unknown = run_plan("--model Llama-9-9000B --seq 128");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("known: Llama-3.2-1B"), std::string::npos) << unknown.err;

  Proc small = run_plan("--model Llama-3.2-1B --seq 4096 --budget 8GiB");
  EXPECT_EQ(small.code, 1);
  EXPECT_NE(small.err.find("nothing fits a device budget of 8.00 GiB"), std::string::npos) << small.err;
  EXPECT_NE(small.err.find("needs at least"), std::string::npos) << small.err;

  Proc other = run_plan("--model tiny --seq 64 --device-name 'NVIDIA H200'");
  EXPECT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("warning: the profile 'NVIDIA H100 80GB HBM3' is for another GPU"), std::string::npos)
      << other.err;
  Proc same = run_plan("--model tiny --seq 64 --profile h200 --device-name 'NVIDIA H200'");
  EXPECT_EQ(same.err.find("warning"), std::string::npos) << same.err;

  Proc both = run_plan("--model tiny --seq 64 --preset keep --budget 1GiB");
  EXPECT_EQ(both.code, 2);

  // A disk plan on a profile whose disk was not measured: a configuration error saying how to fix it.
  const std::string prof = ::testing::TempDir() + "strata_plan_test_no_disk.json";
  DeviceProfile p = find_profile("h100_80gb");
  p.disk_write_gbps = p.disk_read_gbps = 0;
  save_profile(p, prof);
  Proc disk = run_plan("--model tiny --seq 64 --preset disk --profile " + prof);
  EXPECT_EQ(disk.code, 2);
  EXPECT_NE(disk.err.find("disk_write_gbps"), std::string::npos) << disk.err;
  EXPECT_NE(disk.err.find("strata-calibrate --disk DIR"), std::string::npos) << disk.err;
}

// --layer-offloading is the plan's layer_weights: page: the JSON says so, --write-config writes it, and
// strata-train's reader pages from that file; a config's paging survives --preset (the state travels).
TEST(StrataPlan, LayerOffloadingFlagIsThePlansLayerWeightsPage) {
  const std::string yaml = ::testing::TempDir() + "strata_plan_layer_weights.yaml";
  Proc p = run_plan(
      "--model tiny --seq 64 --mode frozen --preset gradient_checkpointing --layer-offloading --json "
      "--write-config " +
      yaml);
  ASSERT_EQ(p.code, 0) << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["layer_weights"], "page");
  EXPECT_TRUE(j["layer_offloading"].get<bool>());
  TrainConfig back;
  apply_yaml(back, yaml);
  EXPECT_TRUE(back.plan.pages_layer_weights());
  EXPECT_EQ(back.plan.checkpoint_every, 1);
  EXPECT_TRUE(back.freeze_base);
  // The written config, with another preset on the command line: still paged, the same forecast peak.
  Proc q = run_plan("--model tiny --config " + yaml + " --preset gradient_checkpointing --json");
  ASSERT_EQ(q.code, 0) << q.err;
  auto k = nlohmann::json::parse(q.out);
  EXPECT_EQ(k["layer_weights"], "page");
  EXPECT_EQ(k["forecast"]["peak_bytes"], j["forecast"]["peak_bytes"]);
  Proc none = run_plan("--model tiny --seq 64 --mode frozen --preset gradient_checkpointing --json");
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(nlohmann::json::parse(none.out)["layer_weights"], "keep");
  std::remove(yaml.c_str());
}

TEST(StrataPlan, HostTierPresetsAndLayerOffloading) {
  for (std::string preset : {"offload", "legacy", "hidden_states"}) {
    Proc p = run_plan("--model tiny --seq 64 --preset " + preset + " --host-budget 1GiB --json");
    ASSERT_EQ(p.code, 0) << preset << ": " << p.err;
    auto j = nlohmann::json::parse(p.out);
    EXPECT_GT(j["forecast"]["peak_host_bytes"].get<size_t>(), 0u) << preset;
    EXPECT_EQ(j["host_budget"].get<size_t>(), size_t(1) << 30) << preset;
    EXPECT_TRUE(j["fits_host_budget"].get<bool>()) << preset;
  }
  Proc disk = run_plan("--model tiny --seq 64 --preset disk --json");
  ASSERT_EQ(disk.code, 0) << disk.err;
  auto dj = nlohmann::json::parse(disk.out)["forecast"];
  EXPECT_GT(dj["peak_disk_bytes"].get<size_t>(), 0u);
  EXPECT_EQ(dj["disk_written_bytes"].get<size_t>(), dj["disk_read_bytes"].get<size_t>());
  EXPECT_GT(dj["disk_busy_s"].get<double>(), 0);
  Proc disk_text = run_plan("--model tiny --seq 64 --preset disk");
  ASSERT_EQ(disk_text.code, 0) << disk_text.err;
  EXPECT_NE(disk_text.out.find("peak disk (disk tier)"), std::string::npos) << disk_text.out;
  Proc paged = run_plan("--model tiny --seq 64 --mode frozen --layer-offloading");
  ASSERT_EQ(paged.code, 0) << paged.err;
  EXPECT_NE(paged.out.find("peak host memory"), std::string::npos) << paged.out;
  EXPECT_NE(paged.out.find("weight pager"), std::string::npos) << paged.out;
  // A full fine-tune pages its trainable layer weights too (their updates stream through the optimizer).
  Proc full = run_plan("--model tiny --seq 64 --mode full --layer-offloading");
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_NE(full.out.find("weight pager"), std::string::npos) << full.out;
  EXPECT_NE((full.out + full.err).find("trainable layer weights paged from host"), std::string::npos)
      << full.out << full.err;
  Proc small = run_plan("--model tiny --seq 64 --preset offload --host-budget 1KiB");
  EXPECT_EQ(small.code, 0) << small.err;
  EXPECT_NE(small.out.find("does NOT fit the host budget"), std::string::npos) << small.out;
}

// The library under the tool (model/run/plan_answer.h): the budget question is the planner's answer on the
// run's request, and the flags' errors name the flag.
TEST(PlanAnswer, ABudgetQuestionIsThePlannersAnswerOnTheRunsRequest) {
  PlanQuestion q;
  q.model = "tiny";
  q.seq = 64;
  q.budget = "1GiB";
  const PlanRequest r = plan_request(q);
  EXPECT_EQ(r.ask, PlanAsk::budget);
  EXPECT_EQ(r.budgets.device, size_t(1) << 30);
  EXPECT_EQ(r.forecast.seq, 64);
  const PlanAnswer a = answer_plan(r);
  const PlanResult direct = plan_for_budget(r.forecast, r.budgets);
  ASSERT_TRUE(a.found);
  EXPECT_EQ(a.planner.label, direct.label);
  EXPECT_EQ(a.plan.preset, direct.plan.preset);
  EXPECT_EQ(a.forecast.peak_bytes, direct.forecast.peak_bytes);
  EXPECT_NE(a.yaml.find("device_memory: 1073741824"), std::string::npos) << a.yaml;

  q.budget = "1KiB";  // nothing fits: no forecast, no config
  const PlanAnswer none = answer_plan(plan_request(q));
  EXPECT_FALSE(none.found);
  EXPECT_GT(none.planner.minimum_bytes, size_t(1024));
  EXPECT_TRUE(none.yaml.empty());
}

TEST(PlanAnswer, WithoutABudgetTheVerdictIsAgainstTheProfilesDefaultArena) {
  PlanQuestion q;
  q.model = "tiny";
  q.seq = 64;
  const PlanAnswer a = answer_plan(plan_request(q));
  EXPECT_EQ(a.budget, find_profile("h100_80gb").default_arena_bytes());
  EXPECT_NE(a.budget_what.find("default arena"), std::string::npos);
  EXPECT_TRUE(a.forecast.fits);
}

TEST(PlanAnswer, FlagErrorsNameTheFlag) {
  auto field_of = [](PlanQuestion q) -> std::string {
    q.model = "tiny";
    try {
      plan_request(q);
    } catch (const ConfigError& e) {
      return e.field;
    }
    return "(no error)";
  };
  PlanQuestion q;
  EXPECT_EQ(field_of(q), "seq");  // no --seq, no sequence_len
  q.seq = 64;
  q.mirror = "gpu";
  EXPECT_EQ(field_of(q), "mirror");
  q.mirror = "cuda";
  q.rank = 1;
  EXPECT_EQ(field_of(q), "rank");  // one GPU
  q.rank.reset();
  q.pack = 3;
  EXPECT_EQ(field_of(q), "pack");  // 3 does not divide 64
  q.pack.reset();
  q.seq = 4294967312LL;
  EXPECT_EQ(field_of(q), "seq");  // refused, not read as 16
}

}  // namespace

// --max-seq without --seq-limit searches as long as the budgets could hold, past max_position_embeddings, and says
// what bounded the search; the answer is the bisection's (it fits, the next multiple does not).
TEST(PlanAnswer, MaxSeqSearchesAsLongAsTheBudgetsCouldHold) {
  PlanQuestion q;
  q.model = "tiny";
  q.max_seq = true;
  q.budget = "128MiB";
  const PlanRequest r = plan_request(q);
  const io::LlamaConfig tiny = resolve_model("tiny");
  EXPECT_GT(r.seq_limit, tiny.max_position_embeddings);
  EXPECT_EQ(r.seq_limit % r.seq_multiple, 0);
  EXPECT_NE(r.seq_limit_why.find("device budget"), std::string::npos) << r.seq_limit_why;
  // The bound: a bf16 hidden state and the batch's ids of one more multiple would not fit the device.
  EXPECT_GT(int64_t(r.seq_limit + r.seq_multiple) * (2 * tiny.hidden_size + 12), int64_t(128) << 20);
  const PlanAnswer a = answer_plan(r);
  ASSERT_TRUE(a.search.found);
  EXPECT_FALSE(a.search.at_limit);  // the budgets, not the search's range, ended it
  EXPECT_EQ(a.search.next_seq, a.search.seq + r.seq_multiple);
  EXPECT_TRUE(a.planner.found);
  EXPECT_LE(a.forecast.high_water_bytes, size_t(128) << 20);

  q.seq_limit = 4096;  // given: the search stops there, and says so
  const PlanRequest given = plan_request(q);
  EXPECT_EQ(given.seq_limit, 4096);
  EXPECT_EQ(given.seq_limit_why, "--seq-limit 4096");

  // A budget too large to bound anything: the forecast's own range.
  ForecastRequest big;
  big.model = tiny;
  const SeqLimit lim = max_seq_upper_bound(big, TierBudgets{size_t(1) << 50, 0, 0});
  EXPECT_EQ(lim.seq, kMaxForecastSeq);
  EXPECT_NE(lim.why.find("longest row"), std::string::npos) << lim.why;
}
