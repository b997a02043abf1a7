// The training loop around Trainer::step: the step count from max_steps or num_epochs, gradient
// accumulation, the learning-rate schedule (model/train/lr_schedule.h), held-out evaluation, progress
// and JSON metrics lines, checkpoints every save_steps (model/run/checkpoint.h) with exact resume, and
// a stop on request (SIGINT/SIGTERM through StopSignals) that saves a checkpoint first.
#pragma once
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "model/data/row_data.h"
#include "model/run/checkpoint.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"

namespace strata {

// The Trainer's options a config asks for (the schedule is the loop's, so no warmup here).
TrainOptions train_options(const TrainConfig& cfg);
// The model's options a config asks for: full, frozen base or LoRA, the state's tiers and precision.
ModelOptions model_options(const TrainConfig& cfg);

struct LoopOptions {
  std::FILE* info = stdout;  // the setup and summary lines
  std::FILE* text = stdout;  // progress and eval lines (null: none)
  bool json = false;         // one JSON object per step on stdout (strata-train --json)
  // Polled after every step: non-zero (the signal's number) stops the run after a checkpoint.
  std::function<int()> stop_requested;
  std::function<void(const StepStats&)> on_step;  // tests
  // A step running longer than this prints where it is to `info` this often (model/run/step_watch.h); 0: never.
  double progress_interval_s = 60;
  CheckpointWrite checkpoint;  // base_model_dir is taken from the config
};

struct LoopResult {
  int first_step = 1;  // 1, or the checkpoint's step + 1 on resume
  int steps_done = 0;  // the last step taken
  int total_steps = 0;
  std::vector<float> losses;                     // this run's steps
  std::vector<std::pair<int, float>> eval_loss;  // (step, held-out mean loss)
  double seconds = 0;
  size_t tokens = 0, peak_device_bytes = 0;
  bool diverged = false;
  int stopped_by = 0;  // the stop request's value when stopped early
  std::string last_checkpoint;
  std::string resumed_from;
  // Writes of the metrics file or the progress output that failed (a full disk): each was warned about on
  // stderr when it happened, the run went on (its saves are separate files), and the tools exit non-zero.
  std::vector<std::string> output_errors;
};

class TrainLoop {
 public:
  // `tokens`: the token file's ids (rows of cfg.seq + 1, model/data/row_data.h).
  TrainLoop(const TrainConfig& cfg, Backend& be, LlamaModel& model, Trainer& trainer, std::vector<int32_t> tokens,
            LoopOptions opt);
  // `rows`: rows with their own targets (a dataset's, model/data/datasets.h), seq = cfg.seq.
  TrainLoop(const TrainConfig& cfg, Backend& be, LlamaModel& model, Trainer& trainer, TokenRows rows, LoopOptions opt);
  int total_steps() const { return total_; }
  int warmup_steps() const { return warmup_; }
  long train_rows() const { return long(split_.train.size()); }
  long val_rows() const { return long(split_.val.size()); }
  const std::vector<long>& val_row_ids() const { return split_.val; }
  // The held-out mean loss over every held-out row (tokens weighted), without training.
  float evaluate();
  // Resumes when the config says so, opens the metrics file and prints the loop's line (once).
  void begin();
  // One step of the loop (micro-batches, schedule, logging, evaluation, checkpoint, stop request);
  // false once the loop is over: total_steps() reached, diverged or stopped (result() says which).
  bool step();
  const LoopResult& result() const { return r_; }
  const StepStats& last_step() const { return last_; }
  // begin(), then step() until the loop is over.
  LoopResult run();
  ~TrainLoop();
  TrainLoop(const TrainLoop&) = delete;
  TrainLoop& operator=(const TrainLoop&) = delete;

 private:
  void log_step(const StepStats& s, int epoch_pct_x100, double elapsed, double eta, float window_mean);
  std::string save(int step, float loss);
  void metrics_line(const std::string& line);
  // After a write to `f` (named `what`): a failure is warned about at once and recorded (LoopResult::output_errors).
  void check_output(std::FILE* f, const std::string& what, int err = 0);
  void close_metrics();
  void open_metrics(int resumed_step);

  TrainConfig cfg_;
  Backend& be_;
  LlamaModel& model_;
  Trainer& trainer_;
  LoopOptions opt_;
  TokenRows rows_;
  RowSplit split_;
  RowSampler sampler_;
  std::vector<Batch> val_batches_;
  Rng rng_;  // the loop's own generator: saved and restored with the checkpoint (nothing draws from it yet)
  int total_ = 0, warmup_ = 0;
  std::string config_json_, metrics_path_;
  std::FILE* metrics_ = nullptr;
  // The loop's progress between step() calls.
  LoopResult r_;
  StepStats last_;
  bool begun_ = false, over_ = false;
  int start_ = 0;
  std::chrono::steady_clock::time_point t_begin_;
  double window_sum_ = 0;
  int window_n_ = 0;
};

// SIGINT and SIGTERM while it lives: the first is recorded (requested() returns its number) and
// the loop stops after the current step, saving a checkpoint; a second one removes the temp files
// of saves in progress and ends the process by that signal. An ignored signal stays ignored. The
// previous handlers come back when it is destroyed.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static int requested();
  // Ends the process by `sig` with its default disposition (after the run saved what it could).
  [[noreturn]] static void reraise(int sig);
};

}  // namespace strata
