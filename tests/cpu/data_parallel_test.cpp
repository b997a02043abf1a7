// Data parallel on the cpu communicator (ranks as threads, engine/comm.h): N ranks, each with its own
// backend and model and its slice of every global batch, against one rank training on the whole
// global batch. Same losses and weights to float rounding (the ranks' sums of the gradient are
// another summation order than one GEMM over all the rows), every rank bit-identical to the others,
// with clipping active on every step, gradient accumulation, unequal token counts and the state on
// the host tier.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <numeric>
#include <thread>

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

namespace {

constexpr int kSteps = 3, kRows = 4, kSeq = 16;

struct RankRun {
  std::vector<float> losses, norms;
  std::vector<std::vector<float>> weights;
  size_t peak = 0;  // the arena's peak over the steps
};

// One rank of `world` (comm null: alone, the whole batch): rows [rank * per, (rank + 1) * per) of each
// global batch, in `accum` micro-batches.
// ZeRO and the state's precision of a run (zero_stage 0: unsharded).
struct Sharding {
  int zero = 0;
  StateRecipe recipe;
};

RankRun train(Communicator* comm, int world, int rank, int accum, const char* state, DType reduce = DType::f32,
              Sharding sh = {}) {
  auto be = make_cpu_backend(size_t(64) << 20);
  Plan plan = Plan::keep_everything();
  plan.set_state_offloading(state, "test");
  ModelOptions mo;
  mo.state_plan = plan;
  mo.recipe = sh.recipe;
  mo.zero = {sh.zero, rank, world};
  LlamaModel model(*be, test_util::tiny_config(), mo);
  model.init_random(7);
  TrainOptions to = test_util::clipped_train_options();
  to.plan = plan;
  to.comm = comm;
  to.optimizer.reduce_dtype = reduce;
  Trainer tr(*be, model, to);
  TokenRows rows(synthetic_tokens(2000, test_util::tiny_config().vocab_size, 5), kSeq);
  const int per = kRows / world, per_micro = per / accum;
  RankRun out;
  for (int s = 0; s < kSteps; ++s) {
    std::vector<Batch> micro;
    // Row r of the global batch with its first 2r targets ignored (unequal token counts between ranks and
    // micro-batches).
    for (int m = 0; m < accum; ++m)
      micro.push_back(test_util::global_rows(rows, kSeq, kRows, s, rank * per + m * per_micro, per_micro, 2));
    const StepStats st = tr.step(micro, 1e-2f);
    out.losses.push_back(st.loss);
    out.norms.push_back(st.grad_norm);
    out.peak = std::max(out.peak, st.peak_device_bytes);
  }
  out.weights = test_util::model_weights(*be, model);
  return out;
}

std::vector<RankRun> train_ranks(int world, int accum, const char* state, DType reduce = DType::f32, Sharding sh = {}) {
  return test_util::run_rank_threads<RankRun>(
      world, [&](Communicator* comm, int r) { return train(comm, world, r, accum, state, reduce, sh); });
}

void expect_close(const RankRun& one, const RankRun& dp, const std::string& what) {
  ASSERT_EQ(one.losses.size(), dp.losses.size());
  for (size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(one.losses[s], dp.losses[s], 2e-6f * std::fabs(one.losses[s])) << what << " loss, step " << s;
    EXPECT_NEAR(one.norms[s], dp.norms[s], 1e-5f * one.norms[s]) << what << " norm, step " << s;
  }
  test_util::expect_weights_close(one.weights, dp.weights, what);
}

// One rank of `world`, each with kRows / world rows, keep-everything, mirroring the cpu backend.
ForecastRequest rank_forecast_request(int world = 2) {
  ForecastRequest r;
  r.model = test_util::tiny_config();
  r.seq = kSeq;
  r.batch = kRows / world;
  r.loss_chunk_tokens = 512;
  r.profile = find_profile("h100_80gb");
  r.mirror = SimMirror::cpu;
  r.gpus = world;
  Plan plan = Plan::keep_everything();
  plan.set_state_offloading("none", "test");
  r.plan = plan;
  return r;
}

// The tiny model's parameters' element counts (0: frozen), in the model's order (zero_owner's input).
std::vector<size_t> numel_of_tiny() {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, test_util::tiny_config(), ModelOptions{});
  std::vector<size_t> numel;
  for (const Parameter& p : model.params()) numel.push_back(p.trainable ? size_t(p.shape.numel()) : 0);
  return numel;
}

