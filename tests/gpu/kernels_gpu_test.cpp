// The hand-written bf16 CUDA kernels (kernels/*.cu, launchers in kernels/ops_cuda.h) against the cpu
// references (kernels/*_cpu.cpp) on odd shapes, forward and backward. The references see the
// bf16-rounded inputs the GPU sees; outputs are poisoned (NaN) first so unwritten elements show.
// Backwards are checked for "+=" (called twice, starting from non-zero gradients) and null skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_test_util.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/dtype.h"
#include "engine/master_split.h"
#include "kernels/adamw.h"
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

// A device tensor with the host values the cpu reference sees (bf16-rounded for bf16 tensors).
template <class T>
struct Dev {
  Vec h;
  DevBuf<T> d;
  explicit Dev(const Vec& x) : h(x), d(x.size()) {
    if constexpr (std::is_same_v<T, bf16>) {
      h = round_bf16(x);
      d.upload(to_bf16(h));
    } else {
      d.upload(h);
    }
  }
  Dev(size_t n, uint32_t seed, float scale = 1.0f) : Dev(randn(n, seed, scale)) {}
  T* p(size_t off = 0) { return d.p + off; }
  Vec get() const {
    if constexpr (std::is_same_v<T, bf16>)
      return from_bf16(d.download());
    else
      return d.download();
  }
  void poison() { cudaMemset(d.p, 0xff, d.n * sizeof(T)); }  // all-ones bits: NaN in bf16 and fp32
};
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

Vec vec(size_t n, float value = 0.0f) {
  return Vec(n, value);
}  // (a function: avoids the vexing parse)
Vec sub(const Vec& x, size_t off) {
  return Vec(x.begin() + off, x.end());
}

void sync() {
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
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
    sync();
    EXPECT_TRUE(close(out.get(), ref, 0.0, "embedding_fwd C=" + std::to_string(C)));
    Vec dout_ref = dout.h;
    for (int c = 0; c < C; c++) dout_ref[3 * C + c] = 0.0f;
    Vec dw_ref = dwte.h;
    for (int rep = 0; rep < 2; rep++) {  // twice: accumulates
      sc::embedding_bwd(dwte.p(), dout.p(), t.d.p, N, C, kStream);
      cpu::embedding_bwd(dw_ref.data(), dout_ref.data(), tok.data(), N, C, V);
      sync();
      EXPECT_TRUE(close(dwte.get(), dw_ref, 1e-12, "embedding_bwd C=" + std::to_string(C)));
    }
    sc::embedding_bwd(nullptr, dout.p(), t.d.p, N, C, kStream);
    sync();
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
    sync();
    EXPECT_TRUE(close(out.get(), round_bf16(out_ref), kBf16Tol, "rmsnorm_fwd out" + tag));
    EXPECT_TRUE(close(rstd.get(), rstd_ref, kF32Tol, "rmsnorm_fwd rstd" + tag));
    Vec dx_ref = dx.h, dw_ref = dw.h;
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) dx.poison(), dw.poison();
      sc::rmsnorm_bwd(dx.p(), dw.p(), dout.p(), x.p(), w.p(), rstd.p(), N, C, acc, acc, kStream);
      cpu::rmsnorm_bwd(dx_ref.data(), dw_ref.data(), dout.h.data(), x.h.data(), w.h.data(), rstd_ref.data(), N, C, acc,
                       acc);
      sync();
      EXPECT_TRUE(close(dx.get(), round_bf16(dx_ref), kBf16Tol, "rmsnorm_bwd dx" + tag));
      EXPECT_TRUE(close(dw.get(), dw_ref, kF32Tol, "rmsnorm_bwd dw" + tag));
      dx_ref = dx.get();  // continue from the gpu's rounding
    }
    sc::rmsnorm_bwd(nullptr, dw.p(), dout.p(), x.p(), w.p(), rstd.p(), N, C, true, true, kStream);  // dw only
    cpu::rmsnorm_bwd(nullptr, dw_ref.data(), dout.h.data(), x.h.data(), w.h.data(), rstd_ref.data(), N, C, true, true);
    sc::rmsnorm_bwd(dx.p(), nullptr, dout.p(), x.p(), w.p(), rstd.p(), N, C, true, true, kStream);  // dx only
    cpu::rmsnorm_bwd(dx_ref.data(), nullptr, dout.h.data(), x.h.data(), w.h.data(), rstd_ref.data(), N, C, true, true);
    sync();
    EXPECT_TRUE(close(dx.get(), round_bf16(dx_ref), kBf16Tol, "rmsnorm_bwd dx only" + tag));
    EXPECT_TRUE(close(dw.get(), dw_ref, kF32Tol, "rmsnorm_bwd dw only" + tag));
    sc::rmsnorm_fwd(x.p(), nullptr, x.p(), w.p(), N, C, eps, kStream);  // in place, no rstd
    sync();
    EXPECT_TRUE(close(x.get(), round_bf16(out_ref), kBf16Tol, "rmsnorm_fwd in place" + tag));
  }
}

