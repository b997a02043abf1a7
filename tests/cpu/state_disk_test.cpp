// Persistent state on the disk tier (Plan::decide_state `disk`: adam.m, adam.v, w.master in the
// model's state file, streamed by the optimizer through pinned host staging, model/train/optimizer.h) on
// the cpu backend: alone, combined with the host tier and the activation plans, with clipping active,
// in every state precision and with chunks that split parameters, it gives losses, weights, masters
// and moments bit-identical to keep-everything; the deferred update equals the eager one; the sim
// forecasts the device, host and disk peaks byte for byte and charges the state file's traffic on its
// disk queue; checkpoints read and write the file (resume bit-exact); a failing write, a too-small
// disk and a gradient sent to disk give clear errors naming the tier and the class.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>

#include "engine/backend.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/checkpoint.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/run_result.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"
#include "tests/cpu/train_loop_util.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

using test_util::StateTable;
using test_util::with_state;

Plan level(Plan p, const char* lvl, Decision tier) {
  p.set_state_offloading(lvl, "test", tier);
  return p;
}

std::string state_dir() {
  return ::testing::TempDir() + "strata_state_disk";
}

struct Result {
  std::vector<float> losses, norms, eval_losses;
  std::vector<std::vector<std::byte>> state;  // weights, masters, moments (snapshot: tier-free)
  size_t state_disk = 0, disk_read = 0, disk_written = 0;
  bool pending_after_last_step = false;
};

struct RunOptions {
  int steps = 4;
  size_t chunk_bytes = size_t(1) << 20;
  StateRecipe recipe = {};
  io::LlamaConfig model = test_util::tiny_config();
  bool defer = true;
  bool evaluate_between = false;
  bool tied = false;
};

// Every trainable parameter's weights, fp32 master and moments, each as one array in one layout
// whatever its tier (device, host or disk), so runs on different tiers compare array for array.
std::vector<std::vector<std::byte>> snapshot(const LlamaModel& m) {
  m.sync_state();
  std::vector<std::vector<std::byte>> out;
  auto take = [&](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.emplace_back(b, b + n);
  };
  const OptimizerState os = m.options().recipe.moments;
  for (const Parameter& p : m.params()) {
    if (!p.trainable) continue;
    const size_t n = size_t(p.shape.numel());
    take(p.value().data, p.value().bytes());
    if (p.host_master != Parameter::kDevice) {
      take(m.host_state(p.host_master), n * sizeof(float));
    } else if (p.disk_master != Parameter::kDevice) {
      out.emplace_back(n * sizeof(float));
      m.read_state_disk(p.disk_master, out.back().data(), n * sizeof(float), p.group + ".w.master");
    } else {
      take(p.master.view().data, n * sizeof(float));  // cpu: the fp32 weights are the master
    }
    for (auto [host, disk, codes, scales] :
         {std::tuple{p.host_m, p.disk_m, &p.m, &p.m_scale}, std::tuple{p.host_v, p.disk_v, &p.v, &p.v_scale}}) {
      std::vector<std::byte> b(moment_bytes(os, n));  // the host tier's layout: codes, scales at moment_scale_offset
      const size_t codes_bytes = os == OptimizerState::q8 ? n : b.size();
      std::byte* sc = b.data() + moment_scale_offset(n);
      const size_t sc_bytes = quant_blocks(n) * sizeof(float);
      if (host != Parameter::kDevice) {
        std::memcpy(b.data(), m.host_state(host), b.size());
      } else if (disk != Parameter::kDevice) {
        m.read_state_disk(disk, b.data(), codes_bytes, p.group + ".adam");
        if (os == OptimizerState::q8)
          m.read_state_disk(disk + Parameter::disk_scale_offset(n), sc, sc_bytes, p.group + ".adam");
      } else {
        std::memcpy(b.data(), codes->view().data, codes_bytes);
        if (os == OptimizerState::q8) std::memcpy(sc, scales->view().data, sc_bytes);
      }
      out.push_back(std::move(b));
    }
  }
  return out;
}

