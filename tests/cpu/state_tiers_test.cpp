// Persistent state on the host tier (ModelOptions::state_plan, model/train/optimizer.h) on the cpu
// backend: every state decision, alone and combined with each other and with the activation
// plans, gives losses, weights and Adam moments bit-identical to keep-everything over several
// steps with clipping active; it lowers the device peak by exactly the state it moves; the sim
// forecasts the device and host peaks byte for byte; the streamed optimizer's chunking (tiny
// chunks split parameters) changes nothing; saves read the host masters.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "engine/backend.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "tests/cpu/run_result.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

struct Result {
  std::vector<float> losses, norms;
  std::vector<std::vector<float>> masters;
  std::vector<std::vector<std::byte>> moments;  // each moment's bytes in its precision (8-bit: codes, then scales)
  std::vector<float> eval_losses;
  size_t peak = 0, host_peak = 0, persistent = 0, state_host = 0, moved = 0;
  bool pending_after_last_step = false;
  bool host_grads = false;  // some gradient lives on the host tier (no deferral then)
};

using test_util::with_state;

Result run(const Plan& plan, int steps = 4, size_t chunk_bytes = size_t(1) << 20, bool tied = false,
           StateRecipe recipe = {}, io::LlamaConfig c = test_util::tiny_config(), bool defer = true,
           bool evaluate_between = false) {
  auto be = make_cpu_backend(size_t(64) << 20);
  c.tie_word_embeddings = tied;
  ModelOptions mo;
  mo.state_plan = plan;
  mo.recipe = recipe;
  LlamaModel model(*be, c, mo);
  model.init_random(11);
  Result r;
  r.persistent = be->arena().in_use();
  r.state_host = model.state_host_bytes();
  TrainOptions to = test_util::clipped_train_options();
  to.plan = plan;
  to.tiers.offload_dir = ::testing::TempDir();
  to.optimizer.chunk_bytes = chunk_bytes;
  to.optimizer.grad_inflight_bytes = 4096;  // small: the waits and frees run often
  to.optimizer.defer_update = defer;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, c.vocab_size, 3), 2, 19);
  TokenBatcher eval_data(synthetic_tokens(4000, c.vocab_size, 5), 2, 19);
  for (int s = 0; s < steps; ++s) {
    // An evaluation's forward applies a deferred update as a step's would; its losses are checked
    // through the next steps' (the same numbers, or the weights it saw were wrong).
    if (evaluate_between && s > 0) r.eval_losses.push_back(tr.evaluate(eval_data.next()));
    StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
    r.peak = std::max(r.peak, st.peak_device_bytes);
    r.host_peak = st.peak_host_bytes + st.state_host_bytes;
    r.moved += st.state_bytes_moved;
  }
  r.pending_after_last_step = tr.optimizer().pending();
  r.host_grads = model.grads_on_host();
  model.sync_state();  // the last step's deferred update (model/train/optimizer.h)
  for (auto& p : model.params()) {
    std::vector<float> h(size_t(p.shape.numel()));
    // The fp32 master, wherever it lives (the save path reads it the same way).
    if (p.host_master != Parameter::kDevice)
      std::memcpy(h.data(), model.host_state(p.host_master), h.size() * 4);
    else
      std::memcpy(h.data(), p.master.view().data, h.size() * 4);
    r.masters.push_back(h);
    const size_t n = h.size(), bytes = moment_bytes(recipe.moments, n);
    for (auto [off, buf, scales] : {std::tuple{p.host_m, &p.m, &p.m_scale}, std::tuple{p.host_v, &p.v, &p.v_scale}}) {
      std::vector<std::byte> mb(bytes);
      if (off != Parameter::kDevice) {
        std::memcpy(mb.data(), model.host_state(off), bytes);
      } else {
        std::memcpy(mb.data(), buf->view().data, buf->view().bytes());
        if (scales->allocated())
          std::memcpy(mb.data() + moment_scale_offset(n), scales->view().data, scales->view().bytes());
      }
      r.moments.push_back(std::move(mb));
    }
  }
  return r;
}

