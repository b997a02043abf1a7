// Weight paging for a full fine-tune (layer_offloading with trainable layer weights) on the cpu
// backend, where copies are memcpy and everything is exact: with the state on any tier, under the
// activation plans, with gradient accumulation, clipping, bf16 gradients and low-precision moments,
// losses, gradient norms, gradients, weights and moments are bit-identical to the same run without
// paging over several steps; the device holds two layers' weights instead of all of them; no slot
// survives a step (the next forward reads the update); the sim forecasts the device and host peaks
// byte for byte; a checkpoint round-trips; ZeRO with it is refused by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "engine/backend.h"
#include "engine/weight_pager.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/shapes.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/checkpoint.h"
#include "model/run/train_config.h"
#include "model/run/train_loop.h"
#include "model/train/trainer.h"
#include "tests/cpu/rank_threads.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

// hidden 40 (not a multiple of 64), 3 layers, GQA 5 query heads on 1 KV head, odd vocab.
io::LlamaConfig odd_config() {
  io::LlamaConfig c;
  c.hidden_size = 40;
  c.intermediate_size = 72;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 5;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.vocab_size = 67;
  c.rms_norm_eps = 1e-5f;
  return c;
}

struct FtCase {
  FtCase(std::string n, Plan p = Plan::keep_everything()) : name(std::move(n)), plan(std::move(p)) {}
  std::string name;
  Plan plan = Plan::keep_everything();  // the activation plan and the state table
  StateRecipe recipe;
  int micro = 1;           // micro-batches a step (gradient accumulation)
  float max_norm = 0.05f;  // small: clipping is active on every step
  int mlp_tiles = 1;
  io::LlamaConfig model = test_util::tiny_config();
  bool evaluate_between = false;  // an evaluation between steps reads the updated weights
};

struct Result {
  std::vector<float> losses, norms, eval_losses;
  std::vector<std::vector<float>> weights, grads;
  std::vector<std::vector<std::byte>> moments;
  size_t peak = 0, persistent = 0, paged_bytes = 0, slot_bytes = 0, pager_host = 0;
  std::vector<long> uploads;
};

Plan with_state(Plan p, const char* level, Decision tier = Decision::host) {
  p.set_state_offloading(level, "test", tier);
  return p;
}

ModelOptions model_options_of(const FtCase& s, bool page) {
  ModelOptions mo;
  mo.state_plan = s.plan;
  mo.recipe = s.recipe;
  mo.mlp_tiles = s.mlp_tiles;
  mo.page_layers = page;
  mo.state_dir = ::testing::TempDir();
  return mo;
}

TrainOptions train_options_of(const FtCase& s) {
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.adam.weight_decay = 0.1f;
  to.max_grad_norm = s.max_norm;
  to.plan = s.plan;
  to.tiers.offload_dir = ::testing::TempDir();
  to.optimizer.chunk_bytes = size_t(1) << 20;
  to.optimizer.grad_inflight_bytes = 4096;  // small: the waits and frees run often
  return to;
}

// The fp32 weights of every parameter, wherever they live (the pager's host block or the device).
std::vector<float> weights_of(LlamaModel& model, const Parameter& p) {
  std::vector<float> h(size_t(p.shape.numel()));
  if (p.page >= 0)
    model.pager()->read_host(size_t(p.page), h.data());
  else
    std::memcpy(h.data(), p.value().data, h.size() * 4);
  return h;
}

std::vector<std::byte> moment_of(const LlamaModel& model, const Parameter& p, bool second, OptimizerState os) {
  const size_t n = size_t(p.shape.numel()), bytes = moment_bytes(os, n);
  const size_t host = second ? p.host_v : p.host_m, disk = second ? p.disk_v : p.disk_m;
  const Buffer& codes = second ? p.v : p.m;
  const Buffer& scales = second ? p.v_scale : p.m_scale;
  std::vector<std::byte> b(bytes);
  if (host != Parameter::kDevice) {
    std::memcpy(b.data(), model.host_state(host), bytes);
  } else if (disk != Parameter::kDevice) {
    model.read_state_disk(disk, b.data(), os == OptimizerState::q8 ? size_t(n) : bytes, "test");
    if (os == OptimizerState::q8)
      model.read_state_disk(disk + Parameter::disk_scale_offset(n), b.data() + moment_scale_offset(n),
                            quant_blocks(n) * sizeof(float), "test");
  } else if (codes.allocated()) {
    std::memcpy(b.data(), codes.view().data, codes.view().bytes());
    if (scales.allocated()) std::memcpy(b.data() + moment_scale_offset(n), scales.view().data, scales.view().bytes());
  }
  return b;
}