void expect_ranks_identical(const std::vector<RankRun>& runs, const std::string& what) {
  for (size_t r = 1; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].weights.size(), runs[0].weights.size());
    EXPECT_EQ(std::memcmp(runs[r].losses.data(), runs[0].losses.data(), runs[0].losses.size() * 4), 0)
        << what << ": rank " << r << "'s losses";
    for (size_t i = 0; i < runs[0].weights.size(); ++i)
      EXPECT_EQ(std::memcmp(runs[r].weights[i].data(), runs[0].weights[i].data(), runs[0].weights[i].size() * 4), 0)
          << what << ": rank " << r << ", parameter " << i;
  }
}

}  // namespace

TEST(DataParallel, RanksMatchOneRankOnTheGlobalBatch) {
  const RankRun one = train(nullptr, 1, 0, 1, "none");
  struct Case {
    int world, accum;
    const char* state;
  };
  for (const Case c : {Case{2, 1, "none"}, Case{4, 1, "none"}, Case{2, 2, "none"}, Case{2, 1, "optimizer"},
                       Case{2, 2, "master"}, Case{2, 1, "all"}}) {
    const std::string what = fmt::format("{} ranks, {} micro-batches, state on host: {}", c.world, c.accum, c.state);
    const std::vector<RankRun> runs = train_ranks(c.world, c.accum, c.state);
    expect_ranks_identical(runs, what);
    expect_close(one, runs[0], what);
  }
}

// grad_reduce_dtype: bf16: the ranks sum bf16 copies of their gradients. Every rank still ends
// bit-identical to the others; against one rank the gradients carry bf16 rounding (2^-9 relative per
// element and per rank), so the losses and norms agree loosely, and the weights within what Adam's
// lr-sized steps on those rounded gradients allow. The bf16 copies live one group at a time: the
// rank's peak is at least fp32's, and the forecast's equals the cpu rank's byte for byte.
TEST(DataParallel, Bf16ReduceKeepsRanksIdenticalAndCloseToOneRank) {
  const RankRun one = train(nullptr, 1, 0, 1, "none");
  const RankRun f32 = train_ranks(2, 1, "none")[0];
  for (const char* state : {"none", "optimizer"}) {
    const std::string what = fmt::format("bf16 reduce, 2 ranks, state on host: {}", state);
    const std::vector<RankRun> runs = train_ranks(2, 1, state, DType::bf16);
    expect_ranks_identical(runs, what);
    double moved = 0;  // the bf16 run must differ from fp32's: the narrowing took place
    for (size_t s = 0; s < one.losses.size(); ++s) {
      EXPECT_NEAR(one.losses[s], runs[0].losses[s], 1e-3f * std::fabs(one.losses[s])) << what << ", step " << s;
      // The first norm differs by the gradient's rounding only; later ones also by the weights that
      // Adam moved by ~lr wherever a small gradient's rounding flipped its sign.
      EXPECT_NEAR(one.norms[s], runs[0].norms[s], (s == 0 ? 4e-3f : 5e-2f) * one.norms[s]) << what << ", step " << s;
    }
    double worst = 0;
    for (size_t i = 0; i < one.weights.size(); ++i)
      for (size_t e = 0; e < one.weights[i].size(); ++e) {
        worst = std::max(worst, std::fabs(double(one.weights[i][e]) - runs[0].weights[i][e]));
        moved = std::max(moved, std::fabs(double(f32.weights[i][e]) - runs[0].weights[i][e]));
      }
    EXPECT_LT(worst, 3 * kSteps * 1e-2) << what << ": at most Adam's lr a step, with margin";
    EXPECT_GT(moved, 0.0) << what << ": bf16 sums gave fp32's weights bit for bit";
    if (std::string(state) == "none") {
      EXPECT_GE(runs[0].peak, f32.peak) << what;
    }
  }
  ForecastRequest r = rank_forecast_request();
  r.grad_reduce = DType::bf16;
  const Forecast fc = forecast(r);
  ASSERT_TRUE(fc.fits) << fc.oom;
  EXPECT_EQ(fc.peak_bytes, train_ranks(2, 1, "none", DType::bf16)[0].peak);
  r.mirror = SimMirror::cuda;
  r.gpus = 4;
  r.profile.nccl_latency_us = 0;  // the tiny model's collectives are latency otherwise
  const double busy_bf16 = forecast(r).comm_busy_s;
  r.grad_reduce = DType::f32;
  const double busy_f32 = forecast(r).comm_busy_s;
  EXPECT_GT(busy_bf16, 0.0);
  EXPECT_LT(busy_bf16, 0.55 * busy_f32) << "half the bytes on the links";
}

