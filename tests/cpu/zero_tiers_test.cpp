// ZeRO-1/2/3 (model/llama/zero.h) composed with the state tiers: each rank's own share of the state (its masters,
// moments and, with `all`, its gradients) on the host or the disk tier, as the plan says; parameters another
// rank owns hold none. On the cpu communicator, against the same stage with every rank's state on the device:
// the same arithmetic (the streamed update is the device one on staged copies; it is not deferred under ZeRO,
// whose owners broadcast or gather the updated weights when the step ends), so losses, norms and weights are
// bit-identical, with clipping on every step. Every rank holds less host state than one unsharded model, the
// ranks together exactly as much; every rank's device, host and disk peaks are the forecast's (sim mirroring
// cpu) byte for byte. A checkpoint of host-tier shards resumes bit-exactly, on the host tier or the device.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/comm.h"
#include "model/data/data.h"
#include "model/data/row_data.h"
#include "model/llama/zero.h"
#include "model/plan/forecast.h"
#include "model/run/checkpoint.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "tests/cpu/rank_threads.h"
#include "tests/cpu/run_result.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 3, kRows = 4, kSeq = 16;

io::LlamaConfig config() {
  io::LlamaConfig c = test_util::tiny_config();
  c.num_hidden_layers = 3;
  c.intermediate_size = 44;
  return c;
}

// Where this run keeps the state: a state_offloading level ("none": every rank's on the device) on a tier.
struct Placement {
  std::string level = "none";
  Decision tier = Decision::host;
};
std::string name_of(const Placement& s) {
  return s.level + (s.tier == Decision::disk ? " on disk" : " on the host");
}
Plan state_plan(const Placement& s) {
  Plan p = Plan::keep_everything();
  p.set_state_offloading(s.level, "test", s.tier);
  return p;
}

enum class Mode { straight, save, resume };
struct RunSpec {
  int world = 2, zero = 1;
  Placement state = {};
  Mode mode = Mode::straight;
  std::string dir = {};
  int save_at = 2;
};

struct RankRun {
  std::vector<float> losses, norms;
  std::vector<std::vector<float>> weights;  // per parameter; empty where this rank holds none (ZeRO-3)
  size_t peak = 0, host_peak = 0, disk_peak = 0, state_host = 0, state_disk = 0;
};

std::string state_dir() {
  const std::string d = ::testing::TempDir() + "strata_zero_tiers";
  fs::create_directories(d);
  return d;
}

RankRun train(Communicator* comm, int rank, const RunSpec& run) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.zero = {run.zero, rank, run.world};
  mo.state_plan = state_plan(run.state);
  mo.state_dir = state_dir();
  LlamaModel model(*be, config(), mo);
  model.init_random(7);
  RankRun out;
  out.state_host = model.state_host_bytes();
  out.state_disk = model.state_disk_bytes();
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.adam.weight_decay = 0.1f;
  to.max_grad_norm = 0.05f;  // clipping on every step
  to.comm = comm;
  to.plan = mo.state_plan;
  to.tiers.offload_dir = state_dir();
  Trainer tr(*be, model, to);
  TokenRows rows(synthetic_tokens(2000, config().vocab_size, 5), kSeq);
  test_util::RankCheckpoints ck(*be, model, tr,
                                checkpoint_config_json(TrainConfig{}, model.config(), rows.rows(), run.world));
  const int first = run.mode == Mode::resume ? ck.resume(run.dir, run.save_at) : 0;
  const int per = kRows / run.world;
  for (int s = first; s < kSteps; ++s) {
    const StepStats st =
        tr.step(std::vector<Batch>{test_util::global_rows(rows, kSeq, kRows, s, rank * per, per)}, 1e-2f);
    out.losses.push_back(st.loss);
    out.norms.push_back(st.grad_norm);
    out.peak = std::max(out.peak, st.peak_device_bytes);
    out.host_peak = std::max(out.host_peak, st.peak_host_bytes + st.state_host_bytes);  // the forecast's sum
    out.disk_peak = std::max(out.disk_peak, st.peak_disk_bytes + st.state_disk_bytes);
    if (run.mode == Mode::save && s + 1 == run.save_at) ck.save(run.dir, run.save_at);
  }
  model.sync_state();
  for (const Parameter& p : model.params()) {
    std::vector<float> h;
    if (!p.gathered()) {
      h.resize(size_t(p.shape.numel()));
      be->download_f32(h.data(), p.value());
    }
    out.weights.push_back(std::move(h));
  }
  return out;
}

std::vector<RankRun> ranks(const RunSpec& run) {
  return test_util::run_rank_threads<RankRun>(run.world, [&](Communicator* c, int r) { return train(c, r, run); });
}

