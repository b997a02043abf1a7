// Sequence tiling of the MLP (ModelOptions::mlp_tiles, ops::mlp_tiled) on the cpu backend, on odd
// shapes (39 rows: tiles that do not divide them, a tile per row, more tiles than rows):
// - the loss and every gradient outside the MLP's projections are bit-identical to the untiled
//   graph (the forward and the input gradient are row by row, in the same order);
// - the gate/up/down weight and bias gradients, whose sums over rows the tiles split, agree within
//   kSplitSumTol of the gradient's largest magnitude;
// - frozen-base and adapter training (no MLP weight gradient) are bit-identical outright;
// - every memory plan, and state on the host, is bit-identical to tiled keep-everything;
// - the sim forecasts the tiled step's peaks and allocation schedule byte for byte;
// - the planner tiles only when nothing fits untiled, and its plan fits on cpu;
// - bad values are refused naming the key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/backend.h"
#include "engine/ops.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

// Tiling splits each MLP weight gradient's sum over rows into per-tile partial sums added in fp32:
// the difference is a few roundings of the sum, far below this fraction of its largest element.
constexpr double kSplitSumTol = 1e-5;
constexpr int kB = 3, kT = 13;  // 39 rows

io::LlamaConfig odd_config(bool biases) {
  io::LlamaConfig c = test_util::tiny_config();
  c.intermediate_size = 52;
  c.qkv_bias = c.o_bias = c.mlp_bias = biases;
  return c;
}

bool in_mlp(const std::string& name) {
  return name.find(".mlp.") != std::string::npos;
}

struct Grads {
  float loss = 0;
  std::vector<std::string> names;
  std::vector<std::vector<float>> g;
  std::vector<ArenaEvent> events;
};

Grads gradients(const io::LlamaConfig& cfg, ModelOptions mo, const Plan& plan = Plan::keep_everything()) {
  auto be = make_cpu_backend(size_t(64) << 20);
  be->arena().set_logging(true);
  LlamaModel model(*be, cfg, mo);
  model.init_random(11);
  TrainOptions to;
  to.plan = plan;
  to.tiers.offload_dir = ::testing::TempDir();
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, cfg.vocab_size, 3), kB, kT);
  Grads out;
  out.loss = tr.compute_gradients(data.next());
  for (auto& p : model.params()) {
    if (!p.trainable) continue;
    out.names.push_back(p.name);
    out.g.emplace_back(size_t(p.shape.numel()));
    be->download_f32(out.g.back().data(), p.grad_view());
  }
  out.events = be->arena().events();
  return out;
}

// Blocks allocated under `tag` in the log.
int allocations(const std::vector<ArenaEvent>& ev, const std::string& tag) {
  return int(std::count_if(ev.begin(), ev.end(), [&](const ArenaEvent& e) { return e.delta > 0 && e.tag == tag; }));
}

TEST(MlpTiles, TileRowsCoverEveryRowOnce) {
  for (int64_t n : {1, 5, 38, 39, 64, 65, 130, 1000, 4095, 262144})
    for (int tiles : {1, 2, 3, 7, 8, 64, 100}) {
      const int64_t rows = ops::mlp_tile_rows(n, tiles);
      const int count = ops::mlp_tile_count(n, tiles);
      EXPECT_LE(count, tiles) << n << " " << tiles;
      EXPECT_GE(rows * count, n) << n << " " << tiles;        // every row in a tile
      EXPECT_LT(rows * (count - 1), n) << n << " " << tiles;  // no empty tile
      if (rows > 64 && rows < n) {                            // GEMM-friendly tiles; one tile is all the rows
        EXPECT_EQ(rows % 64, 0) << n << " " << tiles;
      }
      if (n % (64 * int64_t(tiles)) == 0) {
        EXPECT_EQ(count, tiles) << n << " " << tiles;
      }
    }
}

