// The state's precision (engine/state_recipe.h: master_weights, optimizer_state), on cpu:
// the 8-bit code maps against a reference built from their definition (levels from std::pow, the
// nearest level by brute force); the precision-generic AdamW step against the fp32 step applied
// element by element between the precision's own reads and writes; the device bytes each precision
// takes; and the config keys. The tiers' bit-exactness for each precision is in state_tiers_test.cpp;
// the cuda kernels against this reference in tests/gpu/kernels_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend.h"
#include "engine/names.h"
#include "kernels/adamw.h"
#include "kernels/quant8.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;

namespace {

// level(j) = 2^(-j/8) by its definition: 2^-floor(j/8) times 2^(-(j%8)/8) rounded to float once.
float ref_level(int j) {
  return std::ldexp(float(std::pow(2.0, -double(j % 8) / 8.0)), -(j / 8));
}

// The ladder index nearest to r by its definition: the midpoints between consecutive levels,
// rounded to float, bound each level's range; r on a midpoint goes to the smaller level. (Within
// half a float ulp of the exact midpoint this can differ from the exact nearest level.)
int ref_nearest(float r) {
  int j = 0;
  while (j < 400 && r <= float((double(ref_level(j)) + double(ref_level(j + 1))) / 2)) ++j;
  return j;
}

// Values are scaled by the block's reciprocal scale, 1 / absmax rounded to float, then encoded.
uint8_t ref_encode_signed(float x, float absmax) {
  if (x == 0.0f || absmax == 0.0f) return 0;
  const int j = ref_nearest(std::fabs(x) * (1.0f / absmax));
  const int k = j >= 127 ? 0 : 127 - j;
  return uint8_t((x < 0 && k ? 0x80 : 0) | k);
}

uint8_t ref_encode_unsigned(float x, float absmax) {
  if (!(x > 0.0f) || absmax == 0.0f) return 0;
  const int j = ref_nearest(x * (1.0f / absmax));
  return uint8_t(j >= 255 ? 1 : 255 - j);
}

std::vector<float> random_values(size_t n, uint64_t seed, double lo_exp, double hi_exp, bool signed_values) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = float(std::pow(10.0, lo_exp + (hi_exp - lo_exp) * rng.uniform()));
    if (signed_values && rng.uniform() < 0.5) x = -x;
  }
  return v;
}

}  // namespace

TEST(StatePrecision, LadderConstantsAreTheirDefinition) {
  for (int f = 0; f < 8; ++f) {
    EXPECT_EQ(q8::ladder(f), float(std::pow(2.0, -f / 8.0))) << f;
    const float next = f < 7 ? q8::ladder(f + 1) : 0.5f;
    EXPECT_EQ(q8::ladder_mid(f), float((double(q8::ladder(f)) + double(next)) / 2)) << f;
  }
  for (int j = 0; j < 300; ++j) EXPECT_EQ(q8::level(j), ref_level(j)) << j;
}

