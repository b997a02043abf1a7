// The hand-written bf16 CUDA kernels (kernels/*.cu, launchers in kernels/ops_cuda.h) against the cpu
// references (kernels/*_cpu.cpp) on odd shapes, forward and backward. The references see the
// bf16-rounded inputs the GPU sees; outputs are poisoned (NaN) first so unwritten elements show.
// Backwards are checked for "+=" (called twice, starting from non-zero gradients) and null skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/dtype.h"
#include "kernels/add.h"
#include "kernels/bias.h"
#include "kernels/embedding.h"
#include "kernels/lm_head_ce.h"
#include "kernels/ops_cuda.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace {

using namespace gpu_test;
using bf16 = __nv_bfloat16;
using Vec = std::vector<float>;
namespace sc = strata::cuda;
namespace cpu = strata::cpu;

// bf16 outputs are compared with the bf16-rounded fp32 reference: only values within float noise of a
// rounding boundary may differ (by one bf16 ulp), so a systematic error of 0.03% already fails.
constexpr double kBf16Tol = 1e-7;
constexpr double kF32Tol = 1e-9;
constexpr cudaStream_t kStream = nullptr;

using B = Dev<bf16>;
using F = Dev<float>;

struct Ids {
  std::vector<int32_t> h;
  DevBuf<int32_t> d;
  explicit Ids(const std::vector<int32_t>& x) : h(x), d(x.size()) { d.upload(h); }
};

std::vector<int32_t> rand_ids(int n, int hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(g() % uint32_t(hi));
  return t;
}

Vec sub(const Vec& x, size_t off) {
  return Vec(x.begin() + off, x.end());
}

TEST(KernelsGpu, Embedding) {
  STRATA_REQUIRE_GPU();
  const int N = 37, V = 53;
  for (int C : {129, 136}) {
    std::vector<int32_t> tok = rand_ids(N, 20, 1);  // ids < 20: many repeats
    tok[3] = -1;                                    // gpu: zero row forward, skipped backward
    Ids t(tok);
    tok[3] = 0;
    B wte(size_t(V) * C, 2), out(vec(size_t(N) * C)), dout(size_t(N) * C, 3);
    F dwte(size_t(V) * C, 4);
    out.poison();
    sc::embedding_fwd(out.p(), t.d.p, wte.p(), N, C, kStream);
    Vec ref(size_t(N) * C);
    cpu::embedding_fwd(ref.data(), tok.data(), wte.h.data(), N, C);
    for (int c = 0; c < C; c++) ref[3 * C + c] = 0.0f;
    device_sync();
    EXPECT_TRUE(close(out.get(), ref, 0.0, "embedding_fwd C=" + std::to_string(C)));
    Vec dout_ref = dout.h;
    for (int c = 0; c < C; c++) dout_ref[3 * C + c] = 0.0f;
    Vec dw_ref = dwte.h;
    for (int rep = 0; rep < 2; rep++) {  // twice: accumulates
      sc::embedding_bwd(dwte.p(), dout.p(), t.d.p, N, C, kStream);
      cpu::embedding_bwd(dw_ref.data(), dout_ref.data(), tok.data(), N, C, V);
      device_sync();
      EXPECT_TRUE(close(dwte.get(), dw_ref, 1e-12, "embedding_bwd C=" + std::to_string(C)));
    }
    sc::embedding_bwd(nullptr, dout.p(), t.d.p, N, C, kStream);
    device_sync();
  }
}

