// One run, two front ends: the same YAML through strata-train and through the library's Session
// builds the same run (model/run/job.h) — the same plan from the budget planner, bit-identical
// losses and weights, the same held-out loss — on the cpu backend.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "api/backend_factory.h"
#include "model/run/bench.h"
#include "strata/strata.h"
#include "tests/cpu/tool_runner.h"

namespace {

using namespace strata::tool_test;

class OneRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { scratch_.create("one_run"); }
  static void TearDownTestSuite() { scratch_.remove(); }
  static Scratch scratch_;
};
Scratch OneRun::scratch_;

// The "loss" of each step line of a metrics file, as written (the loop's one format for both).
std::vector<std::string> metric_losses(const std::string& path) {
  std::vector<std::string> out;
  const std::regex step_loss("\"step\": ([0-9]+), \"epoch\": [^,]*, \"loss\": ([^,]*),");
  for (const std::string& l : lines(slurp(path))) {
    std::smatch m;
    if (std::regex_search(l, m, step_loss)) out.push_back(m[1].str() + ":" + m[2].str());
  }
  return out;
}

std::vector<std::string> eval_losses(const std::string& path) {
  std::vector<std::string> out;
  const std::regex eval("\"eval_loss\": ([^,]*),");
  for (const std::string& l : lines(slurp(path))) {
    std::smatch m;
    if (std::regex_search(l, m, eval)) out.push_back(m[1].str());
  }
  return out;
}

// The plan table strata-train prints: from "plan (" to the first line that is not indented.
std::string printed_plan(const std::string& out) {
  const size_t at = out.find("plan (");
  if (at == std::string::npos) return {};
  size_t end = out.find('\n', at);
  while (end != std::string::npos && end + 1 < out.size() && out[end + 1] == ' ') end = out.find('\n', end + 1);
  return out.substr(at, end == std::string::npos ? std::string::npos : end + 1 - at);
}

TEST_F(OneRun, TheSameYamlThroughStrataTrainAndSessionIsTheSameRun) {
  ASSERT_TRUE(scratch_.ok());
  ASSERT_TRUE(tools_built());
  const std::string tiny = scratch_.path("tiny");
  strata::ModelShape shape;
  shape.layers = 2;
  const std::string tokens = strata::write_tiny_checkpoint(tiny, shape, 5, 20000);

  // The budget: below keep-everything's peak, so the planner must choose (the same plan, both ways).
  strata::ForecastSpec spec;
  spec.model = tiny;
  spec.seq = 32;
  spec.batch = 2;
  spec.mirror = "cpu";
  const size_t keep_peak = strata::forecast(spec).peak_bytes;
  ASSERT_GT(keep_peak, 0u);
  const size_t budget = keep_peak * 9 / 10;
  // The arena above the budget: the held-out evaluation's forward is not part of the planned step.

  auto yaml = [&](const std::string& out) {
    return "base_model: " + tiny + "\ndata: " + tokens +
           "\nsequence_len: 32\nmicro_batch_size: 2\ngradient_accumulation_steps: 2\nmax_steps: 6\n"
           "learning_rate: 3.0e-3\nlr_scheduler: cosine\nwarmup_steps: 2\nval_set_size: 0.05\neval_steps: 3\n"
           "seed: 3\nmemory_budget: " +
           std::to_string(budget) + "\ndevice_memory: " + std::to_string(2 * keep_peak) + "\noutput_dir: " + out + "\n";
  };
  const std::string a = scratch_.path("by_tool"), b = scratch_.path("by_session");
  const std::string cfg_a = scratch_.path("a.yaml");
  { std::ofstream(cfg_a) << yaml(a); }
  const Proc p = scratch_.run(kTrain + " --backend cpu --config " + quote(cfg_a));
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("planner: "), std::string::npos) << "the budget planner did not run:\n" << p.out;

  strata::SessionConfig cfg;
  strata::apply_yaml_text(cfg, yaml(b), "b.yaml");
  strata::Session s(strata::make_backend("cpu"), cfg);
  s.run();
  s.save();

  EXPECT_EQ(s.plan_table(), printed_plan(p.out));
  EXPECT_EQ(s.steps_done(), 6);
  const std::vector<std::string> la = metric_losses(a + "/metrics.jsonl"), lb = metric_losses(b + "/metrics.jsonl");
  EXPECT_EQ(la.size(), 6u);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(eval_losses(a + "/metrics.jsonl"), eval_losses(b + "/metrics.jsonl"));
  EXPECT_FALSE(eval_losses(a + "/metrics.jsonl").empty());
  const std::string wa = slurp(a + "/model.safetensors"), wb = slurp(b + "/model.safetensors");
  ASSERT_FALSE(wa.empty());
  EXPECT_TRUE(wa == wb) << "the saved weights differ";
}

// strata-bench's run (model/run/bench.h): the same Job on random weights, its hooks around the timed
// steps, and its modes as the trainable counts show them.
TEST(Bench, RunsTheJobOnRandomWeightsAroundItsHooks) {
  strata::BenchQuestion q;
  q.seq = 16, q.steps = 2, q.warmup = 1;
  q.backend = "cpu";
  std::vector<std::string> events;
  strata::BenchHooks hooks;
  hooks.before_timed_steps = [&] { events.push_back("timed"); };
  hooks.after_steps = [&](int timed) { events.push_back("after " + std::to_string(timed)); };
  const strata::BenchResult full = strata::run_bench(q, strata::default_platform(), hooks);
  EXPECT_EQ(events, (std::vector<std::string>{"timed", "after 2"}));
  EXPECT_EQ(full.plan, "keep");
  EXPECT_EQ(full.backend, "cpu");
  EXPECT_GT(full.params, size_t(0));
  EXPECT_EQ(full.trainable, full.params);
  EXPECT_GT(full.peak_arena_bytes, size_t(0));
  EXPECT_GT(full.step_s, 0.0);
  EXPECT_NEAR(full.loss, std::log(float(full.shape.vocab_size)), 0.5);  // random weights: about ln(vocab)

  q.mode = "lora";
  q.lora_rank = 4;
  const strata::BenchResult lora = strata::run_bench(q, strata::default_platform());
  EXPECT_EQ(lora.params - lora.trainable, full.params);  // the base frozen, the adapters trained
  EXPECT_GT(lora.trainable, size_t(0));

  q.pack = 3;  // does not divide 16
  try {
    strata::run_bench(q, strata::default_platform());
    ADD_FAILURE() << "--pack 3 with --seq 16 was accepted";
  } catch (const strata::ConfigError& e) {
    EXPECT_EQ(e.field, "pack");
  }
}

}  // namespace