TEST(MlpTiles, GradientsMatchUntiledOnOddShapes) {
  for (bool biases : {false, true}) {
    const io::LlamaConfig cfg = odd_config(biases);
    const Grads ref = gradients(cfg, {});
    EXPECT_GT(allocations(ref.events, "L0.mlp.gate"), 0);
    for (int tiles : {2, 3, 5, 39, 64}) {
      ModelOptions mo;
      mo.mlp_tiles = tiles;
      const Grads got = gradients(cfg, mo);
      const std::string what = fmt::format("biases {} tiles {}", biases, tiles);
      // Forward runs each tile once, backward recomputes it once; no untiled [N, F] block exists.
      const int count = ops::mlp_tile_count(kB * kT, tiles);
      EXPECT_EQ(allocations(got.events, "L0.mlp.gate.tile"), 2 * count) << what;
      EXPECT_EQ(allocations(got.events, "L0.mlp.gate"), 0) << what;
      EXPECT_EQ(std::memcmp(&got.loss, &ref.loss, 4), 0) << what << ": " << got.loss << " vs " << ref.loss;
      ASSERT_EQ(got.names, ref.names);
      int split = 0;
      for (size_t i = 0; i < ref.g.size(); ++i) {
        const auto &a = got.g[i], &b = ref.g[i];
        if (!in_mlp(ref.names[i])) {
          EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << what << ": " << ref.names[i];
          continue;
        }
        double worst = 0, scale = 0;
        for (size_t k = 0; k < b.size(); ++k) {
          worst = std::max(worst, std::fabs(double(a[k]) - b[k]));
          scale = std::max(scale, std::fabs(double(b[k])));
        }
        EXPECT_GT(scale, 0) << what << ": " << ref.names[i];
        EXPECT_LE(worst, kSplitSumTol * scale) << what << ": " << ref.names[i];
        split++;
      }
      EXPECT_EQ(split, cfg.num_hidden_layers * (biases ? 6 : 3)) << what;
    }
  }
}

struct Steps {
  std::vector<float> losses, norms;
  std::string weights;  // the saved model.safetensors
};

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Three steps with clipping on; the weights as saved (masters read wherever they live).
Steps train(const io::LlamaConfig& cfg, ModelOptions mo, const Plan& plan, const std::string& tag) {
  const fs::path dir = fs::path(::testing::TempDir()) / fmt::format("strata-mlp-tiles-{}-{}", tag, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto be = make_cpu_backend(size_t(64) << 20);
  mo.state_plan = plan;
  LlamaModel model(*be, cfg, mo);
  model.init_random(11);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.max_grad_norm = 0.05f;
  to.plan = plan;
  to.tiers.offload_dir = dir.string();
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, cfg.vocab_size, 3), kB, kT);
  Steps r;
  for (int s = 0; s < 3; ++s) {
    const StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
  }
  if (mo.lora.enabled())
    model.save_lora((dir / "saved").string(), "base");
  else
    model.save((dir / "saved").string());
  r.weights =
      file_bytes((dir / "saved" / (mo.lora.enabled() ? "adapter_model.safetensors" : "model.safetensors")).string());
  EXPECT_FALSE(r.weights.empty()) << tag;
  fs::remove_all(dir);
  return r;
}

void expect_identical(const Steps& a, const Steps& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], 4), 0) << what << ": loss of step " << i;
    EXPECT_EQ(std::memcmp(&a.norms[i], &b.norms[i], 4), 0) << what << ": grad norm of step " << i;
  }
  EXPECT_TRUE(a.weights == b.weights) << what << ": the weights differ";
}

TEST(MlpTiles, FrozenBaseAndAdaptersAreBitIdenticalToUntiled) {
  const io::LlamaConfig cfg = odd_config(true);
  ModelOptions frozen;
  frozen.train_base = false;
  frozen.train_norms = true;
  ModelOptions lora;
  lora.train_base = false;
  lora.lora.rank = 2;  // attention targets: the tiled MLP has no adapters
  for (const auto& [name, mo] : {std::pair{"frozen", frozen}, std::pair{"lora", lora}}) {
    ModelOptions tiled = mo;
    tiled.mlp_tiles = 4;
    for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1)})
      expect_identical(train(cfg, mo, plan, name), train(cfg, tiled, plan, std::string(name) + "-tiled"),
                       fmt::format("{} {} tiled", name, plan.preset));
  }
}

