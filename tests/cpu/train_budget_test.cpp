// strata-train --budget / memory_budget end to end on the cpu backend: the budget planner picks a
// plan before training, the run stays within the budget (and the host budget when one is
// given), and a budget below what any plan needs exits 1 naming the minimum.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "tests/cpu/tool_runner.h"

namespace strata {
namespace {

using namespace tool_test;

namespace fs = std::filesystem;
using json = nlohmann::json;

// Every step line of a --json run.
std::vector<json> step_lines(const std::string& out) {
  std::vector<json> v;
  std::stringstream ss(out);
  for (std::string l; std::getline(ss, l);)
    if (!l.empty()) v.push_back(json::parse(l));
  return v;
}

// peak_device_bytes of every step line of a --json run.
std::vector<size_t> peaks(const std::string& out) {
  std::vector<size_t> v;
  for (const json& j : step_lines(out)) v.push_back(j.at("peak_device_bytes").get<size_t>());
  return v;
}

// The plan table strata-train prints before the first step (stderr with --json).
std::string plan_table(const std::string& err) {
  size_t at = err.find("plan (");
  return at == std::string::npos ? std::string() : err.substr(at);
}

class train_budget : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { scratch_.create("strata_budget"); }
  static void TearDownTestSuite() { scratch_.remove(); }

  void SetUp() override {
    ASSERT_TRUE(scratch_.ok()) << "mkdtemp failed";
    ASSERT_TRUE(tool_test::tools_built());
    if (keep_peak_) return;
    Proc r = run(kMakeTiny + " " + quote(scratch_.path("tiny")) +
                 " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 64 --tokens 5000");
    ASSERT_EQ(r.code, 0) << r.err;
    // The two ends: keep everything, and gradient checkpointing.
    Proc keep = run(train_cmd(""));
    ASSERT_EQ(keep.code, 0) << keep.err;
    write("gc.yaml", "gradient_checkpointing: true\n");
    Proc gc = run(train_cmd("--config " + quote(path("gc.yaml"))));
    ASSERT_EQ(gc.code, 0) << gc.err;
    auto kp = peaks(keep.out), gp = peaks(gc.out);
    ASSERT_FALSE(kp.empty());
    ASSERT_FALSE(gp.empty());
    keep_peak_ = *std::max_element(kp.begin(), kp.end());
    gc_peak_ = *std::max_element(gp.begin(), gp.end());
    ASSERT_LT(gc_peak_ + 4096, keep_peak_) << "the tiny model must leave room between the two";
  }

  static std::string path(const std::string& name) { return scratch_.path(name); }
  static void write(const std::string& name, const std::string& text) { std::ofstream(path(name)) << text; }

  static Proc run(const std::string& cmd) { return scratch_.run(cmd); }

  static std::string train_cmd(const std::string& extra) {
    return kTrain + " --model " + quote(path("tiny")) + " --data " + quote(path("tiny/tokens.bin")) +
           " --backend cpu --seq 64 --batch 2 --steps 3 --lr 1e-3 --json " + extra;
  }

