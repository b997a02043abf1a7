// cpu reference kernels: embedding, rmsnorm, linear, swiglu, add, bias, adamw.
// Each op: forward against a formula, finite-difference gradients on odd shapes, "+=" semantics
// (two backward calls give twice the gradient), overwrite semantics (the same bits as zeroing
// first, never reading the old contents) and null gradient pointers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/add.h"
#include "kernels/bias.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"
#include "kernels_test_util.h"

namespace strata::test {
namespace {

using Vec = std::vector<float>;

Vec scaled(const Vec& a, float s) {
  Vec r(a);
  for (auto& x : r) x *= s;
  return r;
}

TEST(KernelsCpu, EmbeddingForwardGathersAndBackwardScatters) {
  const int N = 7, C = 9, V = 5;
  const std::vector<int32_t> tok = {3, 0, 4, 3, 1, 3, 2};  // 3 repeats: its gradient sums three rows
  Vec wte = randn(size_t(V) * C, 1), out(size_t(N) * C);
  cpu::embedding_fwd(out.data(), tok.data(), wte.data(), N, C);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) ASSERT_EQ(out[n * C + c], wte[tok[n] * C + c]);

  const Vec R = randn(out.size(), 2);
  auto loss = [&] {
    cpu::embedding_fwd(out.data(), tok.data(), wte.data(), N, C);
    return dotd(out, R);
  };
  Vec dwte(wte.size(), 0.0f);
  cpu::embedding_bwd(dwte.data(), R.data(), tok.data(), N, C, V);
  expect_grad_near(dwte, fd_grad(wte, loss), "dwte", 1e-4);
  EXPECT_FLOAT_EQ(dwte[3 * C], R[0 * C] + R[3 * C] + R[5 * C]);

  Vec twice = dwte;
  cpu::embedding_bwd(twice.data(), R.data(), tok.data(), N, C, V);
  expect_all_near(twice, scaled(dwte, 2.0f), 1e-6, 1e-6, "accumulated dwte");
  cpu::embedding_bwd(nullptr, R.data(), tok.data(), N, C, V);  // skip: must not crash
}

TEST(KernelsCpu, RmsnormMatchesFormulaAndGradients) {
  const int N = 6, C = 13;
  const float eps = 1e-5f;
  Vec x = randn(size_t(N) * C, 3), w = randn(C, 4, 0.5f), out(x.size()), rstd(N);
  for (auto& wi : w) wi += 1.0f;
  cpu::rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  std::vector<double> ref(x.size());
  for (int n = 0; n < N; n++) {
    double ss = 0;
    for (int c = 0; c < C; c++) ss += double(x[n * C + c]) * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    EXPECT_NEAR(rstd[n], r, 1e-6 * r);
    for (int c = 0; c < C; c++) ref[n * C + c] = x[n * C + c] * r * w[c];
  }
  expect_all_near(out, ref, 1e-6, 1e-6, "rmsnorm out");

  const Vec R = randn(out.size(), 5);
  Vec r_tmp(N);
  auto loss = [&] {
    cpu::rmsnorm_fwd(out.data(), r_tmp.data(), x.data(), w.data(), N, C, eps);
    return dotd(out, R);
  };
  Vec dx(x.size(), 0.0f), dw(C, 0.0f);
  cpu::rmsnorm_bwd(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C, true, true);
  expect_grad_near(dx, fd_grad(x, loss, 1e-3f), "rmsnorm dx");
  expect_grad_near(dw, fd_grad(w, loss, 1e-3f), "rmsnorm dw");

  Vec dx2 = dx, dw2 = dw;
  cpu::rmsnorm_bwd(dx2.data(), dw2.data(), R.data(), x.data(), w.data(), rstd.data(), N, C, true, true);
  expect_all_near(dx2, scaled(dx, 2.0f), 1e-6, 1e-6, "accumulated dx");
  expect_all_near(dw2, scaled(dw, 2.0f), 1e-6, 1e-6, "accumulated dw");
  Vec dxo = poisoned(dx.size()), dwo = poisoned(dw.size());
  cpu::rmsnorm_bwd(dxo.data(), dwo.data(), R.data(), x.data(), w.data(), rstd.data(), N, C, false, false);
  expect_same_bits(dxo, dx, "overwritten dx");
  expect_same_bits(dwo, dw, "overwritten dw");
  Vec dx_only(x.size(), 0.0f), dw_only(C, 0.0f);
  cpu::rmsnorm_bwd(dx_only.data(), nullptr, R.data(), x.data(), w.data(), rstd.data(), N, C, true, false);
  cpu::rmsnorm_bwd(nullptr, dw_only.data(), R.data(), x.data(), w.data(), rstd.data(), N, C, false, true);
  expect_all_near(dx_only, dx, 0, 0, "dx alone");
  expect_all_near(dw_only, dw, 0, 0, "dw alone");
}

TEST(KernelsCpu, LinearMatchesNaiveAndGradients) {
  const int N = 5, I = 13, O = 9;
  Vec x = randn(size_t(N) * I, 6), w = randn(size_t(O) * I, 7, 0.3f), y(size_t(N) * O);
  cpu::linear_fwd(y.data(), x.data(), w.data(), N, I, O);
  std::vector<double> ref(y.size(), 0.0);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++)
      for (int i = 0; i < I; i++) ref[n * O + o] += double(x[n * I + i]) * w[o * I + i];
  expect_all_near(y, ref, 1e-5, 1e-5, "linear y");