Result run(const Plan& plan, const RunOptions& o = {}) {
  auto be = make_cpu_backend(size_t(256) << 20);
  io::LlamaConfig c = o.model;
  c.tie_word_embeddings = o.tied;
  ModelOptions mo;
  mo.state_plan = plan;
  mo.state_dir = state_dir();
  mo.recipe = o.recipe;
  LlamaModel model(*be, c, mo);
  model.init_random(11);
  Result r;
  r.state_disk = model.state_disk_bytes();
  TrainOptions to = test_util::clipped_train_options();
  to.plan = plan;
  to.tiers.offload_dir = state_dir();  // activations on disk share the directory with the state file
  to.optimizer.chunk_bytes = o.chunk_bytes;
  to.optimizer.grad_inflight_bytes = 4096;
  to.optimizer.defer_update = o.defer;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, c.vocab_size, 3), 2, 19);
  TokenBatcher eval_data(synthetic_tokens(4000, c.vocab_size, 5), 2, 19);
  for (int s = 0; s < o.steps; ++s) {
    if (o.evaluate_between && s > 0) r.eval_losses.push_back(tr.evaluate(eval_data.next()));
    StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
    r.disk_read += tr.optimizer().stats().disk_read_bytes;
    r.disk_written += tr.optimizer().stats().disk_written_bytes;
    EXPECT_EQ(st.state_disk_bytes, model.state_disk_bytes());
  }
  r.pending_after_last_step = tr.optimizer().pending();
  r.state = snapshot(model);  // syncs the deferred update first
  return r;
}

void expect_identical(const Result& a, const Result& b, const std::string& what) {
  test_util::expect_each_bit_identical(a.losses, b.losses, what, "loss of step");
  test_util::expect_each_bit_identical(a.norms, b.norms, what, "gradient norm of step");
  test_util::expect_each_bit_identical(a.eval_losses, b.eval_losses, what, "evaluation");
  ASSERT_EQ(a.state.size(), b.state.size()) << what;
  for (size_t i = 0; i < a.state.size(); ++i) EXPECT_TRUE(a.state[i] == b.state[i]) << what << ": state array " << i;
}

const StateTable kEach[] = {
    {{"*.adam.m", Decision::disk}},
    {{"*.adam.v", Decision::disk}},
    {{"*.w.master", Decision::disk}},
    {{"*.adam.*", Decision::disk}, {"*.w.master", Decision::disk}},
    // One layer's and one other group's state on disk, the rest on the device.
    {{"L1.adam.*", Decision::disk}, {"L1.w.master", Decision::disk}, {"head.adam.v", Decision::disk}},
    // Disk and host mixed within each parameter, gradients on the host.
    {{"*.adam.m", Decision::disk},
     {"*.adam.v", Decision::host},
     {"*.w.master", Decision::disk},
     {"*.grad", Decision::host}},
};

std::string name_of(const StateTable& t) {
  std::string s;
  for (auto& [pat, d] : t) s += (s.empty() ? "" : ", ") + pat + ": " + decision_name(d);
  return s;
}

}  // namespace

TEST(StateDisk, EachDiskDecisionIsBitIdenticalWithClipping) {
  const Result keep = run(Plan::keep_everything());
  EXPECT_EQ(keep.state_disk, 0u);
  EXPECT_GT(keep.norms[0], 0.05f) << "the test wants clipping active";
  for (const StateTable& st : kEach) {
    const Result r = run(with_state(Plan::keep_everything(), st));
    expect_identical(keep, r, name_of(st));
    EXPECT_GT(r.state_disk, 0u) << name_of(st);
    // Every step reads and writes each disk array once (the deferred update of step s runs in step s+1's
    // forward; the last one at sync): at least three steps' worth each way over four steps.
    EXPECT_GE(r.disk_written, 3 * r.state_disk) << name_of(st);
    EXPECT_GE(r.disk_read, 3 * r.state_disk) << name_of(st);
  }
}

TEST(StateDisk, LevelsOnTheDiskTierCombinedWithActivationPlansAreBitIdentical) {
  const Result keep = run(Plan::keep_everything(), {.steps = 3});
  for (const char* lvl : {"optimizer", "master", "all"})
    for (const Plan& ap : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::hidden_states(),
                           Plan::activation_offloading(Decision::disk), Plan::selective_recompute()}) {
      const Plan p = level(ap, lvl, Decision::disk);
      const Result r = run(p, {.steps = 3});
      EXPECT_GT(r.state_disk, 0u) << lvl;
      expect_identical(keep, r, std::string(lvl) + " on disk + " + ap.preset);
    }
}

