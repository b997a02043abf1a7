// Sequence parallelism (model/llama/seq_parallel.h) on the cpu communicator, ranks as threads: N ranks share each row
// of the global batch (each holds T/N tokens; all-to-alls around attention) against one rank training on the whole
// rows. What is bit-exact, and what only to rounding:
//  - the forward: every rank's logits are exactly one rank's logits of its tokens (the ops before and after attention
//    work token by token, and attention on a head sees the same whole sequence), packed rows included;
//  - the plans: a recompute plan (gradient checkpointing) and hidden-state host offload give the keep plan's losses,
//    norms and weights bit for bit (a replayed all-to-all moves the same bytes), and every rank ends with the same
//    weights bit for bit;
//  - against one rank, to float rounding only: each rank's loss is the mean over its tokens and its gradient seed
//    its share of the loss tokens (another rounding of 1/tokens), and each weight gradient is the sum over ranks of
//    per-rank sums (another order than one sum over all rows), as in data parallel: losses within 2e-6, norms 1e-5
//    (relative), weights within 2e-4 at worst and 2e-6 rms after 3 steps with clipping on every step.
#include "model/llama/seq_parallel.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <thread>

#include "engine/comm.h"
#include "engine/ops.h"
#include "model/data/data.h"
#include "model/data/row_data.h"
#include "model/plan/forecast.h"
#include "model/train/trainer.h"
#include "tests/cpu/rank_threads.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;

namespace {

constexpr int kSteps = 3;

struct RunSpec {
  io::LlamaConfig cfg = test_util::tiny_config();
  int rows = 2, seq = 24;  // rows of the global batch; T is not a multiple of 64
  Plan plan = Plan::keep_everything();
  int mlp_tiles = 1;
  int pack = 1;   // > 1: each row as `pack` packed examples
  int accum = 1;  // micro-batches a step (gradient accumulation), each of rows / accum of the rank's rows
  int zero = 0;   // zero_stage over every rank
};

struct RankRun {
  std::vector<float> losses, norms, evals;
  std::vector<std::vector<float>> weights;
  std::vector<float> logits;  // the first step's, this rank's tokens [rows * T/N, V]
  size_t peak = 0;
};

// Global batch of step s: `rows` rows of synthetic tokens, row r with its first 3r targets ignored (unequal loss
// tokens between ranks), packed as `pack` examples a row when asked.
Batch global_batch(const RunSpec& su, const TokenRows& data, int step) {
  Batch b{su.rows,
          su.seq,
          std::vector<int32_t>(size_t(su.rows) * su.seq),
          std::vector<int32_t>(size_t(su.rows) * su.seq),
          {}};
  for (int r = 0; r < su.rows; ++r) {
    data.row(step * su.rows + r, b.inputs.data() + r * su.seq, b.targets.data() + r * su.seq);
    for (int t = 0; t < 3 * r && t < su.seq; ++t) b.targets[size_t(r * su.seq + t)] = -1;
  }
  if (su.pack > 1)
    for (int i = 0; i < su.rows * su.seq; ++i) b.positions.push_back(int32_t(i % su.seq % (su.seq / su.pack)));
  return b;
}

// One rank: `world` spans every rank (null: `sp` itself), `sp` its sequence-parallel group (null: alone, whole
// rows); data-parallel rank `dp` of `dp_world` trains on its rows of each global batch.
RankRun train(const RunSpec& su, Communicator* world, Communicator* sp, int dp = 0, int dp_world = 1) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.state_plan = su.plan;
  mo.mlp_tiles = su.mlp_tiles;
  Communicator* all = world ? world : sp;
  mo.zero = {su.zero, all ? all->rank() : 0, all ? all->world() : 1};
  LlamaModel model(*be, su.cfg, mo);
  model.init_random(11);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.adam.weight_decay = 0.1f;
  to.max_grad_norm = 0.05f;  // clipping on every step
  to.plan = su.plan;
  to.comm = world;
  to.seq_comm = sp;
  Trainer tr(*be, model, to);
  const TokenRows data(synthetic_tokens(4000, su.cfg.vocab_size, 3), su.seq);
  RankRun out;
  for (int s = 0; s < kSteps; ++s) {
    Batch all = global_batch(su, data, s);
    const int per = su.rows / dp_world;
    Batch b{per, su.seq, {}, {}, {}};
    const auto first = long(dp) * per * su.seq, n = long(per) * su.seq;
    b.inputs.assign(all.inputs.begin() + first, all.inputs.begin() + first + n);
    b.targets.assign(all.targets.begin() + first, all.targets.begin() + first + n);
    if (!all.positions.empty()) b.positions.assign(all.positions.begin() + first, all.positions.begin() + first + n);
    if (s == 0) tr.compute_gradients(b, &out.logits);
    std::vector<Batch> micro;
    const int rows = per / su.accum;
    for (int m = 0; m < su.accum; ++m) {
      Batch mb{rows, su.seq, {}, {}, {}};
      const auto at = long(m) * rows * su.seq, k = long(rows) * su.seq;
      mb.inputs.assign(b.inputs.begin() + at, b.inputs.begin() + at + k);
      mb.targets.assign(b.targets.begin() + at, b.targets.begin() + at + k);
      if (!b.positions.empty()) mb.positions.assign(b.positions.begin() + at, b.positions.begin() + at + k);
      micro.push_back(std::move(mb));
    }
    const StepStats st = tr.step(micro, 1e-2f);
    out.losses.push_back(st.loss);
    out.norms.push_back(st.grad_norm);
    out.peak = std::max(out.peak, st.peak_device_bytes);
    if (dp_world == 1) out.evals.push_back(tr.evaluate(b));
  }
  model.sync_state();
  for (const Parameter& p : model.params()) {
    std::vector<float> h(size_t(p.shape.numel()));
    be->download_f32(h.data(), p.value());
    out.weights.push_back(std::move(h));
  }
  return out;
}