TEST(KernelsGpu, RmsNorm) {
  STRATA_REQUIRE_GPU();
  const float eps = 1e-5f;
  // N = 3000 at C = 2048: blocks walk several row groups (the 1B's width).
  for (auto [N, C] : {std::pair{37, 129},
                      {37, 130},
                      {37, 136},
                      {37, 4096},
                      {37, 5001},
                      {37, 8200},
                      {37, 16384},
                      {3000, 2048},
                      // Qwen3's q_norm/k_norm: rows are heads, C the head_dim.
                      {222, 12},
                      {4000, 128},
                      {37, 64}}) {
    const std::string tag = " N=" + std::to_string(N) + " C=" + std::to_string(C);
    const size_t NC = size_t(N) * C;
    Vec wv = randn(C, 11, 0.1f);
    for (auto& x : wv) x += 1.0f;
    B x(NC, 10, 2.0f), w(wv), out(vec(NC)), dout(NC, 12), dx(NC, 13, 0.5f);
    F rstd(vec(N)), dw(C, 14);
    out.poison();
    rstd.poison();
    sc::rmsnorm_fwd(out.p(), rstd.p(), x.p(), w.p(), N, C, eps, kStream);
    Vec out_ref(NC), rstd_ref(N);
    cpu::rmsnorm_fwd(out_ref.data(), rstd_ref.data(), x.h.data(), w.h.data(), N, C, eps);
    device_sync();
    EXPECT_TRUE(close(out.get(), round_bf16(out_ref), kBf16Tol, "rmsnorm_fwd out" + tag));
    EXPECT_TRUE(close(rstd.get(), rstd_ref, kF32Tol, "rmsnorm_fwd rstd" + tag));
    Vec dx_ref = dx.h, dw_ref = dw.h;
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) dx.poison(), dw.poison();
      sc::rmsnorm_bwd(dx.p(), dw.p(), dout.p(), x.p(), w.p(), rstd.p(), N, C, acc, acc, kStream);
      cpu::rmsnorm_bwd(dx_ref.data(), dw_ref.data(), dout.h.data(), x.h.data(), w.h.data(), rstd_ref.data(), N, C, acc,
                       acc);
      device_sync();
      EXPECT_TRUE(close(dx.get(), round_bf16(dx_ref), kBf16Tol, "rmsnorm_bwd dx" + tag));
      EXPECT_TRUE(close(dw.get(), dw_ref, kF32Tol, "rmsnorm_bwd dw" + tag));
      dx_ref = dx.get();  // continue from the gpu's rounding
    }
    sc::rmsnorm_bwd(nullptr, dw.p(), dout.p(), x.p(), w.p(), rstd.p(), N, C, true, true, kStream);  // dw only
    cpu::rmsnorm_bwd(nullptr, dw_ref.data(), dout.h.data(), x.h.data(), w.h.data(), rstd_ref.data(), N, C, true, true);
    sc::rmsnorm_bwd(dx.p(), nullptr, dout.p(), x.p(), w.p(), rstd.p(), N, C, true, true, kStream);  // dx only
    cpu::rmsnorm_bwd(dx_ref.data(), nullptr, dout.h.data(), x.h.data(), w.h.data(), rstd_ref.data(), N, C, true, true);
    device_sync();
    EXPECT_TRUE(close(dx.get(), round_bf16(dx_ref), kBf16Tol, "rmsnorm_bwd dx only" + tag));
    EXPECT_TRUE(close(dw.get(), dw_ref, kF32Tol, "rmsnorm_bwd dw only" + tag));
    sc::rmsnorm_fwd(x.p(), nullptr, x.p(), w.p(), N, C, eps, kStream);  // in place, no rstd
    device_sync();
    EXPECT_TRUE(close(x.get(), round_bf16(out_ref), kBf16Tol, "rmsnorm_fwd in place" + tag));
  }
}

TEST(KernelsGpu, Rope) {
  STRATA_REQUIRE_GPU();
  const int N = 37, H = 6;
  // scale: the attention factor (yarn's default at factor 4, and longrope's sqrt(2)) on cos and sin, both ways.
  for (float scale : {1.0f, 1.1386294f, 1.4142135f})
    for (int D : {10, 64, 128}) {
      const std::string tag = " D=" + std::to_string(D) + " scale=" + std::to_string(scale);
      const size_t n = size_t(N) * H * D;
      Vec freq(D / 2);
      cpu::rope_inv_freq(freq.data(), D, 500000.0f, strata::RopeScaling{});
      Ids pos(rand_ids(N, 8192, 20));
      F inv_freq(freq);
      B x(n, 21), out(vec(n)), dout(n, 22), dx(n, 23, 0.5f);
      out.poison();
      sc::rope_fwd(out.p(), x.p(), pos.d.p, inv_freq.p(), N, H, D, scale, kStream);
      Vec ref(n);
      cpu::rope_fwd(ref.data(), x.h.data(), pos.h.data(), freq.data(), N, H, D, scale);
      device_sync();
      EXPECT_TRUE(close(out.get(), round_bf16(ref), kBf16Tol, "rope_fwd" + tag));
      Vec dx_ref = dx.h;
      for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
        const bool acc = rep < 2;
        if (!acc) dx.poison();
        sc::rope_bwd(dx.p(), dout.p(), pos.d.p, inv_freq.p(), N, H, D, acc, scale, kStream);
        cpu::rope_bwd(dx_ref.data(), dout.h.data(), pos.h.data(), freq.data(), N, H, D, acc, scale);
        device_sync();
        EXPECT_TRUE(close(dx.get(), round_bf16(dx_ref), kBf16Tol, "rope_bwd" + tag));
        dx_ref = dx.get();
      }
      sc::rope_bwd(nullptr, dout.p(), pos.d.p, inv_freq.p(), N, H, D, true, scale, kStream);
      sc::rope_fwd(x.p(), x.p(), pos.d.p, inv_freq.p(), N, H, D, scale, kStream);  // in place
      device_sync();
      EXPECT_TRUE(close(x.get(), round_bf16(ref), kBf16Tol, "rope_fwd in place" + tag));
    }
}

