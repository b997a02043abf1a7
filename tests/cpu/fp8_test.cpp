// fp8: true (engine/fp8.h, engine/ops/linear_fp8.cpp) on the cpu backend, which emulates the FP8 codes the cuda
// backend's kernels write:
//  - the codecs: every code decodes and encodes back to itself, rounding is to nearest even, values past the finite
//    range saturate, and the scale puts the amax on the largest finite value;
//  - the FP8 linear layer's forward and gradients are within the error the formats allow of the exact ones;
//  - a model trained with fp8 gives bit-identical losses and weights under every activation plan, the sim
//    forecasts its cpu peaks byte for byte, its saved projection inputs take 1 byte an element, and its losses stay
//    within a stated distance of full precision.
#include "engine/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend.h"
#include "engine/op_scratch.h"
#include "engine/ops.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/shapes.h"
#include "model/plan/forecast.h"
#include "model/train/trainer.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
using fp8::Format;

namespace {

TEST(Fp8Codec, EveryFiniteCodeRoundTrips) {
  for (Format f : {Format::e4m3, Format::e5m2}) {
    int finite = 0;
    for (int c = 0; c < 256; ++c) {
      const float v = fp8::decode(uint8_t(c), f);
      if (!std::isfinite(v)) continue;
      ++finite;
      const uint8_t back = fp8::encode(v, f);
      if (v == 0.0f)
        EXPECT_EQ(back & 0x7f, 0) << c;  // +-0
      else
        EXPECT_EQ(back, c) << "format " << int(f) << " code " << c << " value " << v;
    }
    EXPECT_EQ(finite, f == Format::e4m3 ? 254 : 248);  // E4M3: two NaNs; E5M2: two infinities and six NaNs
  }
}

// fp8_cast with kScaleGiven writes the codes at the scale already in sb and leaves sb as it was: a kept block's
// replay reproduces the first cast's codes, and a different block gives codes at its own scale.
TEST(Fp8Codec, AGivenScaleBlockIsReadNotWritten) {
  auto be = make_cpu_backend(size_t(16) << 20);
  const int R = 32, C = 48;
  std::vector<float> x(size_t(R) * C);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float& v : x) v = nd(rng);
  Buffer bx(be->arena(), DType::f32, {R, C}, "x"), q(be->arena(), DType::u8, {R, C}, "q"),
      qt(be->arena(), DType::u8, {C, R}, "qt"), sb(be->arena(), DType::f32, {4}, "sb"),
      q2(be->arena(), DType::u8, {R, C}, "q2"), qt2(be->arena(), DType::u8, {C, R}, "qt2");
  be->upload_f32(bx.view(), x.data());
  be->fp8_cast(q.view(), qt.view(), sb.view(), bx.view(), uint8_t(fp8::Format::e4m3));
  const uint8_t given = uint8_t(fp8::Format::e4m3) | fp8::kScaleGiven;
  be->fp8_cast(q2.view(), qt2.view(), sb.view(), bx.view(), given);
  auto bytes = [&](const Buffer& b) {
    const auto* p = static_cast<const uint8_t*>(b.view().data);
    return std::vector<uint8_t>(p, p + b.view().bytes());
  };
  EXPECT_EQ(bytes(q2), bytes(q));
  EXPECT_EQ(bytes(qt2), bytes(qt));
  float block[4];
  be->download_f32(block, sb.view());
  const float scale = block[fp8::kScale];
  const float half[4] = {2.0f / scale, scale / 2, block[fp8::kAmax], 0.0f};
  be->upload_f32(sb.view(), half);
  be->fp8_cast(q2.view(), Tensor(), sb.view(), bx.view(), given);
  float after[4];
  be->download_f32(after, sb.view());
  EXPECT_EQ(std::memcmp(after, half, sizeof half), 0) << "a given block is not written";
  std::vector<uint8_t> want(size_t(R) * C);
  fp8::encode_all(x.data(), R, C, fp8::Format::e4m3, scale / 2, want.data(), nullptr);
  EXPECT_EQ(bytes(q2), want);
  EXPECT_NE(bytes(q2), bytes(q));
}

