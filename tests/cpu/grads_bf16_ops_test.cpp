// gradients: bf16 (engine/state_recipe.h), op by op, on the cpu backend: every op that writes a
// parameter gradient, given a bf16 one, writes its f32 term rounded to nearest even once per write:
// bf16(term) when it overwrites (whatever the buffer held), bf16(old + term) when it adds; the LM head
// once per chunk (each chunk is one GEMM on cuda), the embedding once per op over the rows its tokens
// hit. Odd shapes throughout. The norm and AdamW read bf16 gradients widened. Then the config keys, the
// flags' contradiction with grad_reduce_dtype, the plan's YAML and the checkpoint's config. The plans and
// tiers with bf16 gradients are in grads_bf16_plans_test.cpp; the cuda kernels in
// tests/gpu/grads_bf16_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/backend.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/checkpoint.h"
#include "model/run/train_config.h"
#include "model/run/train_loop.h"
#include "model/train/trainer.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"
#include "tests/cpu/tool_runner.h"

using namespace strata;

namespace {

std::vector<float> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(scale * r.normal());
  return v;
}

// Random bf16 bits (an old gradient to add into), and bits that are NaN (an overwrite must not read them).
std::vector<uint16_t> bf16_of(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  return h;
}

struct Fixture {
  std::unique_ptr<Backend> be = make_cpu_backend(size_t(64) << 20);
  std::vector<Buffer> keep;
  Tensor f32(const std::vector<float>& h, Shape s) {
    keep.emplace_back(be->arena(), DType::f32, s, "test");
    std::memcpy(keep.back().view().data, h.data(), h.size() * 4);
    return keep.back().view();
  }
  Tensor i32(const std::vector<int32_t>& h) {
    keep.emplace_back(be->arena(), DType::i32, Shape{int64_t(h.size())}, "test");
    std::memcpy(keep.back().view().data, h.data(), h.size() * 4);
    return keep.back().view();
  }
  Tensor bf16(const std::vector<uint16_t>& h, Shape s) {
    keep.emplace_back(be->arena(), DType::bf16, s, "test");
    std::memcpy(keep.back().view().data, h.data(), h.size() * 2);
    return keep.back().view();
  }
  static std::vector<float> read_f32(const Tensor& t) {
    std::vector<float> h(size_t(t.numel()));
    std::memcpy(h.data(), t.data, h.size() * 4);
    return h;
  }
  static std::vector<uint16_t> read_bf16(const Tensor& t) {
    std::vector<uint16_t> h(size_t(t.numel()));
    std::memcpy(h.data(), t.data, h.size() * 2);
    return h;
  }
};

// A gradient op run three ways on the same inputs: into an f32 gradient (overwrite: its term), into a
// bf16 one full of NaN (overwrite), and into a bf16 one holding `old` (add). `run(g, acc)` runs the op.
template <class Run>
void expect_rounded_once(Fixture& f, Shape shape, Run run, const std::string& what) {
  const size_t n = size_t(shape.numel());
  const Tensor g32 = f.f32(std::vector<float>(n, 12345.0f), shape);
  run(g32, false);
  const std::vector<float> term = Fixture::read_f32(g32);
  const Tensor over = f.bf16(std::vector<uint16_t>(n, 0x7fc1), shape);  // NaN: an overwrite never reads it
  run(over, false);
  const std::vector<float> old_f = randn(n, 77, 0.5);
  const std::vector<uint16_t> old = bf16_of(old_f);
  const Tensor add = f.bf16(old, shape);
  run(add, true);
  const std::vector<uint16_t> o = Fixture::read_bf16(over), a = Fixture::read_bf16(add);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(o[i], f32_to_bf16(term[i])) << what << ": overwrite, element " << i;
    ASSERT_EQ(a[i], f32_to_bf16(bf16_to_f32(old[i]) + term[i])) << what << ": add, element " << i;
    nonzero += term[i] != 0.0f && f32_to_bf16(term[i]) != 0;
  }
  EXPECT_GT(nonzero, n / 2) << what << ": the op wrote (almost) nothing";
}

}  // namespace