Result run(const FtCase& s, bool page, int steps = 3) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, s.model, model_options_of(s, page));
  model.init_random(11);
  Result r;
  r.persistent = be->arena().in_use();
  if (const WeightPager* pg = model.pager()) {
    r.slot_bytes = pg->slot_bytes();
    r.pager_host = pg->host_bytes();
  }
  for (auto& p : model.params())
    if (p.page >= 0) r.paged_bytes += size_t(p.shape.numel()) * 4;
  Trainer tr(*be, model, train_options_of(s));
  TokenBatcher data(synthetic_tokens(4000, s.model.vocab_size, 3), 2, 19);
  TokenBatcher eval_data(synthetic_tokens(4000, s.model.vocab_size, 5), 2, 19);
  for (int st = 0; st < steps; ++st) {
    if (s.evaluate_between && st > 0) r.eval_losses.push_back(tr.evaluate(eval_data.next()));
    std::vector<Batch> micro;
    for (int i = 0; i < s.micro; ++i) micro.push_back(data.next());
    const StepStats ss = tr.step(micro, 1e-2f);
    r.losses.push_back(ss.loss);
    r.norms.push_back(ss.grad_norm);
    r.peak = std::max(r.peak, ss.peak_device_bytes);
    r.uploads.push_back(ss.paged_uploads);
    if (const WeightPager* pg = model.pager()) {
      for (int sl = 0; sl < pg->slot_count(); ++sl)
        EXPECT_EQ(pg->slot_state(sl), WeightPager::SlotState::EMPTY) << s.name << ": slot " << sl << " after a step";
    }
  }
  model.sync_state();
  for (auto& p : model.params()) {
    r.weights.push_back(weights_of(model, p));
    if (!p.trainable) continue;
    std::vector<float> g(size_t(p.shape.numel()));
    tr.optimizer().download_grad(p, g.data());
    r.grads.push_back(std::move(g));
    for (bool second : {false, true}) r.moments.push_back(moment_of(model, p, second, s.recipe.moments));
  }
  return r;
}

void expect_identical(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], 4), 0)
        << what << ": loss of step " << i << ": " << a.losses[i] << " vs " << b.losses[i];
    EXPECT_EQ(std::memcmp(&a.norms[i], &b.norms[i], 4), 0) << what << ": gradient norm of step " << i;
  }
  ASSERT_EQ(a.eval_losses.size(), b.eval_losses.size()) << what;
  for (size_t i = 0; i < a.eval_losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.eval_losses[i], &b.eval_losses[i], 4), 0) << what << ": evaluation " << i;
  auto same = [&](const auto& x, const auto& y, const char* kind) {
    ASSERT_EQ(x.size(), y.size()) << what << ": " << kind;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(x[i].size(), y[i].size()) << what << ": " << kind << " " << i;
      EXPECT_EQ(std::memcmp(x[i].data(), y[i].data(), x[i].size() * sizeof(x[i][0])), 0)
          << what << ": " << kind << " " << i;
    }
  };
  same(a.weights, b.weights, "weights");
  same(a.grads, b.grads, "gradient");
  same(a.moments, b.moments, "moment");
}