// The streamed update deferred to the next forward against the one right after backward: the same
// bits, with an evaluation between steps (its forward applies the deferred update first).
TEST(StateDisk, DeferredUpdateIsBitIdenticalToTheEagerOneAndToKeep) {
  RunOptions o;
  o.evaluate_between = true;
  const Result keep = run(Plan::keep_everything(), o);
  for (const StateTable& st : kEach) {
    const Plan p = with_state(Plan::keep_everything(), st);
    RunOptions eager = o;
    eager.defer = false;
    const Result now = run(p, eager), later = run(p, o);
    EXPECT_FALSE(now.pending_after_last_step) << name_of(st);
    const bool host_grads = name_of(st).find("grad") != std::string::npos;
    EXPECT_EQ(later.pending_after_last_step, !host_grads) << name_of(st);
    expect_identical(now, later, name_of(st) + ": eager vs deferred");
    expect_identical(keep, later, name_of(st) + ": deferred vs keep");
  }
}

// bf16 and 8-bit moments and master_weights none (on cpu the weights are the fp32 master, so the
// w.master class still exists) on disk: the same bits as on the device in the same precision. A model
// whose matrices span partial quantisation blocks (hidden 72, intermediate 200).
TEST(StateDisk, EveryStatePrecisionIsBitIdenticalOnDisk) {
  io::LlamaConfig c = test_util::tiny_config();
  c.hidden_size = 72;
  c.intermediate_size = 200;
  c.head_dim = 18;
  for (const StateRecipe recipe :
       {StateRecipe{MasterWeights::fp32, OptimizerState::bf16}, StateRecipe{MasterWeights::fp32, OptimizerState::q8},
        StateRecipe{MasterWeights::none, OptimizerState::bf16}, StateRecipe{MasterWeights::none, OptimizerState::q8}}) {
    const std::string tag =
        std::string(master_weights_name(recipe.master)) + "/" + optimizer_state_name(recipe.moments);
    RunOptions o;
    o.steps = 3;
    o.recipe = recipe;
    o.model = c;
    const Result keep = run(Plan::keep_everything(), o);
    RunOptions fp32 = o;
    fp32.recipe = {};
    EXPECT_FALSE(keep.state == run(Plan::keep_everything(), fp32).state)
        << tag << ": the precision changes nothing (the test would compare fp32 with itself)";
    for (const StateTable& st : kEach)
      expect_identical(keep, run(with_state(Plan::keep_everything(), st), o), tag + " " + name_of(st));
    expect_identical(keep, run(level(Plan::gradient_checkpointing(1), "all", Decision::disk), o),
                     tag + " all on disk + gc");
  }
}

// Pieces of a parameter with disk arrays start on 4096 elements (1024 quantisation blocks with 8-bit
// moments on disk, where one granule exceeds a 1 MiB chunk): 1 MiB chunks split a 1100 x 256 matrix
// into several, each read and written on its own pages, without changing a bit.
TEST(StateDisk, ChunksSplitParametersOnPagesWithoutChangingABit) {
  io::LlamaConfig c = test_util::tiny_config();
  c.hidden_size = 256;
  c.intermediate_size = 1100;
  c.head_dim = 64;
  for (const OptimizerState os : {OptimizerState::fp32, OptimizerState::q8}) {
    RunOptions o;
    o.steps = 2;
    o.model = c;
    o.recipe.moments = os;
    const Result keep = run(Plan::keep_everything(), o);
    const Plan disk = level(Plan::keep_everything(), "master", Decision::disk);
    expect_identical(keep, run(disk, o), std::string("1 MiB chunks, ") + optimizer_state_name(os));
    RunOptions big = o;
    big.chunk_bytes = size_t(1) << 30;
    expect_identical(keep, run(disk, big), std::string("one chunk, ") + optimizer_state_name(os));
  }
}

TEST(StateDisk, TiedEmbeddingsOnDiskAreBitIdentical) {
  RunOptions o;
  o.steps = 3;
  o.tied = true;
  expect_identical(run(Plan::keep_everything(), o), run(level(Plan::keep_everything(), "all", Decision::disk), o),
                   "tied, all on disk");
}