void expect_identical(const Result& a, const Result& b, const std::string& what) {
  test_util::expect_each_bit_identical(a.losses, b.losses, what, "loss of step");
  test_util::expect_each_bit_identical(a.norms, b.norms, what, "gradient norm of step");
  ASSERT_EQ(a.masters.size(), b.masters.size());
  for (size_t i = 0; i < a.masters.size(); ++i)
    EXPECT_EQ(std::memcmp(a.masters[i].data(), b.masters[i].data(), a.masters[i].size() * 4), 0)
        << what << ": master " << i;
  ASSERT_EQ(a.moments.size(), b.moments.size());
  for (size_t i = 0; i < a.moments.size(); ++i) {
    ASSERT_EQ(a.moments[i].size(), b.moments[i].size()) << what << ": moment " << i;
    EXPECT_EQ(std::memcmp(a.moments[i].data(), b.moments[i].data(), a.moments[i].size()), 0)
        << what << ": moment " << i;
  }
}

const test_util::StateTable kEach[] = {
    {{"*.adam.m", Decision::host}},
    {{"*.adam.v", Decision::host}},
    {{"*.w.master", Decision::host}},
    {{"*.grad", Decision::host}},
    {{"L1.*", Decision::host}, {"head.grad", Decision::host}},  // one layer's state and one other group's
    {{"*", Decision::host}},
};

}  // namespace

TEST(StateTiers, EachStateDecisionAloneIsBitIdenticalWithClipping) {
  const Result keep = run(Plan::keep_everything());
  EXPECT_EQ(keep.state_host, 0u);
  EXPECT_GT(keep.norms[0], 0.05f) << "the test wants clipping active";
  for (auto& st : kEach) {
    const Result r = run(with_state(Plan::keep_everything(), st));
    expect_identical(keep, r, st.front().first);
    EXPECT_GT(r.state_host, 0u) << st.front().first;
    // On cpu a host master leaves its f32 compute copy on the device: the same bytes there.
    if (st.front().first == "*.w.master")
      EXPECT_EQ(r.persistent, keep.persistent);
    else
      EXPECT_LT(r.persistent, keep.persistent) << st.front().first;
    EXPECT_GT(r.moved, 0u) << st.front().first;
  }
}

// The streamed update deferred to the next forward (model/train/optimizer.h) against the one right after
// backward: the same bits, with an evaluation between steps, for every state decision and precision.
TEST(StateTiers, DeferredUpdateIsBitIdenticalToTheUndeferredOne) {
  const Result keep = run(Plan::keep_everything(), 4, size_t(1) << 20, false, {}, test_util::tiny_config(), true, true);
  EXPECT_FALSE(keep.pending_after_last_step) << "device state is never deferred";
  for (auto& st : kEach) {
    for (OptimizerState os : {OptimizerState::fp32, OptimizerState::q8}) {
      StateRecipe rc;
      rc.moments = os;
      const std::string what = st.front().first + (os == OptimizerState::q8 ? " 8bit" : " fp32");
      const Plan plan = with_state(Plan::keep_everything(), st);
      const Result now = run(plan, 4, size_t(1) << 20, false, rc, test_util::tiny_config(), false, true);
      const Result later = run(plan, 4, size_t(1) << 20, false, rc, test_util::tiny_config(), true, true);
      EXPECT_FALSE(now.pending_after_last_step) << what;
      EXPECT_EQ(later.pending_after_last_step, !later.host_grads) << what;
      expect_identical(now, later, what);
      ASSERT_EQ(now.eval_losses.size(), 3u);
      EXPECT_EQ(std::memcmp(now.eval_losses.data(), later.eval_losses.data(), 3 * sizeof(float)), 0) << what;
      // The deferred run moved its last step's state at sync_state, after the count: less.
      if (!later.host_grads) {
        EXPECT_LT(later.moved, now.moved) << what;
      }
      if (os == OptimizerState::fp32) {
        EXPECT_EQ(std::memcmp(now.eval_losses.data(), keep.eval_losses.data(), 3 * sizeof(float)), 0) << what;
        expect_identical(keep, later, what + " against keep-everything");
      }
    }
  }
}

