// The training loop on the cpu backend (model/run/train_loop.h): the learning-rate schedules at known
// steps, gradient accumulation against one batch of all the rows, the held-out rows kept out of
// training and evaluated without changing it, the step count from num_epochs, and the loop's YAML
// keys with their errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numbers>
#include <set>

#include "model/data/row_data.h"
#include "model/train/grad_accum.h"
#include "model/train/lr_schedule.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/train_loop_util.h"

using namespace strata;
using namespace strata::test_util;

namespace {

// Hugging Face's schedules (transformers.optimization) at its 0-based step, for comparison.
double hf_linear(int step, int warmup, int total) {
  if (step < warmup) return double(step) / std::max(1, warmup);
  return std::max(0.0, double(total - step) / std::max(1, total - warmup));
}
double hf_cosine(int step, int warmup, int total) {
  if (step < warmup) return double(step) / std::max(1, warmup);
  const double p = double(step - warmup) / std::max(1, total - warmup);
  return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
}

// Every trainable parameter's gradient of the last backward (others: zeros).
std::vector<std::vector<float>> grads(Optimizer& opt, const LlamaModel& m) {
  std::vector<std::vector<float>> g;
  for (const Parameter& p : m.params()) {
    g.emplace_back(size_t(p.shape.numel()));
    if (p.trainable) opt.download_grad(p, g.back().data());
  }
  return g;
}

// The largest difference between two such sets, relative to each parameter's largest gradient.
double worst_relative(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  double worst = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    float scale = 0;
    for (float x : want[j]) scale = std::max(scale, std::fabs(x));
    for (size_t e = 0; e < want[j].size(); ++e)
      worst = std::max(worst, std::fabs(double(got[j][e]) - want[j][e]) / std::max(1e-30, double(scale)));
  }
  return worst;
}

}  // namespace

TEST(LrSchedule, ValuesAtKnownSteps) {
  // 10 steps, 2 of warmup, lr 1.
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::constant, 1.0f, 1, 10, 2), 0.5f);
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::constant, 1.0f, 2, 10, 2), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::constant, 1.0f, 10, 10, 2), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::linear, 1.0f, 1, 10, 2), 0.5f);
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::linear, 1.0f, 3, 10, 2), 1.0f);     // p = 0
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::linear, 1.0f, 7, 10, 2), 0.5f);     // p = 4/8
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::linear, 1.0f, 10, 10, 2), 0.125f);  // p = 7/8: never 0
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::cosine, 1.0f, 3, 10, 2), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::cosine, 1.0f, 7, 10, 2), 0.5f);          // cos(pi/2)
  EXPECT_NEAR(scheduled_lr(LrScheduler::cosine, 1.0f, 10, 10, 2), 0.0380602, 1e-6);  // (1 + cos(7pi/8)) / 2
  EXPECT_FLOAT_EQ(scheduled_lr(LrScheduler::cosine, 2e-3f, 1, 5, 0), 2e-3f);         // no warmup: full rate first
  // After the warmup each equals Hugging Face's at step t - 1.
  for (int t = 3; t <= 100; ++t) {
    EXPECT_NEAR(scheduled_lr(LrScheduler::linear, 1.0f, t, 100, 2), hf_linear(t - 1, 2, 100), 1e-6) << t;
    EXPECT_NEAR(scheduled_lr(LrScheduler::cosine, 1.0f, t, 100, 2), hf_cosine(t - 1, 2, 100), 1e-6) << t;
  }
  // warmup_ratio rounds up as Hugging Face does; warmup_steps wins over it.
  EXPECT_EQ(resolve_warmup(0, 0.1, 95), 10);
  EXPECT_EQ(resolve_warmup(0, 0.1, 100), 10);
  EXPECT_EQ(resolve_warmup(3, 0.5, 100), 3);
  EXPECT_EQ(resolve_warmup(0, 0.0, 100), 0);
}

TEST(TrainLoop, TheModelGetsTheConfigsMlpTiles) {
  TrainConfig cfg;
  EXPECT_EQ(model_options(cfg).mlp_tiles, 1) << "auto: untiled";
  cfg.plan.mlp_tiles = 4;
  EXPECT_EQ(model_options(cfg).mlp_tiles, 4);
}