TEST(MlpTiles, EveryPlanIsBitIdenticalToTiledKeepEverything) {
  const io::LlamaConfig cfg = odd_config(true);
  ModelOptions mo;
  mo.mlp_tiles = 3;
  const Steps keep = train(cfg, mo, Plan::keep_everything(), "keep");
  std::vector<Plan> plans = {Plan::gradient_checkpointing(1),
                             Plan::gradient_checkpointing(2),
                             Plan::selective_recompute(),
                             Plan::hidden_states(),
                             Plan::activation_offloading(Decision::host),
                             Plan::activation_offloading(Decision::disk)};
  for (const char* level : {"optimizer", "all"}) {
    Plan p = Plan::gradient_checkpointing(1);
    p.set_state_offloading(level, "test");
    plans.push_back(p);
  }
  // Random decisions over the tiled model's own slot classes (no gate, up or act among them).
  std::vector<std::string> classes;
  {
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel model(*be, cfg, mo);
    Trainer tr(*be, model, {});
    for (const PlanRow& row : tr.plan_table(kB, kT))
      if (row.cls.rfind("L*.", 0) == 0) classes.push_back(row.cls.substr(3));
  }
  for (const char* gone : {"mlp.gate", "mlp.up", "mlp.act"})
    EXPECT_EQ(std::find(classes.begin(), classes.end(), gone), classes.end()) << gone;
  EXPECT_NE(std::find(classes.begin(), classes.end(), "mlp_norm.out"), classes.end());
  const Decision all[] = {Decision::keep, Decision::recompute, Decision::host, Decision::disk};
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    Rng rng(seed * 17);
    Plan p;
    p.preset = fmt::format("random {}", seed);
    for (int l = 0; l < cfg.num_hidden_layers; ++l)
      for (const std::string& c : classes) p.add(fmt::format("L{}.{}", l, c), all[rng.below(4)]);
    plans.push_back(p);
  }
  for (const Plan& p : plans) expect_identical(keep, train(cfg, mo, p, "plan"), p.preset + " + " + p.state_preset);
  // Against untiled: the first step's loss bit for bit; later ones moved by the split weight
  // gradients, within the same tolerance.
  const Steps untiled = train(cfg, {}, Plan::keep_everything(), "untiled");
  EXPECT_EQ(std::memcmp(&untiled.losses[0], &keep.losses[0], 4), 0);
  for (size_t i = 1; i < keep.losses.size(); ++i)
    EXPECT_NEAR(keep.losses[i], untiled.losses[i], kSplitSumTol * std::fabs(untiled.losses[i])) << "step " << i;
}

// Every plan family, each tier, the three training modes, paged weights, with and without biases.
struct TiledCase {
  Plan plan;
  TrainMode mode;
  bool paged;
  bool biases;
};
std::vector<TiledCase> tiled_cases() {
  Plan state_all = Plan::gradient_checkpointing(1);
  state_all.set_state_offloading("all", "test");
  return {{Plan::keep_everything(), TrainMode::full, false, true},
          {Plan::gradient_checkpointing(1), TrainMode::full, false, false},
          {Plan::gradient_checkpointing(2), TrainMode::full, false, true},
          {Plan::selective_recompute(), TrainMode::full, false, false},
          {Plan::hidden_states(), TrainMode::full, false, true},
          {Plan::activation_offloading(Decision::host), TrainMode::full, false, false},
          {Plan::activation_offloading(Decision::disk), TrainMode::full, false, true},
          {state_all, TrainMode::full, false, false},
          {Plan::selective_recompute(), TrainMode::frozen, false, true},
          {Plan::gradient_checkpointing(1), TrainMode::lora, true, false}};
}