void expect_same_run(const std::vector<RankRun>& a, const std::vector<RankRun>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t r = 0; r < a.size(); ++r) {
    const std::string at = fmt::format("{}, rank {}", what, r);
    test_util::expect_each_bit_identical(a[r].losses, b[r].losses, at, "loss");
    test_util::expect_each_bit_identical(a[r].norms, b[r].norms, at, "norm");
    ASSERT_EQ(a[r].weights.size(), b[r].weights.size()) << at;
    for (size_t i = 0; i < a[r].weights.size(); ++i)
      test_util::expect_bits(a[r].weights[i], b[r].weights[i], fmt::format("{}, parameter {}", at, i));
  }
}

const Placement kPlacements[] = {
    {"optimizer", Decision::host},
    {"all", Decision::host},
    {"master", Decision::disk},
    {"optimizer", Decision::disk},
};

}  // namespace

// Every stage with each rank's share on the host or disk against the same stage on the device: bit for bit. The
// state really moved: every rank holds host or disk state, less than one unsharded model, and the ranks together
// hold the unsharded model's masters and moments exactly.
TEST(ZeroTiers, EachStageWithItsShareOffTheDeviceMatchesTheDeviceBitForBit) {
  for (int zero : {1, 2, 3}) {
    const std::vector<RankRun> device = ranks(RunSpec{2, zero});
    ASSERT_GT(device[0].losses.size(), 0u);
    EXPECT_EQ(device[0].state_host, 0u);
    for (const Placement& s : kPlacements) {
      const std::string what = fmt::format("zero_stage {}, {}", zero, name_of(s));
      const std::vector<RankRun> tiered = ranks(RunSpec{2, zero, s});
      expect_same_run(tiered, device, what);
      // One unsharded model with the same placement (a single rank: ZeRO is a no-op there).
      const RankRun whole = test_util::run_rank_threads<RankRun>(1, [&](Communicator* c, int r) {
        return train(c, r, RunSpec{1, zero, s});
      })[0];
      const bool disk = s.tier == Decision::disk;
      size_t total = 0;
      for (const RankRun& r : tiered) {
        const size_t held = disk ? r.state_disk : r.state_host;
        EXPECT_GT(held, 0u) << what;
        EXPECT_LT(held, disk ? whole.state_disk : whole.state_host) << what;
        total += held;
      }
      // Masters and moments split by owner; with `all` a rank also keeps the gradients it does not own (ZeRO-1,
      // on the device) or none (ZeRO-2 and 3): only the owned ones are on the host.
      if (s.level != "all") {
        EXPECT_EQ(total, disk ? whole.state_disk : whole.state_host) << what;
      }
    }
  }
}

// Each rank's device, host and disk peaks are its forecast's (the sim mirroring the cpu backend), byte for byte.
TEST(ZeroTiers, EveryRanksPeaksAreTheForecast) {
  for (int zero : {1, 2, 3})
    for (const Placement& s : {kPlacements[0], kPlacements[3]}) {
      const std::vector<RankRun> runs = ranks(RunSpec{2, zero, s});
      for (int r = 0; r < 2; ++r) {
        const std::string what = fmt::format("zero_stage {}, {}, rank {}", zero, name_of(s), r);
        ForecastRequest req;
        req.model = config();
        req.seq = kSeq;
        req.batch = kRows / 2;
        req.loss_chunk_tokens = 512;
        req.profile = find_profile("h100_80gb");
        req.profile.disk_write_gbps = req.profile.disk_read_gbps = 2.0;
        req.mirror = SimMirror::cpu;
        req.gpus = 2;
        req.rank = r;
        req.zero_stage = zero;
        req.plan = state_plan(s);
        const Forecast f = forecast(req);
        ASSERT_TRUE(f.fits) << what << ": " << f.oom;
        EXPECT_EQ(f.peak_bytes, runs[size_t(r)].peak) << what;
        EXPECT_EQ(f.peak_host_bytes, runs[size_t(r)].host_peak) << what;
        EXPECT_EQ(f.peak_disk_bytes, runs[size_t(r)].disk_peak) << what;
      }
    }
}

// A checkpoint of host-tier shards (each rank saves its own) resumes bit-exactly on the host tier, and on the
// device: the tier changes where the state lives, not its bits.
TEST(ZeroTiers, HostTierShardsResumeOnAnyTier) {
  for (int zero : {1, 2, 3}) {
    const Placement host{"optimizer", Decision::host};
    const std::string dir = test_util::fresh_temp_dir(fmt::format("strata_zero_tiers_ck{}", zero));
    const std::vector<RankRun> straight = ranks(RunSpec{2, zero, host, Mode::save, dir});
    for (const Placement& to : {host, Placement{}}) {
      const std::vector<RankRun> resumed = ranks(RunSpec{2, zero, to, Mode::resume, dir});
      for (size_t r = 0; r < 2; ++r)
        test_util::expect_resumed_bit_identical(
            straight[r], 2, resumed[r], fmt::format("zero_stage {}, resumed with {}, rank {}", zero, name_of(to), r));
    }
  }
}