TEST(Fp8Codec, KnownValuesRoundingAndSaturation) {
  EXPECT_EQ(fp8::decode(0x7e, Format::e4m3), 448.0f);
  EXPECT_EQ(fp8::decode(0x7b, Format::e5m2), 57344.0f);
  EXPECT_EQ(fp8::decode(0x01, Format::e4m3), std::ldexp(1.0f, -9));   // the smallest subnormal
  EXPECT_EQ(fp8::decode(0x01, Format::e5m2), std::ldexp(1.0f, -16));  // the same in E5M2
  EXPECT_EQ(fp8::encode(1.0f, Format::e4m3), 0x38);
  EXPECT_EQ(fp8::encode(1.0625f, Format::e4m3), 0x38);  // halfway between 1 and 1.125: to the even code
  EXPECT_EQ(fp8::encode(1.1875f, Format::e4m3), 0x3a);  // halfway between 1.125 and 1.25: to the even code
  EXPECT_EQ(fp8::encode(1.05f, Format::e4m3), 0x38);
  EXPECT_EQ(fp8::encode(1.07f, Format::e4m3), 0x39);
  EXPECT_EQ(fp8::encode(1.1f, Format::e4m3), 0x39);
  EXPECT_EQ(fp8::encode(-1.0f, Format::e5m2), 0xbc);
  EXPECT_EQ(fp8::encode(1e6f, Format::e4m3), 0x7e);  // saturates to the finite maximum
  EXPECT_EQ(fp8::encode(-INFINITY, Format::e4m3), 0xfe);
  EXPECT_EQ(fp8::encode(1e9f, Format::e5m2), 0x7b);
  EXPECT_TRUE(std::isnan(fp8::decode(fp8::encode(NAN, Format::e4m3), Format::e4m3)));
  EXPECT_EQ(fp8::encode(std::ldexp(1.0f, -11), Format::e4m3), 0x00);  // a quarter of the smallest: to zero
  EXPECT_EQ(fp8::encode(std::ldexp(3.0f, -10), Format::e4m3), 0x02);  // 1.5 subnormal quanta: to the even one
  EXPECT_EQ(fp8::encode(std::ldexp(5.0f, -10), Format::e4m3), 0x02);  // 2.5 quanta: to the even one
  EXPECT_EQ(fp8::scale_for(2.0f, Format::e4m3), 224.0f);
  EXPECT_EQ(fp8::scale_for(0.0f, Format::e4m3), 1.0f);
  EXPECT_EQ(fp8::scale_for(INFINITY, Format::e5m2), 1.0f);
}

TEST(Fp8Codec, QuantizeScalesToTheAmaxAndTransposes) {
  const int R = 16, C = 32;
  std::vector<float> x(size_t(R) * C);
  std::mt19937 rng(3);
  for (float& v : x) v = std::uniform_real_distribution<float>(-3.0f, 3.0f)(rng);
  x[37] = -5.0f;  // the amax
  std::vector<uint8_t> q(x.size()), qt(x.size());
  float sb[fp8::kScaleFloats];
  fp8::quantize(x.data(), R, C, Format::e4m3, q.data(), qt.data(), sb);
  EXPECT_EQ(sb[fp8::kAmax], 5.0f);
  EXPECT_EQ(sb[fp8::kScale], 448.0f / 5.0f);
  EXPECT_EQ(sb[fp8::kInvScale], 1.0f / sb[fp8::kScale]);
  EXPECT_EQ(q[37], 0xfe);  // -448
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(q[size_t(r) * C + c], qt[size_t(c) * R + r]);
      const float back = fp8::decode(q[size_t(r) * C + c], Format::e4m3) * sb[fp8::kInvScale], v = x[size_t(r) * C + c];
      EXPECT_LE(std::fabs(back - v), std::fabs(v) * 0.0625f + 1e-6f);  // half an ulp of 3 mantissa bits
    }
}