TEST(DataParallel, AccumulationWithHostGradientsIsRefusedNamingTheSetting) {
  try {
    train_ranks(2, 2, "all");
    FAIL() << "expected an UnsupportedError";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("state_offloading"), std::string::npos) << e.what();
  }
}

// One rank with a communicator of one is the single-process path, bit for bit.
TEST(DataParallel, AWorldOfOneIsBitIdenticalToNoCommunicator) {
  CpuGroup group(1, 10);
  auto comm = make_cpu_communicator(group, 0);
  const RankRun a = train(nullptr, 1, 0, 1, "none");
  const RankRun b = train(comm.get(), 1, 0, 1, "none");
  expect_ranks_identical({a, b}, "world of one");
}

// strata-plan --gpus: one rank's forecast. Its peak is the rank's on the cpu backend, byte for byte
// (collectives allocate nothing), and mirroring cuda the all-reduces take time on their own timeline.
TEST(DataParallel, TheForecastIsOneRanksPeakAndTheCollectivesTakeTime) {
  ForecastRequest r = rank_forecast_request();
  const Forecast two = forecast(r);
  ASSERT_TRUE(two.fits) << two.oom;
  const std::vector<RankRun> runs = train_ranks(2, 1, "none");
  EXPECT_EQ(two.peak_bytes, runs[0].peak);
  r.gpus = 1;
  EXPECT_EQ(forecast(r).peak_bytes, two.peak_bytes);
  r.mirror = SimMirror::cuda;
  const Forecast one_cuda = forecast(r);
  r.gpus = 4;
  const Forecast four_cuda = forecast(r);
  EXPECT_EQ(one_cuda.comm_busy_s, 0.0);
  EXPECT_GT(four_cuda.comm_busy_s, 0.0);
  EXPECT_GE(four_cuda.step_s, one_cuda.step_s);
  EXPECT_NEAR(four_cuda.tokens_per_s, 4.0 * double(r.batch) * r.seq / four_cuda.step_s, 1e-6 * four_cuda.tokens_per_s);
  r.gpus = 0;
  EXPECT_THROW(forecast(r), ConfigError);
}

// ZeRO-1 (model/llama/zero.h): owners by greedy balance of element counts, the same on every call; every
// parameter with state owned exactly once, none without; the largest first onto the least loaded.
TEST(Zero, OwnersAreBalancedDeterministicAndCoverEveryParameterOnce) {
  const std::vector<size_t> numel = {100, 7, 0, 50, 50, 30, 20, 7};
  const std::vector<int> own = zero_owner(numel, 2);
  EXPECT_EQ(own, zero_owner(numel, 2));
  // By hand, largest first (ties by index): 100 -> 0, 50 -> 1, 50 -> 1, 30 -> 0 (a 100 : 100 tie goes
  // to rank 0), 20 -> 1, 7 -> 1 (130 : 120), 7 -> 1 (130 : 127); loads 130 : 134.
  EXPECT_EQ(own, (std::vector<int>{0, 1, -1, 1, 1, 0, 1, 1}));
  const io::LlamaConfig cfg = test_util::tiny_config();
  std::vector<size_t> sizes;
  for (auto& [name, shape] : llama_weight_shapes(cfg)) sizes.push_back(size_t(shape.numel()));
  for (int world : {1, 2, 3, 4, 7}) {
    const std::vector<int> o = zero_owner(sizes, world);
    ASSERT_EQ(o.size(), sizes.size());
    std::vector<size_t> load(size_t(world), 0);
    size_t biggest = 0, total = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      ASSERT_GE(o[i], 0) << "parameter " << i;
      ASSERT_LT(o[i], world) << "parameter " << i;
      load[size_t(o[i])] += sizes[i];
      biggest = std::max(biggest, sizes[i]);
      total += sizes[i];
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_EQ(std::accumulate(load.begin(), load.end(), size_t(0)), total);
    // Greedy largest-first: the spread is at most one parameter's size.
    EXPECT_LE(*hi - *lo, biggest) << world << " ranks";
  }
  EXPECT_THROW(zero_owner(sizes, 0), ConfigError);
}