TEST(StateDisk, DeviceBytesFallByTheStateMovedAndTheFileHoldsItPageAligned) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions keep_mo;
  LlamaModel keep(*be, test_util::tiny_config(), keep_mo);
  const size_t keep_bytes = be->arena().in_use();
  auto be2 = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.state_plan = level(Plan::keep_everything(), "optimizer", Decision::disk);
  mo.state_dir = state_dir();
  LlamaModel m(*be2, test_util::tiny_config(), mo);
  size_t moved = 0, file = 0;
  for (const Parameter& p : m.params()) {
    ASSERT_NE(p.disk_m, Parameter::kDevice) << p.name;
    ASSERT_NE(p.disk_v, Parameter::kDevice) << p.name;
    EXPECT_EQ(p.host_m, Parameter::kDevice);
    EXPECT_EQ(p.disk_master, Parameter::kDevice);
    EXPECT_EQ(p.disk_m % 4096, 0u);
    EXPECT_EQ(p.disk_v % 4096, 0u);
    const size_t b = size_t(p.shape.numel()) * 4;
    moved += 2 * ((b + 255) / 256 * 256);
    file += 2 * ((b + 4095) / 4096 * 4096);
  }
  EXPECT_EQ(keep_bytes - be2->arena().in_use(), moved);
  EXPECT_EQ(m.state_disk_bytes(), file);
  EXPECT_EQ(m.state_host_bytes(), 0u);
  ASSERT_NE(m.state_disk(), nullptr);
  // The file is nameless: nothing of it is listed in the directory.
  for (const auto& e : fs::directory_iterator(state_dir()))
    EXPECT_EQ(e.path().filename().string().find("strata-offload"), std::string::npos) << e.path();
}

TEST(StateDisk, SimForecastsDeviceHostAndDiskPeaksByteForByte) {
  for (const char* lvl : {"optimizer", "master", "all"})
    for (const Plan& ap : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::hidden_states(),
                           Plan::activation_offloading(Decision::disk)})
      for (OptimizerState os : {OptimizerState::fp32, OptimizerState::bf16, OptimizerState::q8}) {
        const Plan p = level(ap, lvl, Decision::disk);
        ForecastRequest req = sim_twin::tiny_request(p);
        req.recipe.moments = os;
        const std::string what = std::string(lvl) + " " + ap.preset + " " + optimizer_state_name(os);
        const Forecast f = forecast(req);
        const sim_twin::CpuStep cpu = sim_twin::cpu_step(req, sim_twin::kBudget, p);
        ASSERT_TRUE(f.fits && cpu.fits) << what;
        EXPECT_EQ(f.peak_bytes, cpu.peak) << what;
        EXPECT_EQ(f.high_water_bytes, cpu.high_water) << what;
        EXPECT_EQ(f.peak_host_bytes, cpu.host_peak) << what;
        EXPECT_EQ(f.peak_disk_bytes, cpu.disk_peak) << what;
        EXPECT_GT(f.state_disk_bytes, 0u) << what;
        EXPECT_GE(f.peak_disk_bytes, f.state_disk_bytes) << what;
        // The optimizer's host staging of the disk arrays is in the host peak.
        EXPECT_GT(f.state_host_bytes, 0u) << what;
        // The reported step writes every disk array back once (the deferred update it applies) and
        // reads them at least once.
        EXPECT_GE(f.disk_written_bytes, f.state_disk_bytes) << what;
        EXPECT_GE(f.disk_read_bytes, f.state_disk_bytes) << what;
        EXPECT_GT(f.disk_busy_s, 0.0) << what;
      }
}