TEST(StatePrecision, EightBitCodesAreTheNearestLevel) {
  std::vector<float> xs = random_values(20000, 3, -12, 0, true);
  // Exact levels, exact midpoints (ties), their neighbours, the ends.
  for (int j = 0; j < 260; ++j) {
    const float a = ref_level(j), b = ref_level(j + 1), mid = float((double(a) + double(b)) / 2);
    for (float x : {a, b, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1.0f)}) xs.push_back(x), xs.push_back(-x);
  }
  xs.insert(xs.end(), {1.0f, -1.0f, 0.0f, 1e-38f, 1e-45f});
  size_t nonzero_signed = 0;
  for (float x : xs) {
    const uint8_t s = q8::encode_signed(x, 1.0f);
    ASSERT_EQ(s, ref_encode_signed(x, 1.0f)) << "signed " << x;
    if (x > 0) {  // braces: ASSERT_EQ is an if/else of its own (-Wdangling-else)
      ASSERT_EQ(q8::encode_unsigned(x, 1.0f), ref_encode_unsigned(x, 1.0f)) << "unsigned " << x;
    }
    const float back = q8::decode_signed(s, 1.0f);
    if (s & 0x7f) {
      ++nonzero_signed;
      EXPECT_LE(std::fabs(back - x), 0.0445 * std::fabs(x)) << x;
      EXPECT_EQ(std::signbit(back), std::signbit(x)) << x;
    } else {
      EXPECT_LT(std::fabs(x), ref_level(126)) << x;  // only values below the smallest level become zero
    }
  }
  EXPECT_GT(nonzero_signed, xs.size() / 4);  // values span 12 decades; the signed map covers the top 4.7
  // A positive second moment never becomes zero; a block's largest value is stored exactly.
  EXPECT_EQ(q8::encode_unsigned(1e-30f, 1.0f), 1);
  EXPECT_EQ(q8::decode_unsigned(q8::encode_unsigned(3.5f, q8::inverse_scale(3.5f)), 3.5f), 3.5f);
  EXPECT_EQ(q8::decode_signed(q8::encode_signed(-2.0f, q8::inverse_scale(2.0f)), 2.0f), -2.0f);
  // nearest_step reads a normal value's exponent and significand from its bits: frexpf's answer, over every
  // exponent a ratio can have, at the ladder's midpoints and their neighbours, the binade's ends and subnormals.
  const auto by_frexp = [](float r) {
    if (r >= 1.0f) return 0;
    if (!(r > 0.0f)) return 1 << 20;
    int ex = 0;
    const float m = std::frexp(r, &ex);
    int f = 0;
    for (int i = 0; i < 8; i++) f += q8::ladder_mid(i) >= m ? 1 : 0;
    return 8 * (-ex) + f;
  };
  for (int e = -150; e <= 1; ++e)
    for (float m0 : {0.5f, 0.75f, std::nextafter(1.0f, 0.0f), q8::ladder_mid(0), q8::ladder_mid(3), q8::ladder_mid(7)})
      for (float m : {m0, std::nextafter(m0, 0.0f), std::nextafter(m0, 1.0f)}) {
        const float r = std::ldexp(m, e);
        ASSERT_EQ(q8::nearest_step(r), by_frexp(r)) << "r " << r << " (2^" << e << " x " << m << ")";
      }
  // The table decodes (the cuda kernel's, from level(0..255) in shared memory) are the decodes, bit for bit.
  float levels[q8::kUnsignedTop + 1];
  for (int j = 0; j <= q8::kUnsignedTop; ++j) levels[j] = q8::level(j);
  for (float scale : {1.0f, 3.7e-3f, 2.5e4f, 7e-9f})
    for (int c = 0; c < 256; ++c) {
      const float a = q8::decode_signed(uint8_t(c), scale), b = q8::decode_signed(uint8_t(c), scale, levels);
      const float u = q8::decode_unsigned(uint8_t(c), scale), w = q8::decode_unsigned(uint8_t(c), scale, levels);
      ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << "signed code " << c << " scale " << scale;
      ASSERT_EQ(std::memcmp(&u, &w, 4), 0) << "unsigned code " << c << " scale " << scale;
    }
  // Scaled blocks: the code of x relative to absmax.
  for (float absmax : {100.0f, 3.0f, 7e-9f})
    for (float x : random_values(2000, 5, -8, 2, true)) {
      const float xs = x * absmax / 100.0f;
      ASSERT_EQ(q8::encode_signed(xs, q8::inverse_scale(absmax)), ref_encode_signed(xs, absmax)) << xs;
    }
}

