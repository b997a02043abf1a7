// cpu reference kernels: rope (inv_freq with and without llama3 scaling, rotation, gradient) and
// causal GQA attention (against a materialised-softmax reference, gradients, accumulation).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/attention.h"
#include "kernels/rope.h"
#include "kernels_test_util.h"

namespace strata::test {
namespace {

using Vec = std::vector<float>;

// transformers' llama3 inv_freq, written independently in double from the published formula.
std::vector<double> ref_inv_freq(int D, double theta, const RopeScaling& s) {
  std::vector<double> f(D / 2);
  for (int i = 0; i < D / 2; i++) {
    double inv = 1.0 / std::pow(theta, double(2 * i) / D);
    if (s.type == RopeType::llama3) {
      const double old_ctx = s.original_max_position_embeddings;
      const double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
      const double wl = 2 * std::numbers::pi / inv;
      if (wl > low_wl) {
        inv = inv / s.factor;
      } else if (wl >= high_wl) {
        const double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        inv = (1 - smooth) * inv / s.factor + smooth * inv;
      }
    }
    f[i] = inv;
  }
  return f;
}

TEST(KernelsCpu, RopeInvFreqDefault) {
  const int D = 8;
  Vec f(D / 2);
  cpu::rope_inv_freq(f.data(), D, 10000.0f, RopeScaling{});
  const double expect[4] = {1.0, 0.1, 0.01, 0.001};
  for (int i = 0; i < D / 2; i++) EXPECT_NEAR(f[i], expect[i], 2e-7 * expect[i]) << i;
  Vec g(64);
  cpu::rope_inv_freq(g.data(), 128, 500000.0f, RopeScaling{});
  expect_all_near(g, ref_inv_freq(128, 500000.0, RopeScaling{}), 0, 3e-7, "inv_freq D=128");
}

TEST(KernelsCpu, RopeInvFreqLlama3AllThreeBands) {
  RopeScaling s;
  s.type = RopeType::llama3;
  s.factor = 8.0f;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_max_position_embeddings = 8192;
  // D = 16, theta 1e4: wavelengths 6.3 ... 1987 (kept), 6283 (smoothed), 19869 (divided by 8).
  const int D = 16;
  Vec f(D / 2), plain(D / 2);
  cpu::rope_inv_freq(f.data(), D, 10000.0f, s);
  cpu::rope_inv_freq(plain.data(), D, 10000.0f, RopeScaling{});
  expect_all_near(f, ref_inv_freq(D, 10000.0, s), 0, 1e-6, "llama3 inv_freq D=16");
  for (int i = 0; i <= 5; i++) EXPECT_EQ(f[i], plain[i]) << "high-frequency band is unchanged, i=" << i;
  EXPECT_GT(f[6], plain[6] / 8) << "medium band lies strictly between";
  EXPECT_LT(f[6], plain[6]);
  EXPECT_FLOAT_EQ(f[7], plain[7] / 8) << "low-frequency band is divided by factor";

  // D = 8 with a short original context (64) also hits every band, and the spec's D=8 shape.
  s.original_max_position_embeddings = 64;
  Vec g(4), gp(4);
  cpu::rope_inv_freq(g.data(), 8, 10000.0f, s);
  cpu::rope_inv_freq(gp.data(), 8, 10000.0f, RopeScaling{});
  expect_all_near(g, ref_inv_freq(8, 10000.0, s), 0, 1e-6, "llama3 inv_freq D=8");
  EXPECT_EQ(g[0], gp[0]);
  EXPECT_GT(g[1], gp[1] / 8);
  EXPECT_LT(g[1], gp[1]);
  EXPECT_FLOAT_EQ(g[2], gp[2] / 8);
  EXPECT_FLOAT_EQ(g[3], gp[3] / 8);
}

TEST(KernelsCpu, RopeMatchesRotateHalfAndGradients) {
  const int N = 6, H = 3, D = 8;
  const std::vector<int32_t> pos = {0, 1, 2, 7, 100, 4095};
  Vec inv(D / 2);
  RopeScaling s;
  s.type = RopeType::llama3;
  s.factor = 8.0f;
  s.original_max_position_embeddings = 64;
  cpu::rope_inv_freq(inv.data(), D, 10000.0f, s);
  Vec x = randn(size_t(N) * H * D, 21), out(x.size());
  cpu::rope_fwd(out.data(), x.data(), pos.data(), inv.data(), N, H, D);
  std::vector<double> ref(x.size());
  for (int n = 0; n < N; n++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < D / 2; i++) {
        const double a = float(pos[n]) * inv[i];  // float angle, as transformers computes it
        const size_t b = (size_t(n) * H + h) * D;
        ref[b + i] = x[b + i] * std::cos(a) - x[b + i + D / 2] * std::sin(a);
        ref[b + i + D / 2] = x[b + i + D / 2] * std::cos(a) + x[b + i] * std::sin(a);
      }
  expect_all_near(out, ref, 1e-6, 1e-6, "rope out");
  for (int c = 0; c < H * D; c++) EXPECT_EQ(out[c], x[c]) << "position 0 is the identity";

  const Vec R = randn(out.size(), 22);
  auto loss = [&] {
    cpu::rope_fwd(out.data(), x.data(), pos.data(), inv.data(), N, H, D);
    return dotd(out, R);
  };
  Vec dx(x.size(), 0.0f);
  cpu::rope_bwd(dx.data(), R.data(), pos.data(), inv.data(), N, H, D, true);
  expect_grad_near(dx, fd_grad(x, loss), "rope dx", 1e-3);
  Vec dx2 = dx;
  cpu::rope_bwd(dx2.data(), R.data(), pos.data(), inv.data(), N, H, D, true);
  for (size_t i = 0; i < dx.size(); i++) ASSERT_FLOAT_EQ(dx2[i], 2.0f * dx[i]);
  Vec dxo = poisoned(dx.size());
  cpu::rope_bwd(dxo.data(), R.data(), pos.data(), inv.data(), N, H, D, false);
  expect_same_bits(dxo, dx, "overwritten rope dx");
  cpu::rope_bwd(nullptr, R.data(), pos.data(), inv.data(), N, H, D, false);  // skip: must not crash
}

struct AttnShape {
  int B, T, Hq, Hkv, D;
};

// Materialised softmax(q k^T / sqrt(D) + causal mask) v in double; lse [B, Hq, T].
void ref_attention(std::vector<double>& out, std::vector<double>& lse, const Vec& q, const Vec& k, const Vec& v,
                   AttnShape s) {
  out.assign(q.size(), 0.0);
  lse.assign(size_t(s.B) * s.Hq * s.T, 0.0);
  const double scale = 1.0 / std::sqrt(double(s.D));
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.Hq; h++) {
      const int kh = h / (s.Hq / s.Hkv);
      std::vector<double> S(size_t(s.T) * s.T, -INFINITY);
      for (int i = 0; i < s.T; i++) {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
          double d = 0;
          for (int e = 0; e < s.D; e++)
            d += double(q[((b * s.T + i) * s.Hq + h) * s.D + e]) * k[((b * s.T + j) * s.Hkv + kh) * s.D + e];
          S[i * s.T + j] = d * scale;
          m = std::max(m, d * scale);
        }
        for (int j = 0; j <= i; j++) sum += std::exp(S[i * s.T + j] - m);
        lse[(b * s.Hq + h) * s.T + i] = m + std::log(sum);
        for (int j = 0; j <= i; j++) {
          const double p = std::exp(S[i * s.T + j] - m) / sum;
          for (int e = 0; e < s.D; e++)
            out[((b * s.T + i) * s.Hq + h) * s.D + e] += p * v[((b * s.T + j) * s.Hkv + kh) * s.D + e];
        }
      }
    }
}