// Elementwise ops run at offset 0 (16-byte path plus a tail) and 1 (misaligned: scalar path).
constexpr long kElems = 1000003;

TEST(KernelsGpu, Swiglu) {
  STRATA_REQUIRE_GPU();
  for (long off : {0L, 1L}) {
    const long n = kElems - off;
    const std::string tag = " offset=" + std::to_string(off);
    B gate(kElems, 30, 2.0f), up(kElems, 31), out(vec(kElems)), dout(kElems, 32), dg(kElems, 33), du(kElems, 34);
    out.poison();
    sc::swiglu_fwd(out.p(off), gate.p(off), up.p(off), n, kStream);
    Vec ref(n);
    cpu::swiglu_fwd(ref.data(), gate.h.data() + off, up.h.data() + off, n);
    device_sync();
    EXPECT_TRUE(close(sub(out.get(), off), round_bf16(ref), kBf16Tol, "swiglu_fwd" + tag));
    Vec dg_ref = sub(dg.h, off), du_ref = sub(du.h, off);
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) dg.poison(), du.poison();
      sc::swiglu_bwd(dg.p(off), du.p(off), dout.p(off), gate.p(off), up.p(off), n, acc, acc, kStream);
      cpu::swiglu_bwd(dg_ref.data(), du_ref.data(), dout.h.data() + off, gate.h.data() + off, up.h.data() + off, n, acc,
                      acc);
      device_sync();
      EXPECT_TRUE(close(sub(dg.get(), off), round_bf16(dg_ref), kBf16Tol, "swiglu_bwd dgate" + tag));
      EXPECT_TRUE(close(sub(du.get(), off), round_bf16(du_ref), kBf16Tol, "swiglu_bwd dup" + tag));
      dg_ref = sub(dg.get(), off), du_ref = sub(du.get(), off);
    }
    sc::swiglu_bwd(nullptr, du.p(off), dout.p(off), gate.p(off), up.p(off), n, true, true, kStream);
    cpu::swiglu_bwd(nullptr, du_ref.data(), dout.h.data() + off, gate.h.data() + off, up.h.data() + off, n, true, true);
    sc::swiglu_bwd(dg.p(off), nullptr, dout.p(off), gate.p(off), up.p(off), n, true, true, kStream);
    cpu::swiglu_bwd(dg_ref.data(), nullptr, dout.h.data() + off, gate.h.data() + off, up.h.data() + off, n, true, true);
    device_sync();
    EXPECT_TRUE(close(sub(dg.get(), off), round_bf16(dg_ref), kBf16Tol, "swiglu_bwd dgate only" + tag));
    EXPECT_TRUE(close(sub(du.get(), off), round_bf16(du_ref), kBf16Tol, "swiglu_bwd dup only" + tag));
  }
}

