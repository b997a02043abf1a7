// The optimizer's cuda kernels (kernels/adamw.cu): the gradients' sums of squares and AdamW over every state
// precision, against the cpu references (kernels/adamw_cpu.cpp) bit for bit where the arithmetic is the same, on odd
// sizes (tails past the kernels' vector widths, chunk and quantisation-block edges) and lists over several launches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/dtype.h"
#include "engine/master_split.h"
#include "kernels/adamw.h"
#include "kernels/ops_cuda.h"

namespace {

using namespace gpu_test;
using bf16 = __nv_bfloat16;
using Vec = std::vector<float>;
using F = Dev<float>;
namespace sc = strata::cuda;
namespace cpu = strata::cpu;

constexpr cudaStream_t kStream = nullptr;
constexpr long kElems = 1000003;

TEST(OptimizerGpu, SumSquares) {
  STRATA_REQUIRE_GPU();
  for (size_t off : {size_t(0), size_t(1)}) {
    F g(size_t(kElems), 70), out(Vec{1.5f});
    sc::sum_squares(out.p(), g.p(off), kElems - off, kStream);
    const double ref = 1.5 + cpu::sum_squares(g.h.data() + off, kElems - off);
    device_sync();
    EXPECT_TRUE(close(out.get(), {float(ref)}, 1e-12, "sum_squares offset=" + std::to_string(off)));
  }
}

// A split fp32 master on the device (engine/master_split.h): hi the bf16 weights, lo the low halves.
struct Master {
  DevBuf<uint16_t> hi;
  DevBuf<int16_t> lo;
  explicit Master(const Vec& x) : hi(x.size()), lo(x.size()) {
    std::vector<uint16_t> h(x.size());
    std::vector<int16_t> l(x.size());
    strata::master_split(x.data(), h.data(), l.data(), x.size());
    hi.upload(h);
    lo.upload(l);
  }
  Master(size_t n, uint32_t seed, float scale = 1.0f) : Master(randn(n, seed, scale)) {}
  bf16* hi_p() { return reinterpret_cast<bf16*>(hi.p); }
  // The fp32 master, joined on the host.
  Vec get() const {
    const std::vector<uint16_t> h = hi.download();
    const std::vector<int16_t> l = lo.download();
    Vec x(h.size());
    strata::master_join(x.data(), h.data(), l.data(), x.size());
    return x;
  }
  Vec weights() const {  // the bf16 compute weights
    const std::vector<uint16_t> h = hi.download();
    Vec x(h.size());
    for (size_t i = 0; i < h.size(); i++) x[i] = strata::bf16_to_f32(h[i]);
    return x;
  }
};

// Bits of the nearest bf16 with ties away from zero (the split's high half) of each value.
Vec nearest_bf16_ties_away(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    uint16_t h;
    int16_t l;
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    strata::master_split_bits(u, h, l);
    y[i] = strata::bf16_to_f32(h);
  }
  return y;
}

// One tensor through the list kernel: a split fp32 master, f32 moments and gradients.
void adamw_one(Master& w, F& m, F& v, F& g, size_t n, const float* norm_sq, float max_norm,
               const strata::AdamWParams& hp, int t) {
  const sc::AdamWAnyTensors a{w.lo.p, w.hi_p(), m.p(), v.p(), nullptr, nullptr, g.p(), n};
  sc::adamw_step_any(&a, 1, true, strata::OptimizerState::fp32, norm_sq, max_norm, hp.lr, hp.beta1, hp.beta2, hp.eps,
                     hp.weight_decay, t, kStream);
}

// Several AdamW steps against the cpu reference (fp32 master), clipping active, inactive (norm below
// max) and off. The split master, joined, is the reference's fp32 master (to float noise, as before).
TEST(OptimizerGpu, AdamW) {
  STRATA_REQUIRE_GPU();
  const size_t n = 100003;
  strata::AdamWParams hp;
  hp.lr = 1e-3f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.eps = 1e-8f, hp.weight_decay = 0.1f;
  for (float max_norm : {1.0f, 1e9f, 0.0f}) {
    const std::string tag = " max_norm=" + std::to_string(max_norm);
    Master master(n, 80);
    F m(vec(n, 0.0f)), v(vec(n, 0.0f)), norm_sq(vec(1));
    Vec pm = master.get(), mm = m.h, vv = v.h;
    for (int t = 1; t <= 3; t++) {
      F g(n, 81 + t);
      sc::fill_f32(norm_sq.p(), 0.0f, 1, kStream);
      sc::sum_squares(norm_sq.p(), g.p(), n, kStream);
      adamw_one(master, m, v, g, n, norm_sq.p(), max_norm, hp, t);
      device_sync();
      // The scale the device formed, from the same norm_sq, in the same float operations.
      const float norm = std::sqrt(norm_sq.get()[0]);
      const float scale = (max_norm > 0.0f && norm > max_norm) ? max_norm / (norm + 1e-6f) : 1.0f;
      if (max_norm == 1.0f) {
        EXPECT_LT(scale, 0.1f) << "clipping should be active";
      }
      cpu::adamw_step(pm.data(), mm.data(), vv.data(), g.h.data(), n, hp, t, scale);
      const Vec got = master.get();
      EXPECT_TRUE(close(got, pm, 1e-13, "adamw master t=" + std::to_string(t) + tag));
      EXPECT_TRUE(close(m.get(), mm, 1e-12, "adamw m t=" + std::to_string(t) + tag));
      EXPECT_TRUE(close(v.get(), vv, 1e-12, "adamw v t=" + std::to_string(t) + tag));
      EXPECT_TRUE(close(master.weights(), nearest_bf16_ties_away(got), 0.0, "adamw bf16 weights" + tag));
    }
  }
}

