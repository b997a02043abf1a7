// Every memory plan must give the same losses and gradients as keep-everything, bit for bit on
// cpu, while lowering the peak; and no slot may outlive a step, an evaluation or an exception.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>

#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/slot_store.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/train/trainer.h"
#include "tests/cpu/run_result.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;

namespace {

using test_util::capture;
using test_util::expect_bit_identical;
using test_util::RunResult;

using test_util::tiny_config;

RunResult run(const Plan& plan, ModelOptions mo = {}, int steps = 3, bool log = false) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, tiny_config(), mo);
  model.init_random(11);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.plan = plan;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  RunResult r;
  be->arena().set_logging(log);
  for (int s = 0; s < steps; ++s) {
    StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.peak = std::max(r.peak, st.peak_device_bytes);
    r.recomputed += st.recomputed_nodes;
  }
  capture(r, *be, model);
  return r;
}

TEST(Plans, PresetsAreBitIdenticalToKeepEverythingAndLowerThePeak) {
  RunResult keep = run(Plan::keep_everything());
  EXPECT_EQ(keep.recomputed, 0);
  EXPECT_LT(keep.losses.back(), keep.losses.front() + 1.0f);
  for (const Plan& p :
       {Plan::gradient_checkpointing(1), Plan::gradient_checkpointing(2), Plan::selective_recompute()}) {
    RunResult r = run(p);
    expect_bit_identical(keep, r, p.preset);
    EXPECT_GT(r.recomputed, 0) << p.preset << " recomputed nothing";
    EXPECT_LT(r.peak, keep.peak) << p.preset << " did not lower the peak";
  }
}

TEST(Plans, CheckpointingEveryTwoLayersReplaysLongerSegments) {
  RunResult keep = run(Plan::keep_everything());
  RunResult g1 = run(Plan::gradient_checkpointing(1));
  RunResult g2 = run(Plan::gradient_checkpointing(2));
  // Odd layers' inputs are dropped too, so their replays run through the layer before.
  EXPECT_GT(g2.recomputed, g1.recomputed);
  EXPECT_LT(g2.peak, keep.peak);
}

TEST(Plans, RandomPerClassPlansAreBitIdentical) {
  RunResult keep = run(Plan::keep_everything(), {}, 2);
  // The slot classes of this model.
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, tiny_config(), {});
  Trainer tr(*be, model, {});
  std::vector<PlanRow> rows = tr.plan_table(2, 19);
  ASSERT_GT(rows.size(), 10u);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Rng rng(seed);
    Plan p;
    p.preset = "random";
    for (int l = 0; l < tiny_config().num_hidden_layers; ++l)
      for (auto& r : rows) {
        std::string cls = r.cls.rfind("L*", 0) == 0 ? fmt::format("L{}{}", l, r.cls.substr(2)) : r.cls;
        p.add(cls, rng.below(2) ? Decision::recompute : Decision::keep);
      }
    expect_bit_identical(keep, run(p, {}, 2), "random plan " + std::to_string(seed));
  }
}

TEST(Plans, LoraAndFrozenBaseAreBitIdenticalUnderCheckpointing) {
  ModelOptions lora;
  lora.train_base = false;
  lora.lora.rank = 4;
  lora.lora.target_modules = {"q_proj", "v_proj", "down_proj"};
  expect_bit_identical(run(Plan::keep_everything(), lora), run(Plan::gradient_checkpointing(1), lora), "lora+gc");
  ModelOptions frozen;
  frozen.train_base = false;
  frozen.train_norms = true;
  RunResult fk = run(Plan::keep_everything(), frozen);
  expect_bit_identical(fk, run(Plan::gradient_checkpointing(1), frozen), "frozen+gc");
  // A frozen linear saves nothing but its weight: the frozen run keeps fewer bytes than full finetune.
  EXPECT_LT(fk.peak, run(Plan::keep_everything()).peak);
}

TEST(Plans, EventLogShowsRecomputedSlotsLeavingAndComingBack) {
  RunResult keep = run(Plan::keep_everything(), {}, 1, true);
  RunResult gc = run(Plan::gradient_checkpointing(1), {}, 1, true);
  // keep: each slot allocated once; checkpointing: dropped in forward, rebuilt in backward.
  EXPECT_EQ(keep.allocs_per_tag["L1.mlp.gate"], 1);
  EXPECT_EQ(gc.allocs_per_tag["L1.mlp.gate"], 2);
  EXPECT_EQ(gc.allocs_per_tag["L1.input"], 1) << "a kept layer input must not be rebuilt";
  EXPECT_EQ(gc.allocs_per_tag["final_norm.out"], 1);
}