// The state's precision (engine/state_recipe.h) under every tier: bf16 and 8-bit moments give the
// same bits on the host tier as on the device, alone, combined with activation plans, and with
// chunks that split parameters (8-bit scales travel with their blocks). A model whose matrices span
// several quantisation blocks with partial last blocks (hidden 72, intermediate 200: 72 x 200 =
// 14400 = 56.25 blocks).
TEST(StateTiers, EveryStatePrecisionIsBitIdenticalOnEveryTier) {
  io::LlamaConfig c = test_util::tiny_config();
  c.hidden_size = 72;
  c.intermediate_size = 200;
  c.head_dim = 18;
  for (OptimizerState os : {OptimizerState::bf16, OptimizerState::q8}) {
    const StateRecipe recipe{MasterWeights::none, os};  // none is fp32 on cpu: the weights are f32
    const std::string tag = optimizer_state_name(os);
    const Result keep = run(Plan::keep_everything(), 3, size_t(1) << 20, false, recipe, c);
    const Result fp32 = run(Plan::keep_everything(), 3, size_t(1) << 20, false, {}, c);
    EXPECT_NE(std::memcmp(keep.masters[3].data(), fp32.masters[3].data(), keep.masters[3].size() * 4), 0)
        << tag << ": the precision changes nothing (the test would compare fp32 with itself)";
    for (auto& st : kEach)
      expect_identical(keep, run(with_state(Plan::keep_everything(), st), 3, size_t(1) << 20, false, recipe, c),
                       tag + " " + st.front().first);
    Plan all;
    all.set_state_offloading("all", "test");
    for (const Plan& ap : {Plan::gradient_checkpointing(1), Plan::hidden_states()}) {
      Plan p = ap;
      p.state = all.state;
      expect_identical(keep, run(p, 3, size_t(1) << 20, false, recipe, c), tag + " all on host + " + ap.preset);
    }
  }
}

TEST(StateTiers, StreamedChunksSplitQuantisedParametersWithoutChangingABit) {
  // A 1100 x 256 matrix with 8-bit moments and fp32 grads and masters on the host is 3.4 MiB:
  // 1 MiB chunks split it at multiples of the quantisation block.
  io::LlamaConfig c = test_util::tiny_config();
  c.hidden_size = 256;
  c.intermediate_size = 1100;
  c.head_dim = 64;
  Plan all;
  all.set_state_offloading("all", "test");
  const StateRecipe q8{MasterWeights::fp32, OptimizerState::q8};
  expect_identical(run(Plan::keep_everything(), 2, size_t(1) << 20, false, q8, c),
                   run(all, 2, size_t(1) << 20, false, q8, c), "8bit, all on the host, 1 MiB chunks");
}

TEST(StateTiers, PersistentDeviceBytesFallByExactlyTheStateMoved) {
  const Result keep = run(Plan::keep_everything(), 1);
  for (const char* level : {"optimizer", "master", "all"}) {
    Plan p;
    p.set_state_offloading(level, "test");
    const Result r = run(p, 1);
    // The device drops each host-tier array; on cpu a host master leaves its f32 compute copy behind.
    size_t moved = 0;
    auto be = make_cpu_backend(size_t(64) << 20);
    ModelOptions mo;
    mo.state_plan = p;
    LlamaModel m(*be, test_util::tiny_config(), mo);
    for (auto& par : m.params()) {
      const size_t b = (size_t(par.shape.numel()) * 4 + 255) / 256 * 256;
      moved += (par.host_m != Parameter::kDevice) * b + (par.host_v != Parameter::kDevice) * b +
               (par.host_grad != Parameter::kDevice) * b;
    }
    EXPECT_EQ(keep.persistent - r.persistent, moved) << level;
    EXPECT_GT(r.state_host, moved / 2) << level;
  }
}

