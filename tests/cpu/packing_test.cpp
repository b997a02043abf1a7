// Sample packing: several examples in one row, positions restarting per example and attention
// confined to each. The cpu attention and rope kernels on packed rows against the same examples
// as separate sequences, a packed batch's loss and gradients against the examples in rows of their
// own (GQA, head_dim 6), the layout lay_rows_packed gives, and the sim's forecast of a packed step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "engine/backend.h"
#include "engine/error.h"
#include "kernels/attention.h"
#include "kernels/rope.h"
#include "kernels_test_util.h"
#include "model/data/datasets.h"
#include "model/data/row_data.h"
#include "model/llama/llama.h"
#include "model/plan/forecast.h"
#include "model/train/trainer.h"
#include "tests/cpu/sim_twin.h"

namespace strata::test {
namespace {

using Vec = std::vector<float>;

// Positions of rows laid from segment lengths (each row's lengths sum to T).
std::vector<int32_t> positions_of(const std::vector<std::vector<int>>& rows) {
  std::vector<int32_t> pos;
  for (const auto& row : rows)
    for (int len : row)
      for (int i = 0; i < len; ++i) pos.push_back(i);
  return pos;
}

// Copies tokens [t0, t0 + n) of row b of x [B, T, H, D] into out [n, H, D] (or back, `to_x`).
void copy_rows(Vec& x, Vec& out, int b, int t0, int n, int T, int H, int D, bool to_x = false) {
  const size_t w = size_t(H) * D;
  if (!to_x) out.resize(size_t(n) * w);
  for (int i = 0; i < n; ++i) {
    float* xi = x.data() + (size_t(b) * T + t0 + i) * w;
    float* oi = out.data() + size_t(i) * w;
    if (to_x)
      std::memcpy(xi, oi, w * sizeof(float));
    else
      std::memcpy(oi, xi, w * sizeof(float));
  }
}

struct Shape4 {
  int Hq, Hkv, D;
};

class PackedAttention : public ::testing::TestWithParam<Shape4> {};

// Every example of a packed row, run alone as a sequence of its own, gives the same out, lse and
// gradients to the bit: the packed kernel visits the same keys in the same order.
TEST_P(PackedAttention, EqualsExamplesAsSeparateSequences) {
  const auto [Hq, Hkv, D] = GetParam();
  const int B = 2, T = 13;
  const std::vector<std::vector<int>> rows = {{4, 1, 8}, {13}};  // an example of 1 token; a full row
  const std::vector<int32_t> pos = positions_of(rows);
  const size_t nq = size_t(B) * T * Hq * D, nkv = size_t(B) * T * Hkv * D;
  Vec q = randn(nq, 1), k = randn(nkv, 2), v = randn(nkv, 3), dout = randn(nq, 4);
  Vec out(nq), lse(size_t(B) * Hq * T);
  cpu::attention_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, Hq, Hkv, D, pos.data());
  Vec dq(nq), dk(nkv), dv(nkv);
  cpu::attention_bwd(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(),
                     B, T, Hq, Hkv, D, false, false, false, pos.data());
  Vec eout(nq), else_(lse.size()), edq(nq), edk(nkv), edv(nkv);  // the same, one example at a time
  for (int b = 0; b < B; ++b) {
    int t0 = 0;
    for (int n : rows[size_t(b)]) {
      Vec sq, sk, sv, sdo;
      copy_rows(q, sq, b, t0, n, T, Hq, D);
      copy_rows(k, sk, b, t0, n, T, Hkv, D);
      copy_rows(v, sv, b, t0, n, T, Hkv, D);
      copy_rows(dout, sdo, b, t0, n, T, Hq, D);
      Vec so(sq.size()), sl(size_t(Hq) * n), sdq(sq.size()), sdk(sk.size()), sdv(sv.size());
      cpu::attention_fwd(so.data(), sl.data(), sq.data(), sk.data(), sv.data(), 1, n, Hq, Hkv, D);
      cpu::attention_bwd(sdq.data(), sdk.data(), sdv.data(), sdo.data(), sq.data(), sk.data(), sv.data(), so.data(),
                         sl.data(), 1, n, Hq, Hkv, D, false, false, false);
      copy_rows(eout, so, b, t0, n, T, Hq, D, true);
      copy_rows(edq, sdq, b, t0, n, T, Hq, D, true);
      copy_rows(edk, sdk, b, t0, n, T, Hkv, D, true);
      copy_rows(edv, sdv, b, t0, n, T, Hkv, D, true);
      for (int h = 0; h < Hq; ++h)
        for (int i = 0; i < n; ++i) else_[(size_t(b) * Hq + h) * T + t0 + i] = sl[size_t(h) * n + i];
      t0 += n;
    }
  }
  expect_same_bits(out, eout, "packed out");
  expect_same_bits(lse, else_, "packed lse");
  expect_same_bits(dq, edq, "packed dq");
  expect_same_bits(dk, edk, "packed dk");
  expect_same_bits(dv, edv, "packed dv");
  // And packing is not plain causal attention: the second example's first token sees only itself.
  Vec causal(nq), clse(lse.size());
  cpu::attention_fwd(causal.data(), clse.data(), q.data(), k.data(), v.data(), B, T, Hq, Hkv, D);
  EXPECT_NE(0, std::memcmp(out.data(), causal.data(), size_t(T) * Hq * D * sizeof(float)));
  // A packed layout of one example a row is plain causal attention.
  const std::vector<int32_t> whole = positions_of({{T}, {T}});
  Vec o1(nq), l1(lse.size());
  cpu::attention_fwd(o1.data(), l1.data(), q.data(), k.data(), v.data(), B, T, Hq, Hkv, D, whole.data());
  expect_same_bits(o1, causal, "one example a row");
}

// GQA 6/2 and 4/4, odd head dims (5, 3) and a wider one.
INSTANTIATE_TEST_SUITE_P(Shapes, PackedAttention,
                         ::testing::Values(Shape4{6, 2, 5}, Shape4{4, 4, 3}, Shape4{3, 1, 8}, Shape4{4, 2, 16}));

TEST(PackedRope, PositionsEqualSeparateSequences) {
  const int H = 3, D = 6;
  const std::vector<int> lens = {5, 1, 7, 3};
  const std::vector<int32_t> pos = positions_of({lens});
  const int N = int(pos.size());
  Vec inv(D / 2);
  cpu::rope_inv_freq(inv.data(), D, 10000.0f, RopeScaling{});
  Vec x = randn(size_t(N) * H * D, 7), dout = randn(x.size(), 8), out(x.size()), dx(x.size());
  cpu::rope_fwd(out.data(), x.data(), pos.data(), inv.data(), N, H, D);
  cpu::rope_bwd(dx.data(), dout.data(), pos.data(), inv.data(), N, H, D, false);
  int t0 = 0;
  for (int n : lens) {
    std::vector<int32_t> own(static_cast<size_t>(n));
    std::iota(own.begin(), own.end(), 0);
    const size_t at = size_t(t0) * H * D, len = size_t(n) * H * D;
    Vec so(len), sdx(len);
    cpu::rope_fwd(so.data(), x.data() + at, own.data(), inv.data(), n, H, D);
    cpu::rope_bwd(sdx.data(), dout.data() + at, own.data(), inv.data(), n, H, D, false);
    expect_same_bits(Vec(out.begin() + long(at), out.begin() + long(at + len)), so, "rope out");
    expect_same_bits(Vec(dx.begin() + long(at), dx.begin() + long(at + len)), sdx, "rope dx");
    t0 += n;
  }
  // Not the row's own positions: the second example onwards rotates differently.
  std::vector<int32_t> row(static_cast<size_t>(N));
  std::iota(row.begin(), row.end(), 0);
  Vec plain(x.size());
  cpu::rope_fwd(plain.data(), x.data(), row.data(), inv.data(), N, H, D);
  EXPECT_NE(0, std::memcmp(plain.data(), out.data(), plain.size() * sizeof(float)));
}

// --- the model: a packed batch against the same examples in rows of their own ---------------------

io::LlamaConfig packed_config() {
  io::LlamaConfig c;
  c.hidden_size = 24;
  c.intermediate_size = 40;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;  // GQA 4/2
  c.num_key_value_heads = 2;
  c.head_dim = 6;  // not a multiple of 8 (cuDNN's rule); odd sizes elsewhere too
  c.vocab_size = 61;
  c.rms_norm_eps = 1e-5f;
  return c;
}

// Examples of different lengths, each with a masked prompt (target -1) and a trained response.
struct Ex {
  std::vector<int32_t> ids, targets;
};
std::vector<Ex> examples(int vocab) {
  std::vector<Ex> out;
  const int lens[] = {5, 9, 3, 7, 2};
  uint32_t s = 17;
  for (int n : lens) {
    Ex e;
    for (int i = 0; i < n; ++i) e.ids.push_back(int32_t((s = s * 1103515245u + 12345u) >> 8) % vocab);
    for (int i = 0; i < n; ++i) e.targets.push_back(i + 1 < n && i >= n / 3 ? e.ids[size_t(i) + 1] : -1);
    out.push_back(e);
  }
  return out;
}

// rows[r] lists the examples of row r; each row padded to T (pad id 0, target -1) and, packed,
// given positions restarting per example (the padding one more run).
Batch lay(const std::vector<Ex>& ex, const std::vector<std::vector<int>>& rows, int T, bool packed) {
  Batch b;
  b.B = int(rows.size());
  b.T = T;
  for (const auto& row : rows) {
    size_t used = 0;
    for (int i : row) {
      const Ex& e = ex[size_t(i)];
      b.inputs.insert(b.inputs.end(), e.ids.begin(), e.ids.end());
      b.targets.insert(b.targets.end(), e.targets.begin(), e.targets.end());
      for (size_t p = 0; p < e.ids.size(); ++p) b.positions.push_back(int32_t(p));
      used += e.ids.size();
    }
    for (size_t p = 0; used < size_t(T); ++used, ++p) {
      b.inputs.push_back(0);
      b.targets.push_back(-1);
      b.positions.push_back(int32_t(p));
    }
  }
  if (!packed) b.positions.clear();
  return b;
}

struct Result {
  float loss = 0;
  std::vector<Vec> grads;
};

Result run(const Batch& b, const ModelOptions& mo = ModelOptions{}) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, packed_config(), mo);
  model.init_random(3);
  Trainer tr(*be, model, TrainOptions{});
  Result r;
  r.loss = tr.compute_gradients(b);
  for (auto& p : model.params()) {
    if (!p.trainable) continue;
    r.grads.emplace_back(size_t(p.shape.numel()));
    be->download_f32(r.grads.back().data(), p.grad_view());
  }
  return r;
}