  const Vec R = randn(y.size(), 8);
  auto loss = [&] {
    cpu::linear_fwd(y.data(), x.data(), w.data(), N, I, O);
    return dotd(y, R);
  };
  Vec dx(x.size(), 0.0f), dw(w.size(), 0.0f);
  cpu::linear_bwd(dx.data(), dw.data(), R.data(), x.data(), w.data(), N, I, O, true, true);
  expect_grad_near(dx, fd_grad(x, loss), "linear dx", 1e-3);
  expect_grad_near(dw, fd_grad(w, loss), "linear dw", 1e-3);

  Vec dx2 = dx, dw2 = dw;
  cpu::linear_bwd(dx2.data(), dw2.data(), R.data(), x.data(), w.data(), N, I, O, true, true);
  expect_all_near(dx2, scaled(dx, 2.0f), 1e-6, 1e-6, "accumulated dx");
  expect_all_near(dw2, scaled(dw, 2.0f), 1e-6, 1e-6, "accumulated dw");
  Vec dxo = poisoned(dx.size()), dwo = poisoned(dw.size());
  cpu::linear_bwd(dxo.data(), dwo.data(), R.data(), x.data(), w.data(), N, I, O, false, false);
  expect_same_bits(dxo, dx, "overwritten dx");
  expect_same_bits(dwo, dw, "overwritten dw");
  Vec dw_only(w.size(), 0.0f);
  cpu::linear_bwd(nullptr, dw_only.data(), R.data(), x.data(), w.data(), N, I, O, false, true);
  expect_all_near(dw_only, dw, 0, 0, "dw alone");
}

TEST(KernelsCpu, LinearLargerShapeMatchesNaive) {
  // Exercises the 8-wide dot product path with a remainder (I = 67).
  const int N = 17, I = 67, O = 33;
  Vec x = randn(size_t(N) * I, 9), w = randn(size_t(O) * I, 10, 0.2f), y(size_t(N) * O);
  cpu::linear_fwd(y.data(), x.data(), w.data(), N, I, O);
  std::vector<double> ref(y.size(), 0.0);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < O; o++)
      for (int i = 0; i < I; i++) ref[n * O + o] += double(x[n * I + i]) * w[o * I + i];
  expect_all_near(y, ref, 1e-5, 1e-5, "linear y");
}