TEST(MlpTiles, SimForecastsTheTiledPeaksAndScheduleByteForByte) {
  for (int tiles : {3, 64}) {
    for (const auto& [plan, mode, paged, biases] : tiled_cases()) {
      ForecastRequest r = sim_twin::tiny_request(plan, mode);
      r.model = odd_config(biases);
      r.plan.layer_weights = paged ? Decision::page : Decision::keep;
      r.mlp_tiles = tiles;
      const std::string what = fmt::format("{} ({}), {} tiles", plan.preset, train_mode_name(mode), tiles);
      const Forecast f = forecast(r);
      ASSERT_TRUE(f.fits) << what << ": " << f.oom;
      const sim_twin::CpuStep cpu = sim_twin::cpu_step(r, sim_twin::kBudget, plan);
      ASSERT_TRUE(cpu.fits) << what;
      EXPECT_EQ(f.peak_bytes, cpu.peak) << what;
      EXPECT_EQ(f.high_water_bytes, cpu.high_water) << what;
      EXPECT_EQ(f.peak_host_bytes, cpu.host_peak) << what;
      EXPECT_EQ(f.peak_disk_bytes, cpu.disk_peak) << what;
      ASSERT_EQ(f.events.size(), cpu.events.size()) << what;
      for (size_t i = 0; i < f.events.size(); ++i) {
        ASSERT_EQ(f.events[i].tag, cpu.events[i].tag) << what << " event " << i;
        ASSERT_EQ(f.events[i].delta, cpu.events[i].delta) << what << " event " << i;
      }
      EXPECT_GT(allocations(cpu.events, "L1.mlp.act.tile"), 0) << what;
    }
  }
}

// Request r forecast twice: detailed (every allocation logged, so every tile run) and as a planner's search asks
// (the middle tiles repeated). Every figure of the two must agree to the bit; returns the repeated one.
Forecast expect_repeats_exact(ForecastRequest r, const std::string& what) {
  r.detail = true;
  const Forecast run = forecast(r);
  r.detail = false;
  const Forecast rep = forecast(r);
  EXPECT_TRUE(run.fits && rep.fits) << what << ": " << run.oom << rep.oom;
  EXPECT_EQ(run.repeated_blocks, 0) << what;
  EXPECT_EQ(rep.step_s, run.step_s) << what;
  EXPECT_EQ(rep.forward_s, run.forward_s) << what;
  EXPECT_EQ(rep.backward_s, run.backward_s) << what;
  EXPECT_EQ(rep.optimizer_s, run.optimizer_s) << what;
  EXPECT_EQ(rep.recompute_s, run.recompute_s) << what;
  EXPECT_EQ(rep.first_step_extra_s, run.first_step_extra_s) << what;
  EXPECT_EQ(rep.copy_wait_s, run.copy_wait_s) << what;
  EXPECT_EQ(rep.copy_busy_s, run.copy_busy_s) << what;
  EXPECT_EQ(rep.disk_wait_s, run.disk_wait_s) << what;
  EXPECT_EQ(rep.comm_busy_s, run.comm_busy_s) << what;
  EXPECT_EQ(rep.comm_wait_s, run.comm_wait_s) << what;
  EXPECT_EQ(rep.kernels, run.kernels) << what;
  EXPECT_EQ(rep.time_by_op, run.time_by_op) << what;
  EXPECT_EQ(rep.peak_bytes, run.peak_bytes) << what;
  EXPECT_EQ(rep.high_water_bytes, run.high_water_bytes) << what;
  EXPECT_EQ(rep.peak_host_bytes, run.peak_host_bytes) << what;
  EXPECT_EQ(rep.peak_disk_bytes, run.peak_disk_bytes) << what;
  return rep;
}