// The forecast charges the state file's traffic on the disk queue at the profile's bandwidth: a model
// whose moments take GiBs forecasts a slower step with them on disk than on the host, by at least what
// the disk queue cannot hide, and the queue is busy for at least the bytes over the bandwidth.
TEST(StateDisk, ForecastChargesTheStateFilesTrafficOnTheDiskQueue) {
  ForecastRequest r;
  r.model = resolve_model("Llama-3.2-1B");
  r.seq = 2048;
  r.plan = level(Plan::gradient_checkpointing(1), "optimizer", Decision::host);
  r.profile = find_profile("h100_80gb");
  r.mirror = SimMirror::cuda;
  r.tiers.offload_dir = state_dir();
  const Forecast host = forecast(r);
  r.plan = level(Plan::gradient_checkpointing(1), "optimizer", Decision::disk);
  const Forecast disk = forecast(r);
  ASSERT_TRUE(host.fits && disk.fits);
  EXPECT_EQ(host.state_disk_bytes, 0u);
  EXPECT_GT(disk.state_disk_bytes, size_t(4) << 30);  // 1.2B parameters' fp32 m and v
  const double bytes = double(disk.disk_read_bytes + disk.disk_written_bytes);
  const double min_busy = double(disk.disk_written_bytes) / (r.profile.disk_write_gbps * 1e9) +
                          double(disk.disk_read_bytes) / (r.profile.disk_read_gbps * 1e9);
  EXPECT_GE(bytes, 2.0 * double(disk.state_disk_bytes));
  EXPECT_GE(disk.disk_busy_s, 0.99 * min_busy);
  EXPECT_GT(disk.step_s, host.step_s + 0.5 * double(disk.state_disk_bytes) / (r.profile.disk_read_gbps * 1e9));
  std::printf(
      "[ state disk ] 1B gc 2048 optimizer state: host %.3f s/step, disk %.3f s/step (state file %.2f GiB, "
      "disk busy %.3f s)\n",
      host.step_s, disk.step_s, double(disk.state_disk_bytes) / double(size_t(1) << 30), disk.disk_busy_s);
}

// A checkpoint holds the state's bytes wherever they lived: saved from the disk tier and resumed into
// it (or into the device), the run ends bit-identical to the uninterrupted one.
TEST(StateDisk, CheckpointSaveAndResumeWithStateOnDiskIsBitExact) {
  using namespace test_util;
  auto config = [](const std::string& out) {
    TrainConfig c;
    c.seq = 16;
    c.batch = 2;
    c.grad_accum = 2;
    c.steps = 6;
    c.steps_given = true;
    c.lr = 1e-2f;
    c.weight_decay = 0.1f;
    c.max_grad_norm = 0.5f;
    c.output_dir = out;
    c.offload_dir = state_dir();
    return c;
  };
  auto go = [](const TrainConfig& cfg, int stop_after) {
    LoopOptions lo = quiet();
    int steps = 0;
    lo.on_step = [&](const StepStats&) { ++steps; };
    lo.stop_requested = [&] { return stop_after && steps == stop_after ? SIGTERM : 0; };
    Rig r = make_rig(cfg, lo);
    std::pair<LoopResult, std::vector<std::vector<std::byte>>> out;
    out.first = r.loop->run();
    out.second = state_bytes(*r.model);
    return out;
  };
  for (const OptimizerState os : {OptimizerState::fp32, OptimizerState::q8}) {
    SCOPED_TRACE(optimizer_state_name(os));
    const std::string base = ::testing::TempDir() + "strata_state_disk_ck_" + std::to_string(::getpid());
    fs::remove_all(base);
    TrainConfig cfg = config(base + "/whole");
    cfg.recipe.moments = os;
    cfg.plan.set_state_offloading("master", "test", Decision::disk);
    const auto whole = go(cfg, 0);
    ASSERT_EQ(whole.first.losses.size(), 6u);
    cfg.output_dir = base + "/stopped";
    const auto stopped = go(cfg, 3);
    EXPECT_EQ(stopped.first.last_checkpoint, cfg.output_dir + "/checkpoint-3");
    cfg.resume_from_checkpoint = "auto";
    const auto resumed = go(cfg, 0);
    ASSERT_EQ(resumed.first.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.first.losses[i], whole.first.losses[3 + i]) << "step " << 4 + i;
    EXPECT_TRUE(resumed.second == whole.second);
    // The same checkpoint resumed with the state on the device: the same run.
    TrainConfig dev = config(base + "/stopped");
    dev.recipe.moments = os;
    dev.resume_from_checkpoint = cfg.output_dir + "/checkpoint-3";
    dev.output_dir = base + "/device";
    const auto on_device = go(dev, 0);
    ASSERT_EQ(on_device.first.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(on_device.first.losses[i], whole.first.losses[3 + i]);
    fs::remove_all(base);
  }
}

// A write to the state file that fails (a full disk: ENOSPC; an I/O error) stops the step with an
// IoError naming the disk tier, the state class and the file.
TEST(StateDisk, AFailingStateWriteNamesTheDiskTierTheClassAndTheFile) {
  for (const bool defer : {true, false})
    for (const int err : {ENOSPC, EIO}) {
      auto be = make_cpu_backend(size_t(64) << 20);
      ModelOptions mo;
      mo.state_plan = level(Plan::keep_everything(), "optimizer", Decision::disk);
      mo.state_dir = state_dir();
      LlamaModel model(*be, test_util::tiny_config(), mo);
      model.init_random(1);
      TrainOptions to;
      to.plan = mo.state_plan;
      to.optimizer.defer_update = defer;
      Trainer tr(*be, model, to);
      TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
      model.state_disk()->inject_write_failure(1, err);
      const auto e = test_util::catch_as<IoError>([&] {
        for (int s = 0; s < 3; ++s) tr.step(data.next());
      });
      ASSERT_TRUE(e.has_value());
      const std::string msg = e->what();
      EXPECT_NE(msg.find("disk tier"), std::string::npos) << msg;
      EXPECT_NE(msg.find(".adam."), std::string::npos) << msg;
      EXPECT_NE(msg.find(model.state_disk()->path()), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::strerror(err)), std::string::npos) << msg;
    }
}