// zero_owner places each parameter, largest first, on the first least loaded rank: the same owners as a scan of
// every rank's load, for any rank count (more ranks than parameters too), found without walking the ranks.
TEST(DataParallel, ZeroOwnersMatchAScanOfEveryRank) {
  auto scan = [](const std::vector<size_t>& numel, int world) {
    std::vector<size_t> order(numel.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numel[a] > numel[b]; });
    std::vector<size_t> load(size_t(world), 0);
    std::vector<int> owner(numel.size(), -1);
    for (size_t i : order) {
      if (numel[i] == 0) continue;
      const size_t r = size_t(std::min_element(load.begin(), load.end()) - load.begin());
      owner[i] = int(r);
      load[r] += numel[i];
    }
    return owner;
  };
  uint64_t x = 12345;
  auto next = [&] { return x = x * 6364136223846793005ULL + 1442695040888963407ULL, x >> 33; };
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> numel(size_t(1 + next() % 60));
    for (auto& n : numel) n = next() % 4 == 0 ? 0 : size_t(1 + next() % (trial % 2 ? 8 : 100000));  // ties too
    for (int world : {1, 2, 3, 7, 16, 59, 64, 1000})
      EXPECT_EQ(zero_owner(numel, world), scan(numel, world)) << "trial " << trial << ", " << world << " ranks";
  }
  const std::vector<size_t> two{5, 3};
  EXPECT_EQ(zero_owner(two, 1 << 20), (std::vector<int>{0, 1}));  // the rest own nothing
}

// ZeRO-1 against ZeRO-0 over the same ranks: the same arithmetic on the owner and exact copies
// elsewhere, so losses, norms and weights are bit-identical (clipping on every step), with gradient
// accumulation and every moment precision.
TEST(Zero, StageOneIsBitIdenticalToStageZero) {
  struct Case {
    int world, accum;
    StateRecipe recipe;
  };
  const StateRecipe fp32{}, no_master{MasterWeights::none, OptimizerState::fp32},
      bf16m{MasterWeights::fp32, OptimizerState::bf16}, q8{MasterWeights::fp32, OptimizerState::q8};
  for (const Case c : {Case{2, 1, fp32}, Case{4, 1, fp32}, Case{2, 2, fp32}, Case{2, 1, no_master}, Case{2, 1, bf16m},
                       Case{4, 1, q8}}) {
    const std::string what = fmt::format("{} ranks, {} micro-batches, {} master, {} moments", c.world, c.accum,
                                         master_weights_name(c.recipe.master), optimizer_state_name(c.recipe.moments));
    const std::vector<RankRun> z0 = train_ranks(c.world, c.accum, "none", DType::f32, {0, c.recipe});
    const std::vector<RankRun> z1 = train_ranks(c.world, c.accum, "none", DType::f32, {1, c.recipe});
    expect_ranks_identical(z1, what + ", zero 1");
    expect_ranks_identical({z0[0], z1[0]}, what + ", zero 1 against zero 0");
    EXPECT_EQ(std::memcmp(z0[0].norms.data(), z1[0].norms.data(), z0[0].norms.size() * 4), 0) << what;
    for (const RankRun& r : z1) EXPECT_LT(r.peak, z0[0].peak) << what;
  }
}