TEST(Tape, NoSlotOutlivesAStepAnEvaluationOrAnException) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, tiny_config(), {});
  model.init_random(5);
  TrainOptions to;
  to.plan = Plan::gradient_checkpointing(1);
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  tr.step(data.next());  // allocates the batch buffers once
  const size_t base = be->arena().in_use();
  tr.step(data.next());
  EXPECT_EQ(be->arena().in_use(), base);
  tr.evaluate(data.next());
  EXPECT_EQ(be->arena().in_use(), base);
  EXPECT_TRUE(tr.tape().nodes().empty());
  Batch bad = data.next();
  bad.targets[5] = 61;  // >= vocab_size
  EXPECT_THROW(tr.step(bad), ConfigError);
  EXPECT_EQ(be->arena().in_use(), base);
  EXPECT_TRUE(tr.tape().values().empty());
}

// Backward overwrites each gradient at its first write and zeroes none up front: whatever the
// parameter gradients held before (NaN here) must not reach the step's gradients, tied
// embeddings (two writers of one gradient) and adapters included.
TEST(Tape, StaleGradientsNeverLeakIntoAStep) {
  ModelOptions lora;
  lora.train_base = false;
  lora.lora.rank = 4;
  lora.lora.target_modules = {"q_proj", "down_proj"};
  for (bool tied : {false, true})
    for (const ModelOptions& mo : {ModelOptions{}, lora}) {
      io::LlamaConfig c = tiny_config();
      c.tie_word_embeddings = tied;
      std::vector<std::vector<float>> grads[2];
      for (int poison = 0; poison < 2; ++poison) {
        auto be = make_cpu_backend(size_t(64) << 20);
        LlamaModel model(*be, c, mo);
        model.init_random(11);
        Trainer tr(*be, model, {});
        TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
        if (poison)
          for (auto& p : model.params())
            if (p.trainable) be->fill(p.grad.view(), std::numeric_limits<float>::quiet_NaN());
        tr.compute_gradients(data.next());
        for (auto& p : model.params()) {
          if (!p.trainable) continue;
          grads[poison].emplace_back(size_t(p.shape.numel()));
          be->download_f32(grads[poison].back().data(), p.grad.view());
        }
      }
      const std::string what = std::string(tied ? "tied" : "untied") + (mo.lora.enabled() ? " lora" : " full");
      ASSERT_EQ(grads[0].size(), grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i)
        EXPECT_EQ(std::memcmp(grads[0][i].data(), grads[1][i].data(), grads[0][i].size() * 4), 0)
            << what << ": gradient " << i << " differs after stale contents";
    }
}

// A node that reads one value twice writes two gradients into it: both add, into a zeroed one.
TEST(Tape, AValueReadTwiceByOneNodeGetsBothGradients) {
  const int N = 5, C = 8, V = 11;
  auto be = make_cpu_backend(size_t(16) << 20);
  Rng rng(3);
  std::vector<float> xh(size_t(N) * C), wh(size_t(V) * C), yh(xh.size());
  for (auto& v : xh) v = float(rng.normal());
  for (auto& v : wh) v = float(0.3 * rng.normal());
  for (size_t i = 0; i < xh.size(); ++i) yh[i] = xh[i] + 0.5f * xh[i];  // add_fwd's y = x + 0.5 x
  const std::vector<int32_t> th = {3, 0, 10, 7, 7};
  Buffer x(be->arena(), DType::f32, Shape{N, C}, "x"), y(be->arena(), DType::f32, Shape{N, C}, "y"),
      w(be->arena(), DType::f32, Shape{V, C}, "w"), tgt(be->arena(), DType::i32, Shape{N}, "t"),
      dx(be->arena(), DType::f32, Shape{N, C}, "dx"), dy(be->arena(), DType::f32, Shape{N, C}, "dy");
  be->upload_f32(x.view(), xh.data());
  be->upload_f32(y.view(), yh.data());
  be->upload_f32(w.view(), wh.data());
  be->upload_i32(tgt.view(), th.data());
  auto grad = [&](bool twice) {
    Tape t(*be);
    TapeGuard guard(t);
    Tensor g = twice ? dx.view() : dy.view();
    be->fill(g, std::numeric_limits<float>::quiet_NaN());  // stale: must be zeroed, not added to
    VId in = t.param(twice ? "x" : "y", twice ? x.view() : y.view(), g);
    VId h = twice ? ops::add(t, in, in, 0.5f, "h") : in;
    ops::lm_head_ce(t, h, t.param("w", w.view(), Tensor()), t.input("targets", tgt.view()), 4);
    t.apply_plan(Plan::keep_everything());
    t.forward();
    t.backward();
    std::vector<float> out(size_t(N) * C);
    be->download_f32(out.data(), g);
    return out;
  };
  const std::vector<float> gy = grad(false), gx = grad(true);
  for (size_t i = 0; i < gx.size(); ++i) {
    const float want = (0.0f + gy[i]) + 0.5f * gy[i];  // add_bwd: da = dout, then db += 0.5 dout
    EXPECT_EQ(std::memcmp(&gx[i], &want, 4), 0) << i << ": " << gx[i] << " vs " << want;
  }
}