TEST(GradsBf16Ops, LinearWeightGradientIsTheF32GemmRoundedOnce) {
  Fixture f;
  const int N = 7, I = 13, O = 11;
  const Tensor x = f.f32(randn(size_t(N) * I, 1), Shape{N, I}), w = f.f32(randn(size_t(O) * I, 2), Shape{O, I});
  const Tensor dy = f.f32(randn(size_t(N) * O, 3), Shape{N, O});
  expect_rounded_once(
      f, Shape{O, I}, [&](Tensor dw, bool acc) { f.be->linear_bwd(Tensor(), dw, dy, x, w, false, acc); }, "linear");
}

TEST(GradsBf16Ops, RmsnormWeightGradientIsTheF32SumRoundedOnce) {
  Fixture f;
  const int N = 6, C = 13;
  const Tensor x = f.f32(randn(size_t(N) * C, 4), Shape{N, C}), w = f.f32(randn(size_t(C), 5), Shape{C});
  const Tensor dy = f.f32(randn(size_t(N) * C, 6), Shape{N, C});
  Buffer out(f.be->arena(), DType::f32, Shape{N, C}, "t"), rstd(f.be->arena(), DType::f32, Shape{N}, "t");
  f.be->rmsnorm_fwd(out.view(), rstd.view(), x, w, 1e-5f);
  expect_rounded_once(
      f, Shape{C}, [&](Tensor dw, bool acc) { f.be->rmsnorm_bwd(Tensor(), dw, dy, x, w, rstd.view(), false, acc); },
      "rmsnorm");
}

TEST(GradsBf16Ops, BiasGradientIsTheF32ColumnSumRoundedOnce) {
  Fixture f;
  const int N = 9, O = 7;
  const Tensor dy = f.f32(randn(size_t(N) * O, 8), Shape{N, O});
  expect_rounded_once(
      f, Shape{O}, [&](Tensor db, bool acc) { f.be->bias_bwd(db, dy, acc); }, "bias");
}

// Repeated tokens: a row's tokens are summed in fp32 first (in token order), then rounded once into it;
// rows no token hit keep their old value (add) or become zero (overwrite).
TEST(GradsBf16Ops, EmbeddingRowsAreSummedInF32ThenRoundedOnce) {
  Fixture f;
  const int N = 11, C = 9, V = 8;
  const std::vector<int32_t> tok = {3, 0, 5, 3, 1, 3, 2, 5, 0, 3, 6};  // rows 4 and 7 never hit
  const Tensor tokens = f.i32(tok), dout = f.f32(randn(size_t(N) * C, 9), Shape{N, C});
  const Shape s{V, C};
  const Tensor g32 = f.f32(std::vector<float>(size_t(V) * C, 1.0f), s);
  f.be->embedding_bwd(g32, dout, tokens, false);
  const std::vector<float> term = Fixture::read_f32(g32);
  const Tensor over = f.bf16(std::vector<uint16_t>(size_t(V) * C, 0x7fc1), s);
  f.be->embedding_bwd(over, dout, tokens, false);
  const std::vector<uint16_t> old = bf16_of(randn(size_t(V) * C, 10));
  const Tensor add = f.bf16(old, s);
  f.be->embedding_bwd(add, dout, tokens, true);
  const std::vector<uint16_t> o = Fixture::read_bf16(over), a = Fixture::read_bf16(add);
  const std::vector<float> d = Fixture::read_f32(dout);
  for (int v = 0; v < V; ++v)
    for (int c = 0; c < C; ++c) {
      const size_t i = size_t(v) * C + size_t(c);
      float sum = 0.0f;  // the row's tokens in order, from 0
      bool hit = false;
      for (int n = 0; n < N; ++n)
        if (tok[size_t(n)] == v) sum += d[size_t(n) * C + size_t(c)], hit = true;
      ASSERT_EQ(term[i], sum) << v << "," << c;
      ASSERT_EQ(o[i], f32_to_bf16(sum)) << "overwrite " << v << "," << c;
      ASSERT_EQ(a[i], hit ? f32_to_bf16(bf16_to_f32(old[i]) + sum) : old[i]) << "add " << v << "," << c;
    }
  EXPECT_EQ(o[4 * C], 0) << "a row no token hit is overwritten with zero";
}