// `dp_world` x `n` ranks as threads: world rank r is group r / n's rank r % n. With dp_world 1 the group is the
// world (one communicator), else each group has its own beside the world's.
std::vector<RankRun> train_ranks(const RunSpec& su, int n, int dp_world = 1) {
  const int w = n * dp_world;
  CpuGroup world(w, 60);
  std::vector<std::unique_ptr<CpuGroup>> groups;
  for (int g = 0; g < dp_world; ++g) groups.push_back(std::make_unique<CpuGroup>(n, 60));
  std::vector<RankRun> runs(static_cast<size_t>(w));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(w));
  std::vector<std::thread> threads;
  for (int r = 0; r < w; ++r)
    threads.emplace_back([&, r] {
      try {
        auto sp = make_cpu_communicator(*groups[size_t(r / n)], r % n);
        std::unique_ptr<Communicator> all = dp_world > 1 ? make_cpu_communicator(world, r) : nullptr;
        runs[size_t(r)] = train(su, all.get(), sp.get(), r / n, dp_world);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        world.abort("rank failed");
        for (auto& g : groups) g->abort("rank failed");
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return runs;
}

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

void expect_identical(const RankRun& a, const RankRun& b, const std::string& what) {
  expect_bits(a.losses, b.losses, what + ": losses");
  expect_bits(a.norms, b.norms, what + ": norms");
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) expect_bits(a.weights[i], b.weights[i], what + fmt::format(": w{}", i));
}

void expect_close(const RankRun& one, const RankRun& sp, const std::string& what) {
  ASSERT_EQ(one.losses.size(), sp.losses.size());
  for (size_t s = 0; s < one.losses.size(); ++s) {
    EXPECT_NEAR(one.losses[s], sp.losses[s], 2e-6f * std::fabs(one.losses[s])) << what << " loss, step " << s;
    EXPECT_NEAR(one.norms[s], sp.norms[s], 1e-5f * one.norms[s]) << what << " norm, step " << s;
  }
  for (size_t s = 0; s < std::min(one.evals.size(), sp.evals.size()); ++s)
    EXPECT_NEAR(one.evals[s], sp.evals[s], 2e-6f * std::fabs(one.evals[s])) << what << " evaluate, step " << s;
  test_util::expect_weights_close(one.weights, sp.weights, what);
}

// Rank r's logits are one rank's logits of tokens [r*Tl, (r+1)*Tl) of every row, bit for bit.
void expect_logits_are_slices(const RunSpec& su, const RankRun& one, const std::vector<RankRun>& runs,
                              const std::string& what) {
  const int n = int(runs.size()), Tl = su.seq / n, V = su.cfg.vocab_size;
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(runs[size_t(r)].logits.size(), size_t(su.rows) * Tl * V) << what;
    bool same = true;
    for (int row = 0; row < su.rows; ++row) {
      const float* want = one.logits.data() + (size_t(row) * su.seq + size_t(r) * Tl) * V;
      const float* got = runs[size_t(r)].logits.data() + size_t(row) * Tl * V;
      same = same && std::memcmp(want, got, size_t(Tl) * V * sizeof(float)) == 0;
    }
    EXPECT_TRUE(same) << what << ": rank " << r << "'s logits differ from one rank's";
  }
}

