// ZeRO-3 (model/llama/zero.h) on the cpu communicator: the layers' matrices live on their owners only and are gathered
// per layer into the pager's two slots for forward and backward. Against ZeRO-2 on the same ranks the arithmetic is
// the same (the same owners, reduces and norm parts), so losses, norms and weights are bit-identical, with clipping
// on every step and with gradient accumulation; against one rank on the global batch, float rounding. A 3-layer
// model (an odd layer count: the slots' L % 2 wraps unevenly) on 2 and 3 ranks. Each rank's persistent bytes fall
// below ZeRO-2's by the matrices it does not own less the two slots, and the forecast (sim mirroring cpu) is every
// rank's peak byte for byte. Checkpoints: a resumed stage-3 run is bit-identical, its weights file is stage 2's, and
// stage 2 resumes it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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

constexpr int kSteps = 3, kRows = 6, kSeq = 16;

io::LlamaConfig config() {
  io::LlamaConfig c = test_util::tiny_config();
  c.num_hidden_layers = 3;
  c.intermediate_size = 44;
  return c;
}

struct RankRun {
  std::vector<float> losses, norms;
  std::vector<std::vector<float>> weights;  // per parameter; empty where this rank holds none (ZeRO-3)
  size_t peak = 0, held = 0;                // the arena's peak over the steps; in use before the first step
  std::string saved;                        // the final save (rank 0), or a checkpoint
};

enum class Mode { straight, save, resume };

struct RunSpec {
  int world = 1, zero = 0, accum = 1;
  Mode mode = Mode::straight;
  std::string dir = {};
  int save_at = 2;
  bool fp8 = false;
};
RunSpec plain(int world, int zero, int accum) {
  return {world, zero, accum, Mode::straight, {}, 2};
}

RankRun train(Communicator* comm, int rank, const RunSpec& run) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.zero = {run.zero, rank, run.world};
  mo.fp8 = run.fp8;
  LlamaModel model(*be, config(), mo);
  model.init_random(7);
  RankRun out;
  out.held = be->arena().in_use();
  TrainOptions to = test_util::clipped_train_options();
  to.comm = comm;
  Trainer tr(*be, model, to);
  TokenRows rows(synthetic_tokens(2000, config().vocab_size, 5), kSeq);
  const bool sharded = mo.zero.sharded();
  test_util::RankCheckpoints ck(
      *be, model, tr, checkpoint_config_json(TrainConfig{}, model.config(), rows.rows(), sharded ? run.world : 0));
  int first = 0;
  if (run.mode == Mode::resume) first = ck.resume(run.dir, run.save_at);
  const int per = kRows / run.world, per_micro = per / run.accum;
  for (int s = first; s < kSteps; ++s) {
    // Row r of the global batch with its first r targets ignored.
    std::vector<Batch> micro;
    for (int m = 0; m < run.accum; ++m)
      micro.push_back(test_util::global_rows(rows, kSeq, kRows, s, rank * per + m * per_micro, per_micro, 1));
    const StepStats st = tr.step(micro, 1e-2f);
    out.losses.push_back(st.loss);
    out.norms.push_back(st.grad_norm);
    out.peak = std::max(out.peak, st.peak_device_bytes);
    if (run.mode == Mode::save && s + 1 == run.save_at && ck.saves()) out.saved = ck.save(run.dir, run.save_at);
  }
  out.weights = test_util::model_weights(*be, model);
  if (run.mode == Mode::straight && !run.dir.empty()) {
    // The final save of strata-train: every rank gathers, rank 0 writes.
    tr.optimizer().gather_masters();
    if (rank == 0) {
      model.save(run.dir);
      out.saved = run.dir + "/model.safetensors";
    }
  }
  return out;
}

std::vector<RankRun> ranks(const RunSpec& run) {
  if (run.world == 1) return {train(nullptr, 0, run)};
  return test_util::run_rank_threads<RankRun>(run.world, [&](Communicator* c, int r) { return train(c, r, run); });
}

// Each parameter's weights from the rank that holds them (ZeRO-3: its owner; otherwise every rank: rank 0's).
std::vector<std::vector<float>> weights_of(const std::vector<RankRun>& runs) {
  std::vector<std::vector<float>> w(runs[0].weights.size());
  for (size_t i = 0; i < w.size(); ++i)
    for (const RankRun& r : runs)
      if (!r.weights[i].empty()) {
        w[i] = r.weights[i];
        break;
      }
  return w;
}