// The list forms (one launch per 48 tensors, chunked) against one launch per tensor: 61 tensors of
// odd sizes (tails of 1-7 past a multiple of 8, chunk edges), so three launches and every code path run.
TEST(OptimizerGpu, AdamWListIsPerTensorBitForBit) {
  STRATA_REQUIRE_GPU();
  std::vector<size_t> sizes;
  for (int i = 0; sizes.size() < 61; i++)
    for (size_t n : {size_t(1), size_t(3), size_t(4), size_t(5), size_t(16383), size_t(16384), size_t(16385),
                     size_t(100003) + size_t(i)})
      sizes.push_back(n);
  sizes.resize(61);
  strata::AdamWParams hp;
  hp.lr = 1e-3f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.eps = 1e-8f, hp.weight_decay = 0.1f;
  std::deque<Master> master, master_ref;  // not movable: deque never moves them
  std::deque<F> m, v, g, m_ref, v_ref;
  double want_sq = 0.25;
  for (size_t i = 0; i < sizes.size(); i++) {
    const uint32_t seed = 200 + uint32_t(i) * 7;
    master.emplace_back(sizes[i], seed), master_ref.emplace_back(sizes[i], seed);
    m.emplace_back(sizes[i], seed + 1, 0.01f), m_ref.emplace_back(sizes[i], seed + 1, 0.01f);
    v.emplace_back(vec(sizes[i], 1e-4f)), v_ref.emplace_back(vec(sizes[i], 1e-4f));
    g.emplace_back(sizes[i], seed + 2);
    want_sq += cpu::sum_squares(g.back().h.data(), sizes[i]);
  }
  std::vector<const float*> gp;
  std::vector<sc::AdamWAnyTensors> ts;
  for (size_t i = 0; i < sizes.size(); i++) {
    gp.push_back(g[i].p());
    ts.push_back({master[i].lo.p, master[i].hi_p(), m[i].p(), v[i].p(), nullptr, nullptr, g[i].p(), sizes[i]});
  }
  F norm_sq(Vec{0.25f});
  sc::sum_squares_list(norm_sq.p(), gp.data(), sizes.data(), int(sizes.size()), kStream);
  device_sync();
  EXPECT_TRUE(close(norm_sq.get(), {float(want_sq)}, 1e-11, "sum_squares_list"));
  for (int t = 1; t <= 2; t++) {
    sc::adamw_step_any(ts.data(), int(ts.size()), true, strata::OptimizerState::fp32, norm_sq.p(), 1.0f, hp.lr,
                       hp.beta1, hp.beta2, hp.eps, hp.weight_decay, t, kStream);
    for (size_t i = 0; i < sizes.size(); i++)
      adamw_one(master_ref[i], m_ref[i], v_ref[i], g[i], sizes[i], norm_sq.p(), 1.0f, hp, t);
    device_sync();
    for (size_t i = 0; i < sizes.size(); i++) {
      const std::string tag =
          " t=" + std::to_string(t) + " tensor " + std::to_string(i) + " n=" + std::to_string(sizes[i]);
      EXPECT_TRUE(close(master[i].get(), master_ref[i].get(), 0.0, "list master" + tag));
      EXPECT_TRUE(close(master[i].weights(), master_ref[i].weights(), 0.0, "list bf16 weights" + tag));
      EXPECT_TRUE(close(m[i].get(), m_ref[i].get(), 0.0, "list m" + tag));
      EXPECT_TRUE(close(v[i].get(), v_ref[i].get(), 0.0, "list v" + tag));
    }
  }
}