// The linear layer through the op table: forward against the exact product, gradients against the exact ones,
// within the formats' rounding: each operand element carries at most a relative error u (2^-4 E4M3, 2^-3 E5M2;
// their values are in the normal range here), so |error| <= (u_a + u_b + u_a u_b) sum |a_i b_i| (+ fp32 sums).
TEST(Fp8Linear, WithinTheFormatsErrorOfTheExactGemms) {
  auto be = make_cpu_backend(size_t(64) << 20);
  const int N = 48, I = 80, O = 112;
  std::mt19937 rng(7);
  auto fill = [&](std::vector<float>& v, float lo, float hi) {
    for (float& e : v) {
      const float m = std::uniform_real_distribution<float>(lo, hi)(rng);
      e = std::bernoulli_distribution(0.5)(rng) ? m : -m;
    }
  };
  std::vector<float> x(size_t(N) * I), w(size_t(O) * I), dy(size_t(N) * O);
  fill(x, 0.1f, 1.0f), fill(w, 0.01f, 0.05f), fill(dy, 1e-4f, 1e-3f);  // magnitudes within 10x: all normal codes
  auto buf = [&](DType t, Shape s, const char* tag) { return Buffer(be->arena(), t, s, tag); };
  Buffer bx = buf(DType::f32, {N, I}, "x"), bw = buf(DType::f32, {O, I}, "w"), bdy = buf(DType::f32, {N, O}, "dy");
  Buffer x8 = buf(DType::u8, {N, I}, "x8"), x8t = buf(DType::u8, {I, N}, "x8t");
  Buffer w8 = buf(DType::u8, {O, I}, "w8"), w8t = buf(DType::u8, {I, O}, "w8t");
  Buffer sx = buf(DType::f32, {fp8::kScaleFloats}, "sx"), sw = buf(DType::f32, {fp8::kScaleFloats}, "sw");
  Buffer y = buf(DType::f32, {N, O}, "y");
  Buffer dx = buf(DType::f32, {N, I}, "dx"), dw = buf(DType::f32, {O, I}, "dw");
  be->upload_f32(bx.view(), x.data());
  be->upload_f32(bw.view(), w.data());
  be->upload_f32(bdy.view(), dy.data());
  be->fp8_cast(x8.view(), x8t.view(), sx.view(), bx.view(), uint8_t(Format::e4m3));
  be->fp8_cast(w8.view(), w8t.view(), sw.view(), bw.view(), uint8_t(Format::e4m3));
  be->linear_fp8_fwd(y.view(), x8.view(), sx.view(), w8.view(), sw.view());
  be->linear_fp8_bwd(dx.view(), dw.view(), bdy.view(), x8t.view(), sx.view(), w8t.view(), sw.view(), false, false);
  std::vector<float> gy(size_t(N) * O), gdx(size_t(N) * I), gdw(size_t(O) * I);
  be->download_f32(gy.data(), y.view());
  be->download_f32(gdx.data(), dx.view());
  be->download_f32(gdw.data(), dw.view());
  const double u4 = 1.0 / 16, u5 = 1.0 / 8, eps = 1e-5;
  double worst = 0;  // the largest error as a share of its bound: > 0 shows the codes changed something
  auto check = [&](double got, double exact, double abs_sum, double ua, double ub, const char* what, size_t i) {
    const double bound = (ua + ub + ua * ub) * abs_sum + eps * abs_sum;
    ASSERT_LE(std::fabs(got - exact), bound) << what << " " << i;
    worst = std::max(worst, std::fabs(got - exact) / bound);
  };
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      double e = 0, a = 0;
      for (int i = 0; i < I; ++i) e += double(x[n * I + i]) * w[o * I + i], a += std::fabs(x[n * I + i] * w[o * I + i]);
      check(gy[size_t(n) * O + o], e, a, u4, u4, "y", size_t(n) * O + o);
    }
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < I; ++i) {
      double e = 0, a = 0;
      for (int o = 0; o < O; ++o)
        e += double(dy[n * O + o]) * w[o * I + i], a += std::fabs(dy[n * O + o] * w[o * I + i]);
      check(gdx[size_t(n) * I + i], e, a, u5, u4, "dx", size_t(n) * I + i);
    }
  for (int o = 0; o < O; ++o)
    for (int i = 0; i < I; ++i) {
      double e = 0, a = 0;
      for (int n = 0; n < N; ++n)
        e += double(dy[n * O + o]) * x[n * I + i], a += std::fabs(dy[n * O + o] * x[n * I + i]);
      check(gdw[size_t(o) * I + i], e, a, u5, u4, "dw", size_t(o) * I + i);
    }
  EXPECT_GT(worst, 1e-3);
}

// ---- the model

struct TrainRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  size_t peak = 0, saved_end_of_forward = 0;
};

TrainRun train(bool fp8, const Plan& plan, int steps = 3, TrainMode mode = TrainMode::full,
               const io::LlamaConfig& cfg = test_util::tiny_config()) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.fp8 = fp8;
  mo.loss_chunk_tokens = 16;
  if (mode == TrainMode::lora) {
    mo.train_base = false;
    mo.lora.rank = 4;
  }
  LlamaModel model(*be, cfg, mo);
  model.init_random(11);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.plan = plan;
  to.tiers.offload_dir = ::testing::TempDir();
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(6000, cfg.vocab_size, 3), 2, 16);
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    const StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.peak = std::max(r.peak, st.peak_device_bytes);
    r.saved_end_of_forward = tr.tape().stats().saved_bytes_at_end_of_forward;
  }
  model.sync_state();
  for (const Parameter& p : model.params()) {
    std::vector<float> v(size_t(p.shape.numel()));
    be->download_f32(v.data(), p.value());
    r.weights.push_back(std::move(v));
  }
  return r;
}