using test_util::expect_bits;
using test_util::slurp;

std::string fresh_dir(const std::string& name) {
  return test_util::fresh_temp_dir("zero3_" + name);
}

}  // namespace

// Stage 3 against stage 2 on the same ranks: bit for bit (losses, norms, every weight from its holder), with and
// without accumulation; every rank's losses identical; against one rank on the global batch, float rounding.
TEST(Zero3, MatchesStageTwoBitForBitAndOneRankToRounding) {
  const RankRun one = ranks(plain(1, 0, 1))[0];
  struct Case {
    int world, accum;
  };
  for (const Case c : {Case{2, 1}, Case{3, 1}, Case{2, 3}, Case{3, 2}}) {
    const std::string what = fmt::format("{} ranks, {} micro-batches", c.world, c.accum);
    const std::vector<RankRun> z2 = ranks(plain(c.world, 2, c.accum));
    const std::vector<RankRun> z3 = ranks(plain(c.world, 3, c.accum));
    EXPECT_GT(z3[0].norms[0], 0.05f) << what << ": clipping is active";
    for (size_t r = 0; r < z3.size(); ++r) {
      expect_bits(z3[r].losses, z2[0].losses, what + fmt::format(": rank {}'s losses against zero 2", r));
      expect_bits(z3[r].norms, z2[0].norms, what + fmt::format(": rank {}'s norms against zero 2", r));
      // A rank holds the layer matrices it owns only, and every other parameter.
      size_t holds = 0, gathered = 0;
      for (const auto& w : z3[r].weights) (w.empty() ? gathered : holds)++;
      EXPECT_GT(gathered, 0u) << what << ", rank " << r;
      EXPECT_GT(holds, 0u) << what << ", rank " << r;
    }
    const auto w3 = weights_of(z3), w2 = weights_of(z2);
    for (size_t i = 0; i < w3.size(); ++i) expect_bits(w3[i], w2[i], what + fmt::format(", parameter {}", i));
    ASSERT_EQ(one.losses.size(), z3[0].losses.size());
    for (size_t s = 0; s < one.losses.size(); ++s) {
      EXPECT_NEAR(one.losses[s], z3[0].losses[s], 2e-6f * std::fabs(one.losses[s])) << what << " loss, step " << s;
      EXPECT_NEAR(one.norms[s], z3[0].norms[s], 1e-5f * one.norms[s]) << what << " norm, step " << s;
    }
    test_util::expect_weights_close(one.weights, w3, what + " against one rank");
  }
}

// fp8: true under ZeRO-3: the attention projections' casts read the gathered weights (the MLP's width, 44, keeps it in
// bf16), and the codes they leave are the same on every stage: stage 3 equals stage 2 bit for bit.
TEST(Zero3, Fp8MatchesStageTwoBitForBit) {
  RunSpec plain_fp8 = plain(1, 0, 1);
  plain_fp8.fp8 = true;
  const RankRun one = ranks(plain_fp8)[0], bf16 = ranks(plain(1, 0, 1))[0];
  EXPECT_NE(one.losses, bf16.losses) << "fp8 ran no FP8 GEMM";
  for (auto [world, accum] : {std::pair{2, 1}, std::pair{3, 2}}) {
    const std::string what = fmt::format("fp8, {} ranks, {} micro-batches", world, accum);
    RunSpec r2 = plain(world, 2, accum), r3 = plain(world, 3, accum);
    r2.fp8 = r3.fp8 = true;
    const std::vector<RankRun> z2 = ranks(r2), z3 = ranks(r3);
    for (size_t r = 0; r < z3.size(); ++r) {
      expect_bits(z3[r].losses, z2[0].losses, what + fmt::format(": rank {}'s losses against zero 2", r));
      expect_bits(z3[r].norms, z2[0].norms, what + fmt::format(": rank {}'s norms against zero 2", r));
    }
    const auto w3 = weights_of(z3), w2 = weights_of(z2);
    for (size_t i = 0; i < w3.size(); ++i) expect_bits(w3[i], w2[i], what + fmt::format(", parameter {}", i));
  }
}

