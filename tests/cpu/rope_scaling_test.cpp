// The rope types beside default and llama3 (linear, dynamic, yarn, longrope): inv_freq and the attention factor
// against the numbers transformers 5.24 computes (modeling_rope_utils.py's ROPE_INIT_FUNCTIONS, float32, on
// head sizes whose half is odd), the table length dynamic_rope_update picks batch by batch, and the rotation
// scaled by the attention factor (forward, gradient, and factor 1 bit for bit).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/rope.h"
#include "kernels_test_util.h"

namespace strata::test {
namespace {

using Vec = std::vector<float>;

// Floats between a and b: torch's pow and the correctly rounded one may differ in the last place.
int64_t ulps_apart(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(int64_t(ia) - int64_t(ib));
}

struct InvFreqCase {
  const char* name;
  int D;
  float theta;
  RopeScaling s;
  RopeTableKey key;
  Vec want;          // transformers' inv_freq
  double attention;  // transformers' attention_scaling
};

RopeScaling scaling(RopeType t, double factor) {
  RopeScaling s;
  s.type = t;
  s.factor = factor;
  return s;
}

std::vector<InvFreqCase> cases() {
  std::vector<InvFreqCase> c;
  c.push_back(
      {"linear D14 factor 2.5",
       14,
       10000.0f,
       scaling(RopeType::linear, 2.5),
       {64, 13},
       {0.400000006f, 0.107307829f, 0.0287874229f, 0.00772279035f, 0.00207178923f, 0.000555798062f, 0.000149103726f},
       1.0});
  c.push_back({"dynamic D14 at 37 past 16",
               14,
               10000.0f,
               scaling(RopeType::dynamic, 2.0),
               {16, 37},
               {1.0f, 0.21644792f, 0.0468496978f, 0.0101405205f, 0.00219489424f, 0.000475080335f, 0.00010283017f},
               1.0});
  c.push_back({"dynamic D22 at 1000 past 256",
               22,
               500000.0f,
               scaling(RopeType::dynamic, 3.5),
               {256, 1000},
               {1.0f, 0.238286346f, 0.0567803942f, 0.0135299936f, 0.00322401291f, 0.000768238271f, 0.000183060722f,
                4.36208938e-05f, 1.03942593e-05f, 2.47681146e-06f, 5.90190098e-07f},
               1.0});
  RopeScaling y = scaling(RopeType::yarn, 4.0);
  y.original_max_position_embeddings = 16;
  c.push_back({"yarn D22 defaults",
               22,
               10000.0f,
               y,
               {64, 13},
               {1.0f, 0.270547599f, 0.0468454324f, 0.0202782694f, 0.0087779779f, 0.00379977748f, 0.00164483278f,
                0.00071200903f, 0.000308211631f, 0.000133417489f, 5.77532301e-05f},
               1.138629436111989});
  y = scaling(RopeType::yarn, 8.0);
  y.original_max_position_embeddings = 64;
  y.beta_fast = 16, y.beta_slow = 0.5, y.mscale = 0.707, y.mscale_all_dim = 1.0, y.truncate = false;
  c.push_back({"yarn D22 mscale pair, untruncated",
               22,
               10000.0f,
               y,
               {64, 13},
               {1.0f, 0.327658325f, 0.0962891579f, 0.021965377f, 0.00438898895f, 0.00189988874f, 0.00082241639f,
                0.000356004515f, 0.000154105815f, 6.67087443e-05f, 2.8876615e-05f},
               0.9495608824621653});
  y = scaling(RopeType::yarn, 2.0);
  y.original_max_position_embeddings = 32;
  y.attention_factor = 1.3;
  c.push_back({"yarn D14 explicit attention_factor",
               14,
               1000000.0f,
               y,
               {64, 13},
               {1.0f, 0.0694747642f, 0.00965348631f, 0.00134134782f, 0.000186379621f, 2.58973669e-05f, 3.59842807e-06f},
               1.3});
  RopeScaling l = scaling(RopeType::longrope, 0.0);  // factor absent: max_position_embeddings / original = 8
  l.original_max_position_embeddings = 16;
  l.short_factor = {1.0f, 1.1f, 1.3f, 1.7f, 2.3f, 3.1f, 4.9f};
  l.long_factor = {1.2f, 2.5f, 4.0f, 8.5f, 16.0f, 33.0f, 64.5f};
  const Vec short_want = {1.0f,           0.243881434f,   0.0553604327f, 0.0113570439f,
                          0.00225194497f, 0.00044822428f, 7.6073331e-05f};
  c.push_back({"longrope D14 within the original context", 14, 10000.0f, l, {128, 16}, short_want, 1.3228756555322954});
  c.push_back(
      {"longrope D14 past it",
       14,
       10000.0f,
       l,
       {128, 17},
       {0.833333313f, 0.107307822f, 0.0179921389f, 0.00227140891f, 0.000323717075f, 4.21059158e-05f, 5.77921446e-06f},
       1.3228756555322954});
  l.factor = 3.0;
  c.push_back({"longrope D14 factor 3", 14, 10000.0f, l, {128, 0}, short_want, 1.1816262629022296});
  return c;
}

TEST(RopeScaling, InvFreqAndAttentionFactorMatchTransformers) {
  for (const InvFreqCase& k : cases()) {
    SCOPED_TRACE(k.name);
    ASSERT_EQ(int(k.want.size()), k.D / 2);
    Vec got(size_t(k.D / 2), -1.0f);
    cpu::rope_inv_freq(got.data(), k.D, k.theta, k.s, k.key);
    for (size_t i = 0; i < got.size(); i++)
      EXPECT_LE(ulps_apart(got[i], k.want[i]), 1) << "inv_freq[" << i << "] " << got[i] << " vs " << k.want[i];
    EXPECT_EQ(cpu::rope_attention_factor(k.s, k.key.max_position_embeddings), float(k.attention));
  }
}

TEST(RopeScaling, PlainTypesIgnoreTheLength) {
  Vec a(7), b(7), plain(7);
  cpu::rope_inv_freq(plain.data(), 14, 10000.0f, RopeScaling{});
  // dynamic within max_position_embeddings is the default table.
  cpu::rope_inv_freq(a.data(), 14, 10000.0f, scaling(RopeType::dynamic, 4.0), {64, 64});
  expect_same_bits(a, plain, "dynamic at max_position_embeddings");
  cpu::rope_inv_freq(b.data(), 14, 10000.0f, scaling(RopeType::linear, 2.0), {64, 1 << 20});
  cpu::rope_inv_freq(a.data(), 14, 10000.0f, scaling(RopeType::linear, 2.0), {64, 1});
  expect_same_bits(a, b, "linear at any length");
  EXPECT_EQ(cpu::rope_attention_factor(scaling(RopeType::linear, 2.0), 64), 1.0f);
  EXPECT_EQ(cpu::rope_attention_factor(scaling(RopeType::dynamic, 2.0), 64), 1.0f);
  // yarn at factor 1 keeps the unscaled attention (get_mscale(1) = 1).
  EXPECT_EQ(cpu::rope_attention_factor(scaling(RopeType::yarn, 1.0), 64), 1.0f);
}

// dynamic_rope_update's choice batch by batch: dynamic grows to the longest length past max_position_embeddings
// (64), keeps it for shorter batches still past 64 and resets below 64; longrope follows each batch.
TEST(RopeScaling, TableLengthFollowsDynamicRopeUpdate) {
  const RopeScaling dyn = scaling(RopeType::dynamic, 2.0);
  int held = 0;
  const std::pair<int, int> dynamic_steps[] = {{10, 0}, {64, 0},    {100, 100}, {80, 100}, {64, 100},
                                               {63, 0}, {200, 200}, {300, 300}, {65, 300}, {1, 0}};
  for (auto [len, want] : dynamic_steps) {
    held = rope_table_length(dyn, 64, held, len);
    EXPECT_EQ(held, want) << "dynamic after a batch of " << len;
  }
  RopeScaling lr = scaling(RopeType::longrope, 0.0);
  lr.original_max_position_embeddings = 16;
  held = 0;
  const std::pair<int, int> longrope_steps[] = {{16, 0}, {17, 17}, {40, 17}, {16, 16}, {3, 16}, {100, 100}};
  for (auto [len, want] : longrope_steps) {
    held = rope_table_length(lr, 64, held, len);
    EXPECT_EQ(held, want) << "longrope after a batch of " << len;
  }
  for (RopeType t : {RopeType::plain, RopeType::linear, RopeType::yarn, RopeType::llama3})
    EXPECT_EQ(rope_table_length(scaling(t, 2.0), 64, 0, 1000), 0);
}

// transformers: q * (cos * a) + rotate_half(q) * (sin * a), cos and sin scaled in float32 first.
TEST(RopeScaling, AttentionFactorScalesTheRotation) {
  const int N = 5, H = 3, D = 14;  // D/2 = 7: odd
  const float a = 1.1386294f;
  const std::vector<int32_t> pos = {0, 3, 12, 9, 4000};
  Vec inv(D / 2);
  RopeScaling y = scaling(RopeType::yarn, 4.0);
  y.original_max_position_embeddings = 16;
  cpu::rope_inv_freq(inv.data(), D, 10000.0f, y);
  const Vec x = randn(size_t(N) * H * D, 31);
  Vec out(x.size());
  cpu::rope_fwd(out.data(), x.data(), pos.data(), inv.data(), N, H, D, a);
  std::vector<double> ref(x.size());
  for (int n = 0; n < N; n++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < D / 2; i++) {
        const float angle = float(pos[n]) * inv[size_t(i)];
        const double c = double(std::cos(angle) * a), s = double(std::sin(angle) * a);
        const size_t b = (size_t(n) * H + h) * D;
        ref[b + i] = x[b + i] * c - x[b + i + D / 2] * s;
        ref[b + i + D / 2] = x[b + i + D / 2] * c + x[b + i] * s;
      }
  expect_all_near(out, ref, 1e-6, 1e-6, "scaled rope out");
  for (int c = 0; c < H * D; c++) EXPECT_EQ(out[size_t(c)], x[size_t(c)] * a) << "position 0 scales by a";

  Vec xv = x;
  const Vec R = randn(out.size(), 32);
  auto loss = [&] {
    cpu::rope_fwd(out.data(), xv.data(), pos.data(), inv.data(), N, H, D, a);
    return dotd(out, R);
  };
  Vec dx(x.size(), 0.0f);
  cpu::rope_bwd(dx.data(), R.data(), pos.data(), inv.data(), N, H, D, true, a);
  expect_grad_near(dx, fd_grad(xv, loss), "scaled rope dx", 1e-3);

  // Factor 1 is the unscaled rotation, bit for bit, both ways.
  Vec one(x.size()), plain(x.size()), d_one = poisoned(x.size()), d_plain = poisoned(x.size());
  cpu::rope_fwd(one.data(), x.data(), pos.data(), inv.data(), N, H, D, 1.0f);
  cpu::rope_fwd(plain.data(), x.data(), pos.data(), inv.data(), N, H, D);
  expect_same_bits(one, plain, "rope at factor 1");
  cpu::rope_bwd(d_one.data(), R.data(), pos.data(), inv.data(), N, H, D, false, 1.0f);
  cpu::rope_bwd(d_plain.data(), R.data(), pos.data(), inv.data(), N, H, D, false);
  expect_same_bits(d_one, d_plain, "rope dx at factor 1");
}

}  // namespace
}  // namespace strata::test
