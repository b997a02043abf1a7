// cpu reference kernel: chunked LM head + cross-entropy, against an unchunked reference computed
// here in double, across chunk sizes that do not divide N, with ignored (-100) targets; and its
// training variant (forward and gradients at once) against the forward then the backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"
#include "kernels/lm_head_ce.h"
#include "kernels_test_util.h"

namespace strata::test {
namespace {

using Vec = std::vector<float>;

constexpr int N = 7, C = 9, V = 37;

struct Problem {
  Vec x = randn(size_t(N) * C, 51);
  Vec w = randn(size_t(V) * C, 52, 0.5f);
  std::vector<int32_t> targets = {3, -100, 36, 0, 17, -100, 5};
};

// Unchunked reference: loss, lse [N] and dL/dlogits [N, V] for dL = dloss * loss.
struct Ref {
  double loss = 0;
  int n_valid = 0;
  std::vector<double> lse, dlogits;
};

Ref reference(const Problem& p, double dloss) {
  Ref r;
  r.lse.assign(N, 0.0);
  r.dlogits.assign(size_t(N) * V, 0.0);
  std::vector<double> logits(size_t(N) * V, 0.0);
  for (int n = 0; n < N; n++) {
    double m = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) {
      for (int c = 0; c < C; c++) logits[n * V + v] += double(p.x[n * C + c]) * p.w[v * C + c];
      m = std::max(m, logits[n * V + v]);
    }
    for (int v = 0; v < V; v++) sum += std::exp(logits[n * V + v] - m);
    r.lse[n] = m + std::log(sum);
    if (p.targets[n] >= 0) {
      r.loss += r.lse[n] - logits[n * V + p.targets[n]];
      r.n_valid++;
    }
  }
  if (r.n_valid) r.loss /= r.n_valid;
  for (int n = 0; n < N; n++) {
    if (p.targets[n] < 0) continue;
    for (int v = 0; v < V; v++)
      r.dlogits[n * V + v] = (std::exp(logits[n * V + v] - r.lse[n]) - (v == p.targets[n])) * dloss / r.n_valid;
  }
  return r;
}

TEST(KernelsCpu, LmHeadCeForwardMatchesUnchunkedAndIsChunkInvariant) {
  Problem p;
  const Ref ref = reference(p, 1.0);
  ASSERT_EQ(ref.n_valid, 5);
  Vec lse4(N);
  int n_valid = -1;
  const float loss4 = cpu::lm_head_ce_fwd(lse4.data(), p.x.data(), p.w.data(), p.targets.data(), N, C, V, 4, &n_valid);
  EXPECT_EQ(n_valid, 5);
  EXPECT_NEAR(loss4, ref.loss, 1e-5 * ref.loss);
  expect_all_near(lse4, ref.lse, 1e-5, 1e-6, "lse (ignored tokens included)");
  for (int chunk : {1, 2, 3, 7, 100}) {
    Vec lse(N);
    const float loss =
        cpu::lm_head_ce_fwd(lse.data(), p.x.data(), p.w.data(), p.targets.data(), N, C, V, chunk, nullptr);
    EXPECT_NEAR(loss, loss4, 1e-6) << "chunk " << chunk;
    expect_all_near(lse, lse4, 0, 1e-7, "lse across chunks");
  }
}

TEST(KernelsCpu, LmHeadCeBackwardMatchesReferenceAndFiniteDifferences) {
  Problem p;
  const float dloss = 1.7f;
  const Ref ref = reference(p, dloss);
  Vec lse(N);
  cpu::lm_head_ce_fwd(lse.data(), p.x.data(), p.w.data(), p.targets.data(), N, C, V, 4, nullptr);
  Vec dx(p.x.size(), 0.0f), dw(p.w.size(), 0.0f);
  cpu::lm_head_ce_bwd(dx.data(), dw.data(), dloss, p.x.data(), p.w.data(), p.targets.data(), lse.data(), N, C, V, 4,
                      true, true);

  // Reference dx = dlogits @ w, dw = dlogits^T @ x.
  std::vector<double> rdx(dx.size(), 0.0), rdw(dw.size(), 0.0);
  for (int n = 0; n < N; n++)
    for (int v = 0; v < V; v++)
      for (int c = 0; c < C; c++) {
        rdx[n * C + c] += ref.dlogits[n * V + v] * p.w[v * C + c];
        rdw[v * C + c] += ref.dlogits[n * V + v] * p.x[n * C + c];
      }
  expect_all_near(dx, rdx, 1e-6, 1e-4, "dx vs reference");
  expect_all_near(dw, rdw, 1e-6, 1e-4, "dw vs reference");
  for (int c = 0; c < C; c++) EXPECT_EQ(dx[1 * C + c], 0.0f) << "ignored token gets no gradient";

  Vec lse_tmp(N);
  auto loss = [&] {
    return double(dloss) *
           cpu::lm_head_ce_fwd(lse_tmp.data(), p.x.data(), p.w.data(), p.targets.data(), N, C, V, 3, nullptr);
  };
  expect_grad_near(dx, fd_grad(p.x, loss, 1e-2f), "lm_head_ce dx");
  expect_grad_near(dw, fd_grad(p.w, loss, 1e-2f), "lm_head_ce dw");

  // Other chunk sizes give the same gradients.
  for (int chunk : {1, 3, 7, 64}) {
    Vec dxc(dx.size(), 0.0f), dwc(dw.size(), 0.0f);
    cpu::lm_head_ce_bwd(dxc.data(), dwc.data(), dloss, p.x.data(), p.w.data(), p.targets.data(), lse.data(), N, C, V,
                        chunk, true, true);
    expect_all_near(dxc, dx, 1e-7, 1e-5, "dx across chunks");
    expect_all_near(dwc, dw, 1e-7, 1e-5, "dw across chunks");
  }
}

TEST(KernelsCpu, LmHeadCeAccumulatesOverwritesAndSkipsNulls) {
  Problem p;
  Vec lse(N);
  cpu::lm_head_ce_fwd(lse.data(), p.x.data(), p.w.data(), p.targets.data(), N, C, V, 4, nullptr);
  Vec dx(p.x.size(), 0.0f), dw(p.w.size(), 0.0f);
  auto bwd = [&](float* a, float* b, bool acc = true) {
    cpu::lm_head_ce_bwd(a, b, 1.0f, p.x.data(), p.w.data(), p.targets.data(), lse.data(), N, C, V, 4, acc, acc);
  };
  bwd(dx.data(), dw.data());
  Vec dx2 = dx, dw2 = dw;
  bwd(dx2.data(), dw2.data());
  for (size_t i = 0; i < dx.size(); i++) ASSERT_FLOAT_EQ(dx2[i], 2.0f * dx[i]);
  for (size_t i = 0; i < dw.size(); i++) ASSERT_NEAR(dw2[i], 2.0f * dw[i], 1e-6f + 1e-6f * std::abs(dw[i]));
  // Several chunks, an ignored row: the overwrite writes every element, with the same bits.
  Vec dxo = poisoned(dx.size()), dwo = poisoned(dw.size());
  bwd(dxo.data(), dwo.data(), false);
  expect_same_bits(dxo, dx, "overwritten dx");
  expect_same_bits(dwo, dw, "overwritten dw");
  Vec dx_only(dx.size(), 0.0f), dw_only(dw.size(), 0.0f);
  bwd(dx_only.data(), nullptr);
  bwd(nullptr, dw_only.data());
  expect_all_near(dx_only, dx, 0, 0, "dx alone");
  expect_all_near(dw_only, dw, 0, 0, "dw alone");
}

TEST(KernelsCpu, LmHeadCeIgnoredTargets) {
  Problem p;
  // Dropping the ignored rows gives the same loss: they do not count in the mean.
  Vec lse(N);
  const float loss_all = cpu::lm_head_ce_fwd(lse.data(), p.x.data(), p.w.data(), p.targets.data(), N, C, V, 4, nullptr);
  Vec xs;
  std::vector<int32_t> ts;
  for (int n = 0; n < N; n++)
    if (p.targets[n] >= 0) {
      xs.insert(xs.end(), p.x.begin() + n * C, p.x.begin() + (n + 1) * C);
      ts.push_back(p.targets[n]);
    }
  Vec lse_s(ts.size());
  const float loss_sub =
      cpu::lm_head_ce_fwd(lse_s.data(), xs.data(), p.w.data(), ts.data(), int(ts.size()), C, V, 4, nullptr);
  EXPECT_NEAR(loss_all, loss_sub, 1e-6);

  // All ignored: loss 0, n_valid 0, gradients untouched when adding, zero when overwritten.
  std::vector<int32_t> none(N, -100);
  int n_valid = -1;
  const float loss0 = cpu::lm_head_ce_fwd(lse.data(), p.x.data(), p.w.data(), none.data(), N, C, V, 4, &n_valid);
  EXPECT_EQ(loss0, 0.0f);
  EXPECT_EQ(n_valid, 0);
  Vec dx(p.x.size(), 0.5f), dw(p.w.size(), -0.25f);
  cpu::lm_head_ce_bwd(dx.data(), dw.data(), 1.0f, p.x.data(), p.w.data(), none.data(), lse.data(), N, C, V, 4, true,
                      true);
  for (float g : dx) ASSERT_EQ(g, 0.5f);
  for (float g : dw) ASSERT_EQ(g, -0.25f);
  Vec dxo = poisoned(dx.size()), dwo = poisoned(dw.size());
  cpu::lm_head_ce_bwd(dxo.data(), dwo.data(), 1.0f, p.x.data(), p.w.data(), none.data(), lse.data(), N, C, V, 4, false,
                      false);
  expect_same_bits(dxo, Vec(dx.size(), 0.0f), "overwritten dx, nothing valid");
  expect_same_bits(dwo, Vec(dw.size(), 0.0f), "overwritten dw, nothing valid");
}

// The training variant is the forward followed by the backward (acc_dx false), bit for bit, at
// every chunk size (ragged last chunks included), for any dloss, overwriting or adding into dw.
TEST(KernelsCpu, LmHeadCeFwdGradIsForwardThenBackwardBitForBit) {
  Problem p;
  for (float dloss : {1.0f, 1.7f})
    for (int chunk : {1, 2, 3, 4, 7, 100})
      for (bool acc_dw : {false, true}) {
        const std::string tag = "chunk " + std::to_string(chunk) + (acc_dw ? " acc" : " overwrite");
        Vec lse(N);
        int nv_ref = -1, nv = -1;
        const float loss_ref =
            cpu::lm_head_ce_fwd(lse.data(), p.x.data(), p.w.data(), p.targets.data(), N, C, V, chunk, &nv_ref);
        const Vec dw0 = acc_dw ? randn(p.w.size(), 53) : poisoned(p.w.size());
        Vec dx_ref = poisoned(p.x.size()), dw_ref = dw0, dx = poisoned(p.x.size()), dw = dw0;
        cpu::lm_head_ce_bwd(dx_ref.data(), dw_ref.data(), dloss, p.x.data(), p.w.data(), p.targets.data(), lse.data(),
                            N, C, V, chunk, false, acc_dw);
        const float loss = cpu::lm_head_ce_fwd_grad(dx.data(), dw.data(), dloss, p.x.data(), p.w.data(),
                                                    p.targets.data(), N, C, V, chunk, acc_dw, &nv);
        EXPECT_EQ(std::memcmp(&loss, &loss_ref, 4), 0) << tag;
        EXPECT_EQ(nv, nv_ref);
        expect_same_bits(dx, dx_ref, ("dx " + tag).c_str());
        expect_same_bits(dw, dw_ref, ("dw " + tag).c_str());
        Vec dx_only = poisoned(p.x.size()), dw_only = dw0;  // a frozen head; x without a gradient
        cpu::lm_head_ce_fwd_grad(dx_only.data(), nullptr, dloss, p.x.data(), p.w.data(), p.targets.data(), N, C, V,
                                 chunk, acc_dw, nullptr);
        cpu::lm_head_ce_fwd_grad(nullptr, dw_only.data(), dloss, p.x.data(), p.w.data(), p.targets.data(), N, C, V,
                                 chunk, acc_dw, nullptr);
        expect_same_bits(dx_only, dx_ref, ("dx alone " + tag).c_str());
        expect_same_bits(dw_only, dw_ref, ("dw alone " + tag).c_str());
      }
  // Finite differences of the loss it returns, against the gradients it writes.
  Vec dx(p.x.size()), dw(p.w.size());
  cpu::lm_head_ce_fwd_grad(dx.data(), dw.data(), 1.0f, p.x.data(), p.w.data(), p.targets.data(), N, C, V, 3, false,
                           nullptr);
  Vec xs = p.x, ws = p.w;
  auto loss = [&] {
    return double(cpu::lm_head_ce_fwd(nullptr, xs.data(), ws.data(), p.targets.data(), N, C, V, 4, nullptr));
  };
  expect_grad_near(dx, fd_grad(xs, loss, 1e-2f), "lm_head_ce_fwd_grad dx");
  expect_grad_near(dw, fd_grad(ws, loss, 1e-2f), "lm_head_ce_fwd_grad dw");
  // Nothing valid: loss 0, dx zeros, dw zeros (overwrite) or untouched (add).
  std::vector<int32_t> none(N, -100);
  Vec dxo = poisoned(dx.size()), dwo = poisoned(dw.size()), dwa(dw.size(), -0.25f);
  EXPECT_EQ(cpu::lm_head_ce_fwd_grad(dxo.data(), dwo.data(), 1.0f, p.x.data(), p.w.data(), none.data(), N, C, V, 4,
                                     false, nullptr),
            0.0f);
  cpu::lm_head_ce_fwd_grad(nullptr, dwa.data(), 1.0f, p.x.data(), p.w.data(), none.data(), N, C, V, 4, true, nullptr);
  expect_same_bits(dxo, Vec(dx.size(), 0.0f), "dx, nothing valid");
  expect_same_bits(dwo, Vec(dw.size(), 0.0f), "dw overwritten, nothing valid");
  expect_same_bits(dwa, Vec(dw.size(), -0.25f), "dw added, nothing valid");
}

// Its backward: the saved dx scaled by dloss / assumed (1 copies every bit), added or overwritten;
// a different dloss once dw was written for the assumed one is refused.
TEST(KernelsCpu, LmHeadCeBwdSavedScalesAndRefusesAStaleWeightGradient) {
  const Vec saved = randn(40, 54);
  Vec dx = poisoned(saved.size());
  cpu::lm_head_ce_bwd_saved(dx.data(), saved.data(), 1.0f, 1.0f, true, long(dx.size()), false);
  expect_same_bits(dx, saved, "copy");
  cpu::lm_head_ce_bwd_saved(dx.data(), saved.data(), 1.0f, 1.0f, true, long(dx.size()), true);
  for (size_t i = 0; i < dx.size(); i++) ASSERT_EQ(dx[i], 2.0f * saved[i]);
  Vec dx3 = poisoned(saved.size());
  cpu::lm_head_ce_bwd_saved(dx3.data(), saved.data(), 3.0f, 1.0f, false, long(dx3.size()), false);
  for (size_t i = 0; i < dx.size(); i++) ASSERT_EQ(dx3[i], 3.0f * saved[i]);
  try {
    cpu::lm_head_ce_bwd_saved(dx3.data(), saved.data(), 3.0f, 1.0f, true, long(dx3.size()), false);
    FAIL() << "dw was written for a loss gradient of 1; 3 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backward got 3"), std::string::npos) << e.what();
  }
}

TEST(KernelsCpu, LmHeadLogitsIsPlainMatmul) {
  Problem p;
  Vec logits(size_t(N) * V);
  cpu::lm_head_logits(logits.data(), p.x.data(), p.w.data(), N, C, V);
  std::vector<double> ref(logits.size(), 0.0);
  for (int n = 0; n < N; n++)
    for (int v = 0; v < V; v++)
      for (int c = 0; c < C; c++) ref[n * V + v] += double(p.x[n * C + c]) * p.w[v * C + c];
  expect_all_near(logits, ref, 1e-5, 1e-5, "logits");
}

}  // namespace
}  // namespace strata::test