// A planner's forecasts apply the middle tiles of a tiled MLP from one tile's record (Backend::begin_repeat); a
// detailed forecast logs every allocation and so runs every tile. The two agree to the bit: the clock, each phase,
// every sum and every tier's peak, on both mirrors, at tile counts where 5 and 35 tiles are repeated.
TEST(MlpTiles, RepeatedTilesForecastExactlyAsRunTiles) {
  for (SimMirror mirror : {SimMirror::cpu, SimMirror::cuda}) {
    for (int tiles : {8, 64}) {
      for (const auto& [plan, mode, paged, biases] : tiled_cases()) {
        ForecastRequest r =
            mirror == SimMirror::cpu ? sim_twin::tiny_request(plan, mode) : sim_twin::tiny_cuda_request(plan, mode);
        r.model = odd_config(biases);
        r.plan.layer_weights = paged ? Decision::page : Decision::keep;
        r.mlp_tiles = tiles;
        const std::string what = fmt::format("{} ({}), {} tiles, mirror {}", plan.preset, train_mode_name(mode), tiles,
                                             sim_mirror_name(mirror));
        const Forecast rep = expect_repeats_exact(r, what);
        // Forward and backward, each MLP: its tiles 2 .. k-2 of k (k = 8, or 38 of one row each).
        const long per_op = ops::mlp_tile_count(int64_t(r.batch) * r.seq, tiles) - 3;
        EXPECT_GE(rep.repeated_blocks, 2 * r.model.num_hidden_layers * per_op) << what;
      }
    }
  }
}

// The same on several ranks, where collectives run beside the tiles: ZeRO-3's gathers and reduce-scatters, sequence
// parallelism's all-to-alls (each row's 20 tokens split over 2 ranks), data parallelism's all-reduce; later ranks too.
TEST(MlpTiles, RepeatedTilesForecastExactlyAsRunTilesOnSeveralRanks) {
  struct Ranks {
    int gpus, zero, sp, rank;
  };
  for (const Ranks& k :
       {Ranks{2, 3, 1, 0}, Ranks{2, 3, 1, 1}, Ranks{2, 0, 2, 1}, Ranks{4, 2, 2, 3}, Ranks{2, 0, 1, 0}}) {
    for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1)}) {
      ForecastRequest r = sim_twin::tiny_cuda_request(plan);
      r.model = odd_config(false);
      r.gpus = k.gpus, r.zero_stage = k.zero, r.sequence_parallel = k.sp, r.rank = k.rank;
      r.seq = 20;
      r.mlp_tiles = 8;
      const std::string what =
          fmt::format("{}, {} GPUs, ZeRO-{}, sequence parallel {}, rank {}", plan.preset, k.gpus, k.zero, k.sp, k.rank);
      EXPECT_GT(expect_repeats_exact(r, what).repeated_blocks, 0) << what;
    }
  }
}

// A shape whose MLP dominates the activations: intermediate 16x the width, 512 rows.
ForecastRequest mlp_heavy(const Plan& plan, int tiles) {
  ForecastRequest r = sim_twin::tiny_request(plan);
  r.model.intermediate_size = 512;
  r.seq = 256;
  r.batch = 2;
  r.mlp_tiles = tiles;
  r.budget = 0;
  return r;
}

TEST(MlpTiles, TilingLowersThePeakByTheUntiledIntermediates) {
  const Forecast untiled = forecast(mlp_heavy(Plan::gradient_checkpointing(1), 1));
  const Forecast tiled = forecast(mlp_heavy(Plan::gradient_checkpointing(1), 8));
  ASSERT_TRUE(untiled.fits && tiled.fits);
  const int64_t N = 512, F = 512, rows = ops::mlp_tile_rows(N, 8);
  // At least the gate and up of every row outside one tile are gone from the peak (fp32 on cpu).
  EXPECT_GE(untiled.peak_bytes, tiled.peak_bytes + size_t(2 * (N - rows) * F * 4));
  for (const MemoryItem& it : tiled.activations) {
    EXPECT_NE(it.name, "L*.mlp.gate");
    EXPECT_NE(it.name, "L*.mlp.up");
  }
}

