// The LM head's training variant (ops::lm_head_ce with grad_in_forward: the gradients are formed
// in forward from the logits computed there, so backward recomputes none) against the recomputing
// path: the same losses, gradients and weights bit for bit on cpu, with untied and tied heads, a
// frozen head, LoRA, ignored targets and a ragged last loss chunk, under recompute and offload
// plans too. And the tape's guarantees around it: its outputs are never replayed or moved,
// evaluation never uses it, a loss gradient other than the seed is scaled (frozen head) or
// refused (the weight gradient was written for the seed). The sim forecasts the saved GEMMs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "engine/backend.h"
#include "engine/ops.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/shapes.h"
#include "model/plan/forecast.h"
#include "model/train/trainer.h"
#include "tests/cpu/run_result.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;

namespace {

using test_util::capture;
using test_util::expect_bit_identical;
using test_util::RunResult;

ModelOptions frozen_options() {
  ModelOptions mo;
  mo.train_base = false;  // the head is frozen: the variant must write no weight gradient
  mo.train_norms = true;
  return mo;
}

ModelOptions lora_options() {
  ModelOptions mo;
  mo.train_base = false;
  mo.lora.rank = 4;
  mo.lora.target_modules = {"q_proj", "down_proj"};
  return mo;
}

// Steps of the tiny model: B*T = 38 tokens in loss chunks of 16 (16, 16 and a ragged 6), some
// targets ignored (-100), chosen per step.
RunResult run(bool variant, const Plan& plan, ModelOptions mo = {}, bool tied = false, int steps = 2) {
  auto be = make_cpu_backend(size_t(64) << 20);
  io::LlamaConfig c = test_util::tiny_config();
  c.tie_word_embeddings = tied;
  mo.loss_chunk_tokens = 16;
  mo.loss_grad_in_forward = variant;
  LlamaModel model(*be, c, mo);
  model.init_random(11);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.plan = plan;
  to.tiers.offload_dir = ::testing::TempDir();
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, c.vocab_size, 3), 2, 19);
  be->arena().set_logging(true);
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    Batch b = data.next();
    for (int i : {0, 5, 20 + s, 37}) b.targets[size_t(i)] = -100;
    StepStats st = tr.step(b);
    r.losses.push_back(st.loss);
    r.recomputed += st.recomputed_nodes;
  }
  capture(r, *be, model);
  return r;
}

TEST(LossGradInForward, MatchesTheRecomputingPathBitForBit) {
  const int steps = 2;
  for (bool tied : {false, true})
    for (const auto& [name, mo] : {std::pair{"full", ModelOptions{}}, std::pair{"frozen", frozen_options()},
                                   std::pair{"lora", lora_options()}}) {
      const std::string what = std::string(tied ? "tied " : "untied ") + name;
      RunResult old_path = run(false, Plan::keep_everything(), mo, tied, steps);
      RunResult variant = run(true, Plan::keep_everything(), mo, tied, steps);
      expect_bit_identical(old_path, variant, what);
      EXPECT_LT(variant.losses.back(), variant.losses.front() + 1.0f) << what;
      // The variant saves dx instead of x and lse; the old path the other way round.
      EXPECT_EQ(variant.allocs_per_tag["loss.dx"], steps) << what;
      EXPECT_EQ(variant.allocs_per_tag["loss.lse"], 0) << what;
      EXPECT_EQ(old_path.allocs_per_tag["loss.lse"], steps) << what;
      EXPECT_EQ(old_path.allocs_per_tag["loss.dx"], 0) << what;
    }
}

TEST(LossGradInForward, MatchesKeepEverythingUnderRecomputeAndOffloadPlans) {
  Plan everything;  // asks to recompute every saved slot, the loss's included: the tape keeps loss.dx
  everything.preset = "recompute everything";
  everything.add("*", Decision::recompute);
  Plan loss_to_host;  // asks to offload loss.dx: kept as well (backward reads it first)
  loss_to_host.preset = "loss.* on the host";
  loss_to_host.add("loss.*", Decision::host);
  loss_to_host.add("L*", Decision::host);
  for (bool tied : {false, true}) {
    RunResult keep = run(false, Plan::keep_everything(), {}, tied);
    for (const Plan& p :
         {Plan::gradient_checkpointing(1), Plan::gradient_checkpointing(2), Plan::selective_recompute(),
          Plan::hidden_states(), Plan::activation_offloading(Decision::host), everything, loss_to_host}) {
      const std::string what = std::string(tied ? "tied " : "untied ") + p.preset;
      RunResult r = run(true, p, {}, tied);
      expect_bit_identical(keep, r, what);
      EXPECT_EQ(r.allocs_per_tag["loss.dx"], 2) << what << ": loss.dx must be allocated once per step, never rebuilt";
      EXPECT_EQ(r.allocs_per_tag["loss.logits_chunk"], 0) << what;  // cpu: no in-op allocations
    }
  }
  // Frozen and LoRA under checkpointing.
  expect_bit_identical(run(false, Plan::keep_everything(), frozen_options()),
                       run(true, Plan::gradient_checkpointing(1), frozen_options()), "frozen gc");
  expect_bit_identical(run(false, Plan::keep_everything(), lora_options()),
                       run(true, Plan::gradient_checkpointing(1), lora_options()), "lora gc");
}