// Several steps of the generic step against its definition: each element's moments (and weight,
// without a master) read in their precision, the fp32 step (cpu::adamw_step, one element), written
// back in their precision; 8-bit blocks take the block's largest updated magnitude as their scale.
TEST(StatePrecision, GenericStepIsTheFp32StepBetweenThePrecisionsReadsAndWrites) {
  AdamWParams hp;
  hp.lr = 3e-3f;
  hp.weight_decay = 0.1f;
  for (const size_t n : {size_t(1), size_t(255), size_t(256), size_t(1000), size_t(3 * 256 + 17)})
    for (OptimizerState os : {OptimizerState::fp32, OptimizerState::bf16, OptimizerState::q8})
      for (bool master : {true, false}) {
        const std::string tag = std::string(optimizer_state_name(os)) + (master ? " fp32 master" : " bf16 weights") +
                                " n=" + std::to_string(n);
        const size_t nb = quant_blocks(n);
        std::vector<float> w0 = random_values(n, 1, -2, 0, true);
        // Under test.
        std::vector<float> mst = w0;
        std::vector<uint16_t> wb(n);
        for (size_t i = 0; i < n; ++i) wb[i] = f32_to_bf16(w0[i]);
        const size_t elem = os == OptimizerState::fp32 ? 4 : os == OptimizerState::bf16 ? 2 : 1;
        std::vector<std::byte> m(n * elem), v(n * elem);
        std::vector<float> ms(nb, 0.0f), vs(nb, 0.0f);
        // Reference: the same stored forms, updated element by element.
        std::vector<float> r_mst = mst;
        std::vector<uint16_t> r_wb = wb;
        std::vector<std::byte> r_m = m, r_v = v;
        std::vector<float> r_ms = ms, r_vs = vs;
        for (int t = 1; t <= 4; ++t) {
          const std::vector<float> g = random_values(n, 100 + t, -4, -1, true);
          const float scale = t == 2 ? 0.5f : 1.0f;
          AdamWState s;
          s.master = master ? mst.data() : nullptr;
          s.weights = wb.data();
          s.weights_dtype = DType::bf16;
          s.m = m.data(), s.v = v.data(), s.m_scale = ms.data(), s.v_scale = vs.data();
          s.moments = os;
          s.g = g.data();
          s.n = n;
          cpu::adamw_step(s, hp, t, scale);

          for (size_t b = 0; b < nb; ++b) {
            const size_t lo = b * kQuantBlock, hi = std::min(n, lo + kQuantBlock);
            std::vector<float> pm(hi - lo), mm(hi - lo), vv(hi - lo);
            for (size_t i = lo; i < hi; ++i) {
              float& p = pm[i - lo];
              p = master ? r_mst[i] : bf16_to_f32(r_wb[i]);
              if (os == OptimizerState::fp32) {
                std::memcpy(&mm[i - lo], &r_m[i * 4], 4), std::memcpy(&vv[i - lo], &r_v[i * 4], 4);
              } else if (os == OptimizerState::bf16) {
                uint16_t a, c;
                std::memcpy(&a, &r_m[i * 2], 2), std::memcpy(&c, &r_v[i * 2], 2);
                mm[i - lo] = bf16_to_f32(a), vv[i - lo] = bf16_to_f32(c);
              } else {
                mm[i - lo] = q8::decode_signed(uint8_t(r_m[i]), r_ms[b]);
                vv[i - lo] = q8::decode_unsigned(uint8_t(r_v[i]), r_vs[b]);
              }
              cpu::adamw_step(&p, &mm[i - lo], &vv[i - lo], &g[i], 1, hp, t, scale);
            }
            float am = 0, av = 0;
            for (size_t e = 0; e < pm.size(); ++e) am = std::max(am, std::fabs(mm[e])), av = std::max(av, vv[e]);
            if (os == OptimizerState::q8) r_ms[b] = am, r_vs[b] = av;
            for (size_t i = lo; i < hi; ++i) {
              const float p = pm[i - lo], a = mm[i - lo], c = vv[i - lo];
              if (master) r_mst[i] = p;
              r_wb[i] = f32_to_bf16(p);
              if (os == OptimizerState::fp32) {
                std::memcpy(&r_m[i * 4], &a, 4), std::memcpy(&r_v[i * 4], &c, 4);
              } else if (os == OptimizerState::bf16) {
                const uint16_t x = f32_to_bf16(a), y = f32_to_bf16(c);
                std::memcpy(&r_m[i * 2], &x, 2), std::memcpy(&r_v[i * 2], &y, 2);
              } else {
                r_m[i] = std::byte(ref_encode_signed(a, am));
                r_v[i] = std::byte(ref_encode_unsigned(c, av));
              }
            }
          }
          ASSERT_EQ(std::memcmp(m.data(), r_m.data(), m.size()), 0) << tag << " m, step " << t;
          ASSERT_EQ(std::memcmp(v.data(), r_v.data(), v.size()), 0) << tag << " v, step " << t;
          ASSERT_EQ(std::memcmp(ms.data(), r_ms.data(), nb * 4), 0) << tag << " m scales, step " << t;
          ASSERT_EQ(std::memcmp(vs.data(), r_vs.data(), nb * 4), 0) << tag << " v scales, step " << t;
          ASSERT_EQ(std::memcmp(wb.data(), r_wb.data(), n * 2), 0) << tag << " weights, step " << t;
          if (master) {
            ASSERT_EQ(std::memcmp(mst.data(), r_mst.data(), n * 4), 0) << tag << " master, step " << t;
          }
        }
        // The update moved the weights (the test is not comparing untouched arrays).
        std::vector<uint16_t> wb0(n);
        for (size_t i = 0; i < n; ++i) wb0[i] = f32_to_bf16(w0[i]);
        EXPECT_NE(std::memcmp(wb.data(), wb0.data(), n * 2), 0) << tag;
      }
}