// Paged and unpaged, the same setup: identical numbers; the paged run uploads each layer for forward
// and again for backward (the double buffer keeps the last two), and its device holds no layer matrix
// beyond the two slots.
void check(const FtCase& s, int steps = 3) {
  const Result ref = run(s, false, steps), pg = run(s, true, steps);
  expect_identical(ref, pg, s.name);
  EXPECT_GT(ref.norms[0], s.max_norm > 0 ? s.max_norm : 0.0f) << s.name << ": the test wants clipping active";
  const long L = s.model.num_hidden_layers;
  EXPECT_EQ(ref.uploads, std::vector<long>(size_t(steps), 0)) << s.name;
  if (s.plan.preset.find("every=") == std::string::npos) {  // every-N replays add uploads
    EXPECT_EQ(pg.uploads, std::vector<long>(size_t(steps), s.micro * (2 * L - 2))) << s.name;
  }
  EXPECT_GT(pg.paged_bytes, 0u) << s.name;
  EXPECT_EQ(pg.pager_host, pg.paged_bytes) << s.name << ": the host block holds every paged matrix (f32 on cpu)";
  // The device's persistent bytes: two slots instead of every layer matrix (their copies or the fp32
  // weights on the device; the arena rounds each block to 256 bytes).
  EXPECT_LT(pg.persistent + pg.paged_bytes, ref.persistent + 2 * pg.slot_bytes + 256 * 64)
      << s.name << ": " << pg.persistent << " vs " << ref.persistent;
  EXPECT_LT(pg.persistent, ref.persistent) << s.name;
  std::printf("[ paging ft ] %s: persistent %zu -> %zu, peak %zu -> %zu bytes (paged matrices %zu)\n", s.name.c_str(),
              ref.persistent, pg.persistent, ref.peak, pg.peak, pg.paged_bytes);
}

}  // namespace

TEST(PagingFullFinetune, StateOnTheDeviceIsBitIdentical) {
  check({"state on the device"});
  FtCase unclipped{"state on the device, no clipping"};
  unclipped.max_norm = 0.0f;
  check(unclipped);
}

TEST(PagingFullFinetune, EveryStateLevelOnTheHostIsBitIdentical) {
  for (const char* level : {"optimizer", "master", "all"}) {
    FtCase s{fmt::format("state {} on the host", level), with_state(Plan::keep_everything(), level)};
    check(s);
  }
  FtCase grads{"gradients on the host", Plan::keep_everything()};
  grads.plan.state = {{"*.grad", Decision::host}};
  check(grads);
}

TEST(PagingFullFinetune, StateOnTheDiskIsBitIdentical) {
  for (const char* level : {"optimizer", "master", "all"})
    check({fmt::format("state {} on the disk", level), with_state(Plan::keep_everything(), level, Decision::disk)});
}

TEST(PagingFullFinetune, ActivationPlansAreBitIdentical) {
  for (const Plan& ap : {Plan::gradient_checkpointing(1), Plan::selective_recompute(), Plan::hidden_states(),
                         Plan::activation_offloading(Decision::host), Plan::activation_offloading(Decision::disk)}) {
    check({"state on the device / " + ap.preset, ap});
    check({"state all on the host / " + ap.preset, with_state(ap, "all")});
  }
  // Every-2 checkpointing replays an earlier layer into the slot its neighbour shares: extra uploads.
  check({"gc every 2 / master on the disk", with_state(Plan::gradient_checkpointing(2), "master", Decision::disk)});
  FtCase tiles{"mlp tiles 3 / optimizer on the host", with_state(Plan::gradient_checkpointing(1), "optimizer")};
  tiles.mlp_tiles = 3;
  check(tiles);
}

TEST(PagingFullFinetune, GradientAccumulationIsBitIdentical) {
  FtCase s{"2 micro-batches"};
  s.micro = 2;
  check(s);
  FtCase host = s;
  host.name = "2 micro-batches, state all on the host";
  host.plan = with_state(Plan::gradient_checkpointing(1), "all");
  check(host);
}

TEST(PagingFullFinetune, RecipesAreBitIdentical) {
  for (OptimizerState os : {OptimizerState::bf16, OptimizerState::q8})
    for (const char* level : {"none", "optimizer", "all"}) {
      FtCase s{fmt::format("optimizer_state {} / state {}", optimizer_state_name(os), level),
               with_state(Plan::keep_everything(), level)};
      s.recipe.moments = os;
      check(s);
    }
  FtCase q8disk{"optimizer_state 8bit on the disk", with_state(Plan::keep_everything(), "optimizer", Decision::disk)};
  q8disk.recipe.moments = OptimizerState::q8;
  check(q8disk);
  for (const char* level : {"none", "all"}) {
    FtCase s{fmt::format("bf16 gradients / state {}", level), with_state(Plan::keep_everything(), level)};
    s.recipe.gradients = GradPrecision::bf16;
    check(s);
  }
  // master_weights: none changes nothing where the compute dtype is f32 (the weights are the state).
  FtCase none{"master_weights none", with_state(Plan::keep_everything(), "optimizer")};
  none.recipe.master = MasterWeights::none;
  check(none);
}

