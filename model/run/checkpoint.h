// Training checkpoints: output_dir/checkpoint-<step>/ holds
//   model.safetensors + config.json (full or frozen-base training, Hugging Face layout), or
//   adapter_model.safetensors + adapter_config.json (LoRA, PEFT's layout);
//   the base model's tokenizer files, where it has them;
//   optimizer.safetensors (or, with ZeRO-1/2 over N ranks, optimizer.rank-<r>-of-<N>.safetensors, each
//     holding the parameters rank r owns): each trainable parameter's exact state as it lives in memory, whatever
//     its tier: `<name>` (the compute weights), `<name>.master` (an fp32 master or a split
//     master's i16 low half, where the weights are not the master), `<name>.m`, `<name>.v` (f32,
//     bf16 or 8-bit codes) and, for 8-bit moments, `<name>.m_scale`, `<name>.v_scale`;
//   train_config.json: the resolved config, and the fields a resume must match;
//   trainer_state.json (written last): the step, the data position, the RNG states.
// The directory is written under a hidden temp name (.checkpoint-<step>.tmp.<pid>) and renamed
// only when every file in it is complete, so an interrupted save never leaves a partial
// checkpoint-<step>; the next save removes such a temp once its writer is gone.
//
// ZeRO-1 over several ranks (the model's options().zero.sharded()): every rank calls save_checkpoint
// and load_checkpoint together, with a RankSum. Each rank writes its shard into rank 0's temp directory;
// once every shard is complete rank 0 writes the rest (the fp32 weights of parameters other ranks own are
// joined from its bf16 weights and the low halves in their shards) and publishes it. After each phase
// the ranks agree through the RankSum: a failure on any rank makes every rank throw an IoError, and
// rank 0 removes the temp. The output directory must be one file system every rank sees (several
// nodes: a shared one). ZeRO-2 saves and loads the same shards as ZeRO-1 (the same owners; gradients are
// never saved).
//
// Resharding: any checkpoint resumes on any number of ranks at any stage. Owners are whole parameters
// (model/llama/zero.h) and a tensor's name depends on its parameter alone, so a shard holds complete
// per-parameter state: a load finds each parameter's state in the shard of its owner among the saving run's
// zero_shards ranks (zero_owner over that count; optimizer.safetensors when unsharded) and restores it bit
// for bit, whoever owns it now; nothing is recomputed. Each rank maps only the files its parameters are in,
// and checks each holds its own rank's parameters' state only.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/data/row_data.h"
#include "model/llama/llama.h"
#include "model/run/train_config.h"