// The LM head writes dw once per chunk (chunks after the first add, as cuda's per-chunk dw GEMMs with
// beta 1 do). Each chunk's f32 term is the f32 kernel on that chunk alone: with 4 valid targets in every
// chunk of 5 rows and dloss 1, the per-token scale is 1/16 both ways, exactly. A padded vocabulary's rows
// stay exact zeros. The training variant (gradient in forward) writes the same bits.
TEST(GradsBf16Ops, LmHeadWeightGradientIsRoundedOncePerChunk) {
  Fixture f;
  const int N = 20, C = 13, V = 37, vocab = 33, chunk = 5;
  std::vector<int32_t> tg(static_cast<size_t>(N));
  Rng r(11);
  for (int n = 0; n < N; ++n) tg[size_t(n)] = n % chunk == 2 ? -1 : r.below(vocab);
  std::vector<float> wh = randn(size_t(V) * C, 12, 0.3);
  std::fill(wh.begin() + size_t(vocab) * C, wh.end(), 0.0f);
  const std::vector<float> xh = randn(size_t(N) * C, 13);
  const Tensor x = f.f32(xh, Shape{N, C}), w = f.f32(wh, Shape{V, C}), targets = f.i32(tg);
  Buffer loss(f.be->arena(), DType::f32, Shape{1}, "t"), lse(f.be->arena(), DType::f32, Shape{N}, "t");
  f.be->lm_head_ce_fwd(loss.view(), lse.view(), x, w, targets, chunk, vocab);
  const std::vector<float> lse_h = Fixture::read_f32(lse.view());
  // Each chunk's term alone (f32, overwrite).
  std::vector<std::vector<float>> terms;
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const std::vector<float> xk(xh.begin() + r0 * C, xh.begin() + (r0 + chunk) * C);
    const std::vector<float> lk(lse_h.begin() + r0, lse_h.begin() + r0 + chunk);
    const std::vector<int32_t> tk(tg.begin() + r0, tg.begin() + r0 + chunk);
    const Tensor dwk = f.f32(std::vector<float>(size_t(V) * C, 7.0f), Shape{V, C});
    const Tensor dl = f.f32({0.25f}, Shape{1});
    f.be->lm_head_ce_bwd(Tensor(), dwk, dl, f.f32(xk, Shape{chunk, C}), w, f.i32(tk), f.f32(lk, Shape{chunk}), chunk,
                         vocab, false, false);
    terms.push_back(Fixture::read_f32(dwk));
  }
  const std::vector<uint16_t> old = bf16_of(randn(size_t(V) * C, 14, 0.1));
  for (bool acc : {false, true}) {
    // Overwriting, the first chunk writes bf16(0 + t): the loop below from +0 bits.
    std::vector<uint16_t> want = acc ? old : std::vector<uint16_t>(old.size(), 0);
    for (const auto& t : terms)
      for (size_t i = 0; i < want.size(); ++i) want[i] = f32_to_bf16(bf16_to_f32(want[i]) + t[i]);
    const Tensor dl = f.f32({1.0f}, Shape{1});
    const Tensor bwd = f.bf16(acc ? old : std::vector<uint16_t>(old.size(), 0x7fc1), Shape{V, C});
    f.be->lm_head_ce_bwd(Tensor(), bwd, dl, x, w, targets, lse.view(), chunk, vocab, false, acc);
    const Tensor fg = f.bf16(acc ? old : std::vector<uint16_t>(old.size(), 0x7fc1), Shape{V, C});
    Buffer loss2(f.be->arena(), DType::f32, Shape{1}, "t"), dx(f.be->arena(), DType::f32, Shape{N, C}, "t");
    f.be->lm_head_ce_fwd_grad(loss2.view(), dx.view(), fg, x, w, targets, chunk, vocab, 1.0f, acc);
    const std::vector<uint16_t> b = Fixture::read_bf16(bwd), g = Fixture::read_bf16(fg);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(b[i], want[i]) << "backward, acc " << acc << ", element " << i;
      ASSERT_EQ(g[i], want[i]) << "gradient in forward, acc " << acc << ", element " << i;
    }
    for (size_t i = size_t(vocab) * C; i < want.size() && !acc; ++i) ASSERT_EQ(b[i], 0) << "padded row element " << i;
    EXPECT_EQ(Fixture::read_f32(loss2.view())[0], Fixture::read_f32(loss.view())[0]);
  }
  // Rounding per chunk is not rounding once: some element tells them apart (the test can fail).
  size_t differ = 0;
  std::vector<uint16_t> per_chunk(old.size(), 0);
  for (const auto& t : terms)
    for (size_t i = 0; i < per_chunk.size(); ++i) per_chunk[i] = f32_to_bf16(bf16_to_f32(per_chunk[i]) + t[i]);
  for (size_t i = 0; i < per_chunk.size(); ++i) {
    float once = 0.0f;
    for (const auto& t : terms) once += t[i];
    differ += f32_to_bf16(once) != per_chunk[i];
  }
  EXPECT_GT(differ, 0u);
}