// max |a - b| / max(max |b|, tiny) over a gradient.
double rel_err(const Vec& a, const Vec& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::abs(a[i] - b[i])));
    m = std::max(m, double(std::abs(b[i])));
  }
  return d / std::max(m, 1e-30);
}

TEST(PackedModel, LossAndGradientsEqualExamplesInRowsOfTheirOwn) {
  const std::vector<Ex> ex = examples(packed_config().vocab_size);
  const int T = 14;
  // Row 0 is full (5 + 9), row 1 holds three examples and padding.
  const Batch packed = lay(ex, {{0, 1}, {2, 3, 4}}, T, true);
  const Batch alone = lay(ex, {{0}, {1}, {2}, {3}, {4}}, T, false);
  ASSERT_EQ(valid_targets(packed), valid_targets(alone));
  ASSERT_GT(packed_pairs(packed), 0.0);
  EXPECT_DOUBLE_EQ(packed_pairs(packed), 15 + 45 + 6 + 28 + 3 + 3);  // L(L+1)/2 of 5, 9, 3, 7, 2 and the padding's 2
  const Result p = run(packed), a = run(alone);
  // To the bit: each example's tokens see the same keys in the same order, the loss sums the same
  // per-token terms in the same order, and the padding between them adds exact zeros to the sums.
  EXPECT_EQ(p.loss, a.loss);
  ASSERT_EQ(p.grads.size(), a.grads.size());
  for (size_t i = 0; i < p.grads.size(); ++i) expect_same_bits(p.grads[i], a.grads[i], "packed gradient");
  // The same rows unpacked (the examples attend to each other) give another loss: packing matters.
  Batch mixed = packed;
  mixed.positions.clear();
  EXPECT_GT(std::abs(run(mixed).loss - a.loss), 1e-4);
}