TEST(Fp8Model, EveryPlanGivesTheSameLossesAndWeights) {
  const TrainRun keep = train(true, Plan::keep_everything());
  for (const auto& [name, plan] :
       std::vector<std::pair<std::string, Plan>>{{"gc1", Plan::gradient_checkpointing(1)},
                                                 {"gc2", Plan::gradient_checkpointing(2)},
                                                 {"selective", Plan::selective_recompute()},
                                                 {"offload", Plan::activation_offloading(Decision::host)},
                                                 {"disk", Plan::activation_offloading(Decision::disk)}}) {
    const TrainRun r = train(true, plan);
    ASSERT_EQ(r.losses.size(), keep.losses.size());
    EXPECT_EQ(std::memcmp(r.losses.data(), keep.losses.data(), 4 * r.losses.size()), 0) << name;
    ASSERT_EQ(r.weights.size(), keep.weights.size());
    for (size_t i = 0; i < r.weights.size(); ++i) EXPECT_EQ(r.weights[i], keep.weights[i]) << name << " weight " << i;
  }
}

// Each FP8 weight's codes are slots of the tape ("<projection class>.wfp8", ".wfp8t", ".wfp8.scale"): keep holds the
// transposed codes from forward to backward, exactly their bytes more than casting them again in backward
// (recompute); on the host or the disk tier they come back; the scale blocks stay on the device whatever the plan
// says (Op::keep_output); every placement trains bit for bit alike, as does paging the layer weights (the casts read
// the paged-in weight).
TEST(Fp8Model, WeightCodesAreSlotsEveryPlacementTrainsAlike) {
  const TrainRun keep = train(true, Plan::keep_everything());
  size_t codes = 0;  // the transposed codes of every projection FP8 takes
  const auto cfg = test_util::tiny_config();
  const int64_t h = cfg.hidden_size, q = int64_t(cfg.num_attention_heads) * cfg.head_dim,
                kv = int64_t(cfg.num_key_value_heads) * cfg.head_dim, f = cfg.intermediate_size;
  for (int64_t n : {q * h, kv * h, kv * h, h * q, f * h, f * h, h * f}) codes += size_t(n);
  codes *= size_t(cfg.num_hidden_layers);
  ASSERT_EQ(fp8_projections(cfg, 32), 7) << "the tiny model's projections all take FP8 at 32 tokens";
  std::vector<std::pair<std::string, Plan>> plans;
  for (const auto& [name, d] : std::vector<std::pair<std::string, Decision>>{
           {"recompute", Decision::recompute}, {"host", Decision::host}, {"disk", Decision::disk}}) {
    Plan p = Plan::keep_everything();
    p.overrides = {{"*.wfp8t", d}, {"*.wfp8.scale", d}};
    plans.emplace_back(name, p);
  }
  Plan paged = Plan::keep_everything();
  paged.set_layer_weights(Decision::page, "test");
  plans.emplace_back("paged", paged);
  Plan paged_gc = Plan::gradient_checkpointing(1);
  paged_gc.set_layer_weights(Decision::page, "test");
  plans.emplace_back("paged gc", paged_gc);
  for (const auto& [name, plan] : plans) {
    const TrainRun r = train(true, plan);
    EXPECT_EQ(std::memcmp(r.losses.data(), keep.losses.data(), 4 * r.losses.size()), 0) << name;
    ASSERT_EQ(r.weights.size(), keep.weights.size());
    for (size_t i = 0; i < r.weights.size(); ++i) EXPECT_EQ(r.weights[i], keep.weights[i]) << name << " weight " << i;
    if (name == "recompute") {
      EXPECT_EQ(keep.saved_end_of_forward - r.saved_end_of_forward, codes);
    }
  }
}

