// Forecasts one training step without a GPU: builds the model and runs one real Trainer::step on
// the sim backend — the same tape, schedule, plan and allocator as cpu/cuda — and reads the peak,
// its breakdown and the model-time clock back from the arena's event log.
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/backend_sim.h"
#include "engine/cost_model.h"
#include "engine/plan.h"
#include "io/hf_config.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"

namespace strata {

enum class TrainMode { full, frozen, lora };
const char* train_mode_name(TrainMode m);
// "full", "frozen", "lora"; ConfigError otherwise.
TrainMode parse_train_mode(const std::string& s);

struct ForecastRequest {
  io::LlamaConfig model;
  int seq = 0, batch = 1;
  // Gradient accumulation (TrainConfig::grad_accum): micro-batches of `batch` rows each, their gradients summed on
  // the device (Tape::set_accumulate_param_grads) before one update. The step forecast is all of them and the
  // update; the gradients must stay on the device (the host-tier sum, model/train/grad_accum.h, is not forecast).
  int grad_accum = 1;
  TrainMode mode = TrainMode::full;
  int lora_rank = 16;  // mode lora
  float lora_alpha = 16.0f;
  std::vector<std::string> lora_targets = LoraConfig{}.target_modules;
  int loss_chunk_tokens = 512;  // strata-train's default
  int pad_vocab_multiple =
      kDefaultPadVocabMultiple;      // ModelOptions::pad_vocab_multiple (the forecast runs the padded shape)
  bool loss_grad_in_forward = true;  // ModelOptions::loss_grad_in_forward
  // ModelOptions::mlp_tiles; 0 = auto: plan_for_budget chooses (a forecast runs it untiled).
  int mlp_tiles = 0;
  Plan plan = Plan::keep_everything();  // activations, persistent state and layer weights (paging)
  DeviceProfile profile;
  SimMirror mirror = SimMirror::cuda;
  size_t budget = 0;   // arena budget; 0 = unbounded (the peak is the same; only placement can differ)
  TierOptions tiers;   // host/disk tier bounds (in-flight, prefetch); the sim creates no disk file
  StateRecipe recipe;  // master_weights, optimizer_state (ModelOptions::recipe)
  bool fp8 = false;    // the projections' GEMMs in FP8 (ModelOptions::fp8)
  // TrainOptions::max_grad_norm: <= 0 (no clipping) runs the streamed update during backward
  // (Optimizer::begin_update_in_backward), which moves its staging and transfers there.
  float max_grad_norm = 1.0f;
  // Data-parallel ranks: the forecast is one rank's (each runs the same schedule on its batch rows),
  // its gradients all-reduced on the sim communicator (engine/comm_sim.h, the profile's bus bandwidth).
  int gpus = 1;
  DType grad_reduce = DType::f32;  // the dtype the ranks sum gradients in (OptimizerOptions::reduce_dtype)
  // ZeRO stage (ModelOptions::zero): 1 with gpus > 1 forecasts one rank (`rank`), which holds the optimizer
  // state of its share of the parameters only (model/llama/zero.h) and broadcasts their weights after each step;
  // 2 its share of the gradients too (the others' transient, reduced to their owners).
  int zero_stage = 0;
  // The rank forecast (0 .. gpus - 1): ZeRO's shares, hence the peaks, differ between ranks.
  int rank = 0;
  // Sequence parallelism (model/llama/seq_parallel.h): groups of this many of the `gpus` ranks share each row, each
  // rank holding seq / sequence_parallel of its tokens; the forecast is rank 0's, its all-to-alls around attention
  // on the sim communicator. 1: off. `seq` stays the whole rows' length.
  int sequence_parallel = 1;
  // Sample packing: the batch's positions [batch * seq] (Batch::positions; a row's examples restart
  // at 0), so attention is priced by the pairs its examples attend. Empty: one sequence a row.
  std::vector<int32_t> positions;
  // TrainOptions::batch_tokens: the batch blocks' size when a run's batches vary in length (rows sized to the
  // data); the forecast of each length then places them as the run does. 0: batch * seq.
  int64_t batch_tokens = 0;
  // The budget planner (plan_for_budget, max_seq_for_budget) stops after this many seconds with the best
  // plan found by then (PlanResult::stopped); 0 (here): no limit. The tools take it from the settings'
  // plan_time_limit (default 60 s; train_forecast_request).
  double plan_time_limit_s = 0;
  // Where a long search reports its progress (a line every 10 s, and one when it stops at the limit);
  // none when empty.
  std::function<void(const std::string&)> plan_progress;
  // The whole forecast: the arena's event log, the breakdown at the peak and the plan table. Off (the planner's
  // first run of a candidate, which only compares peaks and steps), those stay empty; every number is the same.
  bool detail = true;
};

// The largest shape a forecast runs: longer rows or more tokens a step are a ConfigError naming
// the field, before anything is allocated for them (the batch alone is 8 bytes a token).
inline constexpr int kMaxForecastSeq = 1 << 24;                  // LlamaConfigLimits' positions
inline constexpr int64_t kMaxForecastTokens = int64_t(1) << 25;  // batch * seq
// Data-parallel ranks (--gpus): strata-train's WORLD_SIZE limit (model/run/launch.cpp), some 30 times the largest
// training jobs yet (tens of thousands of GPUs). A ZeRO plan forecasts at most owners + sequence_parallel ranks
// (plan_for_budget), so the largest answers as fast as a few hundred.
inline constexpr int kMaxForecastRanks = 1 << 20;
// Micro-batches a forecast step runs (grad_accum): each is simulated, so the forecast takes that many times a
// micro-batch's; their tokens together at most kMaxForecastStepTokens (each batch's share of the sim's zero batches
// is 8 bytes a token).
inline constexpr int kMaxForecastMicroBatches = 1024;
inline constexpr int64_t kMaxForecastStepTokens = int64_t(1) << 29;
// ConfigError when `r`'s shape is outside those limits (or seq, batch, gpus < 1).
void check_forecast_shape(const ForecastRequest& r);

// The model options strata-train uses for a mode (also what the cpu twin in the tests builds).
ModelOptions forecast_model_options(const ForecastRequest& r);
// The micro-batches a forecast step runs (grad_accum of them): B rows of T tokens each (all id 0; values never matter
// for memory or time), with the request's positions when it is packed. Shared by the forecasts of one shape (read
// only).
std::shared_ptr<const std::vector<Batch>> forecast_batches(const ForecastRequest& r);
// A checkpoint directory, a config.json, or a built-in name (ConfigError listing the known ones).
io::LlamaConfig resolve_model(const std::string& spec);

struct MemoryItem {
  std::string name;
  size_t bytes = 0;
  int count = 0;  // blocks (for slot classes: layers)
};

struct Forecast {
  bool fits = true;  // false: the arena ran out of its budget; `oom` says allocating what
  std::string oom;