// Each example alone in a batch (B = 1, T = its length), the losses weighted by their trained
// tokens as gradient accumulation weights them: the packed step's loss and gradients.
TEST(PackedModel, EqualsExamplesOneByOneTokenWeighted) {
  const std::vector<Ex> ex = examples(packed_config().vocab_size);
  const Batch packed = lay(ex, {{0, 1}, {2, 3, 4}}, 14, true);
  const Result p = run(packed);
  double loss = 0;
  std::vector<std::vector<double>> g(p.grads.size());
  for (size_t i = 0; i < g.size(); ++i) g[i].assign(p.grads[i].size(), 0.0);
  const double total = double(valid_targets(packed));
  for (size_t e = 0; e < ex.size(); ++e) {
    const Batch one = lay(ex, {{int(e)}}, int(ex[e].ids.size()), false);
    const Result r = run(one);
    const double w = double(valid_targets(one)) / total;
    loss += w * r.loss;
    for (size_t i = 0; i < g.size(); ++i)
      for (size_t j = 0; j < g[i].size(); ++j) g[i][j] += w * r.grads[i][j];
  }
  EXPECT_NEAR(p.loss, loss, 1e-6 * std::abs(loss));  // a float ulp or so
  for (size_t i = 0; i < g.size(); ++i) {
    const Vec gi(g[i].begin(), g[i].end());
    EXPECT_LE(rel_err(p.grads[i], gi), 2e-6) << "parameter " << i;  // 5e-7 seen: the weighting's rounding
  }
}