TEST(PagingFullFinetune, OddShapesAreBitIdentical) {
  for (const char* level : {"none", "master", "all"}) {
    FtCase s{fmt::format("hidden 40, 3 layers, GQA 5/1 / state {}", level),
             with_state(Plan::gradient_checkpointing(1), level)};
    s.model = odd_config();
    check(s, 4);
  }
  FtCase tied{"tied embeddings, odd shape", with_state(Plan::hidden_states(), "optimizer", Decision::disk)};
  tied.model = odd_config();
  tied.model.tie_word_embeddings = true;
  check(tied);
}

TEST(PagingFullFinetune, EvaluationBetweenStepsReadsTheUpdatedWeights) {
  FtCase s{"evaluation between steps"};
  s.evaluate_between = true;
  check(s, 4);
  FtCase host{"evaluation between steps, state on the host", with_state(Plan::keep_everything(), "all")};
  host.evaluate_between = true;
  check(host, 4);
}

TEST(PagingFullFinetune, TheOptimizerWritesTheUpdateIntoTheHostBlock) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.page_layers = true;
  LlamaModel model(*be, test_util::tiny_config(), mo);
  model.init_random(3);
  EXPECT_TRUE(model.pages_trainable());
  Parameter& q = *model.find("model.layers.2.self_attn.q_proj.weight");
  ASSERT_GE(q.page, 0);
  EXPECT_TRUE(q.trainable);
  EXPECT_FALSE(q.master.allocated() || q.compute.allocated()) << "a paged weight has no device copy";
  EXPECT_TRUE(q.grad.allocated()) << "its gradient stays on the device (state_offloading none)";
  const std::vector<float> before = weights_of(model, q);
  TrainOptions to;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  tr.step(data.next());
  EXPECT_FALSE(tr.optimizer().pending()) << "updates of paged weights are never deferred";
  const std::vector<float> after = weights_of(model, q);
  EXPECT_NE(std::memcmp(before.data(), after.data(), before.size() * 4), 0) << "the host block holds the update";
  // Norms, biases, embeddings and the head stay on the device.
  EXPECT_LT(model.find("model.layers.2.input_layernorm.weight")->page, 0);
  EXPECT_LT(model.find("model.embed_tokens.weight")->page, 0);
}

TEST(PagingFullFinetune, CheckpointRoundTripsAndContinuesIdentically) {
  const std::string dir = ::testing::TempDir() + "paging_ft_ckpt";
  fs::remove_all(dir);
  const io::LlamaConfig mc = test_util::tiny_config();
  for (const char* level : {"none", "master", "all"}) {
    SCOPED_TRACE(level);
    TrainConfig cfg;
    cfg.plan = with_state(Plan::gradient_checkpointing(1), level);
    cfg.plan.layer_weights = Decision::page;
    TokenBatcher data(synthetic_tokens(4000, mc.vocab_size, 3), 2, 19);
    std::vector<Batch> batches;
    for (int i = 0; i < 4; ++i) batches.push_back(data.next());
    // Four steps straight through.
    std::vector<float> straight;
    {
      auto be = make_cpu_backend(size_t(64) << 20);
      LlamaModel model(*be, mc, model_options(cfg));
      model.init_random(3);
      Trainer tr(*be, model, train_options(cfg));
      for (auto& b : batches) straight.push_back(tr.step(b).loss);
    }
    // Two steps, a checkpoint, then a fresh model (paged, and unpaged: the same file) resumes.
    std::string path;
    {
      auto be = make_cpu_backend(size_t(64) << 20);
      LlamaModel model(*be, mc, model_options(cfg));
      model.init_random(3);
      Trainer tr(*be, model, train_options(cfg));
      for (int i = 0; i < 2; ++i) EXPECT_EQ(tr.step(batches[size_t(i)]).loss, straight[size_t(i)]);
      CheckpointWrite w;
      w.config_json = checkpoint_config_json(cfg, mc, 10);
      path = save_checkpoint(dir, *be, model, CheckpointState{2, {}, 0, 5, 1.0f}, w);
    }
    for (bool page : {true, false}) {
      TrainConfig c2 = cfg;
      c2.plan.layer_weights = page ? Decision::page : Decision::keep;
      auto be = make_cpu_backend(size_t(64) << 20);
      LlamaModel model(*be, mc, model_options(c2));
      model.init_random(99);  // other weights: the checkpoint must replace them all
      const CheckpointState st = load_checkpoint(path, *be, model, checkpoint_config_json(c2, mc, 10));
      EXPECT_EQ(st.step, 2);
      Trainer tr(*be, model, train_options(c2));
      tr.set_steps_done(st.step);
      for (int i = 2; i < 4; ++i) {
        const float l = tr.step(batches[size_t(i)]).loss;
        EXPECT_EQ(std::memcmp(&l, &straight[size_t(i)], 4), 0)
            << "paged " << page << ", step " << i << ": " << l << " vs " << straight[size_t(i)];
      }
    }
    fs::remove_all(dir);
  }
}