  // Memory (device arena).
  size_t peak_bytes = 0;                // arena in-use peak during the step
  size_t high_water_bytes = 0;          // highest offset used: the budget this run needed with its placement
  size_t persistent_bytes = 0;          // in use before the step (weights, optimizer state, workspaces)
  double peak_at_s = 0;                 // model time of the peak, from the step's start
  std::string peak_phase;               // forward, backward or optimizer
  std::vector<MemoryItem> breakdown;    // categories at the peak; they sum to peak_bytes
  std::vector<MemoryItem> activations;  // activation slot classes live at the peak (layers folded)
  std::vector<MemoryItem> workspaces;   // in-op allocations live at the peak
  size_t saved_bytes = 0;               // saved slots resident at the end of forward

  // Host tier: saved slots offloaded by the slot store, and the weight pager's layers.
  size_t peak_host_slot_bytes = 0;               // slot store: host pool in use, peak
  size_t host_reserved_bytes = 0;                // slot store: its host reservation
  size_t paged_host_bytes = 0;                   // weight pager: its host reservation (all paged layers)
  size_t state_host_bytes = 0;                   // persistent state on the host tier (ModelOptions::state_plan)
                                                 // and the optimizer's host staging of disk-tier state
  size_t state_disk_bytes = 0;                   // persistent state on the disk tier: the model's state file
  size_t state_bytes_moved = 0;                  // that state's copies both ways this step (gradients included)
  size_t peak_host_bytes = 0;                    // the host tier's peak: slot store peak + pager + state reservations
  size_t offloaded_bytes = 0, loaded_bytes = 0;  // slot store, this step
  size_t peak_disk_bytes = 0;                    // disk tier: the slot store's extents' peak + the state file
  size_t paged_bytes_uploaded = 0;               // weight pager, this step
  long paged_uploads = 0;
  double copy_wait_s = 0;  // compute stalled on host copies (slot store / pager)
  double copy_busy_s = 0;  // the copy stream busy

