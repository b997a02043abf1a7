// The host and disk tiers on the cpu backend: every offloading preset and random plans mixing
// all four decisions give losses and gradients bit-identical to keep-everything, lower the
// device peak, show slots leaving and coming back in the event log, go through real io_uring,
// and leave nothing behind after a failure, an exception or an evaluation.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/backend.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/train/trainer.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/run_result.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

io::LlamaConfig cfg() {
  return test_util::tiny_config();
}

std::string fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("strata-tiers-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

using test_util::expect_bit_identical;
using test_util::RunResult;

RunResult run(const Plan& plan, const std::string& dir, int steps = 3, bool log = false) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg(), {});
  model.init_random(11);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.plan = plan;
  to.tiers.offload_dir = dir;
  to.tiers.max_inflight_bytes = 8192;  // small bounds exercise the waits
  to.tiers.prefetch_bytes = 16384;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  be->arena().set_logging(log);
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.peak = std::max(r.peak, st.peak_device_bytes);
    r.host_peak = st.peak_host_bytes;
    r.disk_peak = st.peak_disk_bytes;
  }
  test_util::capture(r, *be, model);
  return r;
}

TEST(Tiers, EveryOffloadPresetIsBitIdenticalAndLowersThePeak) {
  const std::string dir = fresh_dir("presets");
  RunResult keep = run(Plan::keep_everything(), dir);
  EXPECT_EQ(keep.host_peak, 0u);
  struct Case {
    Plan plan;
    bool host, disk;
  } cases[] = {{Plan::activation_offloading(Decision::host), true, false},
               {Plan::activation_offloading(Decision::host, true), true, false},
               {Plan::activation_offloading(Decision::disk), true, true},  // disk stages through host
               {Plan::hidden_states(), true, false}};
  for (auto& c : cases) {
    RunResult r = run(c.plan, dir);
    expect_bit_identical(keep, r, c.plan.preset);
    EXPECT_LT(r.peak, keep.peak) << c.plan.preset;
    EXPECT_EQ(r.host_peak > 0, c.host) << c.plan.preset;
    EXPECT_EQ(r.disk_peak > 0, c.disk) << c.plan.preset;
  }
  EXPECT_EQ(files_in(dir), 0u) << "the disk tier's file must be removed at the end of the run";
  fs::remove_all(dir);
}

TEST(Tiers, RandomPlansMixingAllFourDecisionsAreBitIdentical) {
  const std::string dir = fresh_dir("random");
  RunResult keep = run(Plan::keep_everything(), dir, 2);
  const char* classes[] = {"input",         "attn_norm.out", "attn_norm.rstd", "attn.q", "attn.k",
                           "attn.v",        "attn.out",      "attn.lse",       "mid",    "mlp_norm.out",
                           "mlp_norm.rstd", "mlp.gate",      "mlp.up",         "mlp.act"};
  const Decision all[] = {Decision::keep, Decision::recompute, Decision::host, Decision::disk};
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Rng rng(seed);
    Plan p;
    for (int l = 0; l < cfg().num_hidden_layers; ++l)
      for (const char* c : classes) p.add(fmt::format("L{}.{}", l, c), all[rng.below(4)]);
    expect_bit_identical(keep, run(p, dir, 2), "random plan " + std::to_string(seed));
  }
  fs::remove_all(dir);
}

TEST(Tiers, EventLogShowsSlotsLeavingAndComingBack) {
  const std::string dir = fresh_dir("log");
  RunResult keep = run(Plan::keep_everything(), dir, 1, true);
  RunResult host = run(Plan::activation_offloading(Decision::host), dir, 1, true);
  RunResult disk = run(Plan::activation_offloading(Decision::disk), dir, 1, true);
  EXPECT_EQ(keep.allocs_per_tag["L1.mlp.gate"], 1);
  EXPECT_EQ(host.allocs_per_tag["L1.mlp.gate"], 2) << "offloaded in forward, uploaded again in backward";
  EXPECT_EQ(disk.allocs_per_tag["L1.mlp.gate"], 2);
  EXPECT_EQ(host.allocs_per_tag["L3.input"], 1) << "the last layer's input is never offloaded";
  EXPECT_EQ(host.allocs_per_tag["final_norm.out"], 1) << "the loss inputs are never offloaded";
  fs::remove_all(dir);
}

TEST(Tiers, DiskWriteFailureNamesTheFileAndLeavesNothingBehind) {
  const std::string dir = fresh_dir("fail");
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg(), {});
  model.init_random(2);
  TrainOptions to;
  to.plan = Plan::activation_offloading(Decision::disk);
  to.tiers.offload_dir = dir;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  tr.step(data.next());
  const size_t base = be->arena().in_use();
  EXPECT_EQ(files_in(dir), 0u) << "the offload file has no name, even while the run lasts (no kill can leave it)";
  tr.store().inject_disk_write_failure(3, EIO);
  try {
    tr.step(data.next());
    FAIL() << "an injected write failure must surface";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_in(dir), 0u) << "a failed disk tier removes its file at once";
  EXPECT_EQ(be->arena().in_use(), base) << "no slot outlives the failed step";
  EXPECT_EQ(tr.store().host_arena()->in_use(), 0u);
  // The next step makes a new file and trains on.
  EXPECT_TRUE(std::isfinite(tr.step(data.next()).loss));
  fs::remove_all(dir);
}

// A disk-tier slot whose read back fails in backward: an IoError naming the file and the error, no
// slot or file left, and the next step trains on (a new file).
TEST(Tiers, DiskReadFailureNamesTheFileAndLeavesNothingBehind) {
  const std::string dir = fresh_dir("readfail");
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg(), {});
  model.init_random(2);
  TrainOptions to;
  to.plan = Plan::activation_offloading(Decision::disk);
  to.tiers.offload_dir = dir;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  tr.step(data.next());
  const size_t base = be->arena().in_use();
  tr.store().inject_disk_read_failure(2, EIO);
  const auto e = test_util::catch_as<IoError>([&] { tr.step(data.next()); });
  ASSERT_TRUE(e.has_value()) << "an injected read failure must surface";
  EXPECT_NE(std::string(e->what()).find(dir), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find(std::strerror(EIO)), std::string::npos) << e->what();
  EXPECT_EQ(files_in(dir), 0u) << "a failed disk tier removes its file at once";
  EXPECT_EQ(be->arena().in_use(), base) << "no slot outlives the failed step";
  EXPECT_EQ(tr.store().host_arena()->in_use(), 0u);
  EXPECT_TRUE(std::isfinite(tr.step(data.next()).loss));
  fs::remove_all(dir);
}

TEST(Tiers, SlotsAreReleasedAfterAnExceptionAndAnEvaluation) {
  const std::string dir = fresh_dir("release");
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg(), {});
  model.init_random(2);
  TrainOptions to;
  to.plan = Plan::hidden_states();
  to.tiers.offload_dir = dir;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  tr.step(data.next());
  const size_t base = be->arena().in_use();
  EXPECT_EQ(tr.store().host_arena()->in_use(), 0u);
  tr.evaluate(data.next());
  EXPECT_EQ(be->arena().in_use(), base);
  Batch bad = data.next();
  bad.inputs[3] = 99;  // >= vocab_size
  EXPECT_THROW(tr.step(bad), ConfigError);
  EXPECT_EQ(be->arena().in_use(), base);
  EXPECT_EQ(tr.store().host_arena()->in_use(), 0u);
  fs::remove_all(dir);
}

}  // namespace