TEST(StateTiers, StateDecisionsCombinedWithActivationPlansAreBitIdentical) {
  const Result keep = run(Plan::keep_everything(), 3);
  const Plan activation_plans[] = {Plan::gradient_checkpointing(1), Plan::gradient_checkpointing(2),
                                   Plan::activation_offloading(Decision::host), Plan::hidden_states(),
                                   Plan::selective_recompute()};
  Rng rng(7);
  const Decision tiers[] = {Decision::keep, Decision::host};
  for (const Plan& ap : activation_plans) {
    // A random state table per plan: each kind of each group on the device or the host.
    std::vector<std::pair<std::string, Decision>> st;
    for (const char* g : {"L0", "L1", "L2", "L3", "embed", "head", "final_norm"})
      for (const char* k : kStateKinds) st.emplace_back(std::string(g) + "." + k, tiers[rng.below(2)]);
    expect_identical(keep, run(with_state(ap, st), 3), ap.preset + " + random state");
  }
}

TEST(StateTiers, ChunkingSplitsParametersWithoutChangingABit) {
  Plan all;
  all.set_state_offloading("all", "test");
  const Result whole = run(all, 3);
  // 1 MiB chunks hold the tiny model at once; 1 MiB is the smallest allowed, so use a wide model
  // where a layer's matrices are split across chunks.
  auto wide = [](size_t chunk, const Plan& p) {
    auto be = make_cpu_backend(size_t(256) << 20);
    io::LlamaConfig c = test_util::tiny_config();
    c.hidden_size = 256;
    c.intermediate_size = 1100;  // a 1100 x 256 matrix with three host arrays is 3.4 MiB
    c.head_dim = 64;
    ModelOptions mo;
    mo.state_plan = p;
    LlamaModel model(*be, c, mo);
    model.init_random(3);
    TrainOptions to;
    to.plan = p;
    to.optimizer.chunk_bytes = chunk;
    Trainer tr(*be, model, to);
    TokenBatcher data(synthetic_tokens(4000, c.vocab_size, 3), 1, 8);
    std::vector<float> out;
    long chunks = 0;
    for (int s = 0; s < 2; ++s) {
      out.push_back(tr.step(data.next()).loss);
      chunks = tr.optimizer().stats().chunks;
    }
    model.sync_state();  // the last step's deferred update
    for (auto& par : model.params()) {
      const float* w = par.value().f32();
      out.insert(out.end(), w, w + par.shape.numel());
    }
    return std::pair{out, chunks};
  };
  auto [small, n_small] = wide(size_t(1) << 20, all);
  auto [big, n_big] = wide(size_t(1) << 30, all);
  auto [dev, n_dev] = wide(size_t(1) << 20, Plan::keep_everything());
  EXPECT_GT(n_small, n_big);
  EXPECT_EQ(n_big, 1);
  EXPECT_EQ(n_dev, 0);
  ASSERT_EQ(small.size(), dev.size());
  EXPECT_EQ(std::memcmp(small.data(), dev.data(), small.size() * 4), 0);
  EXPECT_EQ(std::memcmp(big.data(), dev.data(), big.size() * 4), 0);
  EXPECT_FALSE(whole.losses.empty());
}

TEST(StateTiers, TiedEmbeddingsWithHostGradientsAreBitIdentical) {
  Plan all;
  all.set_state_offloading("all", "test");
  expect_identical(run(Plan::keep_everything(), 3, size_t(1) << 20, true), run(all, 3, size_t(1) << 20, true),
                   "tied, all state on the host");
}

