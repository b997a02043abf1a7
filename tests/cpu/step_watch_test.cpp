// A long step's progress lines (model/run/step_watch.h): where the tape is, every interval, and nothing from a
// step shorter than the interval. And where a step's time went: its parts as the device ran them (StepStats::part_s).
#include "model/run/step_watch.h"

#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend_sim.h"
#include "engine/step_progress.h"
#include "tests/cpu/train_loop_util.h"

namespace strata {
namespace {

std::vector<std::string> lines_of(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::vector<std::string> out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) {
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out.push_back(s);
  }
  return out;
}

TEST(StepWatch, PrintsWhereTheStepIsEveryInterval) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  note_step_progress(StepPhase::forward, 4, 10);
  {
    StepWatch w(f, "step 3/7", 0.02);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  note_step_progress(StepPhase::idle, 0, 0);
  const std::vector<std::string> lines = lines_of(f);
  std::fclose(f);
  ASSERT_GE(lines.size(), 2u) << "300 ms at a 20 ms interval";
  EXPECT_LE(lines.size(), 16u);
  for (const std::string& l : lines) EXPECT_EQ(l, "step 3/7: running for 0:00:00 (queued to forward op 5 of 10)");
}

TEST(StepWatch, AStepShorterThanTheIntervalPrintsNothingAndIsNotHeldUp) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  { StepWatch w(f, "step 1/1", 30.0); }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << "the watch ends with the step, not at its next line";
  EXPECT_TRUE(lines_of(f).empty());
  std::fclose(f);
  { StepWatch off(nullptr, "step 1/1", 0.001); }  // no output: no thread, nothing to join
  { StepWatch never(stderr, "step 1/1", 0); }
}

TEST(StepWatch, TheLineNamesThePhaseAndTheElapsedTime) {
  note_step_progress(StepPhase::backward, 0, 4052);
  EXPECT_EQ(step_watch_line("step 1/2", 3725.4), "step 1/2: running for 1:02:05 (queued to backward op 1 of 4052)");
  note_step_progress(StepPhase::idle, 0, 4052);
  EXPECT_EQ(step_watch_line("step 1/2", 61),
            "step 1/2: running for 0:01:01 (between passes, or the GPU finishing the queued ops)");
}

// strata-train's loop: a step that outlasts the interval says which step it is and where its tape is.
TEST(StepWatch, TrainingStepsReportTheirTape) {
  TrainConfig cfg;
  cfg.seq = 64;
  cfg.batch = 4;
  cfg.steps = 3;
  cfg.steps_given = true;
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  LoopOptions lo = test_util::quiet();
  lo.info = f;
  lo.progress_interval_s = 1e-4;
  test_util::Rig r = test_util::make_rig(cfg, lo, 2000);
  r.loop->run();
  std::vector<std::string> watch;
  for (const std::string& l : lines_of(f))
    if (l.find(": running for ") != std::string::npos) watch.push_back(l);
  std::fclose(f);
  ASSERT_FALSE(watch.empty()) << "three steps of a few milliseconds each at a 0.1 ms interval";
  for (const std::string& l : watch) {
    EXPECT_EQ(l.rfind("step ", 0), 0u) << l;
    EXPECT_NE(l.find("/3: running for 0:00:00 ("), std::string::npos) << l;
    const bool known = l.find("(queued to forward op ") != std::string::npos ||
                       l.find("(queued to backward op ") != std::string::npos ||
                       l.find("(between passes, or the GPU finishing the queued ops)") != std::string::npos;
    EXPECT_TRUE(known) << l;
  }
}

Batch random_batch(int B, int T, int vocab, uint64_t seed) {
  const std::vector<int32_t> tok = synthetic_tokens(long(B) * T + 1, vocab, seed);
  Batch b;
  b.B = B;
  b.T = T;
  b.inputs.assign(tok.begin(), tok.end() - 1);
  b.targets.assign(tok.begin() + 1, tok.end());
  return b;
}

