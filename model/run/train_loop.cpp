#include "model/run/train_loop.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "model/run/step_watch.h"

namespace strata {

TrainOptions train_options(const TrainConfig& cfg) {
  TrainOptions to;
  to.adam = {cfg.lr, cfg.beta1, cfg.beta2, cfg.adam_eps, cfg.weight_decay};
  to.max_grad_norm = cfg.max_grad_norm;
  to.plan = cfg.plan;
  to.tiers.offload_dir = cfg.offload_dir;
  check_grad_reduce(cfg);
  to.optimizer.reduce_dtype = effective_grad_reduce(cfg);
  if (!cfg.batch_lengths.empty()) to.batch_tokens = int64_t(cfg.batch) * longest_batch_len(cfg);
  return to;
}

ModelOptions model_options(const TrainConfig& cfg) {
  ModelOptions mo;
  mo.lora = cfg.lora;
  mo.lora.seed = cfg.seed;
  mo.train_base = !cfg.freeze_base && !cfg.lora.enabled();
  mo.train_norms = cfg.freeze_base && !cfg.lora.enabled();  // frozen base: only the norms train
  mo.loss_chunk_tokens = cfg.loss_chunk_tokens;
  mo.pad_vocab_multiple = cfg.pad_vocab_multiple;
  mo.page_layers = cfg.plan.pages_layer_weights();
  mo.state_plan = cfg.plan;        // the persistent state's tiers (state_offloading, state_plan, or the planner's)
  mo.state_dir = cfg.offload_dir;  // state on the disk tier: its file beside the activations' (offload_dir)
  mo.recipe = cfg.recipe;
  mo.fp8 = cfg.fp8;
  mo.mlp_tiles = std::max(1, cfg.plan.mlp_tiles);  // auto (0) is untiled unless the planner wrote a count
  mo.zero.stage = cfg.zero_stage;                  // the caller sets zero.rank and zero.world (its launch)
  return mo;
}

namespace {

std::string clock_str(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  const long t = long(s + 0.5);
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

// A float for a JSON line: null when not finite.
std::string jnum(double v, const char* f = "{:.6g}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : std::string("null");
}

}  // namespace

TrainLoop::TrainLoop(const TrainConfig& cfg, Backend& be, LlamaModel& model, Trainer& trainer,
                     std::vector<int32_t> tokens, LoopOptions opt)
    : TrainLoop(cfg, be, model, trainer, TokenRows(std::move(tokens), cfg.seq), std::move(opt)) {}

TrainLoop::TrainLoop(const TrainConfig& cfg, Backend& be, LlamaModel& model, Trainer& trainer, TokenRows rows,
                     LoopOptions opt)
    : cfg_(cfg),
      be_(be),
      model_(model),
      trainer_(trainer),
      opt_(std::move(opt)),
      rows_(std::move(rows)),
      split_(
          split_rows(rows_.rows(), cfg.val_set_size, cfg.seed, cfg.config_file.empty() ? "config" : cfg.config_file)),
      sampler_(split_.train, cfg.seed),
      rng_(cfg.seed ^ 0x7e41ull) {
  STRATA_CHECK(rows_.seq() == cfg.seq, "rows of another sequence_len than the config's");
  if (!cfg.batch_lengths.empty()) rows_.set_batch_lengths(cfg.batch_lengths);
  // Rows over every data-parallel rank (a sequence-parallel group's ranks share theirs).
  const long per_step = long(cfg.batch) * cfg.grad_accum * trainer.dp_world();
  if (!cfg.steps_given && cfg.num_epochs > 0) {
    // Less than one row in all would still run a whole step: not what was asked.
    if (double(cfg.num_epochs) * double(split_.train.size()) < 1.0)
      throw ConfigError(fmt::format("num_epochs {} of {} training rows is less than one row; at least {:.3g}",
                                    cfg.num_epochs, split_.train.size(), 1.0 / double(split_.train.size())),
                        cfg.config_file.empty() ? "config" : cfg.config_file, "num_epochs");
    const double steps = std::ceil(double(cfg.num_epochs) * double(split_.train.size()) / double(per_step));
    if (steps > 2147483647.0)
      throw ConfigError(fmt::format("num_epochs {} makes {} steps, more than 2^31 - 1", cfg.num_epochs, steps),
                        "config", "num_epochs");
    total_ = std::max(1, int(steps));
  } else {
    total_ = cfg.steps;
  }
  warmup_ = resolve_warmup(cfg.warmup_steps, cfg.warmup_ratio, total_);
  if (!split_.val.empty()) val_batches_ = eval_batches(rows_, split_.val, cfg.batch);
  config_json_ = checkpoint_config_json(cfg, model.config(), rows_.rows(),
                                        model.options().zero.sharded() ? trainer.world() : 0, trainer.dp_world());
  if (opt_.checkpoint.base_model_dir.empty()) opt_.checkpoint.base_model_dir = cfg.model_dir;
  if (opt_.checkpoint.tokenizer_dir.empty()) opt_.checkpoint.tokenizer_dir = cfg.tokenizer_dir;
  if (opt_.checkpoint.chat_template.empty())
    opt_.checkpoint.chat_template = trained_chat_template(
        cfg, opt_.checkpoint.tokenizer_dir.empty() ? opt_.checkpoint.base_model_dir : opt_.checkpoint.tokenizer_dir);
  opt_.checkpoint.config_json = config_json_;
  metrics_path_ = !cfg.metrics_file.empty() ? cfg.metrics_file
                  : !cfg.output_dir.empty() ? cfg.output_dir + "/metrics.jsonl"
                                            : std::string();
  if (trainer.rank() != 0) metrics_path_.clear();  // rank 0 writes the run's files
}

namespace {
// Rows [rank * n, (rank + 1) * n) of a batch of several ranks' rows.
Batch rank_rows(Batch all, int rank, int n) {
  if (all.B == n) return all;
  Batch b{n, all.T, {}, {}, {}};
  const auto first = long(rank) * n * all.T, count = long(n) * all.T;
  b.inputs.assign(all.inputs.begin() + first, all.inputs.begin() + first + count);
  b.targets.assign(all.targets.begin() + first, all.targets.begin() + first + count);
  if (!all.positions.empty()) b.positions.assign(all.positions.begin() + first, all.positions.begin() + first + count);
  return b;
}
}  // namespace

float TrainLoop::evaluate() {
  double sum = 0;
  long n = 0;
  for (const Batch& b : val_batches_) {
    const long k = valid_targets(b);
    if (!k) continue;
    sum += double(trainer_.evaluate(b)) * double(k);
    n += k;
  }
  return n ? float(sum / double(n)) : 0.0f;
}

void TrainLoop::open_metrics(int resumed_step) {
  if (metrics_path_.empty()) return;
  // On resume the lines after the checkpoint's step are dropped: those steps run again.
  std::string kept;
  if (resumed_step > 0) {
    std::ifstream in(metrics_path_);
    for (std::string line; std::getline(in, line);) {
      const size_t at = line.find("\"step\": ");
      if (at != std::string::npos && std::atol(line.c_str() + at + 8) > resumed_step) continue;
      kept += line + "\n";
    }
  }
  const std::filesystem::path parent = std::filesystem::path(metrics_path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  // A file is rewritten (atomically: renamed over it); anything else there, a device (/dev/full,
  // /dev/stdout) or a pipe, is only appended to, never replaced.
  std::error_code ec;
  const auto st = std::filesystem::status(metrics_path_, ec);
  if (!std::filesystem::exists(st) || std::filesystem::is_regular_file(st)) io::write_file_atomic(metrics_path_, kept);
  if (std::filesystem::is_fifo(st)) {  // open() would wait for a reader: none now is an error, not a hang
    const int fd = ::open(metrics_path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0) metrics_ = ::fdopen(fd, "a");
    if (!metrics_) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      throw IoError(fmt::format("{}: cannot open the metrics file (a named pipe): {}", metrics_path_,
                                err == ENXIO ? "nothing reads from it" : std::strerror(err)),
                    metrics_path_);
    }
    return;
  }
  metrics_ = std::fopen(metrics_path_.c_str(), "a");
  if (!metrics_)
    throw IoError(fmt::format("{}: cannot open the metrics file: {}", metrics_path_, std::strerror(errno)),
                  metrics_path_);
}

void TrainLoop::check_output(std::FILE* f, const std::string& what, int err) {
  if (!err && (!f || !std::ferror(f))) return;
  if (!err) err = errno ? errno : EIO;
  if (f) std::clearerr(f);
  for (const std::string& e : r_.output_errors)
    if (e.rfind(what + ":", 0) == 0) return;  // warned once per output
  const std::string msg = fmt::format("{}: writing failed at step {}: {}", what, r_.steps_done, std::strerror(err));
  r_.output_errors.push_back(msg);
  std::fprintf(stderr,
               "strata-train: warning: %s; later lines may be lost. The run goes on (checkpoints and the model "
               "are separate files) and exits non-zero at the end\n",
               msg.c_str());
  std::fflush(stderr);
}

void TrainLoop::metrics_line(const std::string& line) {
  if (!metrics_) return;
  errno = 0;
  const bool ok =
      std::fputs(line.c_str(), metrics_) >= 0 && std::fputc('\n', metrics_) != EOF && std::fflush(metrics_) == 0;
  if (!ok) check_output(metrics_, "metrics file " + metrics_path_, errno ? errno : EIO);
}

void TrainLoop::close_metrics() {
  if (!metrics_) return;
  errno = 0;
  const bool ok = std::fflush(metrics_) == 0 && !std::ferror(metrics_);
  const int err = errno;
  if (std::fclose(metrics_) != 0 || !ok) check_output(nullptr, "metrics file " + metrics_path_, err ? err : EIO);
  metrics_ = nullptr;
}

std::string TrainLoop::save(int step, float loss) {
  // Every rank holds the same weights and state: rank 0 writes them. ZeRO-1: every rank writes its shard.
  const bool sharded = model_.options().zero.sharded();
  if (trainer_.rank() != 0 && !sharded) return {};
  CheckpointState st;
  st.step = step;
  st.data = sampler_.position();
  st.trainer_rng = rng_.state();
  st.total_steps = total_;
  st.loss = loss;
  const RankSum sum = [this](float v) { return trainer_.sum_over_ranks(v); };
  const std::string dir = save_checkpoint(cfg_.output_dir, be_, model_, st, opt_.checkpoint, sharded ? sum : RankSum());
  if (trainer_.rank() != 0) return dir;
  const std::vector<std::string> pruned = prune_checkpoints(cfg_.output_dir, cfg_.save_total_limit);
  std::fprintf(opt_.info, "checkpoint: %s%s\n", dir.c_str(),
               pruned.empty() ? "" : fmt::format(" (removed {} older)", pruned.size()).c_str());
  std::fflush(opt_.info);
  check_output(opt_.info, "the progress output");
  return dir;
}

TrainLoop::~TrainLoop() {
  if (metrics_) std::fclose(metrics_);
}

void TrainLoop::begin() {
  if (begun_) return;
  begun_ = true;
  r_ = LoopResult();
  r_.total_steps = total_;
  int start = 0;
  if (!cfg_.resume_from_checkpoint.empty()) {
    std::string dir;
    CheckpointState st;
    try {
      dir = resolve_checkpoint(cfg_.resume_from_checkpoint, cfg_.output_dir);
      // The data position against the step, once the config matched and before anything is copied in.
      st = load_checkpoint(
          dir, be_, model_, config_json_, [this](float v) { return trainer_.sum_over_ranks(v); },
          [&](const CheckpointState& s) {
            check_data_position(dir, s, sampler_.rows(), long(cfg_.batch) * cfg_.grad_accum * trainer_.dp_world());
          });
    } catch (...) {
      begun_ = false;  // a refused checkpoint is refused again by the next begin(), never trained past
      throw;
    }
    trainer_.set_steps_done(st.step);
    sampler_.restore(st.data);
    rng_.set_state(st.trainer_rng);
    start = st.step;
    r_.resumed_from = dir;
    std::fprintf(opt_.info, "resumed from %s: step %d of %d, epoch %ld, row %ld of %ld\n", dir.c_str(), st.step, total_,
                 st.data.epoch, st.data.index, sampler_.rows());
  }
  open_metrics(start);
  const int k = cfg_.grad_accum;
  std::fprintf(
      opt_.info,
      "loop: %d steps (%ld training rows, %ld a step: %d x %d accumulated x %d ranks%s; %.2f epochs) | lr %g %s, "
      "warmup %d | held out %ld rows%s%s\n",
      total_, long(split_.train.size()), long(cfg_.batch) * k * trainer_.dp_world(), cfg_.batch, k, trainer_.dp_world(),
      trainer_.seq_parallel() > 1
          ? fmt::format(" (groups of {} GPUs, each row's tokens split over a group: sequence parallel)",
                        trainer_.seq_parallel())
                .c_str()
          : "",
      double(total_) * cfg_.batch * k * trainer_.dp_world() / double(split_.train.size()), double(cfg_.lr),
      lr_scheduler_name(cfg_.lr_scheduler), warmup_, long(split_.val.size()),
      split_.val.empty()    ? ""
      : cfg_.eval_steps > 0 ? fmt::format(", evaluated every {} steps", cfg_.eval_steps).c_str()
                            : ", evaluated at the end",
      rows_.packed() ? fmt::format(" | sample packing: {} examples in {} rows", rows_.examples(), rows_.rows()).c_str()
                     : "");
  std::fflush(opt_.info);
  check_output(opt_.info, "the progress output");
  start_ = start;
  r_.first_step = start + 1;
  r_.steps_done = start;
  t_begin_ = std::chrono::steady_clock::now();
  window_sum_ = 0;
  window_n_ = 0;
  over_ = start >= total_;
}

bool TrainLoop::step() {
  begin();
  if (over_) return false;
  LoopResult& r = r_;
  const int step = r.steps_done + 1, start = start_;
  std::vector<Batch> micro(static_cast<size_t>(cfg_.grad_accum));
  const int world = trainer_.world(), dp_world = trainer_.dp_world(), dp_rank = trainer_.dp_rank();
  // Every rank draws the same global micro-batches (the same sampler and seed) and keeps its data-parallel
  // rank's rows (the ranks of a sequence-parallel group the same rows: the trainer takes each one's tokens).
  for (Batch& b : micro) b = rank_rows(sampler_.next(rows_, cfg_.batch * dp_world), dp_rank, cfg_.batch);
  const float lr = scheduled_lr(cfg_.lr_scheduler, cfg_.lr, step, total_, warmup_);
  StepStats s;
  {
    StepWatch watch(opt_.info, fmt::format("step {}/{}", step, total_), opt_.progress_interval_s);
    s = trainer_.step(micro, lr);
  }
  last_ = s;
  r.steps_done = step;
  r.losses.push_back(s.loss);
  r.seconds += s.seconds;
  r.tokens += s.tokens;
  r.peak_device_bytes = std::max(r.peak_device_bytes, s.peak_device_bytes);
  if (opt_.on_step) opt_.on_step(s);
  window_sum_ += s.loss;
  ++window_n_;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_begin_).count();
  const double eta = elapsed / double(step - start) * double(total_ - step);
  const double epoch = double(sampler_.position().epoch) + double(sampler_.position().index) / double(sampler_.rows());
  const double tps = s.seconds > 0 ? double(s.tokens) / s.seconds : 0.0;
  const bool diverged = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
  if (opt_.json) {
    if (diverged)
      std::printf("{\"step\": %d, \"loss\": null, \"grad_norm\": null, \"diverged\": true}\n", s.step);
    else
      std::printf(
          "{\"step\": %d, \"total_steps\": %d, \"epoch\": %.4f, \"loss\": %.6f, \"grad_norm\": %.6f, \"lr\": %.6g, "
          "\"tokens_per_s\": %.1f, \"step_s\": %.6f, \"elapsed_s\": %.3f, \"eta_s\": %.3f, "
          "\"peak_device_bytes\": %zu, \"peak_host_bytes\": %zu, \"peak_disk_bytes\": %zu, "
          "\"device_used_bytes\": %zu, \"saved_bytes\": %zu, \"recomputed_nodes\": %ld, "
          "\"paged_bytes_uploaded\": %zu, \"state_host_bytes\": %zu, \"state_bytes_moved\": %zu, "
          "\"setup_s\": %.6f, \"forward_s\": %.6f, \"backward_s\": %.6f, \"optimizer_s\": %.6f}\n",
          s.step, total_, epoch, double(s.loss), double(s.grad_norm), double(s.lr), tps, s.seconds, elapsed, eta,
          s.peak_device_bytes, s.peak_host_bytes, s.peak_disk_bytes, be_.device_used_bytes(), s.saved_bytes,
          s.recomputed_nodes, s.paged_bytes_uploaded, s.state_host_bytes, s.state_bytes_moved, s.part_s[0], s.part_s[1],
          s.part_s[2], s.part_s[3]);
    std::fflush(stdout);
    check_output(stdout, "standard output");
  }
  const bool log = diverged || step == start + 1 || step == total_ || step % cfg_.logging_steps == 0;
  if (log) {
    if (opt_.text && !opt_.json) {
      std::fprintf(opt_.text,
                   "step %4d/%d | loss %.4f | lr %.2e | grad norm %.3f | %9.0f tok/s | peak %s | %.3f s | "
                   "elapsed %s | eta %s\n",
                   step, total_, double(s.loss), double(s.lr), double(s.grad_norm), tps,
                   format_bytes(s.peak_device_bytes).c_str(), s.seconds, clock_str(elapsed).c_str(),
                   clock_str(eta).c_str());
      std::fflush(opt_.text);
      check_output(opt_.text, "the progress output");
    }
    metrics_line(fmt::format(
        "{{\"step\": {}, \"epoch\": {:.4f}, \"loss\": {}, \"loss_mean\": {}, \"lr\": {:.6g}, "
        "\"grad_norm\": {}, \"tokens_per_s\": {:.1f}, \"elapsed_s\": {:.3f}, \"eta_s\": {:.3f}}}",
        step, epoch, jnum(s.loss), jnum(window_sum_ / window_n_), double(s.lr), jnum(s.grad_norm), tps, elapsed, eta));
    window_sum_ = 0;
    window_n_ = 0;
  }
  if (diverged) {
    r.diverged = true;
    over_ = true;
    return false;
  }
  if (!val_batches_.empty() && (step == total_ || (cfg_.eval_steps > 0 && step % cfg_.eval_steps == 0))) {
    const float el = evaluate();
    r.eval_loss.emplace_back(step, el);
    metrics_line(
        fmt::format("{{\"step\": {}, \"eval_loss\": {}, \"eval_rows\": {}}}", step, jnum(el), split_.val.size()));
    if (opt_.json) {
      std::printf("{\"step\": %d, \"eval_loss\": %s}\n", step, jnum(el).c_str());
      std::fflush(stdout);
      check_output(stdout, "standard output");
    } else if (opt_.text) {
      std::fprintf(opt_.text, "eval step %d/%d | held-out loss %.4f over %zu rows\n", step, total_, double(el),
                   split_.val.size());
      std::fflush(opt_.text);
      check_output(opt_.text, "the progress output");
    }
  }
  int stop = opt_.stop_requested ? opt_.stop_requested() : 0;
  // The ranks stop together: a stop any rank saw stops every rank after this step.
  if (world > 1 && trainer_.sum_over_ranks(stop ? 1.0f : 0.0f) > 0 && !stop) stop = SIGTERM;
  const bool periodic = cfg_.save_steps > 0 && step % cfg_.save_steps == 0;
  if (!cfg_.output_dir.empty() && (periodic || (stop && step < total_))) r.last_checkpoint = save(step, s.loss);
  if (stop && step < total_) {
    r.stopped_by = stop;
    over_ = true;
    return false;
  }
  if (step >= total_) {
    over_ = true;
    // The loop is over: the metrics file is complete.
    close_metrics();
    return false;
  }
  return true;
}

LoopResult TrainLoop::run() {
  begin();
  while (step()) {
  }
  close_metrics();
  return r_;
}

// --- StopSignals -----------------------------------------------------------------------------

namespace {

volatile std::sig_atomic_t g_stop = 0;
struct sigaction g_old[2];
bool g_installed[2] = {false, false};

void on_stop_signal(int sig) {
  if (g_stop == 0) {
    g_stop = sig;
    return;
  }
  // A second signal: what a save leaves goes, and the process ends by the signal.
  const int saved_errno = errno;
  io::unlink_live_temps();
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
  errno = saved_errno;
}

}  // namespace

StopSignals::StopSignals() {
  g_stop = 0;
  const int sigs[2] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; ++i) {
    struct sigaction old = {};
    if (::sigaction(sigs[i], nullptr, &old) != 0) continue;
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;  // nohup, `cmd &`: stays ignored
    struct sigaction sa = {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(sigs[i], &sa, &g_old[i]) == 0) g_installed[i] = true;
  }
}

StopSignals::~StopSignals() {
  const int sigs[2] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; ++i)
    if (g_installed[i]) {
      ::sigaction(sigs[i], &g_old[i], nullptr);
      g_installed[i] = false;
    }
}

int StopSignals::requested() {
  return int(g_stop);
}

void StopSignals::reraise(int sig) {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  std::_Exit(128 + sig);  // not reached
}

}  // namespace strata