// The norm and AdamW read a bf16 gradient as its widened values: the same bits as an f32 copy of them.
TEST(GradsBf16Ops, NormAndAdamWReadBf16GradientsWidened) {
  Fixture f;
  const size_t n = 777;
  const std::vector<uint16_t> gb = bf16_of(randn(n, 20, 0.05));
  std::vector<float> gw(n);
  for (size_t i = 0; i < n; ++i) gw[i] = bf16_to_f32(gb[i]);
  const Tensor g16 = f.bf16(gb, Shape{int64_t(n)}), g32 = f.f32(gw, Shape{int64_t(n)});
  const Tensor n16 = f.f32({0.5f}, Shape{1}), n32 = f.f32({0.5f}, Shape{1});
  f.be->grad_norm_sq(n16, g16);
  f.be->grad_norm_sq_list(n32, {g32});
  EXPECT_EQ(Fixture::read_f32(n16)[0], Fixture::read_f32(n32)[0]);
  EXPECT_GT(Fixture::read_f32(n16)[0], 0.5f);
  for (DType mdt : {DType::f32, DType::bf16}) {
    const std::vector<float> w0 = randn(n, 21);
    Tensor wa = f.f32(w0, Shape{int64_t(n)}), wb = f.f32(w0, Shape{int64_t(n)});
    auto moments = [&] {
      f.keep.emplace_back(f.be->arena(), mdt, Shape{int64_t(n)}, "m");
      f.be->zero(f.keep.back().view());
      return f.keep.back().view();
    };
    const Tensor ma = moments(), va = moments(), mb = moments(), vb = moments();
    AdamWParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.1f;
    for (int t = 1; t <= 3; ++t) {
      f.be->adamw_step({wa, ma, va, g16, Tensor(), Tensor(), Tensor()}, n16, 0.3f, hp, t);
      f.be->adamw_step({wb, mb, vb, g32, Tensor(), Tensor(), Tensor()}, n32, 0.3f, hp, t);
    }
    EXPECT_EQ(std::memcmp(wa.data, wb.data, n * 4), 0) << dtype_name(mdt);
    EXPECT_EQ(std::memcmp(ma.data, mb.data, ma.bytes()), 0) << dtype_name(mdt);
    EXPECT_EQ(std::memcmp(va.data, vb.data, va.bytes()), 0) << dtype_name(mdt);
    EXPECT_NE(std::memcmp(wa.data, w0.data(), n * 4), 0) << "the step moved the weights";
  }
}