class AttentionCpu : public ::testing::TestWithParam<AttnShape> {};

TEST_P(AttentionCpu, MatchesNaiveReferenceAndGradients) {
  const AttnShape s = GetParam();
  const size_t nq = size_t(s.B) * s.T * s.Hq * s.D, nkv = size_t(s.B) * s.T * s.Hkv * s.D;
  Vec q = randn(nq, 31), k = randn(nkv, 32), v = randn(nkv, 33), out(nq), lse(size_t(s.B) * s.Hq * s.T);
  cpu::attention_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.T, s.Hq, s.Hkv, s.D);
  std::vector<double> rout, rlse;
  ref_attention(rout, rlse, q, k, v, s);
  expect_all_near(out, rout, 1e-5, 1e-5, "attention out");
  expect_all_near(lse, rlse, 1e-5, 1e-5, "attention lse");

  const Vec R = randn(nq, 34);
  Vec o_tmp(nq), l_tmp(lse.size());
  auto loss = [&] {
    cpu::attention_fwd(o_tmp.data(), l_tmp.data(), q.data(), k.data(), v.data(), s.B, s.T, s.Hq, s.Hkv, s.D);
    return dotd(o_tmp, R);
  };
  Vec dq(nq, 0.0f), dk(nkv, 0.0f), dv(nkv, 0.0f);
  auto bwd = [&](float* a, float* b, float* c, bool acc = true) {
    cpu::attention_bwd(a, b, c, R.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), s.B, s.T, s.Hq, s.Hkv,
                       s.D, acc, acc, acc);
  };
  bwd(dq.data(), dk.data(), dv.data());
  expect_grad_near(dq, fd_grad(q, loss, 1e-3f), "attention dq");
  expect_grad_near(dk, fd_grad(k, loss, 1e-3f), "attention dk");
  expect_grad_near(dv, fd_grad(v, loss, 1e-3f), "attention dv");

  Vec dq2 = dq, dk2 = dk, dv2 = dv;
  bwd(dq2.data(), dk2.data(), dv2.data());
  for (size_t i = 0; i < nq; i++) ASSERT_FLOAT_EQ(dq2[i], 2.0f * dq[i]);
  for (size_t i = 0; i < nkv; i++) ASSERT_FLOAT_EQ(dk2[i], 2.0f * dk[i]);
  for (size_t i = 0; i < nkv; i++) ASSERT_FLOAT_EQ(dv2[i], 2.0f * dv[i]);
  Vec dqo = poisoned(nq), dko = poisoned(nkv), dvo = poisoned(nkv);
  bwd(dqo.data(), dko.data(), dvo.data(), false);
  expect_same_bits(dqo, dq, "overwritten dq");
  expect_same_bits(dko, dk, "overwritten dk");
  expect_same_bits(dvo, dv, "overwritten dv");
  Vec dk_only(nkv, 0.0f), dq_only(nq, 0.0f);
  bwd(nullptr, dk_only.data(), nullptr);
  bwd(dq_only.data(), nullptr, nullptr);
  expect_all_near(dk_only, dk, 0, 0, "dk alone");
  expect_all_near(dq_only, dq, 0, 0, "dq alone");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCpu,
                         ::testing::Values(AttnShape{2, 7, 6, 2, 8}, AttnShape{1, 5, 6, 3, 6}, AttnShape{2, 6, 4, 4, 8},
                                           AttnShape{1, 9, 3, 1, 6}));