TEST(PackedModel, LoraAndRecomputeAgree) {
  // The positions are batch data: a plan that recomputes attention replays it on them.
  const std::vector<Ex> ex = examples(packed_config().vocab_size);
  const Batch packed = lay(ex, {{0, 1}, {2, 3, 4}}, 14, true);
  ModelOptions mo;
  mo.train_base = false;
  mo.lora.rank = 2;
  mo.lora.seed = 1;
  const Result keep = run(packed, mo);
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, packed_config(), mo);
  model.init_random(3);
  TrainOptions to;
  to.plan = Plan::gradient_checkpointing();
  Trainer tr(*be, model, to);
  EXPECT_EQ(tr.compute_gradients(packed), keep.loss);
  size_t i = 0;
  for (auto& p : model.params()) {
    if (!p.trainable) continue;
    Vec g(size_t(p.shape.numel()));
    be->download_f32(g.data(), p.grad_view());
    expect_same_bits(g, keep.grads[i++], "recomputed gradient");
  }
  EXPECT_GT(tr.tape().stats().recomputed_nodes, 0);
}

TEST(PackedModel, BadPositionsAreRefused) {
  Batch b;
  b.B = 1;
  b.T = 4;
  b.inputs = {1, 2, 3, 4};
  b.targets = {2, 3, 4, -1};
  for (const std::vector<int32_t>& bad : std::vector<std::vector<int32_t>>{{1, 2, 3, 4}, {0, 1, 3, 4}, {0, 1, 1, 2}}) {
    b.positions = bad;
    EXPECT_THROW(packed_pairs(b), ConfigError);
  }
  b.positions = {0, 1, 0, 1};
  EXPECT_DOUBLE_EQ(packed_pairs(b), 6.0);
  b.positions = {0, 1};
  EXPECT_THROW(packed_pairs(b), Error);
}

// --- the layout -------------------------------------------------------------------------------

Example example(int n, int prompt, int32_t first) {
  Example e;
  for (int i = 0; i < n; ++i) {
    e.ids.push_back(first + i);
    e.trained.push_back(i >= prompt);
  }
  return e;
}