TEST(GradsBf16Ops, ConfigKeysFlagsAndTheirErrors) {
  TrainConfig c;
  EXPECT_EQ(c.recipe.gradients, GradPrecision::fp32);
  apply_yaml_text(c, "gradients: bf16\n", "g.yaml");
  EXPECT_EQ(c.recipe.gradients, GradPrecision::bf16);
  EXPECT_EQ(grad_dtype(c.recipe), DType::bf16);
  EXPECT_EQ(effective_grad_reduce(c), DType::bf16) << "bf16 gradients are summed in bf16";
  auto e = test_util::catch_as<ConfigError>([&] { apply_yaml_text(c, "gradients: fp16\n", "g.yaml"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, "g.yaml");
  EXPECT_EQ(e->field, "gradients");
  EXPECT_NE(std::string(e->what()).find("fp32 or bf16"), std::string::npos) << e->what();
  EXPECT_THROW(parse_gradients("BF16", "--gradients"), ConfigError);
  for (GradPrecision g : {GradPrecision::fp32, GradPrecision::bf16})
    EXPECT_EQ(parse_gradients(gradients_name(g), "x"), g);
  // grad_reduce_dtype: bf16 agrees with bf16 gradients; an explicit fp32 contradicts them.
  TrainConfig ok;
  apply_yaml_text(ok, "gradients: bf16\ngrad_reduce_dtype: bf16\n", "g.yaml");
  EXPECT_EQ(effective_grad_reduce(ok), DType::bf16);
  TrainConfig bad;
  e = test_util::catch_as<ConfigError>(
      [&] { apply_yaml_text(bad, "grad_reduce_dtype: fp32\ngradients: bf16\n", "g.yaml"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "grad_reduce_dtype");
  EXPECT_NE(std::string(e->what()).find("g.yaml:1: grad_reduce_dtype is fp32"), std::string::npos) << e->what();
  // The same from a flag after the file (as strata-train applies them), and the default says nothing.
  TrainConfig flag;
  apply_yaml_text(flag, "gradients: bf16\n", "g.yaml");
  EXPECT_NO_THROW(check_grad_reduce(flag));
  flag.grad_reduce = DType::f32;
  flag.grad_reduce_origin = Origin::flag("grad-reduce");
  e = test_util::catch_as<ConfigError>([&] { check_grad_reduce(flag); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "grad-reduce");
  EXPECT_THROW(train_options(flag), ConfigError);
  // fp32 gradients: grad_reduce_dtype as given.
  TrainConfig f32;
  apply_yaml_text(f32, "grad_reduce_dtype: bf16\n", "g.yaml");
  EXPECT_EQ(effective_grad_reduce(f32), DType::bf16);
  EXPECT_EQ(train_options(f32).optimizer.reduce_dtype, DType::bf16);
  EXPECT_EQ(model_options(ok).recipe.gradients, GradPrecision::bf16);
}

// strata-plan --write-config carries the gradients key (alone, or with the rest of the recipe); strata-train
// reads it back. A checkpoint's config names it outside must_match: gradients are never saved.
TEST(GradsBf16Ops, PlanYamlAndCheckpointConfigCarryTheKey) {
  for (StateRecipe r : {StateRecipe{MasterWeights::fp32, OptimizerState::fp32, GradPrecision::bf16},
                        StateRecipe{MasterWeights::none, OptimizerState::q8, GradPrecision::bf16}}) {
    ForecastRequest req = sim_twin::tiny_request(Plan::gradient_checkpointing(1));
    req.recipe = r;
    const Forecast fc = forecast(req);
    ASSERT_TRUE(fc.fits) << fc.oom;
    const std::string y = plan_yaml(req, req.plan, fc, 0);
    EXPECT_NE(y.find("gradients: bf16\n"), std::string::npos) << y;
    TrainConfig back;
    apply_yaml_text(back, y, "plan.yaml");
    EXPECT_EQ(back.recipe, r);
  }
  TrainConfig c;
  c.recipe.gradients = GradPrecision::bf16;
  const nlohmann::json j = nlohmann::json::parse(checkpoint_config_json(c, test_util::tiny_config(), 10));
  EXPECT_EQ(j["config"]["gradients"], "bf16");
  EXPECT_FALSE(j["must_match"].contains("gradients"));
  EXPECT_EQ(j["must_match"]["optimizer_state"], "fp32");
}

// A checkpoint saved with fp32 gradients resumes with bf16 ones (and the weights and state come back bit for
// bit); the optimizer state's precision still has to match.
TEST(GradsBf16Ops, ResumeMayChangeTheGradientPrecision) {
  const std::string dir = ::testing::TempDir() + "grads_bf16_resume";
  std::filesystem::remove_all(dir);
  const io::LlamaConfig mc = test_util::tiny_config();
  TrainConfig cfg32, cfg16;
  cfg16.recipe.gradients = GradPrecision::bf16;
  std::string path;
  std::vector<std::vector<float>> saved;
  {
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel model(*be, mc, model_options(cfg32));
    model.init_random(3);
    Trainer tr(*be, model, train_options(cfg32));
    TokenBatcher data(synthetic_tokens(4000, mc.vocab_size, 3), 2, 19);
    tr.step(data.next());
    CheckpointWrite w;
    w.config_json = checkpoint_config_json(cfg32, mc, 10);
    path = save_checkpoint(dir, *be, model, CheckpointState{1, {}, 0, 5, 1.0f}, w);
    for (auto& p : model.params()) saved.emplace_back(Fixture::read_f32(p.m.view()));
  }
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, mc, model_options(cfg16));
  model.init_random(4);
  const CheckpointState st = load_checkpoint(path, *be, model, checkpoint_config_json(cfg16, mc, 10));
  EXPECT_EQ(st.step, 1);
  for (size_t i = 0; i < saved.size(); ++i)
    EXPECT_EQ(Fixture::read_f32(model.params()[i].m.view()), saved[i]) << model.params()[i].name;
  Trainer tr(*be, model, train_options(cfg16));
  tr.set_steps_done(st.step);
  TokenBatcher data(synthetic_tokens(4000, mc.vocab_size, 3), 2, 19);
  EXPECT_TRUE(std::isfinite(tr.step(data.next()).loss));
  EXPECT_EQ(model.params()[0].grad.view().dtype, DType::bf16);
  TrainConfig q8 = cfg16;
  q8.recipe.moments = OptimizerState::q8;
  LlamaModel other(*be, mc, model_options(q8));
  EXPECT_THROW(load_checkpoint(path, *be, other, checkpoint_config_json(q8, mc, 10)), FormatError);
  std::filesystem::remove_all(dir);
}

// The tools take --gradients, say it and run it; a contradicting --grad-reduce fp32 exits 2 naming it.
TEST(GradsBf16Tools, FlagsReachTheToolsAndContradictionsExit2) {
  using namespace tool_test;
  ASSERT_TRUE(tools_built());
  Scratch sc;
  sc.create("grads_bf16_tools");
  ASSERT_TRUE(sc.ok());
  const std::string m = sc.path("tiny");
  ASSERT_EQ(sc.run(kMakeTiny + " " + quote(m) + " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 " +
                   "--vocab 64 --tokens 5000")
                .code,
            0);
  const std::string train = kTrain + " --model " + quote(m) + " --data " + quote(m + "/tokens.bin") + " --backend cpu ";
  Proc t = sc.run(train + "--steps 2 --seq 16 --json --gradients bf16");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.err.find("gradients bf16"), std::string::npos) << t.err;
  EXPECT_EQ(lines(t.out).size(), 2u) << t.out;
  Proc contra = sc.run(train + "--gradients bf16 --grad-reduce fp32");
  EXPECT_EQ(contra.code, 2) << contra.err;
  EXPECT_NE(contra.err.find("--grad-reduce is fp32, but gradients: bf16"), std::string::npos) << contra.err;
  Proc bad = sc.run(train + "--gradients fp16");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--gradients"), std::string::npos) << bad.err;
  const std::string plan = kPlan + " --model tiny --mirror cpu --device-name cpu --seq 16 --json ";
  Proc p16 = sc.run(plan + "--gradients bf16"), p32 = sc.run(plan);
  ASSERT_EQ(p16.code, 0) << p16.err;
  ASSERT_EQ(p32.code, 0) << p32.err;
  const nlohmann::json a = nlohmann::json::parse(p16.out), b = nlohmann::json::parse(p32.out);
  EXPECT_EQ(a["gradients"], "bf16");
  EXPECT_EQ(b["gradients"], "fp32");
  EXPECT_LT(a["forecast"]["persistent_bytes"].get<size_t>(), b["forecast"]["persistent_bytes"].get<size_t>());
  Proc pc = sc.run(plan + "--gpus 2 --gradients bf16 --grad-reduce fp32");
  EXPECT_EQ(pc.code, 2) << pc.err;
  EXPECT_NE(pc.err.find("--grad-reduce"), std::string::npos) << pc.err;
  Proc bench =
      sc.run(kBench + " --model " + quote(m) + " --seq 16 --steps 1 --warmup 0 --backend cpu --gradients bf16");
  ASSERT_EQ(bench.code, 0) << bench.err;
  EXPECT_EQ(nlohmann::json::parse(lines(bench.out).back())["gradients"], "bf16");
  sc.remove();
}