TEST(StateTiers, SimForecastsDeviceAndHostPeaksByteForByte) {
  for (const char* level : {"optimizer", "master", "all"})
    for (const Plan& ap : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::hidden_states()})
      for (OptimizerState os : {OptimizerState::fp32, OptimizerState::bf16, OptimizerState::q8}) {
        Plan p = ap;
        p.set_state_offloading(level, "test");
        ForecastRequest req = sim_twin::tiny_request(p);
        req.recipe.moments = os;
        const Forecast f = forecast(req);
        const sim_twin::CpuStep cpu = sim_twin::cpu_step(req, sim_twin::kBudget, p);
        ASSERT_TRUE(f.fits && cpu.fits) << level << " " << ap.preset;
        EXPECT_EQ(f.peak_bytes, cpu.peak) << level << " " << ap.preset;
        EXPECT_EQ(f.high_water_bytes, cpu.high_water) << level << " " << ap.preset;
        EXPECT_EQ(f.peak_host_bytes, cpu.host_peak) << level << " " << ap.preset;
        EXPECT_GT(f.state_host_bytes, 0u);
        EXPECT_GT(f.state_bytes_moved, 0u);
      }
}

TEST(StateTiers, SavedCheckpointReadsTheHostMasters) {
  Plan all;
  all.set_state_offloading("all", "test");
  const std::string dir = ::testing::TempDir() + "state_tiers_save";
  fs::remove_all(dir);
  std::vector<float> expect;
  {
    auto be = make_cpu_backend(size_t(64) << 20);
    ModelOptions mo;
    mo.state_plan = all;
    LlamaModel model(*be, test_util::tiny_config(), mo);
    model.init_random(2);
    TrainOptions to;
    to.plan = all;
    Trainer tr(*be, model, to);
    TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
    tr.step(data.next());
    model.save(dir);
    const Parameter* q = model.find("model.layers.2.self_attn.q_proj.weight");
    ASSERT_NE(q->host_master, Parameter::kDevice);
    const float* h = reinterpret_cast<const float*>(model.host_state(q->host_master));
    expect.assign(h, h + q->shape.numel());
  }
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel back(*be, test_util::tiny_config(), {});
  back.load(dir);
  const Parameter* q = back.find("model.layers.2.self_attn.q_proj.weight");
  EXPECT_EQ(std::memcmp(q->master.view().data, expect.data(), expect.size() * 4), 0);
  fs::remove_all(dir);
}

TEST(StateTiers, StateDecisionsOtherThanKeepOrHostAreRefusedNamingTheClass) {
  Plan p;
  p.state = {{"L*.adam.m", Decision::recompute}};
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.state_plan = p;
  try {
    LlamaModel m(*be, test_util::tiny_config(), mo);
    FAIL() << "a recompute decision for optimizer state was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("L0.adam.m"), std::string::npos) << e.what();
  }
  Plan q;
  EXPECT_THROW(q.set_state_offloading("everything", "cfg.yaml"), ConfigError);
}

TEST(StateTiers, ActivationPresetsNeverMoveState) {
  // "*" -> host (activation_offloading) and "L*" -> recompute (checkpointing) are activation rules.
  for (const Plan& p : {Plan::activation_offloading(Decision::host), Plan::gradient_checkpointing(1)}) {
    auto be = make_cpu_backend(size_t(64) << 20);
    ModelOptions mo;
    mo.state_plan = p;
    LlamaModel m(*be, test_util::tiny_config(), mo);
    EXPECT_EQ(m.state_host_bytes(), 0u) << p.preset;
  }
}