// The sequence-parallel forecast of rank 0, mirroring cpu.
ForecastRequest sp_request(const RunSpec& su, int n) {
  ForecastRequest r;
  r.model = su.cfg;
  r.seq = su.seq;
  r.batch = su.rows;
  r.profile = find_profile("h100_80gb");
  r.mirror = SimMirror::cpu;
  r.gpus = n;
  r.sequence_parallel = n;
  r.plan = su.plan;
  r.mlp_tiles = su.mlp_tiles;
  return r;
}

}  // namespace

// The strided block copy and the head replication against loops written out here.
TEST(SeqParallel, BlockCopyAndRepeatHeads) {
  auto be = make_cpu_backend(size_t(1) << 20);
  const int a = 3, b = 4, e = 5;
  Buffer in(be->arena(), DType::f32, Shape{a * b * e}, "t"), out(be->arena(), DType::f32, Shape{a * b * e}, "t");
  for (int i = 0; i < a * b * e; ++i) in.view().f32()[i] = float(i);
  be->block_copy(out.view(), in.view(), BlockCopy::swap_axes(a, b, e), false);
  for (int i = 0; i < a; ++i)
    for (int j = 0; j < b; ++j)
      for (int k = 0; k < e; ++k) ASSERT_EQ(out.view().f32()[(j * a + i) * e + k], float((i * b + j) * e + k));
  be->block_copy(out.view(), in.view(), BlockCopy::swap_axes(a, b, e), true);  // adds
  EXPECT_EQ(out.view().f32()[(1 * a + 2) * e + 3], 2.0f * float((2 * b + 1) * e + 3));
  Buffer small(be->arena(), DType::f32, Shape{7}, "t");
  EXPECT_THROW(be->block_copy(small.view(), in.view(), BlockCopy::swap_axes(a, b, e), false), Error);

  // repeat_heads: [N, H*D] -> [N, H*m*D], each head's copies in a row (its backward runs in the 4-rank training
  // below, where 2 KV heads are replicated to 4).
  Tape t(*be);
  const int N = 3, H = 2, D = 4, m = 3;
  Buffer x(be->arena(), DType::f32, Shape{N, H * D}, "x");
  for (int i = 0; i < N * H * D; ++i) x.view().f32()[i] = float(i + 1);
  const VId y = ops::repeat_heads(t, t.input("x", x.view()), H, m, "rep");
  t.retain(y);
  t.forward();
  const Tensor yv = t.tensor(y);
  ASSERT_EQ(yv.numel(), N * H * m * D);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < m; ++j)
        for (int d = 0; d < D; ++d)
          ASSERT_EQ(yv.f32()[(n * H * m + h * m + j) * D + d], x.view().f32()[(n * H + h) * D + d]);
  t.clear();
}