// Dispatch: an op the backend does not run in the input's element type fails when it is recorded,
// naming the op, the input and what the backend runs.
TEST(Tape, UnsupportedOpFailsAtRecordNamingItAndWhatTheBackendRuns) {
  auto be = make_cpu_backend(size_t(16) << 20);
  EXPECT_TRUE(be->supports(OpKind::linear, DType::f32));
  EXPECT_FALSE(be->supports(OpKind::linear, DType::bf16));
  Buffer x(be->arena(), DType::bf16, Shape{4, 8}, "x"), w(be->arena(), DType::f32, Shape{3, 8}, "w");
  Tape t(*be);
  TapeGuard guard(t);
  VId xi = t.input("L0.h", x.view()), wi = t.param("w", w.view(), Tensor());
  try {
    ops::linear(t, xi, wi, "L0.y");
    FAIL() << "a bf16 linear on the cpu backend must be refused";
  } catch (const UnsupportedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the cpu backend has no bf16 linear (input 'L0.h')"), std::string::npos) << m;
    EXPECT_NE(m.find("it runs: embedding f32, rmsnorm f32, linear f32"), std::string::npos) << m;
  }
  // The same op in f32 records.
  Buffer xf(be->arena(), DType::f32, Shape{4, 8}, "xf");
  EXPECT_GE(ops::linear(t, t.input("L0.hf", xf.view()), wi, "L0.yf"), 0);
}

TEST(Plans, HostDecisionsNeedASlotStore) {
  // A bare tape (no Trainer, so no slot store) refuses host/disk decisions by name.
  Plan p;
  p.add("L*.mlp.up", Decision::host);
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, tiny_config(), {});
  Tape tape(*be);
  Buffer tok(be->arena(), DType::i32, Shape{8}, "t"), tgt(be->arena(), DType::i32, Shape{8}, "t"),
      pos(be->arena(), DType::i32, Shape{8}, "t");
  model.build(tape, tok.view(), tgt.view(), pos.view(), 1, 8);
  try {
    tape.apply_plan(p);
    FAIL() << "a host decision without a slot store must be refused";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("L0.mlp.up"), std::string::npos) << e.what();
  }
}

}  // namespace

// The engine reads the model's marks, never the class names: a graph whose layer inputs are named
// "block<i>.in" (no "L<n>.input" anywhere) and marked with Tape::mark_layer_input gets gradient
// checkpointing's segment boundaries from the marks; a value named like a layer input but not
// marked is just another slot; the head's values (begin_head) and the last layer's input are never
// sent to a tier whatever they are called.
TEST(Plans, LayerInputsAndTheHeadComeFromTheModelsMarksNotTheirNames) {
  auto be = make_cpu_backend(size_t(16) << 20);
  Tape t(*be);
  SlotStore store(*be, TierOptions{});
  t.set_store(&store);
  Buffer w(be->arena(), DType::f32, Shape{8, 8}, "w"), g(be->arena(), DType::f32, Shape{8, 8}, "g");
  Buffer xin(be->arena(), DType::f32, Shape{4, 8}, "x");
  be->fill(w.view(), 0.01f), be->fill(xin.view(), 1.0f);
  VId x = t.input("x", xin.view());
  VId wp = t.param("w", w.view(), g.view());
  std::vector<VId> inputs;
  for (int i = 0; i < 6; ++i) {
    x = ops::linear(t, x, wp, fmt::format("block{}.in", i));
    t.mark_layer_input(x, i);
    inputs.push_back(x);
  }
  VId decoy = ops::linear(t, x, wp, "L2.input");  // looks like a layer input; not marked
  t.begin_head();
  VId head = ops::linear(t, decoy, wp, "logits");
  t.set_loss(head);
  Plan p = Plan::gradient_checkpointing(2);
  p.add("*", Decision::recompute);
  t.apply_plan(p);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(t.value(inputs[size_t(i)]).decision, i % 2 == 0 ? Decision::keep : Decision::recompute)
        << "block" << i << ".in";
  EXPECT_EQ(t.value(decoy).decision, Decision::recompute) << "a name alone makes no layer input";
  Plan host = Plan::activation_offloading(Decision::host);
  t.apply_plan(host);
  EXPECT_EQ(t.value(inputs[4]).decision, Decision::host);
  EXPECT_EQ(t.value(inputs[5]).decision, Decision::keep) << "the last layer's input stays";
  EXPECT_TRUE(t.value(head).head);
  EXPECT_EQ(t.value(head).decision, Decision::keep) << "the head's values stay";
}