// Each rank's peak falls by at least the state of the parameters it does not own (fp32 m and v on
// cpu: 8 bytes an element, the weights being the master there), and the forecast of rank 0 (sim,
// mirroring cpu) is rank 0's cpu peak byte for byte.
TEST(Zero, EachRankSavesTheUnownedStateAndTheForecastMatches) {
  const int world = 2;
  const std::vector<RankRun> z0 = train_ranks(world, 1, "none");
  const std::vector<RankRun> z1 = train_ranks(world, 1, "none", DType::f32, {1, {}});
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  LlamaModel model(*be, test_util::tiny_config(), mo);
  std::vector<size_t> numel;
  for (const Parameter& p : model.params()) numel.push_back(p.trainable ? size_t(p.shape.numel()) : 0);
  const std::vector<int> own = zero_owner(numel, world);
  for (int r = 0; r < world; ++r) {
    size_t unowned = 0;
    for (size_t i = 0; i < numel.size(); ++i)
      if (own[i] != r) unowned += 2 * numel[i] * sizeof(float);
    ASSERT_GT(unowned, 0u);
    EXPECT_LE(z1[size_t(r)].peak + unowned, z0[size_t(r)].peak) << "rank " << r;
  }
  ForecastRequest req = rank_forecast_request(world);
  req.zero_stage = 1;
  const Forecast fc = forecast(req);
  ASSERT_TRUE(fc.fits) << fc.oom;
  EXPECT_EQ(fc.peak_bytes, z1[0].peak);
  req.zero_stage = 0;
  EXPECT_EQ(forecast(req).peak_bytes, z0[0].peak);
  // Mirroring cuda, the broadcasts take time on the collectives' timeline.
  req.mirror = SimMirror::cuda;
  req.profile.nccl_latency_us = 0;
  const double busy0 = forecast(req).comm_busy_s;
  req.zero_stage = 1;
  EXPECT_GT(forecast(req).comm_busy_s, busy0);
  // One rank: stage 1 is a no-op.
  req.gpus = 1;
  req.mirror = SimMirror::cpu;
  const size_t one_z1 = forecast(req).peak_bytes;
  req.zero_stage = 0;
  EXPECT_EQ(one_z1, forecast(req).peak_bytes);
}

TEST(Zero, UnsupportedCombinationsAreRefusedNamingTheSettings) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // Host-tier state is not refused: each rank's share takes the tier (zero_tiers_test.cpp checks the results).
  std::string m = message([] { train_ranks(2, 1, "optimizer", DType::f32, {1, {}}); });
  EXPECT_EQ(m, "no error");
  auto be = make_cpu_backend(size_t(64) << 20);
  // LoRA.
  ModelOptions lora;
  lora.train_base = false;
  lora.lora.rank = 4;
  lora.zero = {1, 0, 2};
  m = message([&] { LlamaModel model(*be, test_util::tiny_config(), lora); });
  EXPECT_NE(m.find("zero_stage 1"), std::string::npos) << m;
  EXPECT_NE(m.find("LoRA"), std::string::npos) << m;
  // Stage 2 refuses LoRA too, naming stage 2 (and takes the host tier).
  m = message([] { train_ranks(2, 1, "master", DType::f32, {2, {}}); });
  EXPECT_EQ(m, "no error");
  lora.zero = {2, 1, 2};
  m = message([&] { LlamaModel model(*be, test_util::tiny_config(), lora); });
  EXPECT_NE(m.find("zero_stage 2 with LoRA"), std::string::npos) << m;
  // Stages outside 0..3 (stage 3's own refusals: zero3_test.cpp).
  m = message([] { parse_zero_stage(5, Origin::flag("zero-stage")); });
  EXPECT_NE(m.find("--zero-stage"), std::string::npos) << m;
  EXPECT_THROW(parse_zero_stage(5, Origin::flag("zero-stage")), ConfigError);
  EXPECT_THROW(parse_zero_stage(-1, Origin::flag("zero-stage")), ConfigError);
  EXPECT_EQ(parse_zero_stage(1, Origin::flag("zero-stage")), 1);
  EXPECT_EQ(parse_zero_stage(2, Origin::flag("zero-stage")), 2);
  TrainConfig tc;
  EXPECT_EQ(tc.zero_stage, 0);
  apply_yaml_text(tc, "zero_stage: 1\n", "z.yaml");
  EXPECT_EQ(tc.zero_stage, 1);
  apply_yaml_text(tc, "zero_stage: 2\n", "z.yaml");
  EXPECT_EQ(tc.zero_stage, 2);
  m = message([&] { apply_yaml_text(tc, "zero_stage: 4\n", "z.yaml"); });
  EXPECT_NE(m.find("z.yaml"), std::string::npos) << m;
  EXPECT_NE(m.find("2 (gradients too) or 3 (layer weights too)"), std::string::npos) << m;
  // A sharded model with a trainer on another communicator (or none).
  ModelOptions z1;
  z1.zero = {1, 0, 2};
  LlamaModel model(*be, test_util::tiny_config(), z1);
  m = message([&] { Trainer tr(*be, model, TrainOptions{}); });
  EXPECT_NE(m.find("zero_stage 1"), std::string::npos) << m;
  EXPECT_NE(m.find("communicator is none"), std::string::npos) << m;
  // A checkpoint of a shard without the other ranks (zero_checkpoint_test: with them).
  m = message([&] { save_checkpoint(::testing::TempDir() + "/zero_ckpt", *be, model, CheckpointState{}, {}); });
  EXPECT_NE(m.find("zero_stage 1"), std::string::npos) << m;
  EXPECT_NE(m.find("every rank"), std::string::npos) << m;
}