// A read of the state file that fails (an I/O error) stops the step with an IoError naming the disk
// tier, the state class, the file and the error; a checkpoint saved while the file cannot be read
// fails the same way and leaves neither a checkpoint nor its temp directory behind, and an earlier
// checkpoint stays whole.
TEST(StateDisk, AFailingStateReadNamesTheTierAndTheClassAndLeavesNoCheckpoint) {
  for (const bool defer : {true, false}) {
    auto be = make_cpu_backend(size_t(64) << 20);
    ModelOptions mo;
    mo.state_plan = level(Plan::keep_everything(), "all", Decision::disk);
    mo.state_dir = state_dir();
    LlamaModel model(*be, test_util::tiny_config(), mo);
    model.init_random(1);
    TrainOptions to;
    to.plan = mo.state_plan;
    to.optimizer.defer_update = defer;
    Trainer tr(*be, model, to);
    TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
    tr.step(data.next());
    const std::string out = ::testing::TempDir() + "strata_state_read_fail_" + std::to_string(::getpid());
    fs::remove_all(out);
    const std::string first = save_checkpoint(out, *be, model, CheckpointState{1, {}, 0, 5, 1.0f}, {});
    ASSERT_TRUE(fs::exists(first + "/model.safetensors"));
    auto expect_read_error = [&](const std::optional<IoError>& e) {
      ASSERT_TRUE(e.has_value());
      const std::string msg = e->what();
      EXPECT_NE(msg.find("disk tier"), std::string::npos) << msg;
      EXPECT_TRUE(msg.find(".adam.") != std::string::npos || msg.find("w.master") != std::string::npos) << msg;
      EXPECT_NE(msg.find(model.state_disk()->path()), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::strerror(EIO)), std::string::npos) << msg;
    };
    // A checkpoint whose state read fails: nothing new on disk, the first one untouched.
    const auto before = fs::last_write_time(first + "/model.safetensors");
    model.state_disk()->inject_read_failure(1, EIO);
    expect_read_error(test_util::catch_as<IoError>([&] {
      save_checkpoint(out, *be, model, CheckpointState{2, {}, 0, 5, 1.0f}, {});
    }));
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(out)) {
      ++entries;
      EXPECT_EQ(e.path().filename().string(), fs::path(first).filename().string()) << "left behind: " << e.path();
    }
    EXPECT_EQ(entries, 1u);
    EXPECT_EQ(fs::last_write_time(first + "/model.safetensors"), before);
    // The optimizer's read during a step.
    model.state_disk()->inject_read_failure(1, EIO);
    expect_read_error(test_util::catch_as<IoError>([&] {
      for (int s = 0; s < 3; ++s) tr.step(data.next());
    }));
    fs::remove_all(out);
  }
}