// The bf16 gradients' list form: 16-byte loads over whole spans of 4096, 4 at a time past them, element tails; sizes
// under, at and past a span and a chunk, 53 tensors (two launches); against the cpu sum in double.
TEST(OptimizerGpu, SumSquaresListBf16) {
  STRATA_REQUIRE_GPU();
  std::vector<size_t> sizes;
  for (int i = 0; sizes.size() < 53; i++)
    for (size_t n : {size_t(1), size_t(7), size_t(4095), size_t(4096), size_t(4097 + i), size_t(16384),
                     size_t(3 * 16384 + 4100 + i), size_t(100003)})
      sizes.push_back(n);
  sizes.resize(53);
  std::deque<DevBuf<uint16_t>> g;
  std::vector<const bf16*> gp;
  double want = 0.5;
  for (size_t i = 0; i < sizes.size(); i++) {
    const std::vector<float> x = randn(sizes[i], 900 + uint32_t(i), 0.3f);
    std::vector<uint16_t> bits(sizes[i]);
    for (size_t e = 0; e < sizes[i]; e++) bits[e] = strata::f32_to_bf16(x[e]);
    want += cpu::sum_squares_bf16(bits.data(), sizes[i]);
    g.emplace_back(sizes[i]).upload(bits);
    gp.push_back(reinterpret_cast<const bf16*>(g.back().p));
  }
  F out(Vec{0.5f});
  sc::sum_squares_list_bf16(out.p(), gp.data(), sizes.data(), int(sizes.size()), kStream);
  device_sync();
  EXPECT_TRUE(close(out.get(), {float(want)}, 1e-11, "sum_squares_list_bf16"));
  // The same list again gives the same bits (the blocks' sums are added in a fixed order).
  const float first = out.get()[0], start = 0.5f;
  CUDA_OK(cudaMemcpy(out.p(), &start, 4, cudaMemcpyHostToDevice));
  sc::sum_squares_list_bf16(out.p(), gp.data(), sizes.data(), int(sizes.size()), kStream);
  device_sync();
  EXPECT_EQ(out.get()[0], first);
}

