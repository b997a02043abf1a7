#include "model/run/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "model/llama/rng.h"
#include "model/llama/shapes.h"
#include "model/plan/forecast.h"
#include "model/run/settings.h"

namespace strata {

namespace {

// B rows of T random tokens (from `seed`); with pack > 1 each row holds `pack` examples of T / pack tokens.
Batch random_batch(int B, int T, int vocab, int pack, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.B = B;
  b.T = T;
  for (long i = 0; i < long(B) * T; ++i) {
    b.inputs.push_back(rng.below(vocab));
    b.targets.push_back(rng.below(vocab));
  }
  if (pack > 1)
    for (long i = 0; i < long(B) * T; ++i) b.positions.push_back(int32_t(i % (T / pack)));
  return b;
}

}  // namespace

BenchResult run_bench(const BenchQuestion& q, const Platform& platform, const BenchHooks& hooks) {
  BenchResult r;
  const io::LlamaConfig c = !q.model.empty() ? io::read_llama_config(q.model) : builtin_shape(q.shape);
  r.shape = c;
  r.seq = tool_flag_int(q.seq, "seq", 4096, 1);
  r.batch = tool_flag_int(q.batch, "batch", 1, 1);
  check_micro_batch_tokens(r.batch, r.seq, "command line");
  r.steps = tool_flag_int(q.steps, "steps", 4, 0);
  const int warmup = tool_flag_int(q.warmup, "warmup", 2, 0);
  const double peak_tflops =
      check_number(q.peak_tflops.value_or(989.0), NumberRule::positive, Origin::flag("peak-tflops"));
  r.mode = q.mode;
  r.plan = q.plan.value_or("keep");
  TrainConfig tc;
  tc.loss_chunk_tokens = 1024;
  if (!q.config.empty()) {
    if (q.plan) throw ConfigError("--plan and --config exclude each other", "command line", "config");
    apply_yaml(tc, q.config);
    r.plan = "config:" + q.config + " (" + tc.plan.preset + ")";
    // The config's plan runs as written (strata-plan --write-config wrote it): no planning here.
    tc.memory_budget_bytes = tc.host_budget_bytes = tc.disk_budget_bytes = 0;
  }
  apply_flags(tc, q.flags, Tool::bench);
  tc.backend = q.backend;
  tc.seq = r.seq;
  tc.batch = r.batch;
  tc.lr = 1e-5f;
  const TrainMode mode = parse_train_mode(q.mode);
  if (mode == TrainMode::frozen) {
    tc.freeze_base = true;
  } else if (mode == TrainMode::lora) {
    tc.lora.rank = tool_flag_int(q.lora_rank, "lora-rank", 16, 1);
    tc.lora.alpha = 2.0f * float(tc.lora.rank);
  }
  if (q.config.empty()) {  // the preset's activation rules; the state flags' placement stays
    Plan preset = preset_plan(r.plan, 1, "--plan", "command line", "plan");
    preset.take_state(tc.plan);
    tc.plan = preset;
  }
  r.max_grad_norm = tc.max_grad_norm;

  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const Clock::time_point t_model = Clock::now();
  JobOptions jo;
  jo.random_shape = c;  // random weights, random tokens: no data
  jo.needs_data = false;
  jo.tune = [&](ModelOptions& mo, TrainOptions& to) {
    mo.loss_grad_in_forward = !q.loss_recompute;
    to.optimizer.defer_update = !q.eager_update;
    to.optimizer.update_in_backward = !q.eager_update;
  };
  Job job(tc, platform, jo);
  Backend& be = job.backend();
  LlamaModel& model = job.model();
  Trainer& tr = job.trainer();
  const Clock::time_point t_ready = Clock::now();
  // --pack N: each row as N packed examples of seq / N tokens (sample packing's attention and rope).
  r.pack = tool_flag_int(q.pack, "pack", 1, 1);
  if (r.pack > 1 && r.seq % r.pack)
    throw ConfigError(fmt::format("--pack {} must divide --seq {}", r.pack, r.seq), "command line", "pack");
  // --grad-accum K: K micro-batches a step, their gradients summed before one update (as strata-train's).
  r.grad_accum = tc.grad_accum;
  std::vector<Batch> micro;
  for (int i = 0; i < r.grad_accum; ++i) micro.push_back(random_batch(r.batch, r.seq, c.vocab_size, r.pack, 1 + i));
  std::vector<double> times;
  for (int s = 0; s < warmup + r.steps; ++s) {
    if (s == warmup && hooks.before_timed_steps) hooks.before_timed_steps();
    StepStats st = tr.step(micro, tc.lr);
    if (s == 0 && hooks.info)  // the first step tunes the GEMM and attention plans of every new shape
      std::fprintf(hooks.info, "strata-bench: setup %.1f s (model and random weights %.1f s, first step %.1f s)\n",
                   secs(t_model, Clock::now()), secs(t_model, t_ready), st.seconds);
    if (s >= warmup) times.push_back(st.seconds);
    r.peak_arena_bytes = std::max(r.peak_arena_bytes, st.peak_device_bytes);
    r.device_used_bytes = std::max(r.device_used_bytes, be.device_used_bytes());
    r.peak_host_bytes = st.peak_host_bytes + st.state_host_bytes;
    r.peak_disk_bytes = st.peak_disk_bytes + st.state_disk_bytes;
    r.loss = st.loss;
  }
  be.synchronize();  // the last step may return with its update still running (TrainOptions::time_parts)
  if (hooks.after_steps) hooks.after_steps(r.steps);
  r.offloaded_bytes_per_step = tr.store().stats().offloaded_bytes / size_t(std::max(1, warmup + r.steps));
  std::sort(times.begin(), times.end());
  r.step_s = times.empty() ? 0 : times[times.size() / 2];
  const long tokens = long(r.batch) * r.seq * r.grad_accum;
  r.tokens_per_s = r.step_s > 0 ? tokens / r.step_s : 0.0;
  r.mfu = r.step_s > 0 ? step_flops(c, tokens, r.seq, q.mode == "full") / r.step_s / (peak_tflops * 1e12) : 0;
  r.backend = job.backend_name();
  r.device = be.device_name();
  r.options = model.options();
  r.padded_vocab = model.padded_vocab();
  r.state_offloading = job.config().plan.state_label();
  r.state_host_bytes = model.state_host_bytes();
  r.state_host_pinned = model.state_host_pinned();
  r.state_disk_bytes = model.state_disk_bytes();
  r.params = model.param_count();
  r.trainable = model.trainable_count();
  return r;
}

}  // namespace strata