TEST(PagingFullFinetune, SavedModelHoldsTheTrainedWeights) {
  const std::string dir = ::testing::TempDir() + "paging_ft_save";
  fs::remove_all(dir);
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.page_layers = true;
  mo.state_plan = with_state(Plan::keep_everything(), "master");
  LlamaModel model(*be, test_util::tiny_config(), mo);
  model.init_random(3);
  {
    Trainer tr(*be, model, TrainOptions{});
    TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
    tr.step(data.next());
    tr.step(data.next());
  }
  model.save(dir);
  LlamaModel loaded(*be, test_util::tiny_config(), ModelOptions{});
  loaded.load(dir);
  for (size_t i = 0; i < model.params().size(); ++i) {
    const std::vector<float> a = weights_of(model, model.params()[i]), b = weights_of(loaded, loaded.params()[i]);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << model.params()[i].name;
  }
  fs::remove_all(dir);
}

TEST(PagingFullFinetune, ZeroStagesAreRefusedByName) {
  auto be = make_cpu_backend(size_t(64) << 20);
  for (int stage : {1, 2}) {
    ModelOptions mo;
    mo.page_layers = true;
    mo.zero = {stage, 0, 2};
    try {
      LlamaModel model(*be, test_util::tiny_config(), mo);
      FAIL() << "zero_stage " << stage << " with paged trainable weights must be refused";
    } catch (const UnsupportedError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("layer_offloading"), std::string::npos) << what;
      EXPECT_NE(what.find(fmt::format("zero_stage {}", stage)), std::string::npos) << what;
      EXPECT_NE(what.find("zero_stage: 0"), std::string::npos) << what;
    }
    EXPECT_EQ(be->arena().in_use(), 0u) << "nothing left behind by the refused model";
  }
}

TEST(PagingFullFinetune, SimForecastsDeviceAndHostPeaksByteForByte) {
  struct Case {
    std::string name;
    Plan plan;
    OptimizerState moments;
    GradPrecision grads;
  };
  const OptimizerState f32m = OptimizerState::fp32;
  const GradPrecision f32g = GradPrecision::fp32;
  std::vector<Case> cases = {
      {"keep", Plan::keep_everything(), f32m, f32g},
      {"gc1", Plan::gradient_checkpointing(1), f32m, f32g},
      {"gc2", Plan::gradient_checkpointing(2), f32m, f32g},
      {"offload", Plan::activation_offloading(Decision::host), f32m, f32g},
      {"hidden_states + optimizer host", with_state(Plan::hidden_states(), "optimizer"), f32m, f32g},
      {"keep + master host", with_state(Plan::keep_everything(), "master"), f32m, f32g},
      {"gc1 + all host", with_state(Plan::gradient_checkpointing(1), "all"), f32m, f32g},
      {"gc1 + all host 8bit", with_state(Plan::gradient_checkpointing(1), "all"), OptimizerState::q8, f32g},
      {"keep + optimizer disk", with_state(Plan::keep_everything(), "optimizer", Decision::disk), f32m, f32g},
      {"disk + master disk bf16", with_state(Plan::activation_offloading(Decision::disk), "master", Decision::disk),
       OptimizerState::bf16, f32g},
      {"keep bf16 grads", Plan::keep_everything(), OptimizerState::fp32, GradPrecision::bf16},
  };
  for (const Case& c : cases) {
    ForecastRequest r = sim_twin::tiny_request(c.plan, TrainMode::full);
    r.plan.layer_weights = Decision::page;
    r.recipe.moments = c.moments;
    r.recipe.gradients = c.grads;
    const Forecast f = forecast(r);
    ASSERT_TRUE(f.fits) << c.name << ": " << f.oom;
    const sim_twin::CpuStep cpu = sim_twin::cpu_step(r, sim_twin::kBudget, c.plan);
    ASSERT_TRUE(cpu.fits) << c.name;
    EXPECT_EQ(f.peak_bytes, cpu.peak) << c.name;
    EXPECT_EQ(f.high_water_bytes, cpu.high_water) << c.name;
    EXPECT_EQ(f.peak_host_bytes, cpu.host_peak) << c.name;
    EXPECT_EQ(f.peak_disk_bytes, cpu.disk_peak) << c.name;
    ASSERT_EQ(f.events.size(), cpu.events.size()) << c.name;
    for (size_t i = 0; i < f.events.size(); ++i) {
      ASSERT_EQ(f.events[i].tag, cpu.events[i].tag) << c.name << ": event " << i;
      ASSERT_EQ(f.events[i].in_use, cpu.events[i].in_use) << c.name << ": event " << i;
    }
    EXPECT_GT(f.paged_host_bytes, 0u) << c.name;
    EXPECT_GT(f.paged_uploads, 0) << c.name;
    EXPECT_GT(f.state_bytes_moved, 0u) << c.name << ": the paged weights stream through the optimizer";
    // The forecast of the unpaged run holds the layer matrices on the device for the whole step.
    ForecastRequest plain = r;
    plain.plan.layer_weights = Decision::keep;
    const Forecast pf = forecast(plain);
    EXPECT_LT(f.persistent_bytes, pf.persistent_bytes) << c.name;
  }
}