  // Disk tier (peak_disk_bytes above): slots written from host staging (in the host peak) to the
  // slot store's file and read back in backward.
  size_t disk_written_bytes = 0, disk_read_bytes = 0;  // this step
  double disk_busy_s = 0;                              // the disk queue busy
  double disk_wait_s = 0;                              // the slot store (and so compute) waiting on disk requests
  long recomputed_nodes = 0;

  // The first step's setup, not in step_s (the later steps have none): its pinned host reservations (slot store,
  // weight pager, persistent state) allocated at the profile's pinned_alloc_gbps, and the first calls' work: the
  // profile's first_step_tuning_s plus the kernels' tuning of each GEMM and attention problem (SimBackend::tuning_s).
  // The weight pager's and the state's reservations are made at load, before the first step; the slot store's
  // (host_reserved_bytes) and the tuning inside it, so the first step takes first_step_s = step_s +
  // first_step_extra_s.
  size_t pinned_bytes = 0;
  double setup_pinned_s = 0, setup_tuning_s = 0, setup_s = 0;
  double load_pinned_s = 0;       // the pager's and the state's pinning, before the first step
  double first_step_extra_s = 0;  // the slot store's pinning and the tuning, inside the first step
  double first_step_s() const { return step_s + first_step_extra_s; }
  // On a freshly started machine (host memory never touched, as a new cloud VM's) the pinning is slower: every rank
  // of the machine (gpus, each taken to pin this rank's bytes) pinning at once at the profile's machine-wide
  // pinned_first_touch_gbps. 0 when the profile has no such rate. An upper figure: a machine that touched some of
  // its memory before pins that part at pinned_alloc_gbps.
  double setup_fresh_pinned_s = 0;
  // The host memory the run holds: its pinned reservations, which are taken whole at the first step, and never
  // less than the host peak (the slot store's pool is reserved for every host slot and its disk staging, while
  // its peak use may be lower). What a host budget is held to.
  size_t host_held_bytes() const { return std::max(peak_host_bytes, pinned_bytes); }

  // Time (model clock of the cost model).
  double step_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0, recompute_s = 0;
  double tokens_per_s = 0;  // every rank's tokens
  double comm_busy_s = 0;   // data parallel: the collectives' timeline busy (overlapping compute)
  double all_to_all_s = 0;  // sequence parallel: of comm_busy_s, the all-to-alls around attention
  double comm_wait_s = 0;   // compute (and the host) stalled on collectives
  std::vector<std::pair<std::string, double>> time_by_op;  // seconds, largest first
  long kernels = 0;
  long repeated_blocks = 0;  // the step's blocks the sim applied from a record rather than ran (SimOptions)

  size_t params = 0, trainable = 0;
  // ZeRO over several ranks: how many ranks own some parameter's state (ranks 0 .. this - 1: the owners fill the
  // lowest ranks first, model/llama/zero.h); every rank from here on owns nothing. 0 without sharding.
  int zero_owning_ranks = 0;
  std::vector<PlanRow> plan_rows;  // the plan resolved on this model's saved slots
  std::string device;              // the sim backend's description

  // The arena's whole event log (construction and step; times are model time) and where the
  // step starts in it.
  std::vector<ArenaEvent> events;
  size_t step_first_event = 0;
  double step_start_s = 0;
};

// ConfigError when the plan sends slots to the disk tier and the profile's disk bandwidth is not
// measured (disk_write_gbps / disk_read_gbps 0).
Forecast forecast(const ForecastRequest& r);

// "L12.attn.q" -> "L*.attn.q"; other names unchanged.
std::string fold_layers(const std::string& cls);

}  // namespace strata