// Loading weights whose master write into the state file fails names the tier and the class; loaded
// without the fault, the masters read back from the file are the checkpoint's bit for bit.
TEST(StateDisk, AFailingRestoreWriteNamesTheDiskTierAndTheClass) {
  const std::string dir = ::testing::TempDir() + "strata_state_disk_model_" + std::to_string(::getpid());
  fs::remove_all(dir);
  {
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel src(*be, test_util::tiny_config(), {});
    src.init_random(3);
    src.save(dir);
  }
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.state_plan = level(Plan::keep_everything(), "master", Decision::disk);
  mo.state_dir = state_dir();
  LlamaModel model(*be, test_util::tiny_config(), mo);
  model.state_disk()->inject_write_failure(1, ENOSPC);
  const auto e = test_util::catch_as<IoError>([&] { model.load(dir); });
  ASSERT_TRUE(e.has_value());
  const std::string msg = e->what();
  EXPECT_NE(msg.find("disk tier"), std::string::npos) << msg;
  EXPECT_NE(msg.find("w.master"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::strerror(ENOSPC)), std::string::npos) << msg;
  // Loaded without a fault, the masters come back from the file exactly.
  model.load(dir);
  auto be2 = make_cpu_backend(size_t(64) << 20);
  LlamaModel dev(*be2, test_util::tiny_config(), {});
  dev.load(dir);
  for (size_t i = 0; i < model.params().size(); ++i) {
    const Parameter& p = model.params()[i];
    std::vector<float> a(size_t(p.shape.numel()));
    model.read_state_disk(p.disk_master, a.data(), a.size() * 4, p.group + ".w.master");
    EXPECT_EQ(std::memcmp(a.data(), dev.params()[i].master.view().data, a.size() * 4), 0) << p.name;
  }
  fs::remove_all(dir);
}