TEST(KernelsGpu, Rope) {
  STRATA_REQUIRE_GPU();
  const int N = 37, H = 6;
  for (int D : {10, 64, 128}) {
    const std::string tag = " D=" + std::to_string(D);
    const size_t n = size_t(N) * H * D;
    Vec freq(D / 2);
    cpu::rope_inv_freq(freq.data(), D, 500000.0f, strata::RopeScaling{});
    Ids pos(rand_ids(N, 8192, 20));
    F inv_freq(freq);
    B x(n, 21), out(vec(n)), dout(n, 22), dx(n, 23, 0.5f);
    out.poison();
    sc::rope_fwd(out.p(), x.p(), pos.d.p, inv_freq.p(), N, H, D, kStream);
    Vec ref(n);
    cpu::rope_fwd(ref.data(), x.h.data(), pos.h.data(), freq.data(), N, H, D);
    sync();
    EXPECT_TRUE(close(out.get(), round_bf16(ref), kBf16Tol, "rope_fwd" + tag));
    Vec dx_ref = dx.h;
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) dx.poison();
      sc::rope_bwd(dx.p(), dout.p(), pos.d.p, inv_freq.p(), N, H, D, acc, kStream);
      cpu::rope_bwd(dx_ref.data(), dout.h.data(), pos.h.data(), freq.data(), N, H, D, acc);
      sync();
      EXPECT_TRUE(close(dx.get(), round_bf16(dx_ref), kBf16Tol, "rope_bwd" + tag));
      dx_ref = dx.get();
    }
    sc::rope_bwd(nullptr, dout.p(), pos.d.p, inv_freq.p(), N, H, D, true, kStream);
    sc::rope_fwd(x.p(), x.p(), pos.d.p, inv_freq.p(), N, H, D, kStream);  // in place
    sync();
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
    sync();
    EXPECT_TRUE(close(sub(out.get(), off), round_bf16(ref), kBf16Tol, "swiglu_fwd" + tag));
    Vec dg_ref = sub(dg.h, off), du_ref = sub(du.h, off);
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) dg.poison(), du.poison();
      sc::swiglu_bwd(dg.p(off), du.p(off), dout.p(off), gate.p(off), up.p(off), n, acc, acc, kStream);
      cpu::swiglu_bwd(dg_ref.data(), du_ref.data(), dout.h.data() + off, gate.h.data() + off, up.h.data() + off, n, acc,
                      acc);
      sync();
      EXPECT_TRUE(close(sub(dg.get(), off), round_bf16(dg_ref), kBf16Tol, "swiglu_bwd dgate" + tag));
      EXPECT_TRUE(close(sub(du.get(), off), round_bf16(du_ref), kBf16Tol, "swiglu_bwd dup" + tag));
      dg_ref = sub(dg.get(), off), du_ref = sub(du.get(), off);
    }
    sc::swiglu_bwd(nullptr, du.p(off), dout.p(off), gate.p(off), up.p(off), n, true, true, kStream);
    cpu::swiglu_bwd(nullptr, du_ref.data(), dout.h.data() + off, gate.h.data() + off, up.h.data() + off, n, true, true);
    sc::swiglu_bwd(dg.p(off), nullptr, dout.p(off), gate.p(off), up.p(off), n, true, true, kStream);
    cpu::swiglu_bwd(dg_ref.data(), nullptr, dout.h.data() + off, gate.h.data() + off, up.h.data() + off, n, true, true);
    sync();
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
    sync();
    EXPECT_TRUE(close(sub(out.get(), off), round_bf16(ref), kBf16Tol, "add_fwd" + tag));
    Vec da_ref = sub(da.h, off), db_ref = sub(db.h, off);
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) da.poison(), db.poison();
      sc::add_bwd(da.p(off), db.p(off), dout.p(off), s, n, acc, acc, kStream);
      cpu::add_bwd(da_ref.data(), db_ref.data(), dout.h.data() + off, s, n, acc, acc);
      sync();
      EXPECT_TRUE(close(sub(da.get(), off), round_bf16(da_ref), kBf16Tol, "add_bwd da" + tag));
      EXPECT_TRUE(close(sub(db.get(), off), round_bf16(db_ref), kBf16Tol, "add_bwd db" + tag));
      da_ref = sub(da.get(), off), db_ref = sub(db.get(), off);
    }
    sc::add_bwd(nullptr, db.p(off), dout.p(off), s, n, true, true, kStream);
    cpu::add_bwd(nullptr, db_ref.data(), dout.h.data() + off, s, n, true, true);
    sc::add_bwd(da.p(off), nullptr, dout.p(off), s, n, true, true, kStream);
    cpu::add_bwd(da_ref.data(), nullptr, dout.h.data() + off, s, n, true, true);
    sync();
    EXPECT_TRUE(close(sub(da.get(), off), round_bf16(da_ref), kBf16Tol, "add_bwd da only" + tag));
    EXPECT_TRUE(close(sub(db.get(), off), round_bf16(db_ref), kBf16Tol, "add_bwd db only" + tag));
    sc::add_fwd(a.p(off), a.p(off), b.p(off), s, n, kStream);  // in place (residual stream)
    sync();
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
    sync();
    EXPECT_TRUE(close(y.get(), round_bf16(ref), kBf16Tol, "bias_fwd" + tag));
    Vec db_ref = db.h;
    for (int rep = 0; rep < 3; rep++) {  // twice adding, then overwriting poison
      const bool acc = rep < 2;
      if (!acc) db.poison();
      sc::bias_bwd(db.p(), dy.p(), N, O, acc, kStream);
      cpu::bias_bwd(db_ref.data(), dy.h.data(), N, O, acc);
      sync();
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
    sync();
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
    sync();
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
  sync();
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
  sync();
  EXPECT_EQ(loss.get()[0], 0.0f);
  EXPECT_EQ(n_valid.get()[0], 0.0f);
  EXPECT_TRUE(close(dl.get(), Vec(size_t(n) * V, 0.0f), 0.0, "ce dlogits all ignored"));
}