// ZeRO-2 (model/llama/zero.h) against ZeRO-0 over the same ranks, one micro-batch a step: the owner's reduce is
// the all-reduce's rank-order sum, and the global norm is summed from per-parameter parts in backward's
// order with the single-rank arithmetic, so losses, norms (clipping on every step) and weights are
// bit-identical, for fp32 and bf16 sums of fp32 gradients and every moment precision; every rank ends
// with the same weights; each rank's peak is below stage 1's.
TEST(Zero, StageTwoIsBitIdenticalToStageZero) {
  struct Case {
    int world;
    StateRecipe recipe;
    DType reduce;
  };
  const StateRecipe fp32{}, no_master{MasterWeights::none, OptimizerState::fp32},
      q8{MasterWeights::fp32, OptimizerState::q8};
  for (const Case c : {Case{2, fp32, DType::f32}, Case{4, fp32, DType::f32}, Case{2, no_master, DType::f32},
                       Case{4, q8, DType::f32}, Case{2, fp32, DType::bf16}, Case{4, fp32, DType::bf16}}) {
    const std::string what =
        fmt::format("{} ranks, {} master, {} moments, {} sums", c.world, master_weights_name(c.recipe.master),
                    optimizer_state_name(c.recipe.moments), dtype_name(c.reduce));
    const std::vector<RankRun> z0 = train_ranks(c.world, 1, "none", c.reduce, {0, c.recipe});
    const std::vector<RankRun> z1 = train_ranks(c.world, 1, "none", c.reduce, {1, c.recipe});
    const std::vector<RankRun> z2 = train_ranks(c.world, 1, "none", c.reduce, {2, c.recipe});
    expect_ranks_identical(z2, what + ", zero 2");
    expect_ranks_identical({z0[0], z2[0]}, what + ", zero 2 against zero 0");
    EXPECT_EQ(std::memcmp(z0[0].norms.data(), z2[0].norms.data(), z0[0].norms.size() * 4), 0) << what;
    EXPECT_GT(z0[0].norms[0], 0.05f) << what << ": clipping is active";
    for (size_t r = 0; r < z2.size(); ++r) EXPECT_LT(z2[r].peak, z1[r].peak) << what << ", rank " << r;
  }
  // And against one rank on the global batch: float rounding (the ranks sum in another order).
  expect_close(train(nullptr, 1, 0, 1, "none"), train_ranks(2, 1, "none", DType::f32, {2, {}})[0], "zero 2, 2 ranks");
}

// Gradient accumulation with ZeRO-2: each micro-batch's gradients are reduced into the owner's accumulating
// buffer (a rank's transient gradient never outlives one backward), so the sum runs in another order than
// stage 0's (each rank's micro-batches first): equal to float rounding (expect_close's tolerances), against
// stage 0 on the same ranks and against one rank on the global batch; every rank still bit-identical.
TEST(Zero, StageTwoAccumulatesMicroBatchesIntoTheOwners) {
  const RankRun one = train(nullptr, 1, 0, 1, "none");
  for (int world : {2, 4}) {
    const int accum = kRows / world;
    const std::string what = fmt::format("zero 2, {} ranks, {} micro-batches", world, accum);
    const std::vector<RankRun> z0 = train_ranks(world, accum, "none");
    const std::vector<RankRun> z2 = train_ranks(world, accum, "none", DType::f32, {2, {}});
    expect_ranks_identical(z2, what);
    expect_close(z0[0], z2[0], what + " against zero 0");
    expect_close(one, z2[0], what + " against one rank");
    for (size_t r = 0; r < z2.size(); ++r) EXPECT_LT(z2[r].peak, z0[r].peak) << what << ", rank " << r;
  }
  // bf16 sums of fp32 gradients with accumulation: each micro-batch's reduce rounds the owner's running sum to
  // bf16 too, so loosely (as Bf16ReduceKeepsRanksIdenticalAndCloseToOneRank), the ranks still identical.
  const std::vector<RankRun> b = train_ranks(2, 2, "none", DType::bf16, {2, {}});
  expect_ranks_identical(b, "zero 2, bf16 sums, 2 micro-batches");
  for (size_t s = 0; s < one.losses.size(); ++s)
    EXPECT_NEAR(one.losses[s], b[0].losses[s], 1e-3f * std::fabs(one.losses[s])) << "bf16 sums, step " << s;
}