// The forward on 2 and 4 ranks gives one rank's logits bit for bit: GQA (4 query heads, 2 KV heads: replicated to
// 4 on 4 ranks), one and two rows (the all-to-all straight into the output, and through the unpacking copy), T = 24.
TEST(SeqParallel, ForwardIsOneRanksBitForBit) {
  for (int rows : {1, 2}) {
    RunSpec su;
    su.rows = rows;
    const RankRun one = train(su, nullptr, nullptr);
    for (int n : {2, 4}) {
      const std::vector<RankRun> runs = train_ranks(su, n);
      expect_logits_are_slices(su, one, runs, fmt::format("{} rows on {} ranks", rows, n));
    }
  }
}

// Training steps on 2 and 4 ranks against one rank on the whole rows (clipping on every step), with the keep plan,
// gradient checkpointing (recompute: each replay re-runs its all-to-alls) and hidden states on the host tier.
TEST(SeqParallel, TrainingMatchesOneRankUnderEveryPlan) {
  RunSpec su;
  const RankRun one = train(su, nullptr, nullptr);
  for (int n : {2, 4}) {
    std::vector<RankRun> keep;
    for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(), Plan::hidden_states()}) {
      RunSpec s = su;
      s.plan = plan;
      const std::string what = fmt::format("{} ranks, {}", n, plan.preset);
      const std::vector<RankRun> runs = train_ranks(s, n);
      for (size_t r = 1; r < runs.size(); ++r) expect_identical(runs[0], runs[r], what + fmt::format(", rank {}", r));
      expect_close(one, runs[0], what);
      if (keep.empty())
        keep = runs;
      else
        expect_identical(keep[0], runs[0], what + " against keep");
    }
  }
}

// Odd shapes: head_dim 12 (not a power of two), one KV head (replicated to every rank), Qwen-style q/k norms and
// q/k/v biases, MLP row tiles, T = 36 on 2 and 4 ranks (9 tokens a rank); and packed rows (attention within each
// example over the whole rows, rope at each example's positions).
TEST(SeqParallel, OddShapesAndPackedRows) {
  RunSpec su;
  su.cfg.hidden_size = 48;
  su.cfg.num_attention_heads = 4;
  su.cfg.num_key_value_heads = 1;
  su.cfg.head_dim = 12;
  su.cfg.qk_norm = true;
  su.cfg.qkv_bias = true;
  su.seq = 36;
  su.mlp_tiles = 2;
  const RankRun one = train(su, nullptr, nullptr);
  for (int n : {2, 4}) {
    const std::vector<RankRun> runs = train_ranks(su, n);
    expect_logits_are_slices(su, one, runs, fmt::format("odd shapes, {} ranks", n));
    expect_close(one, runs[0], fmt::format("odd shapes, {} ranks", n));
  }
  RunSpec packed;
  packed.pack = 3;  // examples of 8 tokens; on 4 ranks (6 tokens each) they cross the ranks' boundaries
  const RankRun one_packed = train(packed, nullptr, nullptr);
  for (int n : {2, 4}) {
    const std::vector<RankRun> runs = train_ranks(packed, n);
    expect_logits_are_slices(packed, one_packed, runs, fmt::format("packed, {} ranks", n));
    expect_close(one_packed, runs[0], fmt::format("packed, {} ranks", n));
  }
}

// Data parallel x sequence parallel: 2 groups of 2 ranks, each group its rows, against one rank on all of them.
TEST(SeqParallel, DataParallelGroupsOfSequenceParallelRanks) {
  RunSpec su;
  su.rows = 4;
  const RankRun one = train(su, nullptr, nullptr);
  const std::vector<RankRun> runs = train_ranks(su, 2, 2);
  for (size_t r = 1; r < runs.size(); ++r) expect_identical(runs[0], runs[r], fmt::format("2 x 2 ranks, rank {}", r));
  expect_close(one, runs[0], "2 data-parallel groups x 2 sequence-parallel ranks");
}