// The file is created at setup at its full size: a disk (here a file-size limit) too small fails at
// once, naming the tier, the classes and the bytes needed.
TEST(StateDisk, ATooSmallDiskFailsAtSetupNamingTheTierClassesAndBytes) {
  ModelOptions mo;
  mo.state_plan = level(Plan::keep_everything(), "master", Decision::disk);
  mo.state_dir = state_dir();
  fs::create_directories(state_dir());
  auto be = make_cpu_backend(size_t(64) << 20);
  size_t needed = 0;
  {
    LlamaModel m(*be, test_util::tiny_config(), mo);
    needed = m.state_disk_bytes();
  }
  ASSERT_GT(needed, size_t(64) << 10);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 64 << 10;  // files of 64 KiB at most: fallocate fails with EFBIG
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  try {
    LlamaModel m(*be, test_util::tiny_config(), mo);
  } catch (const IoError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(msg.empty()) << "the state file was created beyond the file-size limit";
  EXPECT_NE(msg.find("disk tier"), std::string::npos) << msg;
  EXPECT_NE(msg.find("L0.w.master"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(needed)), std::string::npos) << msg;
  EXPECT_NE(msg.find(state_dir()), std::string::npos) << msg;
}

TEST(StateDisk, GradientsOnDiskAreRefusedNamingTheClass) {
  Plan p;
  p.state = {{"L*.grad", Decision::disk}};
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.state_plan = p;
  const auto e = test_util::catch_as<ConfigError>([&] { LlamaModel m(*be, test_util::tiny_config(), mo); });
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(std::string(e->what()).find("L0.grad"), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find("disk"), std::string::npos) << e->what();
  // A level on disk leaves the gradients on the host ("all") or the device.
  Plan all;
  all.set_state_offloading("all", "test", Decision::disk);
  EXPECT_EQ(all.decide_state("L2.grad"), Decision::host);
  EXPECT_EQ(all.decide_state("L2.adam.v"), Decision::disk);
  EXPECT_EQ(all.decide_state("embed.w.master"), Decision::disk);
  EXPECT_EQ(all.state_preset, "all on disk");
  Plan opt;
  opt.set_state_offloading("optimizer", "test", Decision::disk);
  EXPECT_EQ(opt.decide_state("L2.grad"), Decision::keep);
  EXPECT_EQ(opt.decide_state("L2.w.master"), Decision::keep);
  EXPECT_EQ(opt.decide_state("head.adam.m"), Decision::disk);
  EXPECT_THROW(opt.set_state_offloading("optimizer", "test", Decision::recompute), ConfigError);
}

TEST(StateDisk, YamlTierKeyAndDiskEntriesParseInAnyOrder) {
  TrainConfig a;
  apply_yaml_text(a, "state_offloading_tier: disk\nstate_offloading: master\noffload_dir: /nvme/x\n", "s.yaml");
  EXPECT_EQ(a.plan.decide_state("L0.adam.m"), Decision::disk);
  EXPECT_EQ(a.plan.decide_state("L0.w.master"), Decision::disk);
  EXPECT_EQ(a.plan.decide_state("L0.grad"), Decision::keep);
  EXPECT_EQ(model_options(a).state_dir, "/nvme/x");
  TrainConfig b;
  apply_yaml_text(b, "state_offloading: optimizer\nstate_offloading_tier: host\n", "s.yaml");
  EXPECT_EQ(b.plan.decide_state("L0.adam.v"), Decision::host);
  TrainConfig c;
  apply_yaml_text(c, "state_plan:\n  \"L1.adam.*\": disk\n  \"*.grad\": host\nstate_offloading: optimizer\n", "s.yaml");
  EXPECT_EQ(c.plan.decide_state("L1.adam.m"), Decision::disk);  // the explicit table first
  EXPECT_EQ(c.plan.decide_state("L2.adam.m"), Decision::host);  // the level, on its default tier
  EXPECT_EQ(c.plan.decide_state("L2.grad"), Decision::host);
  for (const char* bad : {"state_offloading_tier: tape\n", "state_plan:\n  \"L*.grad\": disk\n",
                          "state_plan:\n  \"L*.adam.m\": recompute\n", "state_offloading_tier: [disk]\n"}) {
    TrainConfig d;
    try {
      apply_yaml_text(d, bad, "s.yaml");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("s.yaml"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_state_tier("nvme", "--state-offloading-tier"), ConfigError);
  EXPECT_EQ(parse_state_tier("disk", "x"), Decision::disk);
}

// With a host budget too small for the optimizer state but enough for the disk tier's staging, and a
// disk budget, the planner moves the state to the disk tier when nothing else fits the device (the 1B
// shape: its fp32 moments are 9 GiB, the staging four 256 MiB chunks); its YAML reads back the same
// decisions.
TEST(StateDisk, PlannerMovesStateToDiskWhenNothingElseFits) {
  ForecastRequest base;
  base.model = resolve_model("Llama-3.2-1B");
  base.seq = 2048;
  base.profile = find_profile("h100_80gb");
  base.mirror = SimMirror::cuda;
  base.tiers.offload_dir = state_dir();
  ForecastRequest gcr = base;
  gcr.plan = Plan::gradient_checkpointing(1);
  const Forecast gc = forecast(gcr);
  ASSERT_TRUE(gc.fits);
  const size_t budget = gc.high_water_bytes - (size_t(2) << 30);  // 2 GiB under: some state must move
  // 1.25 GiB of host: the staging, not the optimizer state of the 6 layers (2.72 GiB) that would let a plan fit
  // without the disk tier.
  const TierBudgets tb{budget, size_t(1280) << 20, size_t(64) << 30};
  ASSERT_FALSE(plan_for_budget(base, TierBudgets{budget, tb.host, 0}).found);
  const PlanResult pr = plan_for_budget(base, tb);
  ASSERT_TRUE(pr.found) << pr.label;
  EXPECT_NE(pr.label.find("state on disk"), std::string::npos) << pr.label;
  EXPECT_LE(pr.forecast.peak_bytes, budget);
  EXPECT_GT(pr.forecast.state_disk_bytes, size_t(4) << 30);
  EXPECT_LE(pr.forecast.peak_disk_bytes, tb.disk);
  EXPECT_LE(pr.forecast.peak_host_bytes, tb.host);
  TrainConfig tc;
  ForecastRequest chosen = base;
  chosen.plan = pr.plan;
  apply_yaml_text(tc, plan_yaml(chosen, pr.plan, pr.forecast, budget), "plan.yaml");
  for (const char* g : {"L0", "L15", "embed", "final_norm"})
    for (const char* k : kStateKinds) {
      const std::string cls = std::string(g) + "." + k;
      EXPECT_EQ(tc.plan.decide_state(cls), pr.plan.decide_state(cls)) << cls;
    }
}
