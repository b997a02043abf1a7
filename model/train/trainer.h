// One training step on the tape: upload the batch, record the graph, apply the memory plan,
// forward, backward, clip, AdamW. The tape is cleared after every step, also when it throws.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/plan.h"
#include "model/llama/batch.h"
#include "model/llama/llama.h"
#include "model/llama/seq_parallel.h"
#include "model/train/optimizer.h"

namespace strata {

struct TrainOptions {
  AdamWParams adam;
  float max_grad_norm = 1.0f;  // <= 0 disables clipping
  int warmup_steps = 0;        // linear warmup of the learning rate
  Plan plan = Plan::keep_everything();
  TierOptions tiers;           // host/disk tiers: offload directory, in-flight and prefetch bounds
  OptimizerOptions optimizer;  // streaming of host-tier state (ModelOptions::state_plan)
  // Data parallel: the ranks' communicator (null or one rank: none). Every rank builds the same
  // model and calls step() with its own micro-batches; gradients are summed over the ranks before
  // the norm, so every rank clips and updates alike (model/train/optimizer.h).
  Communicator* comm = nullptr;
  // Sequence parallelism (model/llama/seq_parallel.h): the group of n ranks that share each row's tokens (null or one
  // rank: off). Every rank of a group is given the same whole rows (Batch of length T, a multiple of n) and keeps its
  // T/n consecutive tokens of each; the all-to-alls around attention run on this communicator. `comm` spans every
  // rank (the gradient all-reduce and the loss's sums) and holds the groups as consecutive ranks (world rank =
  // data-parallel rank * n + group rank); null: `seq_comm` itself (sequence parallel over the whole world).
  Communicator* seq_comm = nullptr;
  // The batch blocks' size in tokens (B * the longest batch length of the run's data), allocated once so that
  // batches of every length leave the arena as the forecast of any of them does; 0: each batch's own size.
  int64_t batch_tokens = 0;
  // Every step() waits for its update to finish and fills StepStats::part_s. Off (the default), a step whose state
  // is all on the device, on one rank, returns once its loss and gradient norm are read, while the update still runs
  // (the next step's graph is recorded meanwhile; StepStats::seconds then counts the previous step's update instead
  // of its own, the same in a run's steady state), and part_s stays zero; a step that synchronises anyway (state on
  // the host or disk, paged weights, several ranks, Backend::steps_may_overlap false) is timed as with it on.
  bool time_parts = false;
};

// A step's parts as the device ran them (Backend::time_mark at each boundary): setup (from a micro-batch's start
// to its first forward op: the batch's upload, recording the graph, preparing the tiers, which pins the host tier
// at the first step), forward, backward (with the updates that land during it), and the optimizer's step (with the
// gradient norm's download). Measured where TrainOptions::time_parts asks, or where a step synchronises anyway.
enum class StepPart : uint8_t { setup, forward, backward, optimizer };
inline constexpr int kStepParts = 4;
const char* step_part_name(StepPart p);  // "setup", "forward", ...

struct StepStats {
  int step = 0;
  float loss = 0.0f;
  float grad_norm = 0.0f;
  float lr = 0.0f;
  double seconds = 0.0;
  size_t tokens = 0;
  size_t peak_device_bytes = 0;  // arena peak during this step
  size_t saved_bytes = 0;        // saved slots resident at the end of forward
  size_t peak_host_bytes = 0;    // host tier (pinned pool) peak so far
  size_t peak_disk_bytes = 0;    // disk tier peak so far
  long recomputed_nodes = 0;
  size_t paged_bytes_uploaded = 0;  // layer weights uploaded by the weight pager this step
  long paged_uploads = 0;           // layer uploads this step
  size_t state_host_bytes = 0;      // persistent state on the host tier (the model's reservation + disk-tier staging)
  size_t state_disk_bytes = 0;      // persistent state on the disk tier (the model's state file)
  size_t state_bytes_moved = 0;     // host-tier state (gradients included) copied both ways this step
  std::array<double, kStepParts> part_s{};  // seconds in each StepPart (micro-batches summed)
};

// Checks a packed batch's positions (ConfigError naming the first bad index) and returns the
// (query, key) pairs its attention visits per head, AttnSegments::pairs; 0 for an unpacked batch.
double packed_pairs(const Batch& b);

// One row of the resolved plan: a slot class with layer numbers folded ("L*.attn.q").
struct PlanRow {
  std::string cls;
  std::string decision;  // "keep", "recompute", ... or "mixed" (e.g. every-N checkpointing)
  size_t bytes = 0;      // all instances together
  int count = 0;         // instances (layers)
};

class GradAccumulator;

class Trainer {
 public:
  Trainer(Backend& be, LlamaModel& model, TrainOptions opt);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Forward + backward only: parameter gradients are left in each Parameter::grad. Returns the loss.
  // With `logits`, also returns the [B*T, V] logits (small shapes only: evaluation and tests).
  // Sequence parallel: this rank's share: its tokens' mean loss and logits [B*T/n, V], and its tokens' gradient
  // terms (not summed over the ranks).
  float compute_gradients(const Batch& b, std::vector<float>* logits = nullptr);
  // A whole optimizer step (warmup as TrainOptions::warmup_steps says).
  StepStats step(const Batch& b);
  // One optimizer step at learning rate `lr` over one batch or several micro-batches (gradient
  // accumulation, model/train/grad_accum.h): each micro-batch's gradients are weighted by its share of
  // the step's loss tokens and summed, clipping sees the sum's norm, and the loss is the
  // token-weighted mean: one batch of all the rows, to float rounding.
  StepStats step(std::span<const Batch> micro, float lr);
  // Mean loss without gradients or optimizer state changes (sequence parallel: over every token of the rows; the
  // ranks of the group call it together).
  float evaluate(const Batch& b);