TEST(KernelsCpu, SwigluMatchesFormulaAndGradients) {
  const long n = 7 * 13;
  Vec gate = randn(n, 11, 2.0f), up = randn(n, 12), out(n);
  cpu::swiglu_fwd(out.data(), gate.data(), up.data(), n);
  std::vector<double> ref(n);
  for (long i = 0; i < n; i++) ref[i] = gate[i] / (1.0 + std::exp(-double(gate[i]))) * up[i];
  expect_all_near(out, ref, 1e-6, 1e-6, "swiglu out");

  const Vec R = randn(n, 13);
  auto loss = [&] {
    cpu::swiglu_fwd(out.data(), gate.data(), up.data(), n);
    return dotd(out, R);
  };
  Vec dg(n, 0.0f), du(n, 0.0f);
  cpu::swiglu_bwd(dg.data(), du.data(), R.data(), gate.data(), up.data(), n, true, true);
  expect_grad_near(dg, fd_grad(gate, loss, 1e-3f), "dgate");
  expect_grad_near(du, fd_grad(up, loss, 1e-3f), "dup");

  Vec dg2 = dg, du2 = du;
  cpu::swiglu_bwd(dg2.data(), du2.data(), R.data(), gate.data(), up.data(), n, true, true);
  expect_all_near(dg2, scaled(dg, 2.0f), 1e-6, 1e-6, "accumulated dgate");
  expect_all_near(du2, scaled(du, 2.0f), 1e-6, 1e-6, "accumulated dup");
  Vec dgo = poisoned(n), duo = poisoned(n);
  cpu::swiglu_bwd(dgo.data(), duo.data(), R.data(), gate.data(), up.data(), n, false, false);
  expect_same_bits(dgo, dg, "overwritten dgate");
  expect_same_bits(duo, du, "overwritten dup");
  Vec du_only(n, 0.0f);
  cpu::swiglu_bwd(nullptr, du_only.data(), R.data(), gate.data(), up.data(), n, false, true);
  expect_all_near(du_only, du, 0, 0, "dup alone");
}

TEST(KernelsCpu, AddScaledAndGradients) {
  const long n = 6 * 9;
  const float s = 0.37f;
  Vec a = randn(n, 14), b = randn(n, 15), out(n);
  cpu::add_fwd(out.data(), a.data(), b.data(), s, n);
  for (long i = 0; i < n; i++) ASSERT_FLOAT_EQ(out[i], a[i] + s * b[i]);

  const Vec R = randn(n, 16);
  auto loss = [&] {
    cpu::add_fwd(out.data(), a.data(), b.data(), s, n);
    return dotd(out, R);
  };
  Vec da(n, 0.0f), db(n, 0.0f);
  cpu::add_bwd(da.data(), db.data(), R.data(), s, n, true, true);
  expect_grad_near(da, fd_grad(a, loss), "da", 1e-4);
  expect_grad_near(db, fd_grad(b, loss), "db", 1e-4);
  Vec dao = poisoned(n), dbo = poisoned(n);
  cpu::add_bwd(dao.data(), dbo.data(), R.data(), s, n, false, false);
  expect_same_bits(dao, da, "overwritten da");
  expect_same_bits(dbo, db, "overwritten db");
  cpu::add_bwd(da.data(), nullptr, R.data(), s, n, true, false);
  for (long i = 0; i < n; i++) ASSERT_FLOAT_EQ(da[i], 2.0f * R[i]);
  for (long i = 0; i < n; i++) ASSERT_FLOAT_EQ(db[i], s * R[i]);
}

TEST(KernelsCpu, BiasBroadcastsAndItsGradientSumsColumns) {
  const long N = 7, O = 5;
  Vec y0 = randn(N * O, 17), b = randn(O, 18), y = y0;
  cpu::bias_fwd(y.data(), b.data(), N, O);
  for (long n = 0; n < N; n++)
    for (long o = 0; o < O; o++) ASSERT_FLOAT_EQ(y[n * O + o], y0[n * O + o] + b[o]);
  const Vec R = randn(N * O, 19);
  auto loss = [&] {
    Vec out = y0;
    cpu::bias_fwd(out.data(), b.data(), N, O);
    return dotd(out, R);
  };
  Vec db(O, 0.0f);
  cpu::bias_bwd(db.data(), R.data(), N, O, true);
  expect_grad_near(db, fd_grad(b, loss), "db", 1e-4);
  Vec dbo = poisoned(O);
  cpu::bias_bwd(dbo.data(), R.data(), N, O, false);
  expect_same_bits(dbo, db, "overwritten db");
  cpu::bias_bwd(db.data(), R.data(), N, O, true);  // "+=": twice the gradient
  for (long o = 0; o < O; o++) ASSERT_FLOAT_EQ(db[o], 2.0f * dbo[o]);
}