TEST(StateTiers, PlannerMovesStateToTheHostWhenNothingElseFitsAndItsYamlRunsTheSame) {
  const ForecastRequest base = sim_twin::tiny_request(Plan::keep_everything());
  const Forecast gc = forecast(sim_twin::tiny_request(Plan::gradient_checkpointing(1)));
  // Below checkpointing's high-water mark: no activation plan fits with the state on the device.
  const size_t budget = gc.high_water_bytes - gc.high_water_bytes / 20;
  const PlanResult without = plan_for_budget(base, TierBudgets{budget, 0, 0});
  ASSERT_FALSE(without.found);
  const PlanResult pr = plan_for_budget(base, TierBudgets{budget, size_t(1) << 30, 0});
  ASSERT_TRUE(pr.found) << pr.label;
  // A level on every group, or one on some layers (state_layers_test covers which); or the layers'
  // trainable weights paged from the host (layer_offloading, the full fine-tune's other host-tier
  // answer: paging_ft_test.cpp), whichever the forecast finds faster.
  if (!pr.plan.pages_layer_weights()) {
    EXPECT_TRUE(!pr.plan.state.empty() || pr.plan.state_layers > 0) << pr.label;
    EXPECT_TRUE(pr.label.find("state on host") != std::string::npos || pr.label.find(" layers") != std::string::npos)
        << pr.label;
    EXPECT_GT(pr.forecast.state_host_bytes, 0u);
  } else {
    EXPECT_GT(pr.forecast.paged_host_bytes, 0u) << pr.label;
  }
  EXPECT_LE(pr.forecast.peak_bytes, budget);
  ForecastRequest chosen = sim_twin::tiny_request(pr.plan);  // its layer_weights included
  const sim_twin::CpuStep cpu = sim_twin::cpu_step(chosen, budget, pr.plan);
  ASSERT_TRUE(cpu.fits) << pr.label;
  EXPECT_EQ(cpu.peak, pr.forecast.peak_bytes);
  EXPECT_EQ(cpu.host_peak, pr.forecast.peak_host_bytes);
  // The written config carries the state table; strata-train reads back the same decisions.
  TrainConfig tc;
  apply_yaml_text(tc, plan_yaml(chosen, pr.plan, pr.forecast, budget), "plan.yaml");
  EXPECT_EQ(tc.plan.layer_weights, pr.plan.layer_weights);
  const int L = test_util::tiny_config().num_hidden_layers;
  for (const char* g : {"L0", "L1", "L2", "L3", "embed", "head", "final_norm"})
    for (const char* k : kStateKinds) {
      const std::string cls = std::string(g) + "." + k;
      const int l = g[0] == 'L' ? g[1] - '0' : -1;
      EXPECT_EQ(tc.plan.decide_state(cls, l, L), pr.plan.decide_state(cls, l, L)) << cls;
    }
}

TEST(StateTiers, YamlKeysSetTheStateTableAfterThePresetsWhateverTheirOrder) {
  TrainConfig a;
  apply_yaml_text(a, "state_plan:\n  \"L0.grad\": keep\nstate_offloading: all\ngradient_checkpointing: true\n",
                  "s.yaml");
  EXPECT_EQ(a.plan.checkpoint_every, 1);
  EXPECT_EQ(a.plan.decide_state("L0.grad"), Decision::keep);  // the explicit table comes first
  EXPECT_EQ(a.plan.decide_state("L1.grad"), Decision::host);
  EXPECT_EQ(a.plan.decide_state("embed.adam.v"), Decision::host);
  TrainConfig b;
  apply_yaml_text(b, "state_offloading: optimizer\n", "s.yaml");
  EXPECT_EQ(b.plan.decide_state("L2.adam.m"), Decision::host);
  EXPECT_EQ(b.plan.decide_state("L2.w.master"), Decision::keep);
  for (const char* bad :
       {"state_offloading: everything\n", "state_plan:\n  \"L*.adam.m\": recompute\n", "state_plan: [a]\n"}) {
    TrainConfig c;
    try {
      apply_yaml_text(c, bad, "s.yaml");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("s.yaml"), std::string::npos) << e.what();
    }
  }
}