// Gradient accumulation (2 micro-batches a step) on 2 ranks against one rank's; ZeRO-1 and ZeRO-2 over the ranks give
// ZeRO-0's losses, norms and weights bit for bit.
TEST(SeqParallel, AccumulationAndZeroOneAndTwo) {
  RunSpec su;
  su.accum = 2;
  const RankRun one = train(su, nullptr, nullptr);
  const std::vector<RankRun> acc = train_ranks(su, 2);
  expect_identical(acc[0], acc[1], "2 micro-batches, rank 1");
  expect_close(one, acc[0], "2 micro-batches on 2 ranks");
  su.accum = 1;
  const std::vector<RankRun> z0 = train_ranks(su, 2);
  su.zero = 1;
  const std::vector<RankRun> z1 = train_ranks(su, 2);
  expect_identical(z0[0], z1[0], "zero_stage 1 against 0, 2 ranks");
  expect_identical(z1[0], z1[1], "zero_stage 1, rank 1");
  EXPECT_LT(z1[0].peak, z0[0].peak) << "each rank holds half the optimizer state";
  // ZeRO-2 over the sequence-parallel ranks: each gradient reduced to its owner, the norm from its parts.
  su.zero = 2;
  const std::vector<RankRun> z2 = train_ranks(su, 2);
  expect_identical(z0[0], z2[0], "zero_stage 2 against 0, 2 ranks");
  expect_identical(z2[0], z2[1], "zero_stage 2, rank 1");
  EXPECT_LT(z2[0].peak, z1[0].peak) << "each rank holds about half the gradients";
}

// strata-plan --sequence-parallel N: rank 0's forecast (sim mirroring cpu) is rank 0's cpu peak byte for byte, for
// the keep plan and gradient checkpointing; below one rank's peak on the whole rows.
TEST(SeqParallel, TheForecastIsRankZerosPeakByteForByte) {
  for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing()}) {
    RunSpec su;
    su.plan = plan;
    su.rows = 2;
    for (int n : {2, 4}) {
      const Forecast f = forecast(sp_request(su, n));
      ASSERT_TRUE(f.fits) << f.oom;
      const std::vector<RankRun> runs = train_ranks(su, n);
      EXPECT_EQ(f.peak_bytes, runs[0].peak) << plan.preset << ", " << n << " ranks";
      for (const RankRun& r : runs) EXPECT_EQ(r.peak, runs[0].peak) << "every rank runs the same schedule";
    }
    ForecastRequest whole = sp_request(su, 1);
    EXPECT_LT(forecast(sp_request(su, 4)).peak_bytes, forecast(whole).peak_bytes) << plan.preset;
  }
}

// Mirroring cuda: the all-to-alls take time on the collectives' timeline, compute waits for them, and tokens/s
// counts the rows once per group.
TEST(SeqParallel, TheForecastTimesTheAllToAlls) {
  RunSpec su;
  su.seq = 256;
  ForecastRequest r = sp_request(su, 4);
  r.mirror = SimMirror::cuda;
  const Forecast f = forecast(r);
  ASSERT_TRUE(f.fits) << f.oom;
  EXPECT_GT(f.all_to_all_s, 0.0);
  EXPECT_GE(f.comm_busy_s, f.all_to_all_s);
  EXPECT_GT(f.comm_wait_s, 0.0);
  EXPECT_NEAR(f.tokens_per_s, double(r.batch) * r.seq / f.step_s, 1e-6 * f.tokens_per_s);
  r.gpus = 8;  // 2 data-parallel groups of 4
  const Forecast g = forecast(r);
  ASSERT_TRUE(g.fits) << g.oom;
  EXPECT_NEAR(g.tokens_per_s, 2.0 * r.batch * r.seq / g.step_s, 1e-6 * g.tokens_per_s);
  r.gpus = 6;
  EXPECT_THROW(forecast(r), ConfigError);
}

