// strata-train's settings: defaults, then a YAML file (axolotl-style keys), then the command
// line. Unknown keys and bad values are ConfigErrors naming the file and the key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/names.h"
#include "engine/plan.h"
#include "model/data/datasets.h"
#include "model/llama/llama.h"
#include "model/train/lr_schedule.h"

namespace strata {

// Where a setting came from, for its error message and the ConfigError's fields: a YAML key
// ("run.yaml: weight_decay"; file "run.yaml", field "weight_decay") or a flag ("--weight-decay";
// file "command line", field "weight-decay").
struct Origin {
  std::string where, file, field;
  static Origin yaml(const std::string& path, const std::string& key) { return {path + ": " + key, path, key}; }
  static Origin flag(const std::string& name) { return {"--" + name, "command line", name}; }
};

struct TrainConfig {
  std::string model_dir;
  std::string data_path;
  std::vector<DatasetSpec> datasets;  // text/jsonl datasets, tokenised here (instead of data_path)
  std::string tokenizer_dir;          // "" = model_dir
  bool train_on_inputs = false;       // false: prompt tokens are masked out of the loss (axolotl's default)
  bool drop_excess = false;           // excess_length_strategy: drop (else truncate) examples over seq
  bool sample_packing = false;        // datasets: whole examples packed into each row, attention per example
  bool pad_to_sequence_len = false;   // datasets: every batch sequence_len long, not sized to its longest row
  std::string backend = "cpu";
  int seq = 128;
  int batch = 1;
  int steps = 10;
  float lr = 1e-3f;
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f;
  float max_grad_norm = 1.0f;
  int warmup_steps = 0;
  bool freeze_base = false;  // frozen-base training: only norms... or adapters train
  LoraConfig lora;
  Plan plan = Plan::keep_everything();
  size_t device_budget_bytes = 0;  // arena reservation; 0 = auto (cuda: free memory - 2 GiB; cpu: 16 GiB)
  size_t memory_budget_bytes = 0;  // >0: the budget planner chooses `plan` to fit it (strata-train --budget)
  size_t host_budget_bytes = 0;    // the planner's host-tier budget (host_memory_budget; 0 = no host tier)
  size_t disk_budget_bytes = 0;    // the planner's disk-tier budget (disk_memory_budget; 0 = no disk tier)
  int loss_chunk_tokens = 512;
  // grad_reduce_dtype (OptimizerOptions::reduce_dtype): what data-parallel ranks sum fp32 gradients
  // in; where it was set (empty `where`: the default). With gradients: bf16 the sums are bf16 anyway.
  DType grad_reduce = DType::f32;
  Origin grad_reduce_origin;
  // zero_stage (ModelOptions::zero, model/llama/zero.h): 1 shards the optimizer state over the data-parallel
  // ranks, 2 the gradients too, 3 the layers' weights too (gathered per layer); 0 (the default) does not.
  int zero_stage = 0;
  // sequence_parallel (model/llama/seq_parallel.h): groups of N ranks share each row, each holding sequence_len / N of
  // its tokens, with all-to-alls around attention; 1 (the default): off. N must divide the ranks (--gpus).
  int sequence_parallel = 1;
  // Whether the YAML or a flag gave them: with a budget and several GPUs the planner chooses the others
  // (model/plan/layout.h).
  bool zero_stage_given = false, sequence_parallel_given = false;
  // plan_time_limit: the budget planner's search stops after this many seconds with the best plan found (0: none)
  float plan_time_limit_s = 60;
  int pad_vocab_multiple = 64;  // ModelOptions::pad_vocab_multiple: vocabulary rows padded in memory (1: none)
  uint64_t seed = 0;
  std::string offload_dir;  // disk tier directory ("" = $TMPDIR or /tmp)
  // The layers' weight matrices, frozen or trainable, paged from host: plan.layer_weights (layer_weights: page,
  // or layer_offloading: true), read as plan.pages_layer_weights().
  StateRecipe recipe;      // master_weights, optimizer_state, gradients (engine/state_recipe.h)
  bool fp8 = false;        // the projections' GEMMs in FP8 (ModelOptions::fp8)
  std::string output_dir;  // where the trained model / adapter is saved (empty: not saved)
  // The loop (model/run/train_loop.h). `steps` counts when given (steps_given), else num_epochs does.
  bool steps_given = false;                          // max_steps / --steps was set
  float num_epochs = 0;                              // passes over the training rows; 0: not given
  int grad_accum = 1;                                // gradient_accumulation_steps: micro-batches a step
  LrScheduler lr_scheduler = LrScheduler::constant;  // after the warmup
  float warmup_ratio = 0;                            // warmup as a fraction of the steps (warmup_steps wins)
  float val_set_size = 0;                            // held-out rows: a fraction below 1, else a count
  int eval_steps = 0;                                // held-out loss every N steps (and at the end); 0: at the end
  int logging_steps = 1;                             // a progress line (and a metrics line) every N steps
  std::string metrics_file;                          // JSON lines; "" = output_dir/metrics.jsonl when saving
  int save_steps = 0;                                // a checkpoint every N steps; 0: none (but on a signal)
  int save_total_limit = 0;                          // checkpoints kept; 0: all
  std::string resume_from_checkpoint;                // a checkpoint directory, "auto" (newest in output_dir) or ""
  std::string config_file;                           // the YAML file applied last (named by later errors)
  // Not a setting: the batch lengths the datasets' rows need (model/data/row_data.h, rows sized to the data),
  // ascending; the last is what the forecast, the arena and the planner size for. Empty: every batch is seq long.
  std::vector<int> batch_lengths;
};

// The longest batch a run of `c` takes: batch_lengths' last, else seq.
int longest_batch_len(const TrainConfig& c);

// The dataset settings of `c`, as build_dataset_rows reads them.
DatasetOptions dataset_options(const TrainConfig& c);

// "20GiB", "512MiB", "1e9", "4096" -> bytes. ConfigError naming `where` on a bad value.
size_t parse_bytes(const std::string& s, const std::string& where);

// The rules a setting's value must meet, the same for a YAML key and its flag. A value that
// breaks them is a ConfigError naming the origin, the rule and the value; nothing is truncated
// or clamped, and NaN or an infinity never passes.
enum class NumberRule {
  positive,      // (0, inf): learning_rate, adam_epsilon, lora_alpha
  non_negative,  // [0, inf): weight_decay, max_grad_norm (0 = no clipping)
  unit_open,     // [0, 1): adam_beta1, adam_beta2
};
float check_number(double v, NumberRule rule, const Origin& o);
// An integer in [lo, 2^31 - 1] (seq, batch, steps, ...): 4294967312 is refused, not read as 16.
int check_int(long long v, int lo, const Origin& o);
// pad_vocab_multiple: an integer in [1, 65536] (1: no padding); ConfigError naming `o` otherwise.
int check_pad_vocab(long long v, const Origin& o);
// mlp_tiles: "auto" -> 0, or a whole number of tiles >= 1; ConfigError naming `o` otherwise.
int parse_mlp_tiles(const std::string& s, const Origin& o);
// grad_reduce_dtype: "fp32" -> f32, "bf16" -> bf16; ConfigError naming `o` otherwise.
inline constexpr EnumName<DType> kGradReduceNames[] = {{DType::f32, "fp32"}, {DType::bf16, "bf16"}};
DType parse_grad_reduce(const std::string& s, const Origin& o);
// gradients: bf16 sums the bf16 gradients over the ranks in bf16 as they are; an explicit
// grad_reduce_dtype: fp32 beside it asks for what does not exist: ConfigError naming where each was
// set. Applied after the YAML file and after the command line.
void check_grad_reduce(const TrainConfig& c);
// The dtype data-parallel ranks sum gradients in: bf16 with bf16 gradients, else grad_reduce.
DType effective_grad_reduce(const TrainConfig& c);
// zero_stage: 0, 1, 2 or 3; ConfigError naming `o` otherwise.
int parse_zero_stage(long long v, const Origin& o);
// lr_scheduler: "constant", "linear" or "cosine"; ConfigError naming `o` otherwise.
LrScheduler parse_lr_scheduler(const std::string& s, const Origin& o);
// resume_from_checkpoint: "true" or "auto" -> "auto" (the newest checkpoint in output_dir), "false"
// or "" -> "" (none), anything else a checkpoint directory.
std::string parse_resume(const std::string& s);
// lora_target_modules: non-empty, each one of q_proj, k_proj, v_proj, o_proj, gate_proj,
// up_proj, down_proj, none twice.
void check_lora_targets(const std::vector<std::string>& modules, const Origin& o);

// Before the first step of a run that will save into `dir`: the directory exists or can be
// created (its nearest existing ancestor is a directory), a file can be created in it (a probe
// file, removed again), its file system has `bytes` free, and none of `files` (the names the
// save will write) is there as something other than a regular file. IoError naming `dir`
// otherwise. Creates nothing that stays.
void check_save_dir(const std::string& dir, size_t bytes, const std::vector<std::string>& files = {});

// Applies the keys of a YAML file on top of `cfg`. Every value is checked against the rules above
// as it is read: errors are ConfigErrors naming `path` and the key (IoError for a file that
// cannot be read, a directory, or one over 16 MiB).
void apply_yaml(TrainConfig& cfg, const std::string& path);
// Same, from YAML text (tests); `path` is used in error messages.
void apply_yaml_text(TrainConfig& cfg, const std::string& text, const std::string& path);

}  // namespace strata