TEST(TrainLoop, UsesTheScheduleItResolves) {
  TrainConfig cfg;
  cfg.seq = 16;
  cfg.batch = 2;
  cfg.steps = 6;
  cfg.steps_given = true;
  cfg.lr = 1e-2f;
  cfg.lr_scheduler = LrScheduler::cosine;
  cfg.warmup_ratio = 0.3f;  // ceil(1.8) = 2
  std::vector<float> lrs;
  LoopOptions lo = quiet();
  lo.on_step = [&](const StepStats& s) { lrs.push_back(s.lr); };
  Rig r = make_rig(cfg, lo);
  EXPECT_EQ(r.loop->warmup_steps(), 2);
  r.loop->run();
  ASSERT_EQ(lrs.size(), 6u);
  for (int t = 1; t <= 6; ++t) EXPECT_FLOAT_EQ(lrs[size_t(t - 1)], scheduled_lr(LrScheduler::cosine, 1e-2f, t, 6, 2));
}

// Four micro-batches of one row against one batch of the four rows, five steps with clipping
// active: the same losses and weights to float rounding (each GEMM sums its rows in one pass there).
TEST(GradAccumulation, MatchesOneBatchOfAllTheRows) {
  for (bool ignored : {false, true}) {
    SCOPED_TRACE(ignored ? "with ignored targets (unequal token counts)" : "equal token counts");
    TrainConfig cfg;
    cfg.max_grad_norm = 0.5f;
    cfg.weight_decay = 0.1f;
    cfg.lr = 1e-2f;
    Rig big = make_rig(cfg), acc = make_rig(cfg);
    TokenRows rows(synthetic_tokens(400, tiny_config().vocab_size, 5), 16);
    for (int step = 0; step < 5; ++step) {
      Batch all;
      all.B = 4;
      all.T = 16;
      std::vector<Batch> micro(4);
      for (int r = 0; r < 4; ++r) {
        Batch& m = micro[size_t(r)];
        m.B = 1;
        m.T = 16;
        m.inputs.resize(16);
        m.targets.resize(16);
        rows.row(step * 4 + r, m.inputs.data(), m.targets.data());
        if (ignored)
          for (int t = 0; t < 3 * r; ++t) m.targets[size_t(t)] = -1;  // rows of 16, 13, 10, 7 counted tokens
        all.inputs.insert(all.inputs.end(), m.inputs.begin(), m.inputs.end());
        all.targets.insert(all.targets.end(), m.targets.begin(), m.targets.end());
      }
      const StepStats a = big.trainer->step(std::span<const Batch>(&all, 1), 1e-2f);
      const StepStats b = acc.trainer->step(micro, 1e-2f);
      EXPECT_NEAR(a.loss, b.loss, 2e-6f * std::fabs(a.loss)) << "step " << step;
      // The first step's gradients differ by the sums' rounding alone; after it the two runs' weights already
      // differ by Adam's amplified rounding (up to 2e-4 an element, checked below), so their norms drift further.
      EXPECT_NEAR(a.grad_norm, b.grad_norm, (step == 0 ? 1e-5f : 1e-4f) * a.grad_norm) << "step " << step;
      EXPECT_EQ(a.tokens, b.tokens);
    }
    double max_abs = 0, sum_sq = 0;
    long n = 0;
    const auto& pa = big.model->params();
    const auto& pb = acc.model->params();
    for (size_t i = 0; i < pa.size(); ++i) {
      const float* x = pa[i].value().f32();
      const float* y = pb[i].value().f32();
      for (int64_t e = 0; e < pa[i].shape.numel(); ++e) {
        const double d = std::fabs(double(x[e]) - y[e]);
        max_abs = std::max(max_abs, d);
        sum_sq += d * d;
        ++n;
      }
    }
    // Adam divides by the gradient's own scale, so an element whose gradient is near 0 moves by up
    // to lr whatever its rounding: bounded in the worst element, tiny on average.
    EXPECT_LT(max_abs, 2e-4) << "weights after 5 steps (lr 1e-2)";
    EXPECT_LT(std::sqrt(sum_sq / double(n)), 2e-6) << "weights after 5 steps";
  }
}

