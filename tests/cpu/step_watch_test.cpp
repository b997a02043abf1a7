// A long step's progress lines (model/run/step_watch.h): where the tape is, every interval, and nothing from a
// step shorter than the interval.
#include "model/run/step_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace strata