// Persistent bytes (the model alone, before a step): stage 3 holds exactly the layer matrices it does not own less
// than stage 2, plus the two slots (each the largest layer's share of matrices this rank gathers). The peak over
// the steps is the forecast of that rank (sim mirroring cpu) byte for byte; mirroring cuda, the gathers take time.
TEST(Zero3, HoldsOnlyOwnedLayerWeightsAndTheForecastMatchesEveryRank) {
  auto align = [](size_t b) { return (b + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign; };
  for (int world : {2, 3}) {
    const std::vector<RankRun> z2 = ranks(plain(world, 2, 1)), z3 = ranks(plain(world, 3, 1));
    for (int r = 0; r < world; ++r) {
      auto be = make_cpu_backend(size_t(64) << 20);
      ModelOptions mo;
      mo.zero = {3, r, world};
      LlamaModel model(*be, config(), mo);
      ASSERT_NE(model.pager(), nullptr);
      EXPECT_TRUE(model.pager()->gathers());
      size_t unowned = 0;
      std::vector<size_t> layer_share(size_t(config().num_hidden_layers), 0);
      for (const Parameter& p : model.params())
        if (p.gathered()) {
          unowned += align(size_t(p.shape.numel()) * sizeof(float));
          size_t& b = layer_share[size_t(LlamaModel::layer_of_param(p.name))];
          b = align(b) + size_t(p.shape.numel()) * sizeof(float);
        }
      const size_t slot = *std::max_element(layer_share.begin(), layer_share.end());
      EXPECT_EQ(model.pager()->slot_bytes(), slot);
      EXPECT_EQ(z3[size_t(r)].held + unowned, z2[size_t(r)].held + 2 * align(slot)) << world << " ranks, rank " << r;
      EXPECT_LT(z3[size_t(r)].held, z2[size_t(r)].held) << world << " ranks, rank " << r;
      ForecastRequest req;
      req.model = config();
      req.seq = kSeq;
      req.batch = kRows / world;
      req.loss_chunk_tokens = 512;
      req.profile = find_profile("h100_80gb");
      req.mirror = SimMirror::cpu;
      req.gpus = world;
      req.rank = r;
      Plan plan = Plan::keep_everything();
      plan.set_state_offloading("none", "test");
      req.plan = plan;
      req.zero_stage = 3;
      const Forecast f3 = forecast(req);
      ASSERT_TRUE(f3.fits) << f3.oom;
      EXPECT_EQ(f3.peak_bytes, z3[size_t(r)].peak) << world << " ranks, rank " << r;
      req.zero_stage = 2;
      EXPECT_EQ(forecast(req).peak_bytes, z2[size_t(r)].peak) << world << " ranks, rank " << r;
      // Mirroring cuda: the layers' matrices gathered (broadcasts of their bf16 bytes) on the collectives'
      // timeline: every layer in forward, and in backward all but the last two, which the two slots still hold
      // when backward starts; in place of stage 2's one broadcast of every matrix after the step.
      req.mirror = SimMirror::cuda;
      req.profile.nccl_latency_us = 0;
      const double busy2 = forecast(req).comm_busy_s;
      req.zero_stage = 3;
      const double busy3 = forecast(req).comm_busy_s;
      size_t matrices = 0;
      const int last_two = config().num_hidden_layers - 2;
      for (const Parameter& p : model.params())
        if (p.weights_sharded && LlamaModel::layer_of_param(p.name) < last_two) matrices += size_t(p.shape.numel()) * 2;
      const double gather_s = double(matrices) / (req.profile.nccl_busbw_gbps * 1e9);
      EXPECT_NEAR(busy3 - busy2, gather_s, 1e-3 * gather_s) << world << " ranks, rank " << r;
    }
  }
}

// A stage-3 checkpoint: the resumed run is bit-identical to the straight one, its weights file is stage 2's (and
// the final save's of strata-train: gather_masters, rank 0 writes), and stage 2 resumes it bit for bit too.
TEST(Zero3, CheckpointRoundTripAndStageTwoResumesIt) {
  for (int world : {2, 3}) {
    const std::string d3 = fresh_dir(fmt::format("w{}", world)), d2 = fresh_dir(fmt::format("w{}_z2", world));
    const std::vector<RankRun> s3 = ranks(RunSpec{world, 3, 1, Mode::save, d3, 2});
    const std::vector<RankRun> s2 = ranks(RunSpec{world, 2, 1, Mode::save, d2, 2});
    const std::string ck = fmt::format("{}/checkpoint-2", d3);
    ASSERT_EQ(s3[0].saved, ck);
    for (int r = 0; r < world; ++r)
      EXPECT_TRUE(fs::exists(fmt::format("{}/optimizer.rank-{}-of-{}.safetensors", ck, r, world))) << r;
    const std::string m3 = slurp(ck + "/model.safetensors"), m2 = slurp(s2[0].saved + "/model.safetensors");
    EXPECT_GT(m3.size(), 1000u);
    EXPECT_TRUE(m3 == m2) << world << " ranks: stage 3's model.safetensors differs from stage 2's";
    for (int stage : {3, 2}) {
      const std::vector<RankRun> res = ranks(RunSpec{world, stage, 1, Mode::resume, d3, 2});
      for (int r = 0; r < world; ++r) {
        const std::string what = fmt::format("{} ranks, resumed at stage {}, rank {}", world, stage, r);
        ASSERT_EQ(res[size_t(r)].losses.size(), size_t(kSteps - 2)) << what;
        EXPECT_EQ(std::memcmp(res[size_t(r)].losses.data(), s3[size_t(r)].losses.data() + 2, 4 * (kSteps - 2)), 0)
            << what;
      }
      const auto a = weights_of(s3), b = weights_of(res);
      for (size_t i = 0; i < a.size(); ++i)
        expect_bits(a[i], b[i], fmt::format("{} ranks, resumed at stage {}, parameter {}", world, stage, i));
    }
    // The final save: every rank gathers, rank 0 writes the whole model, stage 2's file byte for byte.
    const std::string f3 = fresh_dir(fmt::format("final{}", world)), f2 = fresh_dir(fmt::format("final{}_z2", world));
    const std::string a = slurp(ranks(RunSpec{world, 3, 1, Mode::straight, f3, 2})[0].saved);
    const std::string b = slurp(ranks(RunSpec{world, 2, 1, Mode::straight, f2, 2})[0].saved);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << world << " ranks: the final save differs from stage 2's";
  }
}

TEST(Zero3, UnsupportedCombinationsAreRefusedNamingTheSettings) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions paged;
  paged.page_layers = true;
  paged.zero = {3, 0, 2};
  std::string m = message([&] { LlamaModel model(*be, config(), paged); });
  EXPECT_NE(m.find("layer_weights: page (layer_offloading: true) with zero_stage 3"), std::string::npos) << m;
  ModelOptions frozen;
  frozen.train_base = false;
  frozen.train_norms = true;
  frozen.zero = {3, 1, 2};
  m = message([&] { LlamaModel model(*be, config(), frozen); });
  EXPECT_NE(m.find("zero_stage 3"), std::string::npos) << m;
  EXPECT_NE(m.find("train_base is false"), std::string::npos) << m;
  // (The state on the host or disk tier composes with every stage: zero_tiers_test.cpp.)
  // A gathering model without the trainer's communicator fails at the first gather, naming it.
  ModelOptions z3;
  z3.zero = {3, 0, 2};
  LlamaModel model(*be, config(), z3);
  m = message([&] { Trainer tr(*be, model, TrainOptions{}); });
  EXPECT_NE(m.find("zero_stage 3"), std::string::npos) << m;
  // One rank: stage 3 is the unsharded path (no pager).
  ModelOptions one;
  one.zero = {3, 0, 1};
  LlamaModel alone(*be, config(), one);
  EXPECT_EQ(alone.pager(), nullptr);
  // The key and the flag accept 3.
  EXPECT_EQ(parse_zero_stage(3, Origin::flag("zero-stage")), 3);
  TrainConfig tc;
  apply_yaml_text(tc, "zero_stage: 3\n", "z.yaml");
  EXPECT_EQ(tc.zero_stage, 3);
  m = message([&] { apply_yaml_text(tc, "zero_stage: 4\n", "z.yaml"); });
  EXPECT_NE(m.find("or 3 (layer weights too)"), std::string::npos) << m;
}