TEST(PackedLayout, ExamplesInOrderWholeAndPadded) {
  const int seq = 10;
  // 4 + 5 fit one row; 3 does not fit the 1 left: next row; 12 is over seq (truncated); 6; all
  // prompt (no target): left out; 1 token: no target, left out.
  const std::vector<Example> ex = {example(4, 1, 100), example(5, 2, 200), example(3, 0, 300), example(12, 3, 400),
                                   example(6, 1, 500), example(4, 4, 600), example(1, 0, 700)};
  std::vector<int32_t> in, tg, pos;
  const RowStats st =
      lay_rows_packed(ex, seq, /*pad_id=*/7, /*train_on_inputs=*/false, /*drop_excess=*/false, in, tg, pos);
  EXPECT_EQ(st.examples, 7);
  EXPECT_EQ(st.laid, 5);  // 4, 5, 3, the truncated 12 and 6
  EXPECT_EQ(st.truncated, 1);
  EXPECT_EQ(st.untrained, 2);
  EXPECT_EQ(st.dropped, 0);
  ASSERT_EQ(st.rows, 4);  // [4 5 pad] [3 pad] [10 of the 12] [6 pad]
  ASSERT_EQ(in.size(), size_t(st.rows) * seq);
  ASSERT_EQ(tg.size(), in.size());
  ASSERT_EQ(pos.size(), in.size());
  const std::vector<int32_t> want_in = {100, 101, 102, 103, 200, 201, 202, 203, 204, 7,    // 4 + 5 + pad
                                        300, 301, 302, 7,   7,   7,   7,   7,   7,   7,    // 3, the 12 does not fit
                                        400, 401, 402, 403, 404, 405, 406, 407, 408, 409,  // 12 cut to 10
                                        500, 501, 502, 503, 504, 505, 7,   7,   7,   7};   // 6 + pad
  const std::vector<int32_t> want_pos = {0, 1, 2, 3, 0, 1, 2, 3, 4, 0,                     //
                                         0, 1, 2, 0, 1, 2, 3, 4, 5, 6,                     //
                                         0, 1, 2, 3, 4, 5, 6, 7, 8, 9,                     //
                                         0, 1, 2, 3, 4, 5, 0, 1, 2, 3};
  const std::vector<int32_t> want_tg = {
      101, 102, 103, -1,  -1,  202, 203, 204, -1,  -1,   // prompts 1 and 2 masked
      301, 302, -1,  -1,  -1,  -1,  -1,  -1,  -1,  -1,   // no example predicts the next
      -1,  -1,  403, 404, 405, 406, 407, 408, 409, -1,   // prompt 3; the cut end
      501, 502, 503, 504, 505, -1,  -1,  -1,  -1,  -1};  // padding ignored
  EXPECT_EQ(in, want_in);
  EXPECT_EQ(pos, want_pos);
  EXPECT_EQ(tg, want_tg);
  long trained = 0;
  for (int32_t t : tg) trained += t >= 0;
  EXPECT_EQ(st.trained_targets, trained);
  // Each example's targets are those of its row of its own (lay_rows) at the same offsets.
  std::vector<int32_t> in1, tg1;
  const RowStats one = lay_rows({ex[1]}, seq, 7, false, false, in1, tg1);
  ASSERT_EQ(one.rows, 1);
  EXPECT_TRUE(std::equal(tg1.begin(), tg1.begin() + 5, tg.begin() + 4));

  // drop: the 12 is left out, and the 6 follows the 3 in its row.
  in.clear(), tg.clear(), pos.clear();
  const RowStats d = lay_rows_packed(ex, seq, 7, false, true, in, tg, pos);
  EXPECT_EQ(d.dropped, 1);
  EXPECT_EQ(d.laid, 4);
  EXPECT_EQ(d.rows, 2);
  EXPECT_EQ(std::vector<int32_t>(in.begin() + 10, in.end()),
            (std::vector<int32_t>{300, 301, 302, 500, 501, 502, 503, 504, 505, 7}));
  EXPECT_EQ(std::vector<int32_t>(pos.begin() + 10, pos.end()), (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4, 5, 0}));
}