// The gradient itself: the accumulated sum against one batch's, element by element.
TEST(GradAccumulation, GradientMatchesOneBatchOfAllTheRows) {
  TrainConfig cfg;
  Rig r = make_rig(cfg);
  TokenRows rows(synthetic_tokens(400, tiny_config().vocab_size, 5), 16);
  Batch all{4, 16, {}, {}, {}};
  std::vector<Batch> micro(4);
  for (int i = 0; i < 4; ++i) {
    micro[size_t(i)] = {1, 16, std::vector<int32_t>(16), std::vector<int32_t>(16), {}};
    rows.row(i, micro[size_t(i)].inputs.data(), micro[size_t(i)].targets.data());
    all.inputs.insert(all.inputs.end(), micro[size_t(i)].inputs.begin(), micro[size_t(i)].inputs.end());
    all.targets.insert(all.targets.end(), micro[size_t(i)].targets.begin(), micro[size_t(i)].targets.end());
  }
  Optimizer& opt = r.trainer->optimizer();
  r.trainer->compute_gradients(all);
  const std::vector<std::vector<float>> want = grads(opt, *r.model);
  GradAccumulator acc(*r.be, *r.model, opt);
  for (int i = 0; i < 4; ++i) {
    r.trainer->compute_gradients(micro[size_t(i)]);
    acc.add(size_t(i), 4, 0.25f);
  }
  EXPECT_LT(worst_relative(grads(opt, *r.model), want), 5e-6)
      << "largest difference relative to the parameter's largest gradient";
}

// Accumulation on the device (what Trainer::step does when no gradient lives on the host tier):
// each micro-batch's backward starts from its token share and adds into the gradient buffers.
TEST(GradAccumulation, OnTheDeviceMatchesOneBatchOfAllTheRows) {
  TrainConfig cfg;
  Rig r = make_rig(cfg);
  TokenRows rows(synthetic_tokens(400, tiny_config().vocab_size, 5), 16);
  Batch all{4, 16, {}, {}, {}};
  std::vector<Batch> micro(4);
  long counted[4] = {0, 0, 0, 0}, total = 0;
  for (int i = 0; i < 4; ++i) {
    micro[size_t(i)] = {1, 16, std::vector<int32_t>(16), std::vector<int32_t>(16), {}};
    rows.row(i, micro[size_t(i)].inputs.data(), micro[size_t(i)].targets.data());
    for (int t = 0; t < 2 * i; ++t) micro[size_t(i)].targets[size_t(t)] = -1;  // unequal token counts
    for (int32_t x : micro[size_t(i)].targets) counted[i] += x >= 0;
    total += counted[i];
    all.inputs.insert(all.inputs.end(), micro[size_t(i)].inputs.begin(), micro[size_t(i)].inputs.end());
    all.targets.insert(all.targets.end(), micro[size_t(i)].targets.begin(), micro[size_t(i)].targets.end());
  }
  Optimizer& opt = r.trainer->optimizer();
  r.trainer->compute_gradients(all);
  const std::vector<std::vector<float>> want = grads(opt, *r.model);
  for (size_t j = 0; j < want.size(); ++j) {
    if (!r.model->params()[j].trainable) continue;
    float scale = 0;
    for (float x : want[j]) scale = std::max(scale, std::fabs(x));
    ASSERT_GT(scale, 0.0f) << r.model->params()[j].name << ": a gradient to compare against";
  }
  Tape& tape = r.trainer->tape();
  for (int i = 0; i < 4; ++i) {
    tape.set_loss_seed(float(double(counted[i]) / double(total)));
    tape.set_accumulate_param_grads(i > 0);
    r.trainer->compute_gradients(micro[size_t(i)]);
  }
  tape.set_loss_seed(Tape::kLossSeed);
  tape.set_accumulate_param_grads(false);
  EXPECT_LT(worst_relative(grads(opt, *r.model), want), 5e-6)
      << "largest difference relative to the parameter's largest gradient";
  // A host-tier gradient has a fresh block each backward: it cannot accumulate there.
  TrainConfig host;
  host.plan.set_state_offloading("all", "test");
  Rig h = make_rig(host);
  h.trainer->tape().set_accumulate_param_grads(true);
  EXPECT_THROW(h.trainer->compute_gradients(micro[0]), Error);
}