TEST(KernelsGpu, Add) {
  STRATA_REQUIRE_GPU();
  const float s = 0.75f;
  for (long off : {0L, 1L}) {
    const long n = kElems - off;
    const std::string tag = " offset=" + std::to_string(off);
    B a(kElems, 40), b(kElems, 41), out(vec(kElems)), dout(kElems, 42), da(kElems, 43), db(kElems, 44);
    out.poison();
    sc::add_fwd(out.p(off), a.p(off), b.p(off), s, n, kStream);
    Vec ref(n);
    cpu::add_fwd(ref.data(), a.h.data() + off, b.h.data() + off, s, n);
    device_sync();
    EXPECT_TRUE(close(sub(out.get(), off), round_bf16(ref), kBf16Tol, "add_fwd" + tag));
    Vec da_ref = sub(da.h, off), db_ref = sub(db.h, off);
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) da.poison(), db.poison();
      sc::add_bwd(da.p(off), db.p(off), dout.p(off), s, n, acc, acc, kStream);
      cpu::add_bwd(da_ref.data(), db_ref.data(), dout.h.data() + off, s, n, acc, acc);
      device_sync();
      EXPECT_TRUE(close(sub(da.get(), off), round_bf16(da_ref), kBf16Tol, "add_bwd da" + tag));
      EXPECT_TRUE(close(sub(db.get(), off), round_bf16(db_ref), kBf16Tol, "add_bwd db" + tag));
      da_ref = sub(da.get(), off), db_ref = sub(db.get(), off);
    }
    sc::add_bwd(nullptr, db.p(off), dout.p(off), s, n, true, true, kStream);
    cpu::add_bwd(nullptr, db_ref.data(), dout.h.data() + off, s, n, true, true);
    sc::add_bwd(da.p(off), nullptr, dout.p(off), s, n, true, true, kStream);
    cpu::add_bwd(da_ref.data(), nullptr, dout.h.data() + off, s, n, true, true);
    device_sync();
    EXPECT_TRUE(close(sub(da.get(), off), round_bf16(da_ref), kBf16Tol, "add_bwd da only" + tag));
    EXPECT_TRUE(close(sub(db.get(), off), round_bf16(db_ref), kBf16Tol, "add_bwd db only" + tag));
    sc::add_fwd(a.p(off), a.p(off), b.p(off), s, n, kStream);  // in place (residual stream)
    device_sync();
    EXPECT_TRUE(close(sub(a.get(), off), round_bf16(ref), kBf16Tol, "add_fwd in place" + tag));
  }
}

TEST(KernelsGpu, Bias) {
  STRATA_REQUIRE_GPU();
  // O % 8 == 0 takes the 16-byte path; N = 3000 spreads rows over many row lanes and blocks.
  for (auto [N, O] : {std::pair{37, 129}, {37, 136}, {3000, 1024}, {1, 8}, {5, 3}, {2048, 4104}}) {
    const std::string tag = " N=" + std::to_string(N) + " O=" + std::to_string(O);
    const size_t NO = size_t(N) * O;
    B y(NO, 60), b(size_t(O), 61), dy(NO, 62);
    F db(size_t(O), 63);
    Vec ref = y.h;
    sc::bias_fwd(y.p(), b.p(), N, O, kStream);
    cpu::bias_fwd(ref.data(), b.h.data(), N, O);
    device_sync();
    EXPECT_TRUE(close(y.get(), round_bf16(ref), kBf16Tol, "bias_fwd" + tag));
    Vec db_ref = db.h;
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) db.poison();
      sc::bias_bwd(db.p(), dy.p(), N, O, acc, kStream);
      cpu::bias_bwd(db_ref.data(), dy.h.data(), N, O, acc);
      device_sync();
      EXPECT_TRUE(close(db.get(), db_ref, kF32Tol, "bias_bwd" + tag));
      db_ref = db.get();
    }
  }
}

// Identity [V, V], so the cpu lm_head_ce reference (which multiplies x by w^T) sees x as the logits.
Vec identity(int V) {
  Vec w(size_t(V) * V, 0.0f);
  for (int v = 0; v < V; v++) w[size_t(v) * V + v] = 1.0f;
  return w;
}