TEST(LossGradInForward, PlanTableKeepsLossDxAndSavesNeitherXNorLse) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, test_util::tiny_config(), {});
  TrainOptions to;
  to.plan.add("*", Decision::recompute);
  Trainer tr(*be, model, to);
  std::map<std::string, std::string> rows;
  for (auto& r : tr.plan_table(2, 19)) rows[r.cls] = r.decision;
  EXPECT_EQ(rows["loss.dx"], "keep") << "its producer wrote gradients in forward: never replayed";
  EXPECT_EQ(rows.count("loss.lse"), 0u);
  EXPECT_EQ(rows.count("final_norm.out"), 0u) << "the LM head's input is no longer saved";
  EXPECT_EQ(rows["L*.mlp.gate"], "recompute");
}

TEST(LossGradInForward, EvaluationUsesTheRecomputingForwardAndWritesNoGradient) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, test_util::tiny_config(), {});
  model.init_random(3);
  Trainer tr(*be, model, TrainOptions{});
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  Batch b = data.next();
  b.targets[3] = -100;
  for (auto& p : model.params()) be->fill(p.grad.view(), std::numeric_limits<float>::quiet_NaN());
  be->arena().set_logging(true);
  const float eval_loss = tr.evaluate(b);
  for (auto& e : be->arena().events()) EXPECT_NE(e.tag, "loss.dx") << "evaluation ran the training variant";
  for (auto& p : model.params()) {
    std::vector<float> g(size_t(p.shape.numel()));
    be->download_f32(g.data(), p.grad.view());
    for (float x : g) ASSERT_TRUE(std::isnan(x)) << p.name << ": evaluation wrote a gradient";
  }
  const float train_loss = tr.compute_gradients(b);
  EXPECT_EQ(std::memcmp(&eval_loss, &train_loss, 4), 0) << eval_loss << " vs " << train_loss;
}

// A hand-made graph whose loss reads the LM head's loss twice (L = 2 * lm_head_ce): the head's
// loss gradient is 2, not the seed 1 its forward assumed.
struct TwiceGraph {
  static constexpr int N = 7, C = 8, V = 11;
  std::unique_ptr<Backend> be = make_cpu_backend(size_t(16) << 20);
  Buffer x{be->arena(), DType::f32, Shape{N, C}, "x"}, w{be->arena(), DType::f32, Shape{V, C}, "w"},
      tgt{be->arena(), DType::i32, Shape{N}, "t"}, dx{be->arena(), DType::f32, Shape{N, C}, "dx"},
      dw{be->arena(), DType::f32, Shape{V, C}, "dw"};
  TwiceGraph() {
    std::vector<float> xh(size_t(N) * C), wh(size_t(V) * C);
    for (size_t i = 0; i < xh.size(); ++i) xh[i] = float(std::sin(0.7 * double(i)));
    for (size_t i = 0; i < wh.size(); ++i) wh[i] = float(0.4 * std::cos(1.3 * double(i)));
    const std::vector<int32_t> th = {3, -100, 10, 7, 0, 7, -100};
    be->upload_f32(x.view(), xh.data());
    be->upload_f32(w.view(), wh.data());
    be->upload_i32(tgt.view(), th.data());
  }
  // dx (and dw when the head trains) after one forward + backward; `variant` asks for grad_in_forward.
  std::vector<float> grads(bool variant, bool train_head, std::string* tags = nullptr) {
    Tape t(*be);
    TapeGuard guard(t);
    VId xv = t.param("x", x.view(), dx.view());
    VId wv = t.param("w", w.view(), train_head ? dw.view() : Tensor());
    VId l = ops::lm_head_ce(t, xv, wv, t.input("targets", tgt.view()), 3, variant);
    t.set_loss(ops::add(t, l, l, 1.0f, "twice"));
    if (tags)
      for (auto& v : t.values()) *tags += v.cls + " ";
    t.apply_plan(Plan::keep_everything());
    t.forward();
    t.backward();
    std::vector<float> out(size_t(N) * C + (train_head ? size_t(V) * C : 0));
    be->download_f32(out.data(), dx.view());
    if (train_head) be->download_f32(out.data() + size_t(N) * C, dw.view());
    return out;
  }
};