// The accumulator's own arithmetic, bit for bit: after micro-batches with weights w_i the gradient
// is ((w_1 g_1 + w_2 g_2) + w_3 g_3), each g_i the gradient of that micro-batch alone; the same on
// the host tier (gradients and moments there) as on the device.
TEST(GradAccumulation, SumsEachMicroBatchGradientExactly) {
  for (const char* level : {"none", "all"}) {
    SCOPED_TRACE(level);
    TrainConfig cfg;
    cfg.plan.set_state_offloading(level, "test");
    Rig r = make_rig(cfg);
    TokenRows rows(synthetic_tokens(400, tiny_config().vocab_size, 5), 16);
    std::vector<Batch> micro(3);
    for (int i = 0; i < 3; ++i) {
      micro[size_t(i)] = {1, 16, std::vector<int32_t>(16), std::vector<int32_t>(16), {}};
      rows.row(i, micro[size_t(i)].inputs.data(), micro[size_t(i)].targets.data());
    }
    const float w[3] = {0.25f, 0.5f, 0.25f};
    std::vector<std::vector<std::vector<float>>> g(3);  // [micro][param][elem]
    Optimizer& opt = r.trainer->optimizer();
    for (int i = 0; i < 3; ++i) {
      r.trainer->compute_gradients(micro[size_t(i)]);
      for (const Parameter& p : r.model->params()) {
        g[size_t(i)].emplace_back(size_t(p.shape.numel()));
        if (p.trainable) opt.download_grad(p, g[size_t(i)].back().data());
      }
    }
    GradAccumulator acc(*r.be, *r.model, opt);
    for (int i = 0; i < 3; ++i) {
      r.trainer->compute_gradients(micro[size_t(i)]);
      acc.add(size_t(i), 3, w[i]);
    }
    size_t checked = 0;
    for (size_t j = 0; j < r.model->params().size(); ++j) {
      const Parameter& p = r.model->params()[j];
      if (!p.trainable) continue;
      std::vector<float> got(size_t(p.shape.numel()));
      opt.download_grad(p, got.data());
      for (size_t e = 0; e < got.size(); ++e) {
        const float want = (w[0] * g[0][j][e] + w[1] * g[1][j][e]) + w[2] * g[2][j][e];
        ASSERT_EQ(got[e], want) << p.name << "[" << e << "]";
      }
      ++checked;
    }
    EXPECT_GT(checked, 0u);
  }
}