TEST(KernelsCpu, AttentionIsCausal) {
  // Changing the last token's k and v must not change any earlier output.
  const int B = 1, T = 6, Hq = 4, Hkv = 2, D = 8;
  Vec q = randn(size_t(T) * Hq * D, 41), k = randn(size_t(T) * Hkv * D, 42), v = randn(k.size(), 43);
  Vec o1(q.size()), o2(q.size()), lse(size_t(Hq) * T);
  cpu::attention_fwd(o1.data(), lse.data(), q.data(), k.data(), v.data(), B, T, Hq, Hkv, D);
  for (int e = 0; e < Hkv * D; e++) k[(T - 1) * Hkv * D + e] += 3.0f, v[(T - 1) * Hkv * D + e] -= 2.0f;
  cpu::attention_fwd(o2.data(), lse.data(), q.data(), k.data(), v.data(), B, T, Hq, Hkv, D);
  for (int i = 0; i < (T - 1) * Hq * D; i++) ASSERT_EQ(o1[i], o2[i]) << i;
  bool last_changed = false;
  for (size_t i = size_t(T - 1) * Hq * D; i < o1.size(); i++) last_changed |= o1[i] != o2[i];
  EXPECT_TRUE(last_changed);
}

}  // namespace
}  // namespace strata::test