// Each part of a step is timed, the micro-batches' summed; an evaluation between steps leaves no mark behind.
TEST(StepParts, EveryPartOfAStepIsTimedAndNothingElse) {
  TrainConfig cfg;
  cfg.seq = 32;
  cfg.batch = 2;
  test_util::Rig r = test_util::make_rig(cfg);
  TrainOptions to = train_options(cfg);
  to.time_parts = true;
  r.loop.reset();
  r.trainer = std::make_unique<Trainer>(*r.be, *r.model, to);
  const int V = test_util::tiny_config().vocab_size;
  const std::vector<Batch> micro = {random_batch(2, 32, V, 1), random_batch(2, 32, V, 2)};
  for (int i = 0; i < 2; ++i) {
    r.trainer->evaluate(micro[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // a leaked mark would count this in the step
    const StepStats s = r.trainer->step(micro, 1e-3f);
    double sum = 0;
    for (int p = 0; p < kStepParts; ++p) {
      EXPECT_GE(s.part_s[size_t(p)], 0.0) << step_part_name(StepPart(p));
      sum += s.part_s[size_t(p)];
    }
    EXPECT_GT(s.part_s[size_t(StepPart::forward)], 0.0);
    EXPECT_GT(s.part_s[size_t(StepPart::backward)], 0.0);
    EXPECT_GT(s.part_s[size_t(StepPart::optimizer)], 0.0);
    EXPECT_LE(sum, s.seconds) << "the parts lie inside the step";
    EXPECT_GT(sum, 0.5 * s.seconds) << "the parts cover the step: " << sum << " of " << s.seconds << " s";
  }
}

// On the sim backend the marks are its model clock: the parts add up to the step's model time exactly, and the
// forward part is the forecast's forward (both from the step's start to the loss seed's fill).
TEST(StepParts, SimPartsAddUpToTheStepsModelTime) {
  SimOptions o;
  o.mirror = SimMirror::cpu;
  o.profile = find_profile("h100_80gb");
  std::unique_ptr<SimBackend> be = make_sim_backend(o);
  TrainConfig cfg;
  cfg.seq = 32;
  cfg.batch = 2;
  LlamaModel model(*be, test_util::tiny_config(), model_options(cfg));
  TrainOptions to = train_options(cfg);
  to.time_parts = true;
  Trainer trainer(*be, model, to);
  const Batch b = random_batch(2, 32, test_util::tiny_config().vocab_size, 3);
  const double t0 = be->now_s();
  const StepStats s = trainer.step(std::span<const Batch>(&b, 1), 1e-3f);
  const double step_model_s = be->now_s() - t0;
  double sum = 0;
  for (double p : s.part_s) sum += p;
  ASSERT_GT(step_model_s, 0.0);
  EXPECT_NEAR(sum, step_model_s, 1e-9 * step_model_s);
  const double bwd0 = be->times().backward_start_s;
  ASSERT_GE(bwd0, t0);
  EXPECT_NEAR(s.part_s[size_t(StepPart::setup)] + s.part_s[size_t(StepPart::forward)], bwd0 - t0, 1e-9 * step_model_s);
  EXPECT_GT(s.part_s[size_t(StepPart::backward)], s.part_s[size_t(StepPart::forward)]) << "backward is the larger";
}

// Without time_parts a step whose state is all on the device returns once its loss and norm are read (its update
// may still run on a device that queues work): the same losses, norms and state as the timed steps, bit for bit,
// with one batch and with micro-batches, and no parts.
TEST(StepParts, UntimedStepsTrainTheSameAndCarryNoParts) {
  TrainConfig cfg;
  cfg.seq = 32;
  cfg.batch = 2;
  const int V = test_util::tiny_config().vocab_size;
  const std::vector<Batch> micro = {random_batch(2, 32, V, 4), random_batch(2, 32, V, 5)};
  std::vector<std::vector<float>> seen(2);
  std::vector<std::vector<std::vector<std::byte>>> state(2);
  for (int timed = 0; timed < 2; ++timed) {
    test_util::Rig r = test_util::make_rig(cfg);
    TrainOptions to = train_options(cfg);
    to.time_parts = timed == 1;
    r.loop.reset();
    r.trainer = std::make_unique<Trainer>(*r.be, *r.model, to);
    for (int i = 0; i < 3; ++i) {
      const StepStats s = i == 1 ? r.trainer->step(micro, 1e-3f) : r.trainer->step(micro[size_t(i) / 2]);
      seen[size_t(timed)].push_back(s.loss);
      seen[size_t(timed)].push_back(s.grad_norm);
      EXPECT_TRUE(std::isfinite(s.loss) && s.loss > 0.0f);
      EXPECT_GT(s.grad_norm, 0.0f);
      double sum = 0;
      for (double p : s.part_s) sum += p;
      if (timed)
        EXPECT_GT(sum, 0.0);
      else
        EXPECT_EQ(sum, 0.0) << "an untimed step carries no parts";
    }
    state[size_t(timed)] = test_util::state_bytes(*r.model);
  }
  ASSERT_EQ(seen[0].size(), seen[1].size());
  for (size_t i = 0; i < seen[0].size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(seen[0][i]), std::bit_cast<uint32_t>(seen[1][i])) << "value " << i;
  EXPECT_TRUE(state[0] == state[1]) << "the weights and moments differ";
}

}  // namespace
}  // namespace strata