TEST(KernelsCpu, AdamwFirstStepByHand) {
  // Default betas (0.9, 0.999) as torch holds them, i.e. 1 - beta2 = 0.001 exactly in v.
  // First step: m = (1-b1) g, v = (1-b2) g^2, mhat = g, vhat = g^2,
  // so param = param (1 - lr wd) - lr g / (|g| + eps).
  AdamWParams p;
  p.lr = 0.1f;
  p.weight_decay = 0.01f;
  Vec param = {1.0f, -2.0f, 0.5f}, m(3, 0.0f), v(3, 0.0f);
  const Vec g = {0.5f, 0.25f, -4.0f};
  cpu::adamw_step(param.data(), m.data(), v.data(), g.data(), 3, p, 1, 1.0f);
  const double expected[3] = {1.0 * 0.999 - 0.1, -2.0 * 0.999 - 0.1, 0.5 * 0.999 + 0.1};
  for (int i = 0; i < 3; i++) {
    EXPECT_NEAR(param[i], expected[i], 1e-6) << i;
    EXPECT_NEAR(m[i], 0.1 * g[i], 1e-7 * std::abs(g[i])) << i;
    EXPECT_NEAR(v[i], 0.001 * g[i] * g[i], 1e-6 * 0.001 * g[i] * g[i]) << i;
  }
}

TEST(KernelsCpu, AdamwWeightDecayAndGradScale) {
  AdamWParams p;
  p.lr = 0.01f;
  p.weight_decay = 0.1f;
  // Zero gradient: only the decoupled decay moves the parameter, and the moments stay zero.
  Vec param = {3.0f, -1.5f}, m(2, 0.0f), v(2, 0.0f);
  const Vec zero(2, 0.0f);
  cpu::adamw_step(param.data(), m.data(), v.data(), zero.data(), 2, p, 1, 1.0f);
  EXPECT_FLOAT_EQ(param[0], 3.0f * 0.999f);
  EXPECT_FLOAT_EQ(param[1], -1.5f * 0.999f);
  EXPECT_EQ(m[0], 0.0f);
  EXPECT_EQ(v[1], 0.0f);

  // grad_scale multiplies the gradient before anything else.
  Vec pa = {1.0f, 2.0f}, ma = {0.1f, -0.2f}, va = {0.01f, 0.02f};
  Vec pb = pa, mb = ma, vb = va;
  const Vec g = {0.8f, -0.6f}, g_half = {0.4f, -0.3f};
  cpu::adamw_step(pa.data(), ma.data(), va.data(), g.data(), 2, p, 3, 0.5f);
  cpu::adamw_step(pb.data(), mb.data(), vb.data(), g_half.data(), 2, p, 3, 1.0f);
  for (int i = 0; i < 2; i++) {
    EXPECT_FLOAT_EQ(pa[i], pb[i]);
    EXPECT_FLOAT_EQ(ma[i], mb[i]);
    EXPECT_FLOAT_EQ(va[i], vb[i]);
  }
}

TEST(KernelsCpu, AdamwSeveralStepsMatchDoubleReference) {
  // torch keeps the hyperparameters as doubles; the reference uses the decimals as written.
  const double lr = 3e-3, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.05, scale = 0.7;
  AdamWParams p;
  p.lr = float(lr);
  p.beta1 = float(b1);
  p.beta2 = float(b2);
  p.eps = float(eps);
  p.weight_decay = float(wd);
  const size_t n = 11;
  Vec param = randn(n, 17), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rp(param.begin(), param.end()), rm(n, 0.0), rv(n, 0.0);
  for (int t = 1; t <= 4; t++) {
    const Vec g = randn(n, 100 + t);
    cpu::adamw_step(param.data(), m.data(), v.data(), g.data(), n, p, t, float(scale));
    for (size_t i = 0; i < n; i++) {
      const double gi = double(g[i]) * float(scale);
      rp[i] *= 1.0 - lr * wd;
      rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
      rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
      const double mhat = rm[i] / (1.0 - std::pow(b1, t));
      const double vhat = rv[i] / (1.0 - std::pow(b2, t));
      rp[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  expect_all_near(param, rp, 1e-7, 1e-6, "param after 4 steps");
  expect_all_near(m, rm, 1e-7, 1e-6, "m");
  expect_all_near(v, rv, 1e-9, 1e-6, "v");
}

TEST(KernelsCpu, SumSquaresInDouble) {
  // 2^25 ones: a float accumulator would stall at 2^24.
  const size_t n = 1 << 25;
  Vec g(n, 1.0f);
  EXPECT_EQ(cpu::sum_squares(g.data(), n), double(n));
  const Vec h = {3.0f, -4.0f, 0.5f};
  EXPECT_DOUBLE_EQ(cpu::sum_squares(h.data(), 3), 25.25);
}

}  // namespace
}  // namespace strata::test