  // The plan resolved on this model's real slot classes for a batch shape (records, then clears).
  std::vector<PlanRow> plan_table(int B, int T);

  Tape& tape() { return tape_; }
  Optimizer& optimizer() { return optimizer_; }
  SlotStore& store() { return *store_; }
  int steps_done() const { return t_; }
  // Resuming from a checkpoint: AdamW's step counter (its bias correction) continues from `t`.
  void set_steps_done(int t) { t_ = t; }
  const TrainOptions& options() const { return opt_; }
  // Data parallel: this rank and the number of ranks (1 without a communicator), and a value summed
  // over the ranks (every rank must call it at the same point).
  int rank() const { return opt_.comm ? opt_.comm->rank() : 0; }
  int world() const { return opt_.comm ? opt_.comm->world() : 1; }
  float sum_over_ranks(float v);
  // Sequence parallel: the group's size (1: off) and this rank's place in it. The data-parallel ranks are the
  // groups, world / seq_parallel of them, each given its own rows.
  int seq_parallel() const { return opt_.seq_comm ? opt_.seq_comm->world() : 1; }
  int seq_rank() const { return opt_.seq_comm ? opt_.seq_comm->rank() : 0; }
  int dp_world() const { return world() / seq_parallel(); }
  int dp_rank() const { return rank() / seq_parallel(); }

 private:
  void check_seq_parallel();  // the groups, the heads (ConfigError / UnsupportedError)
  // Checks the batch and lays out its device blocks; the copies wait in uploads_ for send_uploads() (run() sends them
  // after recording the graph).
  void upload(const Batch& b);
  void send_uploads();
  long counted(const Batch& b) const;  // this rank's loss tokens in b (targets >= 0; its share under sp)
  // v summed over the ranks of `c` (null: comm).
  std::array<float, 2> all_reduce_host(const float (&v)[2], Communicator* c = nullptr);
  // One forward (and backward): the loss is queued for reading into *loss (Backend::download_f32_queued).
  void run(const Batch& b, bool with_backward, std::vector<float>* logits, float* loss);
  float run_now(const Batch& b, bool with_backward, std::vector<float>* logits);  // run() and read the loss
  void mark(StepPart p);  // inside step(): a time mark where part p begins

  Backend& be_;
  LlamaModel& model_;
  TrainOptions opt_;
  std::unique_ptr<SlotStore> store_;  // before tape_: the tape's destructor still uses it
  Optimizer optimizer_;               // before tape_ too: the tape holds its hooks
  Tape tape_;
  std::weak_ptr<WeightPager> pager_;  // the model's, if it pages; gone when the model is
  Buffer tokens_, targets_, pos_;
  Buffer rows_pos_;  // sequence parallel, packed rows: every token's position [B*T] (attention's segments)
  Tensor tok_, tgt_, posv_, rows_posv_;  // this batch's prefixes of the blocks above
  bool pos_packed_ = false;              // pos_ holds a packed batch's positions, not 0..T-1 a row
  int pos_len_ = 0;                      // pos_ holds 0..pos_len_-1 a row for pos_n_ tokens
  int64_t pos_n_ = 0;
  double pairs_ = 0;                                        // the uploaded batch's packed_pairs
  int rope_len_ = 0;                                        // its largest position + 1 (dynamic and longrope rope)
  std::vector<std::pair<Tensor, const int32_t*>> uploads_;  // upload()'s copies, until send_uploads()
  std::shared_ptr<const SeqSlice> slice_;                   // host arrays those copies read: sequence parallel's
  std::unique_ptr<int32_t[]> pos_host_;                     // and the rows' positions 0..T-1
  std::unique_ptr<GradAccumulator> accum_;                  // made at the first step of several micro-batches
  // Without clipping: the step's AdamW parameters and count, for the backward whose gradients the step applies
  // (the last micro-batch's): run() begins the optimizer's update in that backward
  // (Optimizer::begin_update_in_backward).
  std::optional<std::pair<AdamWParams, int>> update_in_backward_;
  int t_ = 0;
  StepStats last_;
  bool timing_ = false;               // inside step(): run() marks its phases
  std::vector<StepPart> part_marks_;  // the part each queued time mark begins
};

}  // namespace strata