// What is refused, naming the setting: heads that do not split, KV heads that cannot be replicated to split, a
// length that is not a multiple of the ranks, groups that are not consecutive world ranks.
TEST(SeqParallel, RefusalsNameTheSetting) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  io::LlamaConfig c = test_util::tiny_config();  // 4 query heads, 2 KV heads
  EXPECT_EQ(seq_parallel_kv_heads(c, 1), 2);
  EXPECT_EQ(seq_parallel_kv_heads(c, 2), 2);
  EXPECT_EQ(seq_parallel_kv_heads(c, 4), 4);
  std::string m = message([&] { seq_parallel_kv_heads(c, 3); });
  EXPECT_NE(m.find("num_attention_heads 4"), std::string::npos) << m;
  c.num_attention_heads = 12, c.num_key_value_heads = 4, c.hidden_size = 96;
  m = message([&] { seq_parallel_kv_heads(c, 6); });  // lcm(4, 6) = 12 divides 12: fine
  EXPECT_EQ(m, "no error");
  c.num_attention_heads = 6, c.num_key_value_heads = 4;
  m = message([&] { seq_parallel_kv_heads(c, 3); });  // 4 KV heads over 3, lcm 12 does not divide 6
  EXPECT_NE(m.find("num_key_value_heads 4"), std::string::npos) << m;
  m = message([] { check_seq_parallel_len(30, 4); });
  EXPECT_NE(m.find("sequence_parallel 4"), std::string::npos) << m;
  EXPECT_NE(m.find("32"), std::string::npos) << m;
  RunSpec su;
  su.seq = 26;  // not a multiple of 4
  m = message([&] { train_ranks(su, 4); });
  EXPECT_NE(m.find("sequence length 26"), std::string::npos) << m;
  su.seq = 24;
  su.cfg.num_attention_heads = 4, su.cfg.num_key_value_heads = 2;
  m = message([&] { train_ranks(su, 3); });  // 4 heads over 3 ranks
  EXPECT_NE(m.find("num_attention_heads 4"), std::string::npos) << m;
  // A group whose ranks are not consecutive world ranks: world rank 1 as group rank 0.
  CpuGroup world(2, 10);
  m = message([&] {
    auto w = make_cpu_communicator(world, 1);
    CpuGroup two(2, 10);
    auto g2 = make_cpu_communicator(two, 0);
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel model(*be, test_util::tiny_config(), ModelOptions{});
    TrainOptions to;
    to.comm = w.get();
    to.seq_comm = g2.get();
    Trainer tr(*be, model, to);
  });
  EXPECT_NE(m.find("consecutive ranks"), std::string::npos) << m;
  ForecastRequest r = sp_request(RunSpec{}, 4);
  r.seq = 30;
  m = message([&] { forecast(r); });
  EXPECT_NE(m.find("sequence_parallel 4"), std::string::npos) << m;
}

// A forecast's zeros batch is sliced once per thread and shape (every sim run of a search asks for the same slice);
// the shared slice is the copy seq_slice makes, and any other batch is sliced anew.
TEST(SeqParallel, ZeroBatchSlicesAreSharedAndEqualTheirCopies) {
  auto same = [](const SeqSlice& a, const SeqSlice& b) {
    return a.inputs == b.inputs && a.targets == b.targets && a.positions == b.positions;
  };
  Batch z;
  z.B = 2, z.T = 16, z.zeros = true;
  z.inputs.assign(32, 0), z.targets.assign(32, 0);
  const auto a = seq_slice_shared(z, 1, 4), b = seq_slice_shared(z, 1, 4);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_TRUE(same(*a, seq_slice(z, 1, 4)));
  EXPECT_EQ(a->positions, (std::vector<int32_t>{4, 5, 6, 7, 4, 5, 6, 7}));
  const auto c = seq_slice_shared(z, 2, 4);
  EXPECT_NE(c.get(), a.get());
  EXPECT_TRUE(same(*c, seq_slice(z, 2, 4)));
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(seq_slice_targets(z, rank, 4), 8);
  Batch r = z;
  r.zeros = false;
  for (int i = 0; i < 32; ++i) r.inputs[size_t(i)] = i, r.targets[size_t(i)] = i % 3 == 0 ? -1 : i + 1;
  const auto d = seq_slice_shared(r, 1, 4), e = seq_slice_shared(r, 1, 4);
  EXPECT_NE(d.get(), e.get());
  EXPECT_TRUE(same(*d, seq_slice(r, 1, 4)));
  EXPECT_EQ(d->inputs, (std::vector<int32_t>{4, 5, 6, 7, 20, 21, 22, 23}));
  EXPECT_EQ(seq_slice_targets(r, 1, 4), 6);  // 4..7 and 20..23 less the multiples of 3 (6, 21)
}
