// A training run, built in one place from checked settings: the launch (ranks) and communicators,
// the backend, budget planning, the data, the model, the trainer and the loop. strata-train,
// strata-bench, strata-plan and the library's Session all build their runs here.
#pragma once
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/comm.h"
#include "engine/rendezvous.h"
#include "io/hf_config.h"
#include "model/plan/layout.h"
#include "model/plan/planner.h"
#include "model/run/launch.h"
#include "model/run/train_config.h"
#include "model/run/train_loop.h"
#include "model/train/trainer.h"

namespace strata {

// What the run builder needs from the backends it cannot name (the cuda backend and NCCL live above
// the model's rooms): api/backend_factory.h gives the library's.
struct Platform {
  std::function<std::string(const std::string&)> resolve_backend;  // "auto" -> "cuda" or "cpu"
  // Makes backend `name` with an arena of `arena_bytes` (0: its default) on GPU `local_rank`.
  std::function<std::unique_ptr<Backend>(const std::string& name, size_t arena_bytes, int local_rank)> make_backend;
  // A collective over the rendezvous's ranks (group > 1: groups of that many) on `be`; null: the cpu one.
  std::function<std::unique_ptr<Communicator>(Rendezvous&, Backend& be, const LaunchEnv&, int group)> make_comm;
};

struct JobOptions {
  std::FILE* info = nullptr;  // setup and summary lines (null: none)
  std::FILE* text = nullptr;  // progress and eval lines (null: none)
  bool json = false;          // one JSON object per step on stdout
  std::function<int()> stop_requested;
  std::function<void(const StepStats&)> on_step;
  std::string profile;  // the budget planner's device profile: a name or file ("": the device's built-in)
  // An existing backend (the library's Device) instead of one made from the settings; outlives the job.
  Backend* backend = nullptr;
  std::string backend_name;  // that backend's name ("cpu", "cuda", "sim")
  // Random weights of this shape (strata-bench) instead of loading model_dir; no data is read then.
  std::optional<io::LlamaConfig> random_shape;
  bool needs_data = true;  // false: the caller brings its own batches when no data is configured
  // strata-bench's lab switches, applied to the options the settings give before the model is built.
  std::function<void(ModelOptions&, TrainOptions&)> tune;
};

// The budget planner for a run: the fastest plan (and MLP tile count) whose step fits cfg's
// budgets on the sim mirroring `backend`, priced with `profile` ("": the built-in one matching
// `device`). `world` ranks, this being rank `rank`. The result's plan is not applied.
// With `layout` (several ranks, and sequence_parallel or zero_stage not given): the planner also chooses them
// (model/plan/layout.h) and writes its choice there; `why` gets its line.
PlanResult plan_run_to_budget(const TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& backend,
                              const std::string& device, const std::string& profile, int world, int rank = 0,
                              Layout* layout = nullptr, std::string* why = nullptr);
// Whether a run of cfg over `world` ranks under a budget leaves its layout to the planner.
bool planner_chooses_layout(const TrainConfig& cfg, int world);
// Why nothing fits, in lines a user can act on (the minimum, the short tier, the persistent state).
std::string budget_failure(const TrainConfig& cfg, const PlanResult& pr);
// The device arena a run on `backend` reserves when the settings give none: device_memory, else
// memory_budget, else on cuda what the plan's forecast needs for this rank (model/plan/arena_sizing.h)
// so other processes can share the GPU; 0 elsewhere (the backend's default). `note`: how it was sized.
size_t default_arena_bytes(const TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& backend,
                           const LaunchEnv& env, std::string* note = nullptr);
// Rows sized to the data under a memory budget: the batch lengths of cfg.batch_lengths whose step, with cfg's
// plan, fits `budget` on the sim mirroring `backend` (the longest, which the plan was made for, always stays); a
// batch of a length left out takes the next longer one.
std::vector<int> batch_lengths_within(const TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& backend,
                                      const std::string& device, const std::string& profile, int world, int rank,
                                      size_t budget);
// The line strata-train prints about its rows' length: sized to the data (the longest row, the multiple, the
// lengths) or sequence_len.
std::string describe_batch_lengths(const TrainConfig& c, int longest_row);
// The built-in profile whose `match` is in the device name, else h100_80gb.
DeviceProfile profile_for_device(const std::string& device);
// strata-train --preview-data N: the first N examples of each of cfg's datasets as rendered text, trained text in
// [[ ]], with token counts (model/data/datasets.h preview_dataset). ConfigError (field preview-data) unless
// `n_text` is a count in [1, 999999] and the config has datasets.
void preview_data(std::FILE* out, const TrainConfig& cfg, const std::string& n_text);
// `text` broken after ", " so that lines stay within `width` characters (an item longer than that stays
// whole); continuation lines start with `indent`. The planner's labels list many slot classes.
std::string wrap_list(const std::string& text, size_t width = 100, const std::string& indent = "    ");
// "plan (preset):" and one line per class, as the tools print it.
std::string format_plan_table(const std::string& preset, const std::vector<PlanRow>& rows);

class Job {
 public:
  // Builds the whole run; throws ConfigError (bad settings, nothing fits the budget), IoError,
  // FormatError or OutOfMemoryError. The loop has not started (resume happens at the first step).
  Job(TrainConfig cfg, const Platform& platform, JobOptions opt);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const TrainConfig& config() const { return cfg_; }  // after budget planning
  const LaunchEnv& launch() const { return env_; }
  const io::LlamaConfig& model_config() const { return mc_; }
  const std::string& backend_name() const { return be_name_; }
  Backend& backend() { return *be_; }
  LlamaModel& model() { return *model_; }
  Trainer& trainer() { return *trainer_; }
  bool has_loop() const { return bool(loop_); }
  TrainLoop& loop();  // ConfigError without data
  const std::optional<PlanResult>& budget_plan() const { return planned_; }
  size_t data_tokens() const { return data_tokens_; }  // datasets: up to each row's last trained target
  std::string plan_table() const;                      // format_plan_table of the resolved plan (of the longest batch)

  // The loop to its end (resume first when the settings say so).
  LoopResult run();
  // The trained model (or LoRA adapter) and the tokenizer's files into `dir`; every rank calls it.
  // Returns what rank 0 wrote ("model" or "adapter"; "" on other ranks).
  std::string save(const std::string& dir);

 private:
  TrainConfig cfg_;
  JobOptions opt_;
  LaunchEnv env_;
  io::LlamaConfig mc_;
  std::string be_name_, tokenizer_dir_;
  size_t data_tokens_ = 0;
  std::optional<PlanResult> planned_;
  std::FILE* sink_ = nullptr;  // /dev/null for a null info stream
  // Destroyed in reverse: the loop, trainer and model before the communicators, backend and rendezvous.
  std::unique_ptr<Rendezvous> rdv_;
  std::unique_ptr<Backend> own_be_;
  Backend* be_ = nullptr;
  std::unique_ptr<Communicator> comm_, group_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<TrainLoop> loop_;
};

}  // namespace strata