TEST(KernelsGpu, CrossEntropyChunks) {
  STRATA_REQUIRE_GPU();
  const int N = 37, split = 20;  // two chunks: rows [0, 20) and [20, 37)
  const float dloss_value = 0.7f;
  for (int V : {1001, 1024}) {
    const std::string tag = " V=" + std::to_string(V);
    std::vector<int32_t> tgt = rand_ids(N, V, 50);
    tgt[0] = tgt[7] = tgt[36] = -100;
    tgt[5] = V - 1;
    Ids t(tgt);
    F logits(size_t(N) * V, 51, 3.0f), lse(vec(N)), loss_tok(vec(N)), n_valid(vec(1)), loss(vec(1)),
        dloss(Vec{dloss_value});
    B dlogits(vec(size_t(N) * V));
    lse.poison(), loss_tok.poison(), n_valid.poison(), loss.poison(), dlogits.poison();
    const int rows[2] = {split, N - split};
    for (int k = 0, r0 = 0; k < 2; r0 += rows[k], k++)
      sc::ce_chunk_fwd(lse.p(r0), loss_tok.p(r0), logits.p(size_t(r0) * V), t.d.p + r0, rows[k], V, V, kStream);
    sc::ce_count_valid(n_valid.p(), t.d.p, N, kStream);
    sc::ce_finalize(loss.p(), loss_tok.p(), n_valid.p(), N, kStream);
    for (int k = 0, r0 = 0; k < 2; r0 += rows[k], k++)
      sc::ce_chunk_bwd(dlogits.p(size_t(r0) * V), logits.p(size_t(r0) * V), lse.p(r0), t.d.p + r0, dloss.p(),
                       n_valid.p(), rows[k], V, V, kStream);
    const Vec w = identity(V);
    Vec lse_ref(N), dl_ref(size_t(N) * V, 0.0f), tok_ref(N, 0.0f);
    int nv = 0;
    const float loss_ref = cpu::lm_head_ce_fwd(lse_ref.data(), logits.h.data(), w.data(), tgt.data(), N, V, V, 8, &nv);
    cpu::lm_head_ce_bwd(dl_ref.data(), nullptr, dloss_value, logits.h.data(), w.data(), tgt.data(), lse_ref.data(), N,
                        V, V, 8, true, true);
    for (int r = 0; r < N; r++)
      if (tgt[r] >= 0) tok_ref[r] = lse_ref[r] - logits.h[size_t(r) * V + tgt[r]];
    device_sync();
    EXPECT_TRUE(close(lse.get(), lse_ref, 1e-10, "ce lse" + tag));
    EXPECT_TRUE(close(loss_tok.get(), tok_ref, 1e-10, "ce token_loss" + tag));
    EXPECT_EQ(n_valid.get()[0], float(nv)) << tag;
    EXPECT_TRUE(close(loss.get(), {loss_ref}, 1e-12, "ce loss" + tag));
    const Vec dl = dlogits.get();
    EXPECT_TRUE(close(dl, round_bf16(dl_ref), kBf16Tol, "ce dlogits" + tag));
    for (int r : {0, 7, 36})
      for (int v = 0; v < V; v++) ASSERT_EQ(dl[size_t(r) * V + v], 0.0f) << "ignored row " << r << tag;
    // The training variant's fused kernel: both outputs from one read of the logits, bit for bit.
    F tok2(vec(N));
    B dl2(vec(size_t(N) * V));
    tok2.poison(), dl2.poison();
    for (int k = 0, r0 = 0; k < 2; r0 += rows[k], k++)
      sc::ce_chunk_fwd_bwd(tok2.p(r0), dl2.p(size_t(r0) * V), logits.p(size_t(r0) * V), t.d.p + r0, n_valid.p(),
                           dloss_value, rows[k], V, V, kStream);
    device_sync();
    EXPECT_TRUE(close(tok2.get(), loss_tok.get(), 0.0, "ce fused token_loss" + tag));
    EXPECT_TRUE(close(dl2.get(), dl, 0.0, "ce fused dlogits" + tag));
  }
}