// A rank's persistent gradients are its own parameters' only: the model alone (before any step) holds
// exactly the unowned gradients' blocks less than stage 1's. Its peak (over steps with transient gradients)
// is what the forecast of that rank (sim mirroring cpu, the same arena calls) says, byte for byte, on every
// rank; one rank is the unsharded path; mirroring cuda the reduces take time (at least a reduce of every
// gradient at the profile's bus bandwidth, and less than stage 1's all-reduces when N > 2).
TEST(Zero, StageTwoHoldsOnlyOwnedGradientsAndTheForecastMatchesEveryRank) {
  auto align = [](size_t b) { return (b + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign; };
  for (int world : {2, 4}) {
    const std::vector<size_t> numel = numel_of_tiny();
    const std::vector<int> own = zero_owner(numel, world);
    const std::vector<RankRun> z2 = train_ranks(world, 1, "none", DType::f32, {2, {}});
    for (int r = 0; r < world; ++r) {
      size_t unowned = 0;
      for (size_t i = 0; i < numel.size(); ++i)
        if (numel[i] && own[i] != r) unowned += align(numel[i] * sizeof(float));
      ASSERT_GT(unowned, 0u);
      size_t held[2];
      for (int stage : {1, 2}) {
        auto be = make_cpu_backend(size_t(64) << 20);
        ModelOptions mo;
        mo.zero = {stage, r, world};
        LlamaModel model(*be, test_util::tiny_config(), mo);
        held[stage - 1] = be->arena().in_use();
        for (const Parameter& p : model.params())
          EXPECT_EQ(p.grad.allocated(), p.trainable && (stage == 1 || p.owner == r)) << p.name << ", rank " << r;
      }
      EXPECT_EQ(held[0] - held[1], unowned) << world << " ranks, rank " << r;
      ForecastRequest req = rank_forecast_request(world);
      req.zero_stage = 2;
      req.rank = r;
      const Forecast fc = forecast(req);
      ASSERT_TRUE(fc.fits) << fc.oom;
      EXPECT_EQ(fc.peak_bytes, z2[size_t(r)].peak) << world << " ranks, rank " << r;
    }
  }
  ForecastRequest req = rank_forecast_request(4);
  req.rank = 4;
  EXPECT_THROW(forecast(req), ConfigError);
  // One rank: stage 2 is the unsharded path.
  req = rank_forecast_request(1);
  req.gpus = 1;
  req.zero_stage = 2;
  const size_t one_z2 = forecast(req).peak_bytes;
  req.zero_stage = 0;
  EXPECT_EQ(one_z2, forecast(req).peak_bytes);
  // Mirroring cuda: the per-group reduces (and the broadcasts) on the collectives' timeline.
  req = rank_forecast_request(4);
  req.mirror = SimMirror::cuda;
  req.profile.nccl_latency_us = 0;
  req.zero_stage = 2;
  const Forecast f2 = forecast(req);
  req.zero_stage = 1;
  const Forecast f1 = forecast(req);
  size_t grad_bytes = 0;
  for (size_t n : numel_of_tiny()) grad_bytes += n * sizeof(float);
  const double reduce_s = double(grad_bytes) / (req.profile.nccl_busbw_gbps * 1e9);
  EXPECT_GE(f2.comm_busy_s, reduce_s);
  EXPECT_LT(f2.comm_busy_s, f1.comm_busy_s) << "4 ranks: a reduce moves S, an all-reduce 2 S (N-1)/N";
  EXPECT_LT(f2.peak_bytes, f1.peak_bytes);
}