TEST(RowData, HeldOutRowsNeverTrainAndEveryEpochVisitsEachTrainingRowOnce) {
  const RowSplit s = split_rows(50, 0.1, 7);
  ASSERT_EQ(s.val.size(), 5u);  // ceil(0.1 * 50)
  ASSERT_EQ(s.train.size(), 45u);
  std::set<long> val(s.val.begin(), s.val.end());
  for (long r : s.train) EXPECT_FALSE(val.count(r)) << r;
  EXPECT_EQ(split_rows(50, 7, 7).val.size(), 7u);  // a count
  // The float a YAML value is kept in (0.100000001): still 5 rows, not 6.
  EXPECT_EQ(split_rows(50, double(0.1f), 7).val.size(), 5u);
  EXPECT_EQ(split_rows(30, double(0.1f), 7).val.size(), 3u);
  EXPECT_EQ(split_rows(50, 0.1, 7).val, s.val);  // the seed fixes them
  TokenRows rows(synthetic_tokens(50 * 8 + 1, 61, 1), 8);
  ASSERT_EQ(rows.rows(), 50);
  RowSampler sampler(s.train, 3);
  std::vector<int32_t> in(8), tgt(8);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::multiset<std::vector<int32_t>> seen;
    for (int i = 0; i < 45; ++i) seen.insert(sampler.next(rows, 1).inputs);
    std::multiset<std::vector<int32_t>> want;
    for (long r : s.train) {
      rows.row(r, in.data(), tgt.data());
      want.insert(in);
    }
    EXPECT_EQ(seen, want) << "epoch " << epoch;
  }
  EXPECT_EQ(sampler.position().epoch, 2);
  EXPECT_EQ(sampler.position().index, 45);
  // Errors name the key.
  auto e = catch_as<ConfigError>([] { split_rows(10, 10, 0, "run.yaml"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "val_set_size");
  EXPECT_NE(std::string(e->what()).find("run.yaml"), std::string::npos) << e->what();
  EXPECT_TRUE(catch_as<ConfigError>([] { split_rows(10, 2.5, 0); }));
}

// The held-out loss is the mean over the held-out rows (tokens weighted), and evaluating every step
// changes nothing in training, bit for bit.
TEST(TrainLoop, EvaluatesHeldOutRowsWithoutChangingTraining) {
  TrainConfig cfg;
  cfg.seq = 16;
  cfg.batch = 3;
  cfg.steps = 4;
  cfg.steps_given = true;
  cfg.val_set_size = 5;  // two eval batches of 3, the second padded with ignored rows
  cfg.lr = 1e-2f;
  Rig quiet_run = make_rig(cfg);
  const LoopResult a = quiet_run.loop->run();
  cfg.eval_steps = 1;
  Rig evaluated = make_rig(cfg);
  const LoopResult b = evaluated.loop->run();
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(state_bytes(*quiet_run.model), state_bytes(*evaluated.model));
  ASSERT_EQ(a.eval_loss.size(), 1u);  // at the end only
  ASSERT_EQ(b.eval_loss.size(), 4u);
  EXPECT_EQ(a.eval_loss[0], b.eval_loss[3]);
  // By hand: each held-out row alone, weighted by its 16 tokens (all count).
  TokenRows rows(synthetic_tokens(400, tiny_config().vocab_size, 5), 16);
  ASSERT_EQ(evaluated.loop->val_rows(), 5);
  double sum = 0;
  for (long r : evaluated.loop->val_row_ids()) {
    Batch one{1, 16, std::vector<int32_t>(16), std::vector<int32_t>(16), {}};
    rows.row(r, one.inputs.data(), one.targets.data());
    sum += evaluated.trainer->evaluate(one);
  }
  EXPECT_NEAR(b.eval_loss[3].second, sum / 5, 1e-5);
}

TEST(TrainLoop, NumEpochsSetsTheStepsUnlessMaxStepsIsGiven) {
  TrainConfig cfg;
  cfg.seq = 16;
  cfg.batch = 2;
  cfg.grad_accum = 3;
  cfg.num_epochs = 2;
  cfg.val_set_size = 0.1f;  // 24 rows: 3 held out, 21 train
  Rig r = make_rig(cfg);
  EXPECT_EQ(r.loop->train_rows(), 21);
  EXPECT_EQ(r.loop->total_steps(), 7);  // ceil(2 * 21 / 6)
  cfg.steps = 3;
  cfg.steps_given = true;
  EXPECT_EQ(make_rig(cfg).loop->total_steps(), 3);
}

TEST(TrainLoopConfig, AxolotlKeysAreReadAndCheckedByName) {
  TrainConfig c;
  apply_yaml_text(c,
                  "num_epochs: 3\ngradient_accumulation_steps: 4\nlr_scheduler: cosine\nwarmup_ratio: 0.05\n"
                  "val_set_size: 0.02\neval_steps: 50\nlogging_steps: 10\nmetrics_file: m.jsonl\nsave_steps: 100\n"
                  "save_total_limit: 2\nresume_from_checkpoint: true\n",
                  "run.yaml");
  EXPECT_FLOAT_EQ(c.num_epochs, 3.0f);
  EXPECT_FALSE(c.steps_given);
  EXPECT_EQ(c.grad_accum, 4);
  EXPECT_EQ(c.lr_scheduler, LrScheduler::cosine);
  EXPECT_FLOAT_EQ(c.warmup_ratio, 0.05f);
  EXPECT_FLOAT_EQ(c.val_set_size, 0.02f);
  EXPECT_EQ(c.eval_steps, 50);
  EXPECT_EQ(c.logging_steps, 10);
  EXPECT_EQ(c.metrics_file, "m.jsonl");
  EXPECT_EQ(c.save_steps, 100);
  EXPECT_EQ(c.save_total_limit, 2);
  EXPECT_EQ(c.resume_from_checkpoint, "auto");
  apply_yaml_text(c, "resume_from_checkpoint: out/checkpoint-100\nmax_steps: 5\n", "run.yaml");
  EXPECT_EQ(c.resume_from_checkpoint, "out/checkpoint-100");
  EXPECT_TRUE(c.steps_given);
  apply_yaml_text(c, "resume_from_checkpoint: false\n", "run.yaml");
  EXPECT_EQ(c.resume_from_checkpoint, "");
  struct Bad {
    const char* yaml;
    const char* field;
  };
  for (const Bad& b : {Bad{"lr_scheduler: polynomial\n", "lr_scheduler"},
                       Bad{"gradient_accumulation_steps: 0\n", "gradient_accumulation_steps"},
                       Bad{"num_epochs: -1\n", "num_epochs"}, Bad{"warmup_ratio: 1.5\n", "warmup_ratio"},
                       Bad{"val_set_size: -0.1\n", "val_set_size"}, Bad{"logging_steps: 0\n", "logging_steps"},
                       Bad{"save_total_limit: -1\n", "save_total_limit"}, Bad{"eval_steps: x\n", "eval_steps"}}) {
    TrainConfig t;
    auto e = catch_as<ConfigError>([&] { apply_yaml_text(t, b.yaml, "run.yaml"); });
    ASSERT_TRUE(e) << b.yaml;
    EXPECT_EQ(e->file, "run.yaml") << b.yaml;
    EXPECT_EQ(e->field, b.field) << b.yaml << ": " << e->what();
  }
}

// logging_steps: the progress line and the metrics line on the first step, every N-th and the last;
// the held-out loss in both; each progress line has the step of the total, the rate and the ETA.
TEST(TrainLoop, LogsEveryLoggingStepsToTheProgressLineAndTheMetricsFile) {
  const std::string metrics = fmt::format("{}strata_loop_metrics_{}.jsonl", ::testing::TempDir(), ::getpid());
  std::remove(metrics.c_str());
  TrainConfig cfg;
  cfg.seq = 16;
  cfg.batch = 2;
  cfg.steps = 10;
  cfg.steps_given = true;
  cfg.logging_steps = 4;
  cfg.val_set_size = 2;
  cfg.eval_steps = 5;
  cfg.metrics_file = metrics;
  std::FILE* text = std::tmpfile();
  LoopOptions lo = quiet();
  lo.text = text;
  Rig r = make_rig(cfg, lo);
  r.loop->run();
  std::rewind(text);
  std::vector<std::string> lines;
  for (char buf[512]; std::fgets(buf, sizeof buf, text);) lines.emplace_back(buf);
  std::fclose(text);
  std::vector<std::string> heads;
  for (const std::string& l : lines) heads.push_back(l.substr(0, l.find(" |")));
  EXPECT_EQ(heads, (std::vector<std::string>{"step    1/10", "step    4/10", "eval step 5/10", "step    8/10",
                                             "step   10/10", "eval step 10/10"}));
  for (const std::string& l : lines)
    if (l.starts_with("step")) {
      for (const char* part : {"| loss ", "| lr ", "| grad norm ", " tok/s", "| elapsed ", "| eta "})
        EXPECT_NE(l.find(part), std::string::npos) << part << " in " << l;
    }
  std::ifstream in(metrics);
  std::vector<std::string> kinds;
  for (std::string l; std::getline(in, l);)
    kinds.push_back(fmt::format("{}:{}", l.find("eval_loss") != std::string::npos ? "eval" : "step",
                                std::atoi(l.c_str() + l.find("\"step\": ") + 8)));
  EXPECT_EQ(kinds, (std::vector<std::string>{"step:1", "step:4", "eval:5", "step:8", "step:10", "eval:10"}));
  std::remove(metrics.c_str());
}