TEST(KernelsGpu, CrossEntropyLargeVocabAndAllIgnored) {
  STRATA_REQUIRE_GPU();
  const int n = 3, V = 128256;
  std::vector<int32_t> tgt = {17, V - 1, -100};
  Ids t(tgt);
  F logits(size_t(n) * V, 60, 4.0f), lse(vec(n)), tok(vec(n)), n_valid(vec(1)), loss(vec(1)), dloss(Vec{1.0f});
  B dl(vec(size_t(n) * V));
  lse.poison(), tok.poison(), dl.poison();
  sc::ce_chunk_fwd(lse.p(), tok.p(), logits.p(), t.d.p, n, V, V, kStream);
  sc::ce_count_valid(n_valid.p(), t.d.p, n, kStream);
  sc::ce_chunk_bwd(dl.p(), logits.p(), lse.p(), t.d.p, dloss.p(), n_valid.p(), n, V, V, kStream);
  Vec lse_ref(n), tok_ref(n, 0.0f), dl_ref(size_t(n) * V, 0.0f);
  for (int r = 0; r < n; r++) {  // double-precision reference for the long rows
    const float* l = logits.h.data() + size_t(r) * V;
    double m = l[0], s = 0.0;
    for (int v = 0; v < V; v++) m = std::max(m, double(l[v]));
    for (int v = 0; v < V; v++) s += std::exp(double(l[v]) - m);
    lse_ref[r] = float(m + std::log(s));
    if (tgt[r] < 0) continue;
    tok_ref[r] = float(m + std::log(s) - l[tgt[r]]);
    for (int v = 0; v < V; v++)
      dl_ref[size_t(r) * V + v] = float((std::exp(l[v] - (m + std::log(s))) - (v == tgt[r])) / 2.0);
  }
  device_sync();
  EXPECT_TRUE(close(lse.get(), lse_ref, 1e-11, "ce lse V=128256"));
  EXPECT_TRUE(close(tok.get(), tok_ref, 1e-10, "ce token_loss V=128256"));
  EXPECT_EQ(n_valid.get()[0], 2.0f);
  EXPECT_TRUE(close(dl.get(), round_bf16(dl_ref), kBf16Tol, "ce dlogits V=128256"));
  // Every target ignored: loss 0 (not NaN) and zero gradients.
  Ids none(std::vector<int32_t>(n, -100));
  loss.poison(), dl.poison();
  sc::ce_chunk_fwd(lse.p(), tok.p(), logits.p(), none.d.p, n, V, V, kStream);
  sc::ce_count_valid(n_valid.p(), none.d.p, n, kStream);
  sc::ce_finalize(loss.p(), tok.p(), n_valid.p(), n, kStream);
  sc::ce_chunk_bwd(dl.p(), logits.p(), lse.p(), none.d.p, dloss.p(), n_valid.p(), n, V, V, kStream);
  device_sync();
  EXPECT_EQ(loss.get()[0], 0.0f);
  EXPECT_EQ(n_valid.get()[0], 0.0f);
  EXPECT_TRUE(close(dl.get(), Vec(size_t(n) * V, 0.0f), 0.0, "ce dlogits all ignored"));
}

TEST(KernelsGpu, ConvertAndFill) {
  STRATA_REQUIRE_GPU();
  Vec x = randn(size_t(kElems), 90, 10.0f);
  x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 3.4e38f, x[4] = -1e-40f;  // specials, overflow, denormal
  for (size_t off : {size_t(0), size_t(1)}) {
    const size_t n = kElems - off;
    const std::string tag = " offset=" + std::to_string(off);
    F f(x), back(vec(kElems));
    B b(vec(kElems));
    b.poison(), back.poison();
    sc::f32_to_bf16(b.p(off), f.p(off), n, kStream);
    sc::bf16_to_f32(back.p(off), b.p(off), n, kStream);
    device_sync();
    const Vec want = sub(round_bf16(x), off);
    EXPECT_TRUE(close(sub(b.get(), off), want, 0.0, "f32_to_bf16" + tag));
    EXPECT_TRUE(close(sub(back.get(), off), want, 0.0, "bf16_to_f32" + tag));
    sc::fill_f32(f.p(off), 2.5f, n, kStream);
    sc::fill_bf16(b.p(off), 1.0f / 3.0f, n, kStream);
    device_sync();
    EXPECT_TRUE(close(sub(f.get(), off), Vec(n, 2.5f), 0.0, "fill_f32" + tag));
    EXPECT_TRUE(close(sub(b.get(), off), round_bf16(vec(n, 1.0f / 3.0f)), 0.0, "fill_bf16" + tag));
  }
}

}  // namespace

#else  // !STRATA_HAVE_CUDA

TEST(KernelsGpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without CUDA";
}

#endif