// Every projection with a bias (Qwen2's q/k/v, Llama's attention_bias and mlp_bias) and Qwen3's q/k norms: the
// bias is added after the FP8 GEMM and its gradient taken from the bf16 output gradient, under every plan alike.
TEST(Fp8Model, BiasesAndQkNormsTrainAlikeUnderEveryPlan) {
  io::LlamaConfig cfg = test_util::tiny_config();
  cfg.qkv_bias = cfg.o_bias = cfg.mlp_bias = true;
  cfg.qk_norm = true;
  ASSERT_EQ(fp8_projections(cfg, 32), 7);
  const TrainRun keep = train(true, Plan::keep_everything(), 3, TrainMode::full, cfg);
  const TrainRun plain = train(false, Plan::keep_everything(), 3, TrainMode::full, cfg);
  for (size_t s = 0; s < keep.losses.size(); ++s)
    EXPECT_NEAR(keep.losses[s], plain.losses[s], 0.02 * plain.losses[s]) << "step " << s;
  EXPECT_NE(keep.losses, plain.losses) << "fp8 ran no FP8 GEMM";
  for (const Plan& plan : {Plan::gradient_checkpointing(1), Plan::selective_recompute()}) {
    const TrainRun r = train(true, plan, 3, TrainMode::full, cfg);
    EXPECT_EQ(std::memcmp(r.losses.data(), keep.losses.data(), 4 * r.losses.size()), 0) << plan.preset;
    for (size_t i = 0; i < r.weights.size(); ++i) EXPECT_EQ(r.weights[i], keep.weights[i]) << plan.preset << " " << i;
  }
}

TEST(Fp8Model, ChangesTheTrainingWithinTheFormatsReach) {
  const TrainRun f32 = train(false, Plan::keep_everything(), 5), q = train(true, Plan::keep_everything(), 5);
  bool differs = false;
  for (size_t s = 0; s < f32.losses.size(); ++s) {
    differs = differs || f32.losses[s] != q.losses[s];
    EXPECT_NEAR(q.losses[s], f32.losses[s], 0.02 * f32.losses[s]) << "step " << s;
  }
  EXPECT_TRUE(differs) << "fp8 ran no FP8 GEMM";
  // Each projection input is saved as 1-byte codes where full precision saved 4-byte floats (cpu) for them.
  EXPECT_LT(q.saved_end_of_forward, f32.saved_end_of_forward);
}

TEST(Fp8Model, LoraTrainsTheAdaptersOverFp8BaseProjections) {
  const TrainRun f32 = train(false, Plan::keep_everything(), 3, TrainMode::lora);
  const TrainRun q = train(true, Plan::keep_everything(), 3, TrainMode::lora);
  bool differs = false;
  for (size_t s = 0; s < q.losses.size(); ++s) {
    differs = differs || f32.losses[s] != q.losses[s];
    EXPECT_NEAR(q.losses[s], f32.losses[s], 0.02 * f32.losses[s]) << "step " << s;
  }
  EXPECT_TRUE(differs);
}

TEST(Fp8Model, TheSimForecastsTheCpuPeaksByteForByte) {
  Plan codes_out = Plan::keep_everything();
  codes_out.overrides = {{"*.wfp8t", Decision::host}, {"*.fp8t", Decision::recompute}};
  for (const auto& [name, plan] :
       std::vector<std::pair<std::string, Plan>>{{"keep", Plan::keep_everything()},
                                                 {"gc1", Plan::gradient_checkpointing(1)},
                                                 {"offload", Plan::activation_offloading(Decision::host)},
                                                 {"weight codes on the host", codes_out}}) {
    ForecastRequest r = sim_twin::tiny_request(plan);
    r.seq = 16;
    r.fp8 = true;
    const Forecast f = forecast(r);
    const sim_twin::CpuStep cpu = sim_twin::cpu_step(r, sim_twin::kBudget, plan);
    ASSERT_TRUE(cpu.fits) << name;
    EXPECT_EQ(f.peak_bytes, cpu.peak) << name;
    EXPECT_EQ(f.high_water_bytes, cpu.high_water) << name;
    ForecastRequest plain = r;
    plain.fp8 = false;
    EXPECT_NE(forecast(plain).peak_bytes, f.peak_bytes) << name << ": fp8 changed nothing the sim sees";
  }
}