TEST(MlpTiles, PlannerTilesOnlyWhenNothingFitsUntiled) {
  // The lowest memory untiled (the planner's minimum) and tiled (gradient checkpointing, 8 tiles).
  const PlanResult untiled_min = plan_for_budget(mlp_heavy(Plan::keep_everything(), 1), size_t(1) << 20);
  ASSERT_FALSE(untiled_min.found);
  EXPECT_EQ(untiled_min.plan.mlp_tiles, 1);
  const Forecast tiled_gc = forecast(mlp_heavy(Plan::gradient_checkpointing(1), 8));
  ASSERT_LT(tiled_gc.high_water_bytes, untiled_min.minimum_bytes);

  // Room for keep-everything untiled: no tiles.
  const Forecast keep = forecast(mlp_heavy(Plan::keep_everything(), 1));
  const PlanResult roomy = plan_for_budget(mlp_heavy(Plan::keep_everything(), 0), keep.high_water_bytes + (1 << 20));
  ASSERT_TRUE(roomy.found);
  EXPECT_EQ(roomy.plan.mlp_tiles, 1);

  // Below the untiled minimum: auto tiles, fixed 1 finds nothing.
  const size_t budget = (tiled_gc.high_water_bytes + untiled_min.minimum_bytes) / 2;
  EXPECT_FALSE(plan_for_budget(mlp_heavy(Plan::keep_everything(), 1), budget).found);
  const PlanResult pr = plan_for_budget(mlp_heavy(Plan::keep_everything(), 0), budget);
  ASSERT_TRUE(pr.found) << pr.label;
  EXPECT_GT(pr.plan.mlp_tiles, 1);
  EXPECT_NE(pr.label.find(fmt::format("MLP in {} tiles", pr.plan.mlp_tiles)), std::string::npos) << pr.label;
  EXPECT_LE(pr.forecast.high_water_bytes, budget);
  // The plan runs on cpu within the budget, at the forecast peak.
  ForecastRequest r = mlp_heavy(pr.plan, pr.plan.mlp_tiles);  // the plan's layer_weights included
  const sim_twin::CpuStep cpu = sim_twin::cpu_step(r, budget, pr.plan);
  ASSERT_TRUE(cpu.fits);
  EXPECT_EQ(cpu.peak, pr.forecast.peak_bytes);
  // Written for strata-train and read back: the same tile count.
  const std::string yaml = plan_yaml(r, pr.plan, pr.forecast, budget);
  TrainConfig tc;
  apply_yaml_text(tc, yaml, "plan.yaml");
  EXPECT_EQ(tc.plan.mlp_tiles, pr.plan.mlp_tiles) << yaml;
}

TEST(MlpTiles, BadValuesAreRefusedNamingTheKey) {
  for (const char* bad : {"0", "-2", "two", "2.5", "4x", "''"}) {
    TrainConfig tc;
    auto e =
        test_util::catch_as<ConfigError>([&] { apply_yaml_text(tc, fmt::format("mlp_tiles: {}\n", bad), "run.yaml"); });
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(e->field, "mlp_tiles") << bad;
    const std::string what = e->what();
    for (const char* w : {"run.yaml", "mlp_tiles", "auto"}) EXPECT_NE(what.find(w), std::string::npos) << what;
  }
  TrainConfig tc;
  apply_yaml_text(tc, "mlp_tiles: 6\n", "run.yaml");
  EXPECT_EQ(tc.plan.mlp_tiles, 6);
  apply_yaml_text(tc, "mlp_tiles: auto\n", "run.yaml");
  EXPECT_EQ(tc.plan.mlp_tiles, 0);

  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.mlp_tiles = 0;
  auto e = test_util::catch_as<ConfigError>([&] { LlamaModel m(*be, odd_config(false), mo); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "mlp_tiles");
  // The tiled op has no adapters: LoRA on an MLP projection is refused, and the planner never tiles it.
  mo.mlp_tiles = 2;
  mo.train_base = false;
  mo.lora.rank = 2;
  mo.lora.target_modules = {"q_proj", "up_proj"};
  e = test_util::catch_as<ConfigError>([&] { LlamaModel m(*be, odd_config(false), mo); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "mlp_tiles");
  EXPECT_NE(std::string(e->what()).find("up_proj"), std::string::npos) << e->what();
  ForecastRequest r = mlp_heavy(Plan::keep_everything(), 0);
  EXPECT_FALSE(mlp_tile_candidates(r).empty());
  r.mode = TrainMode::lora;
  r.lora_targets = {"q_proj", "up_proj"};
  EXPECT_TRUE(mlp_tile_candidates(r).empty());
}

}  // namespace