// adamw_step_any, every precision (engine/state_recipe.h): split fp32 masters or none (bf16 weights
// updated in place), moments fp32, bf16 or 8-bit, against the cpu reference (cpu::adamw_step on an
// AdamWState) bit for bit over three steps with clipping active. Sizes cover partial quantisation
// blocks, one element, tails of 1-7 past a multiple of 8, whole 16384-element chunks and tensors spanning several;
// eight tensors in one list; f32 and bf16 gradients.
TEST(OptimizerGpu, AdamWAnyPrecisionIsTheCpuReferenceBitForBit) {
  STRATA_REQUIRE_GPU();
  const std::vector<size_t> sizes = {1, 255, 257, 16384 + 300, 40000, 32768, 2 * 16384 + 2048 + 13, 8};
  strata::AdamWParams hp;
  hp.lr = 1e-3f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.eps = 1e-8f, hp.weight_decay = 0.1f;
  for (strata::OptimizerState os :
       {strata::OptimizerState::fp32, strata::OptimizerState::bf16, strata::OptimizerState::q8})
    for (bool split : {true, false})
      for (bool g16 : {false, true}) {
        const std::string tag = std::string(strata::optimizer_state_name(os)) + (split ? " split" : " no master") +
                                (g16 ? " bf16 gradients" : "");
        const size_t elem = os == strata::OptimizerState::fp32 ? 4 : os == strata::OptimizerState::bf16 ? 2 : 1;
        struct T {
          std::vector<float> master;      // cpu reference: fp32 master (split) ...
          std::vector<uint16_t> weights;  // ... and the bf16 weights
          std::vector<uint8_t> m, v;      // moments' bytes
          std::vector<float> ms, vs;      // 8-bit scales
          std::unique_ptr<DevBuf<uint16_t>> d_hi;
          std::unique_ptr<DevBuf<int16_t>> d_lo;
          std::unique_ptr<DevBuf<uint8_t>> d_m, d_v;
          std::unique_ptr<DevBuf<float>> d_ms, d_vs, d_g;
          std::unique_ptr<DevBuf<uint16_t>> d_g16;
        };
        std::vector<T> ts(sizes.size());
        for (size_t i = 0; i < sizes.size(); ++i) {
          const size_t n = sizes[i], nb = strata::quant_blocks(n);
          T& t = ts[i];
          t.master = randn(n, 300 + uint32_t(i), 0.05f);
          t.weights.resize(n);
          std::vector<int16_t> lo(n);
          if (split) {
            strata::master_split(t.master.data(), t.weights.data(), lo.data(), n);
          } else {
            for (size_t e = 0; e < n; ++e) t.weights[e] = strata::f32_to_bf16(t.master[e]);
          }
          t.m.assign(n * elem, 0), t.v.assign(n * elem, 0), t.ms.assign(nb, 0.0f), t.vs.assign(nb, 0.0f);
          t.d_hi = std::make_unique<DevBuf<uint16_t>>(n), t.d_hi->upload(t.weights);
          t.d_lo = std::make_unique<DevBuf<int16_t>>(n), t.d_lo->upload(lo);
          t.d_m = std::make_unique<DevBuf<uint8_t>>(n * elem), t.d_m->upload(t.m);
          t.d_v = std::make_unique<DevBuf<uint8_t>>(n * elem), t.d_v->upload(t.v);
          t.d_ms = std::make_unique<DevBuf<float>>(nb), t.d_ms->upload(t.ms);
          t.d_vs = std::make_unique<DevBuf<float>>(nb), t.d_vs->upload(t.vs);
          t.d_g = std::make_unique<DevBuf<float>>(n);
          t.d_g16 = std::make_unique<DevBuf<uint16_t>>(n);
        }
        F norm_sq(vec(1));
        for (int step = 1; step <= 3; ++step) {
          double sq = 0;
          std::vector<std::vector<float>> gs;
          for (size_t i = 0; i < sizes.size(); ++i) {
            gs.push_back(randn(sizes[i], 400 + uint32_t(step * 10 + i), 0.02f));
            if (g16) {  // the reference reads the bf16 values widened, as the kernel does
              std::vector<uint16_t> bits(sizes[i]);
              for (size_t e = 0; e < sizes[i]; ++e) bits[e] = strata::f32_to_bf16(gs.back()[e]);
              for (size_t e = 0; e < sizes[i]; ++e) gs.back()[e] = strata::bf16_to_f32(bits[e]);
              ts[i].d_g16->upload(bits);
            }
            ts[i].d_g->upload(gs.back());
            sq += strata::cpu::sum_squares(gs.back().data(), sizes[i]);
          }
          const float nsq = float(sq), max_norm = 0.5f;
          CUDA_OK(cudaMemcpy(norm_sq.p(), &nsq, 4, cudaMemcpyHostToDevice));
          const float norm = std::sqrt(nsq), scale = norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
          ASSERT_LT(scale, 1.0f) << "clipping should be active";
          std::vector<sc::AdamWAnyTensors> list;
          for (size_t i = 0; i < sizes.size(); ++i) {
            T& t = ts[i];
            list.push_back({split ? t.d_lo->p : nullptr, reinterpret_cast<bf16*>(t.d_hi->p), t.d_m->p, t.d_v->p,
                            t.d_ms->p, t.d_vs->p, g16 ? nullptr : t.d_g->p, sizes[i],
                            g16 ? reinterpret_cast<const bf16*>(t.d_g16->p) : nullptr});
            strata::AdamWState st;
            st.master = split ? t.master.data() : nullptr;
            st.weights = t.weights.data();
            st.weights_dtype = strata::DType::bf16;
            st.m = t.m.data(), st.v = t.v.data(), st.m_scale = t.ms.data(), st.v_scale = t.vs.data();
            st.moments = os;
            st.g = gs[i].data();
            st.n = sizes[i];
            cpu::adamw_step(st, hp, step, scale);
          }
          sc::adamw_step_any(list.data(), int(list.size()), split, os, norm_sq.p(), max_norm, hp.lr, hp.beta1, hp.beta2,
                             hp.eps, hp.weight_decay, step, kStream);
          device_sync();
          for (size_t i = 0; i < sizes.size(); ++i) {
            T& t = ts[i];
            const std::string what = tag + " step " + std::to_string(step) + " n=" + std::to_string(sizes[i]);
            EXPECT_EQ(t.d_m->download(), t.m) << what << " m";
            EXPECT_EQ(t.d_v->download(), t.v) << what << " v";
            if (os == strata::OptimizerState::q8) {
              EXPECT_EQ(t.d_ms->download(), t.ms) << what << " m scales";
              EXPECT_EQ(t.d_vs->download(), t.vs) << what << " v scales";
            }
            if (split) {  // the joined master is the reference's; the high half its ties-away rounding
              const std::vector<uint16_t> hi = t.d_hi->download();
              const std::vector<int16_t> lo = t.d_lo->download();
              std::vector<float> joined(sizes[i]);
              strata::master_join(joined.data(), hi.data(), lo.data(), sizes[i]);
              EXPECT_EQ(std::memcmp(joined.data(), t.master.data(), sizes[i] * 4), 0) << what << " master";
            } else {
              EXPECT_EQ(t.d_hi->download(), t.weights) << what << " bf16 weights";
            }
          }
        }
      }
}

}  // namespace

#else  // !STRATA_HAVE_CUDA

TEST(OptimizerGpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without CUDA";
}

#endif