TEST(StatePrecision, Fp32GenericStepIsTheFp32StepBitForBit) {
  AdamWParams hp;
  hp.lr = 1e-2f;
  const size_t n = 777;
  std::vector<float> a = random_values(n, 9, -2, 0, true), b = a, ma(n, 0), va(n, 0), mb(n, 0), vb(n, 0);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_values(n, 50 + t, -3, 0, true);
    cpu::adamw_step(a.data(), ma.data(), va.data(), g.data(), n, hp, t, 0.75f);
    AdamWState s;
    s.master = b.data();
    s.m = mb.data(), s.v = vb.data(), s.g = g.data(), s.n = n;
    cpu::adamw_step(s, hp, t, 0.75f);
  }
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(ma.data(), mb.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(va.data(), vb.data(), n * 4), 0);
}

// The threaded step (the cpu backend's, and strata-calibrate --adamw's host AdamW) splits the arrays on
// multiples of kQuantBlock: for any thread count it writes the serial step's bits, 8-bit scales included.
TEST(StatePrecision, ParallelStepIsTheSerialStepForAnyThreadCount) {
  AdamWParams hp;
  hp.lr = 2e-3f;
  hp.weight_decay = 0.05f;
  const size_t n = 3 * 64 * kQuantBlock + 300;  // four pieces of the parallel split, the last one short
  const size_t nb = quant_blocks(n);
  for (OptimizerState os : {OptimizerState::fp32, OptimizerState::bf16, OptimizerState::q8})
    for (bool master : {true, false})
      for (bool bf16_grads : {false, true}) {
        const size_t elem = os == OptimizerState::fp32 ? 4 : os == OptimizerState::bf16 ? 2 : 1;
        struct Arrays {
          std::vector<float> mst, ms, vs;
          std::vector<uint16_t> wb;
          std::vector<std::byte> m, v;
        };
        const std::vector<float> w0 = random_values(n, 3, -2, 0, true);
        Arrays init{w0,
                    std::vector<float>(nb, 0.0f),
                    std::vector<float>(nb, 0.0f),
                    std::vector<uint16_t>(n),
                    std::vector<std::byte>(n * elem),
                    std::vector<std::byte>(n * elem)};
        for (size_t i = 0; i < n; ++i) init.wb[i] = f32_to_bf16(w0[i]);
        auto state = [&](Arrays& a, const void* g) {
          AdamWState s;
          s.master = master ? a.mst.data() : nullptr;
          s.weights = a.wb.data(), s.weights_dtype = DType::bf16;
          s.m = a.m.data(), s.v = a.v.data(), s.m_scale = a.ms.data(), s.v_scale = a.vs.data();
          s.moments = os;
          s.g = g, s.grad_dtype = bf16_grads ? DType::bf16 : DType::f32;
          s.n = n;
          return s;
        };
        Arrays serial = init;
        std::vector<Arrays> threaded(4, init);
        const size_t counts[] = {1, 2, 3, 16};
        for (int t = 1; t <= 3; ++t) {
          const std::vector<float> g = random_values(n, 70 + t, -4, -1, true);
          std::vector<uint16_t> gb(n);
          for (size_t i = 0; i < n; ++i) gb[i] = f32_to_bf16(g[i]);
          const void* gp = bf16_grads ? static_cast<const void*>(gb.data()) : g.data();
          cpu::adamw_step(state(serial, gp), hp, t, 0.8f);
          for (size_t k = 0; k < 4; ++k) cpu::adamw_step_parallel(state(threaded[k], gp), hp, t, 0.8f, counts[k]);
        }
        const std::string tag = std::string(optimizer_state_name(os)) + (master ? " fp32 master" : " bf16 weights") +
                                (bf16_grads ? " bf16 grads" : " fp32 grads");
        EXPECT_NE(serial.wb, init.wb) << tag;  // the weights moved
        for (size_t k = 0; k < 4; ++k) {
          const std::string at = tag + ", " + std::to_string(counts[k]) + " threads";
          EXPECT_EQ(threaded[k].wb, serial.wb) << at;
          EXPECT_EQ(threaded[k].m, serial.m) << at;
          EXPECT_EQ(threaded[k].v, serial.v) << at;
          EXPECT_EQ(0, std::memcmp(threaded[k].ms.data(), serial.ms.data(), nb * 4)) << at;
          EXPECT_EQ(0, std::memcmp(threaded[k].vs.data(), serial.vs.data(), nb * 4)) << at;
          EXPECT_EQ(0, std::memcmp(threaded[k].mst.data(), serial.mst.data(), n * 4)) << at;
        }
      }
}