  // Checks a run that had to fit `budget`: trained, stayed under it, with recompute in the plan
  // and the arena held to the budget.
  static void expect_trained_within(const Proc& r, size_t budget) {
    ASSERT_EQ(r.code, 0) << r.err;
    auto p = peaks(r.out);
    ASSERT_EQ(p.size(), 3u) << r.out;
    for (size_t b : p) EXPECT_LE(b, budget);
    EXPECT_NE(r.err.find("planner: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("forecast: peak"), std::string::npos) << r.err;
    EXPECT_NE(plan_table(r.err).find("recompute"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("arena budget " + format_bytes(budget)), std::string::npos) << r.err;
  }

  static tool_test::Scratch scratch_;
  static size_t keep_peak_, gc_peak_;
};
tool_test::Scratch train_budget::scratch_;
size_t train_budget::keep_peak_ = 0, train_budget::gc_peak_ = 0;

TEST_F(train_budget, a_budget_between_checkpointing_and_keep_trains_within_it) {
  const size_t budget = (gc_peak_ + keep_peak_) / 2;
  Proc r = run(train_cmd("--budget " + std::to_string(budget)));
  expect_trained_within(r, budget);
}

// With gradient accumulation the plan is for the step of every micro-batch (their peaks are one micro-batch's, the
// gradients summed on the device), and the forecast line says so.
TEST_F(train_budget, micro_batches_are_planned_as_the_step) {
  const size_t budget = (gc_peak_ + keep_peak_) / 2;
  Proc r = run(train_cmd("--grad-accum 3 --budget " + std::to_string(budget)));
  expect_trained_within(r, budget);
  EXPECT_NE(r.err.find(" over 3 micro-batches\n"), std::string::npos) << r.err;
}

TEST_F(train_budget, yaml_memory_budget_replaces_the_configs_plan) {
  const size_t kib = (gc_peak_ + keep_peak_) / 2 / 1024;
  write("budget.yaml", "memory_budget: " + std::to_string(kib) + "KiB\ngradient_checkpointing: true\n");
  Proc r = run(train_cmd("--config " + quote(path("budget.yaml"))));
  expect_trained_within(r, kib * 1024);
  EXPECT_NE(r.err.find("replaces the config's activation plan"), std::string::npos) << r.err;
}

// The config's state placement stays under the budget: the planner plans around it, the run trains with the
// moments on the host tier; without a host budget it is refused naming that budget.
TEST_F(train_budget, the_configs_state_placement_stays_under_the_budget) {
  const size_t budget = (gc_peak_ + keep_peak_) / 2;
  write("state.yaml", "state_offloading: optimizer\n");
  const std::string cfg = "--config " + quote(path("state.yaml")) + " --budget " + std::to_string(budget);
  Proc r = run(train_cmd(cfg + " --host-budget 1GiB"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("state (fixed): optimizer"), std::string::npos) << r.err;
  const std::vector<json> steps = step_lines(r.out);
  EXPECT_EQ(steps.size(), 3u) << r.out;
  for (const json& j : steps) {
    EXPECT_LE(j.at("peak_device_bytes").get<size_t>(), budget) << j;
    EXPECT_GT(j.at("state_host_bytes").get<size_t>(), 0u) << j;
  }

  Proc no_host = run(train_cmd(cfg));
  EXPECT_NE(no_host.code, 0) << no_host.err;
  EXPECT_NE(no_host.err.find("host_memory_budget"), std::string::npos) << no_host.err;
  EXPECT_TRUE(no_host.out.empty()) << no_host.out;
}

TEST_F(train_budget, below_the_minimum_exits_1_naming_it) {
  Proc r = run(train_cmd("--budget 64KiB"));
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("minimum"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // no step ran
}

TEST_F(train_budget, an_explicit_device_memory_is_kept) {
  const size_t budget = (gc_peak_ + keep_peak_) / 2;
  Proc r = run(train_cmd("--budget " + std::to_string(budget) + " --device-memory 4MiB"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("arena budget " + format_bytes(size_t(4) << 20)), std::string::npos) << r.err;
  for (size_t b : peaks(r.out)) EXPECT_LE(b, budget);
}

TEST_F(train_budget, tier_budgets_need_a_device_budget) {
  Proc r = run(train_cmd("--host-budget 1GiB"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("give --budget"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(train_budget, with_a_host_budget_the_run_fits_both) {
  const size_t budget = (gc_peak_ + keep_peak_) / 2, host = size_t(1) << 20;
  Proc r = run(train_cmd("--budget " + std::to_string(budget) + " --host-budget " + std::to_string(host)));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("planner: "), std::string::npos) << r.err;
  const std::vector<json> steps = step_lines(r.out);
  EXPECT_EQ(steps.size(), 3u) << r.out;
  for (const json& j : steps) {
    EXPECT_LE(j.at("peak_device_bytes").get<size_t>(), budget) << j;
    EXPECT_LE(j.at("peak_host_bytes").get<size_t>(), host) << j;
  }
}

}  // namespace
}  // namespace strata