TEST(LossGradInForward, ALossGradientOtherThanTheSeedIsScaledOrRefused) {
  TwiceGraph g;
  // Frozen head: only dx depends on the loss gradient, and backward scales it (by 2: exact).
  std::string tags;
  const std::vector<float> want = g.grads(false, false), got = g.grads(true, false, &tags);
  EXPECT_NE(tags.find("loss.dx"), std::string::npos) << tags;
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << "dx scaled by the real loss gradient";
  // Trainable head: dw was written in forward for a gradient of 1; backward must refuse.
  const size_t before = g.be->arena().in_use();
  try {
    g.grads(true, true);
    FAIL() << "a loss gradient of 2 after dw was written for 1 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grad_in_forward"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g.be->arena().in_use(), before);
  // The recomputing path handles it.
  const std::vector<float> old_path = g.grads(false, true);
  for (float v : old_path) ASSERT_TRUE(std::isfinite(v));
}

TEST(LossGradInForward, FallsBackWhereTheVariantDoesNotApply) {
  // x without a gradient (nothing to deliver in backward), or a head weight that is not a
  // parameter but wants a gradient: the recomputing path, which saves lse.
  auto be = make_cpu_backend(size_t(16) << 20);
  Buffer x(be->arena(), DType::f32, Shape{4, 8}, "x"), w(be->arena(), DType::f32, Shape{5, 8}, "w"),
      p(be->arena(), DType::f32, Shape{8, 8}, "p"), dp(be->arena(), DType::f32, Shape{8, 8}, "dp"),
      dw(be->arena(), DType::f32, Shape{5, 8}, "dw"), tgt(be->arena(), DType::i32, Shape{4}, "t");
  auto classes = [&](bool x_grad, bool w_computed) {
    Tape t(*be);
    TapeGuard guard(t);
    VId xv = t.input("x", x.view());
    if (x_grad) xv = ops::linear(t, xv, t.param("p", p.view(), dp.view()), "h");
    VId wv = t.param("w", w.view(), dw.view());
    if (w_computed) wv = ops::linear(t, wv, t.param("q", p.view(), Tensor()), "w2");
    ops::lm_head_ce(t, xv, wv, t.input("targets", tgt.view()), 2, true);
    std::string out;
    for (auto& v : t.values()) out += v.cls + " ";
    return out;
  };
  EXPECT_NE(classes(false, false).find("loss.lse"), std::string::npos) << "x without a gradient";
  EXPECT_NE(classes(true, true).find("loss.lse"), std::string::npos) << "a computed head weight";
  EXPECT_NE(classes(true, false).find("loss.dx"), std::string::npos) << "the variant applies";
}

// The sim forecasts the variant: per chunk one logits GEMM fewer (the recompute), the dx and dw
// GEMMs moved to forward; it saves dx instead of x and lse. Llama-3.2-1B, 4096 tokens, cuda mirror.
TEST(LossGradInForward, SimForecastDropsOneLogitsGemmPerChunk) {
  ForecastRequest r;
  r.model = builtin_shape("Llama-3.2-1B");
  r.seq = 4096;
  r.loss_chunk_tokens = 512;
  r.profile = find_profile("h100_80gb");
  r.mirror = SimMirror::cuda;
  Forecast with = forecast(r);
  r.loss_grad_in_forward = false;
  Forecast without = forecast(r);
  ASSERT_TRUE(with.fits && without.fits);
  const CostModel cost(r.profile);
  const double n = 512, V = r.model.vocab_size, C = r.model.hidden_size;
  const double logits_gemm = 8 * cost.gemm(n, V, C, n * C * 2 + V * C * 2 + n * V * 4);
  const double saved_s = without.step_s - with.step_s;
  EXPECT_GT(saved_s, 0.9 * logits_gemm) << "forecast " << without.step_s << " s -> " << with.step_s << " s";
  EXPECT_LT(saved_s, 1.1 * logits_gemm) << "forecast " << without.step_s << " s -> " << with.step_s << " s";
  EXPECT_EQ(with.recompute_s, 0);
  // x [N, C] bf16 and lse [N] f32 saved before; dx [N, C] bf16 now.
  EXPECT_EQ(without.saved_bytes - with.saved_bytes, size_t(4096) * 4);
  std::printf("[ sim ] 1B 4096: step %.2f ms -> %.2f ms; peak %s -> %s\n", without.step_s * 1e3, with.step_s * 1e3,
              format_bytes(without.peak_bytes).c_str(), format_bytes(with.peak_bytes).c_str());
}

}  // namespace