// Each precision takes exactly its bytes in the arena: moments n*4, n*2, or n codes plus one f32
// scale per block (each buffer 256-byte aligned); the sim (mirroring cuda, bf16 weights) drops the
// i16 master halves for master_weights none.
TEST(StatePrecision, DeviceBytesAreExactlyThePrecisionsBytes) {
  auto persistent = [](StateRecipe r, bool sim) {
    ForecastRequest req = sim_twin::tiny_request(Plan::keep_everything());
    req.recipe = r;
    req.mirror = sim ? SimMirror::cuda : SimMirror::cpu;
    if (sim) return forecast(req).persistent_bytes;
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel m(*be, req.model, forecast_model_options(req));
    return be->arena().in_use();
  };
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  size_t f32 = 0, bf16 = 0, q8b = 0, lo = 0;
  {
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel m(*be, test_util::tiny_config(), {});
    for (auto& p : m.params()) {
      if (!p.trainable) continue;
      const size_t n = size_t(p.shape.numel());
      f32 += 2 * align(n * 4), bf16 += 2 * align(n * 2), q8b += 2 * (align(n) + align(quant_blocks(n) * 4));
      lo += align(n * 2);
    }
  }
  const size_t base = persistent({}, false);
  EXPECT_EQ(base - persistent({MasterWeights::fp32, OptimizerState::bf16}, false), f32 - bf16);
  EXPECT_EQ(base - persistent({MasterWeights::fp32, OptimizerState::q8}, false), f32 - q8b);
  EXPECT_EQ(persistent({MasterWeights::none, OptimizerState::fp32}, false), base) << "f32 weights are the master";
  const size_t sim = persistent({}, true);
  EXPECT_EQ(sim - persistent({MasterWeights::none, OptimizerState::fp32}, true), lo);
  EXPECT_EQ(sim - persistent({MasterWeights::none, OptimizerState::bf16}, true), lo + f32 - bf16);
}