TEST(PackedLayout, SamplerAndEvalBatchesCarryThePositions) {
  const int seq = 6;
  const std::vector<Example> ex = {example(2, 0, 10), example(3, 0, 20), example(6, 0, 30), example(4, 0, 40)};
  std::vector<int32_t> in, tg, pos;
  const RowStats st = lay_rows_packed(ex, seq, 0, true, false, in, tg, pos);
  ASSERT_EQ(st.rows, 3);
  const TokenRows rows(in, tg, pos, seq, st.laid);
  EXPECT_TRUE(rows.packed());
  EXPECT_EQ(rows.examples(), 4);
  RowSampler s({0, 1, 2}, 1, /*shuffle=*/false);
  const Batch b = s.next(rows, 2);
  ASSERT_EQ(b.positions.size(), size_t(2 * seq));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{0, 1, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5}));
  EXPECT_GT(packed_pairs(b), 0.0);
  const std::vector<Batch> ev = eval_batches(rows, {2}, 2);  // one real row, one filler
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].positions, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(std::vector<int32_t>(ev[0].inputs.begin(), ev[0].inputs.begin() + 4),
            (std::vector<int32_t>{40, 41, 42, 43}));
  const TokenRows unpacked(in, tg, seq);
  EXPECT_TRUE(RowSampler({0}, 1, false).next(unpacked, 1).positions.empty());
}

// --- the sim: a packed step's forecast ------------------------------------------------------------

TEST(PackedSim, PeakEqualsCpuAndAttentionCostFollowsThePairs) {
  ForecastRequest r = sim_twin::tiny_request(Plan::keep_everything());
  r.positions = positions_of({{5, 9, 5}, {19}});  // r.batch 2 rows of r.seq 19
  ASSERT_EQ(r.positions.size(), size_t(r.batch) * r.seq);
  const Forecast f = forecast(r);
  ASSERT_TRUE(f.fits);
  // The cpu twin: the same step on real data with the same packed layout.
  auto be = make_cpu_backend(sim_twin::kBudget);
  LlamaModel model(*be, r.model, forecast_model_options(r));
  model.init_random(5);
  TrainOptions to;
  to.tiers = r.tiers;
  Trainer tr(*be, model, to);
  Batch b = forecast_batches(r)->front();
  const std::vector<int32_t> toks = synthetic_tokens(long(b.inputs.size()) + 1, r.model.vocab_size, 3);
  for (size_t i = 0; i < b.inputs.size(); ++i) b.inputs[i] = toks[i], b.targets[i] = toks[i + 1];
  b.zeros = false;  // real ids now: checked as a read batch's
  StepStats st = tr.step(b);
  if (tr.optimizer().pending()) st = tr.step(b);
  EXPECT_EQ(f.peak_bytes, st.peak_device_bytes);

  // On the cuda mirror the attention time is that of the pairs attended, at the flash kernel's rate
  // (attention_flash_tflops) where the profile gives one, else at cuDNN's.
  auto attention_s = [](const Forecast& x) {
    for (const auto& [op, s] : x.time_by_op)
      if (op.find("attention") != std::string::npos) return s;
    return 0.0;
  };
  ForecastRequest c = r;
  c.mirror = SimMirror::cuda;
  c.budget = 0;
  c.model.hidden_size = 1024, c.model.num_attention_heads = 8, c.model.num_key_value_heads = 2;
  c.model.head_dim = 128, c.model.num_hidden_layers = 1;  // attention above the launch floor
  c.seq = 4096, c.batch = 1;
  c.positions = positions_of({std::vector<int>(8, 512)});
  ForecastRequest u = c;
  u.positions.clear();
  c.profile.attention_flash_tflops = 0;  // packed pairs at cuDNN's rate
  const double packed_s = attention_s(forecast(c)), unpacked_s = attention_s(forecast(u));
  ASSERT_GT(unpacked_s, 0.0);
  // 8 examples of 512: about an eighth of the pairs (the rates alike: this profile has no length scaling).
  EXPECT_NEAR(packed_s / unpacked_s, 8.0 * 512 * 513 / (4096.0 * 4096), 0.01);
  // At the flash kernel's rate: the same pairs, priced at attention_flash_tflops forward and backward.
  c.profile.attention_flash_tflops = 5;
  const double flash_s = attention_s(forecast(c));
  const double pairs = 8 * 512.0 * 513 / 2, fwd_flops = 4.0 * 8 * pairs * 128;  // 8 query heads, D 128, one layer
  EXPECT_NEAR(flash_s, 3.5 * fwd_flops / 5e12, 1e-3 * flash_s) << "forward + backward (2.5x) at 5 TFLOP/s";
}

}  // namespace
}  // namespace strata::test