TEST(PagingFullFinetune, PlannerPagesAFullFinetuneWhenOnlyThatFits) {
  // Llama-3.2-1B on the cuda mirror: its bf16 layer matrices (~2 GiB) dominate a short sequence's
  // footprint, so a device budget at the paged plan's peak fits no unpaged plan. (On a model small
  // enough for the cpu twin the optimizer's three staging chunks, which then hold every paged matrix,
  // outweigh what paging saves: SimForecastsDeviceAndHostPeaksByteForByte checks the sim against cpu.)
  ForecastRequest base = sim_twin::tiny_request(Plan::keep_everything(), TrainMode::full);
  base.model = builtin_shape("Llama-3.2-1B");
  base.seq = 512;
  base.batch = 1;
  base.loss_chunk_tokens = 512;
  base.mlp_tiles = 1;
  base.mirror = SimMirror::cuda;
  base.budget = 0;
  base.profile = find_profile("h100_80gb");
  ForecastRequest paged_req = base;
  paged_req.plan = with_state(Plan::gradient_checkpointing(1), "all");
  paged_req.plan.layer_weights = Decision::page;
  const Forecast paged = forecast(paged_req);
  ForecastRequest unpaged_req = paged_req;
  unpaged_req.plan.layer_weights = Decision::keep;
  const Forecast unpaged = forecast(unpaged_req);
  ASSERT_TRUE(paged.fits && unpaged.fits);
  ASSERT_LT(paged.peak_bytes + (size_t(1) << 30), unpaged.peak_bytes) << "paging must lower this shape's peak";
  TierBudgets b;
  b.device = paged.peak_bytes + (size_t(64) << 20);
  b.host = size_t(64) << 30;
  const PlanResult pr = plan_for_budget(base, b);
  ASSERT_TRUE(pr.found) << "the planner must find a paged plan";
  EXPECT_TRUE(pr.plan.pages_layer_weights());
  EXPECT_LE(pr.forecast.peak_bytes, b.device);
  EXPECT_GT(pr.forecast.paged_host_bytes, 0u);
  EXPECT_LE(pr.forecast.peak_host_bytes, b.host);
  // Without a host budget nothing pages, so nothing fits; the diagnosis names the host tier.
  const PlanResult none = plan_for_budget(base, TierBudgets{b.device, 0, 0});
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.short_tier, "host");
  // The planner's YAML says layer_weights: page for strata-train, which reads it back.
  const std::string yaml = plan_yaml(base, pr.plan, pr.forecast, b.device);
  EXPECT_NE(yaml.find("layer_weights: page"), std::string::npos) << yaml;
  TrainConfig tc;
  apply_yaml_text(tc, yaml, "plan.yaml");
  EXPECT_TRUE(tc.plan.pages_layer_weights());
}