TEST(StatePrecision, ConfigKeysAndTheirErrors) {
  TrainConfig c;
  apply_yaml_text(c, "master_weights: none\noptimizer_state: 8bit\n", "r.yaml");
  EXPECT_EQ(c.recipe.master, MasterWeights::none);
  EXPECT_EQ(c.recipe.moments, OptimizerState::q8);
  apply_yaml_text(c, "optimizer_state: bf16\nmaster_weights: fp32\n", "r.yaml");
  EXPECT_EQ(c.recipe, (StateRecipe{MasterWeights::fp32, OptimizerState::bf16}));
  auto e = test_util::catch_as<ConfigError>([&] { apply_yaml_text(c, "optimizer_state: int4\n", "r.yaml"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->file, "r.yaml");
  EXPECT_EQ(e->field, "optimizer_state");
  EXPECT_NE(std::string(e->what()).find("fp32, bf16 or 8bit"), std::string::npos) << e->what();
  e = test_util::catch_as<ConfigError>([&] { apply_yaml_text(c, "master_weights: bf16\n", "r.yaml"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "master_weights");
  EXPECT_THROW(parse_optimizer_state("8-bit", "--optimizer-state"), ConfigError);
  for (OptimizerState s : {OptimizerState::fp32, OptimizerState::bf16, OptimizerState::q8})
    EXPECT_EQ(parse_optimizer_state(optimizer_state_name(s), "x"), s);
  // strata-plan --write-config carries the recipe; strata-train reads it back.
  ForecastRequest req = sim_twin::tiny_request(Plan::gradient_checkpointing(1));
  req.recipe = {MasterWeights::none, OptimizerState::q8};
  const Forecast f = forecast(req);
  TrainConfig back;
  apply_yaml_text(back, plan_yaml(req, req.plan, f, 0), "plan.yaml");
  EXPECT_EQ(back.recipe, req.recipe);
}

TEST(StatePrecision, LowPrecisionMomentsTrackFp32Training) {
  // A sanity bound, not a definition: 8 steps of the tiny model, losses within 2% of fp32's.
  auto losses = [](StateRecipe r) {
    ForecastRequest req = sim_twin::tiny_request(Plan::keep_everything());
    req.recipe = r;
    auto be = make_cpu_backend(size_t(64) << 20);
    ModelOptions mo = forecast_model_options(req);
    LlamaModel model(*be, req.model, mo);
    model.init_random(5);
    TrainOptions to;
    to.adam.lr = 3e-3f;
    Trainer tr(*be, model, to);
    TokenBatcher data(synthetic_tokens(4000, req.model.vocab_size, 3), 2, 19);
    std::vector<float> out;
    for (int s = 0; s < 8; ++s) out.push_back(tr.step(data.next()).loss);
    return out;
  };
  const std::vector<float> f32 = losses({});
  EXPECT_LT(f32.back(), f32.front());
  for (OptimizerState os : {OptimizerState::bf16, OptimizerState::q8}) {
    const std::vector<float> l = losses({MasterWeights::fp32, os});
    for (size_t i = 0; i < l.size(); ++i)
      EXPECT_NEAR(l[i], f32[i], 0.02 * f32[i]) << optimizer_state_name(os) << " step " << i;
  }
}

// engine/names.h: each enum's one name table parses what it prints, and the errors list the table's names
// (restricted to what the field accepts) in the table's order.
TEST(EnumNames, EachTableParsesWhatItPrintsAndErrorsListItsNames) {
  enum class Three { a, b, c };
  constexpr EnumName<Three> three[] = {{Three::a, "a"}, {Three::b, "b"}, {Three::c, "c"}};
  EXPECT_EQ(name_choices(three), "a, b or c");
  EXPECT_EQ(name_choices(three, {Three::c, Three::a}), "a or c");
  EXPECT_EQ(name_choices(three, {Three::b}), "b");
  EXPECT_EQ(parse_name(three, "b"), Three::b);
  EXPECT_EQ(parse_name(three, "b", {Three::a, Three::c}), std::nullopt);
  EXPECT_EQ(parse_name(three, "B"), std::nullopt);
  EXPECT_STREQ(name_of(three, Three::c), "c");
  EXPECT_STREQ(name_of(three, Three(7)), "?");
  // dtypes: the engine's, safetensors' and torch's names all parse; the first two print.
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u8, DType::i16}) {
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    EXPECT_EQ(parse_dtype(dtype_safetensors_name(t)), t);
  }
  EXPECT_EQ(dtype_safetensors_name(DType::bf16), "BF16");
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("uint8"), DType::u8);
  EXPECT_EQ(parse_dtype("Float32"), std::nullopt);

  for (Decision d : {Decision::keep, Decision::recompute, Decision::host, Decision::disk})
    EXPECT_EQ(parse_decision(decision_name(d), "x"), d);
  for (Decision d : {Decision::host, Decision::disk}) EXPECT_EQ(parse_state_tier(decision_name(d), "x"), d);
  for (Decision d : {Decision::keep, Decision::page}) EXPECT_EQ(parse_layer_weights(decision_name(d), "x"), d);
  for (MasterWeights m : {MasterWeights::fp32, MasterWeights::none})
    EXPECT_EQ(parse_master_weights(master_weights_name(m), "x"), m);
  for (GradPrecision g : {GradPrecision::fp32, GradPrecision::bf16})
    EXPECT_EQ(parse_gradients(gradients_name(g), "x"), g);
  for (TrainMode m : {TrainMode::full, TrainMode::frozen, TrainMode::lora})
    EXPECT_EQ(parse_train_mode(train_mode_name(m)), m);
  const Origin o{"lr_scheduler", "r.yaml", "lr_scheduler"};
  for (LrScheduler s : {LrScheduler::constant, LrScheduler::linear, LrScheduler::cosine})
    EXPECT_EQ(parse_lr_scheduler(lr_scheduler_name(s), o), s);

  auto message = [](auto&& f) {
    auto e = test_util::catch_as<ConfigError>(f);
    return e ? std::string(e->what()) : std::string("(no ConfigError)");
  };
  const std::string page = message([] { parse_decision("page", "plan: L*"); });
  EXPECT_NE(page.find("unknown decision 'page' (expected keep, recompute, host or disk)"), std::string::npos) << page;
  const std::string tier = message([] { parse_state_tier("keep", "s.yaml"); });
  EXPECT_NE(tier.find("state_offloading_tier must be host or disk, got 'keep'"), std::string::npos) << tier;
  const std::string grads = message([] { parse_gradients("fp16", "g.yaml"); });
  EXPECT_NE(grads.find("gradients must be fp32 or bf16, got 'fp16'"), std::string::npos) << grads;
  const std::string mode = message([] { parse_train_mode("qlora"); });
  EXPECT_NE(mode.find("--mode must be full, frozen or lora, got 'qlora'"), std::string::npos) << mode;
  const std::string sched = message([&] { parse_lr_scheduler("step", o); });
  EXPECT_NE(sched.find("unknown scheduler 'step' (expected constant, linear or cosine)"), std::string::npos) << sched;
  const std::string reduce = message([&] { parse_grad_reduce("f32", o); });
  EXPECT_NE(reduce.find("must be fp32 or bf16, got 'f32'"), std::string::npos) << reduce;
}

// The settings table's choice lists (docs, --help, its own errors) name what the enums' tables print, in order.
TEST(EnumNames, TheSettingsTableListsTheEnumsNames) {
  auto choices = [](std::string_view key) {
    const Setting* s = find_setting(key);
    return s ? std::string(s->choices) : "(no setting " + std::string(key) + ")";
  };
  auto join = [](std::initializer_list<const char*> names) {
    std::string out;
    for (const char* n : names) out += (out.empty() ? "" : ", ") + std::string(n);
    return out;
  };
  EXPECT_EQ(choices("master_weights"),
            join({master_weights_name(MasterWeights::fp32), master_weights_name(MasterWeights::none)}));
  EXPECT_EQ(choices("optimizer_state"),
            join({optimizer_state_name(OptimizerState::fp32), optimizer_state_name(OptimizerState::bf16),
                  optimizer_state_name(OptimizerState::q8)}));
  EXPECT_EQ(choices("gradients"), join({gradients_name(GradPrecision::fp32), gradients_name(GradPrecision::bf16)}));
  EXPECT_EQ(choices("grad_reduce_dtype"),
            join({name_of(kGradReduceNames, DType::f32), name_of(kGradReduceNames, DType::bf16)}));
  EXPECT_EQ(choices("lr_scheduler"),
            join({lr_scheduler_name(LrScheduler::constant), lr_scheduler_name(LrScheduler::linear),
                  lr_scheduler_name(LrScheduler::cosine)}));
  EXPECT_EQ(choices("layer_weights"), join({decision_name(Decision::keep), decision_name(Decision::page)}));
  EXPECT_EQ(choices("state_offloading_tier"), join({decision_name(Decision::host), decision_name(Decision::disk)}));
}