namespace strata {

struct CheckpointState {
  int step = 0;  // optimizer steps done (AdamW's t)
  DataPosition data;
  uint64_t trainer_rng = 0;  // the loop's generator (model/run/train_loop.h)
  int total_steps = 0;
  float loss = 0;  // the last step's
};

struct CheckpointWrite {
  std::string base_model_dir;  // tokenizer files come from here; the adapter config names it
  std::string tokenizer_dir;   // where they come from instead (the config's `tokenizer`), if not ""
  std::string config_json;     // train_config.json (checkpoint_config_json)
  std::string chat_template;   // the chat template the run trains with ("" = none): saved with the tokenizer
  // Tests: called after each file of the checkpoint is complete (its name), before the next.
  std::function<void(const std::string&)> after_file;
};

// A sum of one value over every rank of a run, which every rank reaches (Trainer::sum_over_ranks).
using RankSum = std::function<float(float)>;

// The resolved config as train_config.json; `data_rows` is the row count of the data file;
// `zero_shards` the ranks ZeRO-1 or ZeRO-2 shards the optimizer state over (0 or 1: unsharded; recorded in
// must_match, so that a strata from before resharding refuses another count, but not compared on load: it
// says where the state is); `data_parallel_ranks` the ranks that draw each micro-step's rows together
// (recorded under config: a resume may change micro_batch_size where micro_batch_size x data-parallel ranks
// stays the same, the same global batch on another number of ranks).
std::string checkpoint_config_json(const TrainConfig& cfg, const io::LlamaConfig& model, long data_rows,
                                   int zero_shards = 0, int data_parallel_ranks = 1);

// Writes output_dir/checkpoint-<st.step>/ (replacing one of that step); returns its path.
// Reads the optimizer state from the model (call between steps). IoError naming the file.
// Sharded (ZeRO-1): every rank calls it with `sum`; without one, UnsupportedError.
std::string save_checkpoint(const std::string& output_dir, Backend& be, const LlamaModel& model,
                            const CheckpointState& st, const CheckpointWrite& w, const RankSum& sum = {});

// The complete checkpoints in output_dir (checkpoint-<n> directories), by step, oldest first.
struct CheckpointEntry {
  int step;
  std::string path;
};
std::vector<CheckpointEntry> list_checkpoints(const std::string& output_dir);
// Every entry named checkpoint-<n> in output_dir, whatever it is (files and links too), by step.
std::vector<CheckpointEntry> list_checkpoint_names(const std::string& output_dir);
// Removes all but the newest `keep` (0 keeps all) of those strata wrote; returns the paths removed.
std::vector<std::string> prune_checkpoints(const std::string& output_dir, int keep);
// A directory holding a trainer_state.json of format strata-checkpoint (not a symbolic link).
bool is_strata_checkpoint(const std::string& dir) noexcept;
// IoError naming `final_dir` when something strata did not write (a file, a link, a foreign directory)
// holds a checkpoint's path: strata never deletes or replaces it.
void check_checkpoint_path_free(const std::string& final_dir);
// Crash recovery: a complete temp directory of a save whose process is gone (".checkpoint-<n>.tmp.<pid>",
// or ".checkpoint-<n>.old.tmp.<pid>", the new copy preferred) becomes checkpoint-<n> where that name is
// free. resolve_checkpoint("auto") and every save call it first. Returns how many it restored.
size_t restore_killed_checkpoints(const std::string& output_dir) noexcept;
// Restores as above, then removes the temp directories of saves whose process is gone: partial ones, and
// complete ones only where checkpoint-<n> is complete too (never the last complete copy). Returns how many.
size_t remove_stale_checkpoint_temps(const std::string& output_dir) noexcept;

// resume_from_checkpoint: "auto" is the newest checkpoint in output_dir, anything else a directory
// that must hold trainer_state.json. ConfigError naming the key when there is none.
std::string resolve_checkpoint(const std::string& spec, const std::string& output_dir);

// trainer_state.json of checkpoint `dir`, every counter range-checked before conversion (global_step and
// total_steps 0..2^31-1, data.epoch 0..2^31-1, data.index 0..9e15, the RNG states 64-bit) and global_step
// equal to the N of a directory named checkpoint-N. FormatError naming the file and the field.
CheckpointState read_trainer_state(const std::string& dir);
// The data position against the step: epoch x train_rows + index rows drawn must be step x rows_per_step
// (every step draws the same rows), and index at most train_rows. FormatError naming the file and field.
void check_data_position(const std::string& dir, const CheckpointState& st, long train_rows, long rows_per_step);

// Loads a checkpoint into a model built as the run that saved it (its base weights loaded), on any
// number of ranks and ZeRO stage: checks train_config.json against `config_json` (a field that must
// match and differs is a FormatError naming the file and the field), then restores every trainable
// parameter's weights and optimizer state bit for bit from whichever file holds it (FormatError naming
// the file and the tensor on a missing tensor, another dtype or shape, or a tensor that is not that
// file's rank's; naming the file and zero_shards for a missing shard). Returns trainer_state.json's state.
// Sharded now: each rank restores the state of the parameters it owns and the weights of the others';
// with `sum`, a failure on any rank makes every rank throw. `check_state` (e.g. check_data_position) sees
// trainer_state.json once train_config.json matched, before anything is copied in.
CheckpointState load_checkpoint(const std::string& dir, Backend& be, LlamaModel& model, const std::string& config_json,
                                const RankSum& sum = {},
                                const std::function<void(const CheckpointState&)>& check_state = {});

// Copies tokenizer.json, tokenizer_config.json, special_tokens_map.json and tokenizer.model from
// `from` into `to` where they exist (atomically each). Returns how many were copied.
int copy_tokenizer_files(const std::string& from, const std::string& to, const std::string& chat_template = "");
// The template of the run's first chat_template dataset, as load_chat_format resolves it; else, with a `chat`
// dataset, strata's chat format as a template (chat_jinja); else "".
std::string trained_chat_template(const TrainConfig& c, const std::string& tokenizer_dir);

}  // namespace strata