namespace {

struct RankRun {
  std::vector<float> losses, norms;
  std::vector<std::vector<float>> weights;
};

// One of two data-parallel ranks (each its own rows), the gradients all-reduced in backward.
RankRun train_rank(Communicator* comm, int rank, bool page, const char* state) {
  auto be = make_cpu_backend(size_t(64) << 20);
  FtCase s{"data parallel", with_state(Plan::gradient_checkpointing(1), state)};
  LlamaModel model(*be, s.model, model_options_of(s, page));
  model.init_random(7);
  TrainOptions to = train_options_of(s);
  to.comm = comm;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, s.model.vocab_size, 20 + uint64_t(rank)), 2, 19);
  RankRun out;
  for (int st = 0; st < 3; ++st) {
    const StepStats ss = tr.step(data.next());
    out.losses.push_back(ss.loss);
    out.norms.push_back(ss.grad_norm);
  }
  model.sync_state();
  for (const Parameter& p : model.params()) out.weights.push_back(weights_of(model, p));
  return out;
}

}  // namespace

TEST(PagingFullFinetune, DataParallelRanksAreBitIdenticalToUnpagedRanks) {
  for (const char* state : {"none", "all"}) {
    std::vector<RankRun> runs[2];
    for (int page = 0; page < 2; ++page)
      runs[page] = test_util::run_rank_threads<RankRun>(
          2, [&](Communicator* comm, int r) { return train_rank(comm, r, page == 1, state); });
    for (int r = 0; r < 2; ++r) {
      const RankRun &a = runs[0][size_t(r)], &b = runs[1][size_t(r)];
      EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * 4), 0) << state << ", rank " << r;
      EXPECT_EQ(std::memcmp(a.norms.data(), b.norms.data(), a.norms.size() * 4), 0) << state << ", rank " << r;
      ASSERT_EQ(a.weights.size(), b.weights.size());
      for (size_t i = 0; i < a.weights.size(); ++i)
        EXPECT_EQ(std::memcmp(a.weights[i].data(), b.weights[i].data(), a.weights[i].size() * 4), 0)
            << state << ", rank " << r << ", parameter " << i;
    }
    // Both ranks end with the same weights (the reduced gradient, the same update).
    for (size_t i = 0; i < runs[1][0].weights.size(); ++i)
      EXPECT_EQ(runs[1][0].weights[i], runs[1][1].weights[i]) << state << ", parameter " << i;
  }
}

TEST(PagingFullFinetune, AnExceptionInBackwardLeavesThePagerCleanAndTheNextStepExact) {
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  const Batch b1 = data.next(), b2 = data.next();
  for (const char* state : {"none", "all"}) {
    const FtCase s{"exception", with_state(Plan::gradient_checkpointing(1), state)};
    float ref[2];
    {
      auto be = make_cpu_backend(size_t(64) << 20);
      LlamaModel model(*be, s.model, model_options_of(s, false));
      model.init_random(11);
      Trainer tr(*be, model, train_options_of(s));
      ref[0] = tr.step(b1).loss;
      ref[1] = tr.step(b2).loss;
    }
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel model(*be, s.model, model_options_of(s, true));
    model.init_random(11);
    Trainer tr(*be, model, train_options_of(s));
    WeightPager& pg = *model.pager();
    const float l1 = tr.step(b1).loss;
    const size_t base = be->arena().in_use();
    int backward_nodes = 0;
    tr.tape().set_node_hook([&](int node, TapePhase phase) {
      pg.on_node(node, phase);
      if (phase == TapePhase::backward && ++backward_nodes == 20) throw std::runtime_error("injected failure");
    });
    EXPECT_THROW(tr.step(b2), std::runtime_error);
    for (int sl = 0; sl < pg.slot_count(); ++sl) EXPECT_EQ(pg.slot_state(sl), WeightPager::SlotState::EMPTY);
    EXPECT_EQ(be->arena().in_use(), base) << state << ": nothing outlives the failed step";
    pg.install(tr.tape());
    const float l2 = tr.step(b2).loss;
    EXPECT_EQ(std::memcmp(&l1, &ref[0], 4), 0) << state;
    EXPECT_EQ(std::memcmp(&l2, &ref[1], 4), 0) << state << ": " << l2 << " vs " << ref[1];
  }
}