// Recompute neither casts an amax again nor writes a code twice: under gradient checkpointing the first forward leaves
// the transposed codes unwritten (backward replays their casts), and each replay casts from the scale block kept
// since forward, in one pass without the amax's scratch. So the step takes the amax scratch and the transposed
// codes' slots exactly as often as keep-everything does, and never allocates a scale block twice.
TEST(Fp8Model, RecomputeCastsFromTheKeptScaleAndWritesNoCodeTwice) {
  auto count = [](const Forecast& f, auto pred) {
    long n = 0;
    for (size_t i = f.step_first_event; i < f.events.size(); ++i) n += f.events[i].delta > 0 && pred(f.events[i].tag);
    return n;
  };
  auto amax = [](const std::string& t) { return t == scratch_tag::fp8_amax; };
  auto transposed = [](const std::string& t) { return t.ends_with("fp8t"); };
  auto scale = [](const std::string& t) { return t.ends_with("fp8.scale"); };
  for (const Plan& plan : {Plan::gradient_checkpointing(1), Plan::gradient_checkpointing(2), Plan::hidden_states()}) {
    ForecastRequest r = sim_twin::tiny_cuda_request(Plan::keep_everything());
    r.seq = 16;
    r.fp8 = true;
    const Forecast keep = forecast(r);
    r.plan = plan;
    const Forecast f = forecast(r);
    EXPECT_GT(f.recompute_s, 0) << plan.preset;
    EXPECT_GT(count(keep, amax), 0);
    EXPECT_EQ(count(f, amax), count(keep, amax)) << plan.preset;
    EXPECT_GT(count(keep, transposed), 0);
    EXPECT_EQ(count(f, transposed), count(keep, transposed)) << plan.preset;
    EXPECT_GT(count(keep, scale), 0);
    EXPECT_EQ(count(f, scale), count(keep, scale)) << plan.preset;
  }
}

// The cuda mirror prices the FP8 GEMMs at the FP8 rate: the same step forecasts faster with fp8 on a shape whose
// GEMMs dominate, and takes the casts' scratch.
TEST(Fp8Model, TheCudaForecastTakesTheFp8Rate) {
  ForecastRequest r = sim_twin::tiny_cuda_request(Plan::keep_everything());
  r.model.hidden_size = 2048, r.model.intermediate_size = 8192, r.model.num_attention_heads = 16;
  r.model.num_key_value_heads = 8, r.model.head_dim = 128, r.model.vocab_size = 4096;
  r.seq = 2048, r.batch = 1, r.loss_chunk_tokens = 1024;
  const Forecast bf16 = forecast(r);
  r.fp8 = true;
  const Forecast q = forecast(r);
  // The forward casts each weight in both layouts (the transpose kept for backward under this plan), which at 2,048
  // tokens costs about what its FP8 GEMMs save; backward casts no weight, and the step is shorter.
  EXPECT_LT(q.backward_s, bf16.backward_s);
  EXPECT_LT(q.forward_s + q.backward_s, bf16.forward_s + bf16.backward_s)
      << "forward " << q.forward_s << " vs " << bf16.forward_s << ", backward " << q.backward_s << " vs "
      << bf16.backward_s;
  bool scratch = false;
  for (const auto& e : q.events) scratch = scratch || e.tag.rfind("fp8.", 0) == 0;
  EXPECT_TRUE(scratch) << "no FP8 scratch in the cuda mirror's schedule";
}

}  // namespace

namespace {

// A micro-batch whose token count is no multiple of 16 keeps every projection in bf16 (cuBLASLt's FP8 kernels need
// 16): fp8 then changes nothing, and the setup line says so.
TEST(Fp8Model, ShapesFp8CannotTakeStayBf16) {
  auto run = [](bool fp8) {
    auto be = make_cpu_backend(size_t(64) << 20);
    ModelOptions mo;
    mo.fp8 = fp8;
    LlamaModel model(*be, test_util::tiny_config(), mo);
    model.init_random(11);
    TrainOptions to;
    Trainer tr(*be, model, to);
    TokenBatcher data(synthetic_tokens(4000, test_util::tiny_config().vocab_size, 3), 2, 19);  // 38 tokens
    std::vector<float> losses;
    for (int s = 0; s < 2; ++s) losses.push_back(tr.step(data.next()).loss);
    return losses;
  };
  EXPECT_EQ(run(true), run(false));
  EXPECT_EQ(fp8_projections(test_util::tiny_config(), 38), 0);
  EXPECT_EQ(fp8_projections(test_util::tiny_config(), 32), 7);
  EXPECT_EQ(fp8_projections(test_util::tiny_config(), 32, true), 4);  // the tiled MLP's three stay bf16
  EXPECT_NE(fp8_line(true, test_util::tiny_config(), 38).find("in 0 of a layer's 7"), std::string::npos);
  EXPECT_NE(fp8_line(true, test_util::tiny_config(), 32).find("in 7 of a layer's 7"), std::string::npos);
  EXPECT_EQ(fp8_line(false, test_util::tiny_config(), 32), "projections: bf16 GEMMs\n");
}

}  // namespace