TEST(KernelsGpu, SumSquares) {
  STRATA_REQUIRE_GPU();
  for (size_t off : {size_t(0), size_t(1)}) {
    F g(size_t(kElems), 70), out(Vec{1.5f});
    sc::sum_squares(out.p(), g.p(off), kElems - off, kStream);
    const double ref = 1.5 + cpu::sum_squares(g.h.data() + off, kElems - off);
    sync();
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
TEST(KernelsGpu, AdamW) {
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
      sync();
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
TEST(KernelsGpu, AdamWListIsPerTensorBitForBit) {
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
  sync();
  EXPECT_TRUE(close(norm_sq.get(), {float(want_sq)}, 1e-11, "sum_squares_list"));
  for (int t = 1; t <= 2; t++) {
    sc::adamw_step_any(ts.data(), int(ts.size()), true, strata::OptimizerState::fp32, norm_sq.p(), 1.0f, hp.lr,
                       hp.beta1, hp.beta2, hp.eps, hp.weight_decay, t, kStream);
    for (size_t i = 0; i < sizes.size(); i++)
      adamw_one(master_ref[i], m_ref[i], v_ref[i], g[i], sizes[i], norm_sq.p(), 1.0f, hp, t);
    sync();
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
TEST(KernelsGpu, SumSquaresListBf16) {
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
  sync();
  EXPECT_TRUE(close(out.get(), {float(want)}, 1e-11, "sum_squares_list_bf16"));
  // The same list again gives the same bits (the blocks' sums are added in a fixed order).
  const float first = out.get()[0], start = 0.5f;
  CUDA_OK(cudaMemcpy(out.p(), &start, 4, cudaMemcpyHostToDevice));
  sc::sum_squares_list_bf16(out.p(), gp.data(), sizes.data(), int(sizes.size()), kStream);
  sync();
  EXPECT_EQ(out.get()[0], first);
}

// adamw_step_any, every precision (engine/state_recipe.h): split fp32 masters or none (bf16 weights
// updated in place), moments fp32, bf16 or 8-bit, against the cpu reference (cpu::adamw_step on an
// AdamWState) bit for bit over three steps with clipping active. Sizes cover partial quantisation
// blocks, one element, tails of 1-7 past a multiple of 8, whole 16384-element chunks and tensors spanning several;
// eight tensors in one list; f32 and bf16 gradients.
TEST(KernelsGpu, AdamWAnyPrecisionIsTheCpuReferenceBitForBit) {
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
          sync();
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
    sync();
    const Vec want = sub(round_bf16(x), off);
    EXPECT_TRUE(close(sub(b.get(), off), want, 0.0, "f32_to_bf16" + tag));
    EXPECT_TRUE(close(sub(back.get(), off), want, 0.0, "bf16_to_f32" + tag));
    sc::fill_f32(f.p(off), 2.5f, n, kStream);
    sc::fill_bf16(b.p(off), 1.0f / 3.0f, n, kStream);
    sync();
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
