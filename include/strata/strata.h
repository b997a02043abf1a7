// strata's public API: the one header a program that embeds strata includes. It names no internal
// type: every struct here is plain data owned by this header, and Device and Session are handles
// (pimpl), so the engine can change behind them. docs/API.md walks through the lifecycle.
//
//   auto dev = strata::make_backend("cpu");            // "cpu", "cuda", "sim" or "auto"
//   strata::SessionConfig cfg;                        // the fields of strata-train's YAML
//   strata::apply_yaml(cfg, "run.yaml");              // optional: a YAML file on top
//   strata::Session s(dev, cfg);                      // loads cfg.model_dir, opens cfg.data_path
//   s.on_step([](const strata::StepMetrics& m) { ... });
//   for (int i = 0; i < cfg.steps; ++i) s.step();
//   s.save("out");
//
// Errors are the typed exceptions of strata/error.h (ConfigError, FormatError, IoError,
// OutOfMemoryError, UnsupportedError, all strata::Error).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/error.h"

namespace strata {

// The library's version, "MAJOR.MINOR.PATCH" (the CMake package's version too).
const char* version();

// ---- Backends ---------------------------------------------------------------------------------

struct DeviceOptions {
  // The device arena's reservation in bytes; 0 = the backend's default (cuda: the GPU's free memory
  // less headroom; cpu: 16 GiB of address space, touched only as used; sim: unbounded).
  size_t memory_bytes = 0;
  // sim only: the device profile the cost model times ops with (a built-in name such as
  // "h100_80gb" or a profile JSON file), and whose allocations it mirrors ("cuda" or "cpu").
  std::string sim_profile = "h100_80gb";
  std::string sim_mirror = "cuda";
};

// A backend and its device arena. Shared by the sessions built on it; it outlives them.
class Device {
 public:
  struct Impl;
  explicit Device(std::unique_ptr<Impl> impl);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& backend() const;  // "cpu", "cuda" or "sim" ("auto" resolved)
  std::string description() const;     // the device's name (GPU model, "cpu", the sim's profile)
  size_t arena_budget_bytes() const;   // the arena's reservation
  size_t arena_peak_bytes() const;     // its in-use peak so far
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// "cpu", "cuda", "sim" or "auto" (cuda where this build has it and a GPU is present, else cpu).
// ConfigError for an unknown name or "cuda" in a build without the cuda backend.
std::shared_ptr<Device> make_backend(const std::string& name, const DeviceOptions& opt = {});
// The backends this build has: always "cpu" and "sim", "cuda" where it was built with nvcc.
std::vector<std::string> available_backends();

// ---- Models -----------------------------------------------------------------------------------

// The shape of a Llama (the fields of a Hugging Face config.json that strata reads).
struct ModelShape {
  int layers = 2, hidden = 64, heads = 4, kv_heads = 2, intermediate = 128, vocab = 256;
  int max_positions = 2048;
  bool tied_embeddings = false;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  uint64_t parameters = 0;  // filled by the readers below (ignored on input)
};

// The shape of a checkpoint directory, a config.json, or a built-in name ("Llama-3.2-1B", ...).
// ConfigError listing the known names for an unknown one; FormatError/IoError for a bad file.
ModelShape model_shape(const std::string& spec);
// The built-in shape names (forecasts and plans without a checkpoint).
std::vector<std::string> builtin_models();

// Writes a Hugging Face-format Llama checkpoint of `shape` with deterministic random weights
// (config.json, model.safetensors, fp32) into `dir` (created), and `tokens` tokens of a learnable
// synthetic stream into dir/tokens.bin — what strata-make-tiny writes. Returns the token file's path.
std::string write_tiny_checkpoint(const std::string& dir, const ModelShape& shape = {}, uint64_t seed = 0,
                                  long tokens = 200000);

// ---- Training configuration (strata-train's YAML keys) ---------------------------------------

// One row of a memory plan: saved-slot classes matching `pattern` (globs with * and ?, such as
// "L*.mlp.act") get `decision`: "keep", "recompute", "host" or "disk". First match wins.
struct PlanRule {
  std::string pattern, decision;
};

// Where each saved activation and each piece of persistent state lives during a step
// (docs/PLANNER.md). The static makers are the YAML presets.
struct MemoryPlan {
  std::vector<PlanRule> overrides;         // the explicit table (YAML `plan:`), checked first
  std::vector<PlanRule> rules;             // the preset's rules
  std::string preset = "keep-everything";  // how the plan was made, for printing
  int checkpoint_every = 0;                // >0: "L<n>.input" is kept when n % every == 0
  bool sync_transfers = false;             // `activation_offloading: legacy`
  std::vector<PlanRule> state;             // persistent state: "L7.adam.m" -> keep|host
  std::string state_preset = "none";
  // The layers' weight matrices (frozen or trainable): "keep" (on the device) or "page" (in pinned host
  // memory, paged in layer by layer; YAML layer_weights). The `layer_offloading` fields below are its
  // older spelling: true there is "page" here (either one pages the layers).
  std::string layer_weights = "keep";
  // Layer-spread state (YAML state_offloading_layers: {level, layers}; the tools' --state-offloading-layers
  // LEVEL:K): the classes of state_offloading level `state_layers_level` also go to the host in `state_layers`
  // of the model's layers, spread evenly, checked before `state`. "none" and 0: off.
  std::string state_layers_level = "none";
  int state_layers = 0;

  static MemoryPlan keep_everything();
  static MemoryPlan gradient_checkpointing(int every = 1);
  static MemoryPlan selective_recompute();
  static MemoryPlan activation_offloading(const std::string& tier = "host");  // "host", "disk", "legacy"
  static MemoryPlan hidden_states();
  // state_offloading: "none", "optimizer", "master", "all" (ConfigError otherwise).
  MemoryPlan& set_state_offloading(const std::string& level);
  // state_offloading_layers: `level` "optimizer", "master" or "all" in `layers` layers (0: off, any level);
  // ConfigError naming the expected values otherwise. More layers than the model has is refused when the
  // session is built.
  MemoryPlan& set_state_offloading_layers(const std::string& level, int layers);
};

// strata-train's settings: every key of its settings table (docs/USER_GUIDE.md), through set/get
// by YAML key; the common ones also as the typed fields below.
struct SessionConfig {
  std::string model_dir;        // base_model: a Hugging Face checkpoint directory
  std::string data_path;        // data: a token file (docs/FORMATS.md); empty: only step(batch) is used
  std::string backend = "cpu";  // cpu | cuda | sim | auto (when the Session makes its own Device)
  int seq = 128;
  int batch = 1;
  int steps = 10;  // read by run()
  float lr = 1e-3f;
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, adam_eps = 1e-8f;
  float max_grad_norm = 1.0f;  // <= 0: no clipping
  int warmup_steps = 0;
  bool freeze_base = false;  // only the norms train (or the adapters, with LoRA)
  int lora_rank = 0;         // lora_r; 0: no adapters
  float lora_alpha = 16.0f;
  std::vector<std::string> lora_target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  MemoryPlan plan;
  size_t device_budget_bytes = 0;  // device_memory: the arena (when the Session makes its own Device)
  size_t memory_budget_bytes = 0;  // memory_budget: >0, the budget planner chooses `plan` to fit it
  size_t host_budget_bytes = 0;    // host_memory_budget (planner; 0 = no host tier)
  size_t disk_budget_bytes = 0;    // disk_memory_budget (planner; 0 = no disk tier)
  int loss_chunk_tokens = 512;
  int pad_vocab_multiple = 64;  // vocabulary rows padded in memory to a multiple of this (1: none); never saved
  uint64_t seed = 0;
  std::string offload_dir;               // disk tier directory ("" = $TMPDIR or /tmp)
  bool layer_offloading = false;         // true: the same as plan.layer_weights = "page" (kept for older code)
  std::string master_weights = "fp32";   // fp32 | none
  std::string optimizer_state = "fp32";  // fp32 | bf16 | 8bit
  std::string gradients = "fp32";        // fp32 | bf16: the trainable parameters' gradients
  std::string output_dir;                // save() without an argument writes here

  // Any setting by its YAML key (or alias), its value as YAML text: set("gradient_accumulation_steps",
  // "4"), set("gradient_checkpointing", "{every: 2}"); get("zero_stage") -> "0" ("" = not set). The
  // typed fields above are the same settings (set("seq", "256") sets `seq`). ConfigError naming the
  // key for a bad value, or an unknown key (with the nearest known one).
  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key) const;
  static std::vector<std::string> keys();  // every setting's YAML key, in the table's order
  // The settings the typed fields do not hold, (key, YAML value), kept by set() and apply_yaml.
  std::vector<std::pair<std::string, std::string>> more;
};

// Applies a strata-train YAML file (or text) on top of `cfg`, with strata-train's checks: a bad
// key or value is a ConfigError naming the file and the key.
void apply_yaml(SessionConfig& cfg, const std::string& path);
void apply_yaml_text(SessionConfig& cfg, const std::string& text, const std::string& path_for_errors = "yaml");
// "20GiB", "512MiB", "1e9" -> bytes (ConfigError naming `where` otherwise).
size_t parse_bytes(const std::string& s, const std::string& where);

// ---- Training --------------------------------------------------------------------------------

// One step's statistics (strata-train --json prints the same fields).
struct StepMetrics {
  int step = 0;  // 1-based
  float loss = 0.0f;
  float grad_norm = 0.0f;
  float lr = 0.0f;
  double seconds = 0.0;  // the call's wall time (docs/API.md: a step may return before its update ends)
  size_t tokens = 0;
  double tokens_per_s = 0.0;
  size_t peak_device_bytes = 0;  // arena peak during this step
  size_t saved_bytes = 0;        // saved activations resident at the end of forward
  size_t peak_host_bytes = 0;    // host tier peak so far
  size_t peak_disk_bytes = 0;    // disk tier peak so far
  long recomputed_nodes = 0;
  size_t paged_bytes_uploaded = 0;
  size_t state_host_bytes = 0;
  size_t state_bytes_moved = 0;
  bool diverged() const;  // loss or grad norm not finite
};

// A batch of the caller's own tokens: `batch` rows of `seq` inputs and their targets (< 0: ignored).
struct TokenBatch {
  int batch = 0, seq = 0;
  std::vector<int32_t> inputs, targets;
};

// A training run, built as strata-train builds one from the same settings: the model loaded from
// config.model_dir onto a Device, its optimizer state, the memory plan (planned to memory_budget_bytes
// when given), and with data_path (or datasets) the loop: gradient accumulation, the learning-rate
// schedule, held-out evaluation, checkpoints every save_steps and resume_from_checkpoint. Under
// torchrun or srun (RANK, WORLD_SIZE, ...) each process's Session is one rank of the job.
class Session {
 public:
  // The Device is shared: several sessions may use one in turn. Throws ConfigError, FormatError,
  // IoError or OutOfMemoryError; with memory_budget_bytes and no plan that fits, ConfigError
  // naming the smallest budget that would.
  Session(std::shared_ptr<Device> device, const SessionConfig& config);
  // Makes its own Device from config.backend and config.device_budget_bytes.
  explicit Session(const SessionConfig& config);
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // One step of the loop: the next micro-batches of the data, the scheduled learning rate, evaluation
  // and checkpoints when due (ConfigError without data, or once the run's steps are done).
  StepMetrics step();
  // One optimizer step on the caller's batch.
  StepMetrics step(const TokenBatch& batch);
  // Mean loss on a batch without changing the model.
  float evaluate(const TokenBatch& batch);
  // The held-out loss (val_set_size's rows), tokens weighted.
  float evaluate();
  // The loop to its end (or `steps` more steps), stopping early at a diverged step; the last step's metrics.
  StepMetrics run(int steps = -1);
  // The resolved plan, one line per slot class, as strata-train prints it.
  std::string plan_table() const;

  // Called after every step with its metrics (one callback; a new one replaces it, {} removes it).
  void on_step(std::function<void(const StepMetrics&)> callback);

  // The trained model (config.json + model.safetensors) or, with LoRA, the adapter in PEFT's layout
  // (adapter_config.json + adapter_model.safetensors), atomically. `dir` empty: config.output_dir.
  void save(const std::string& dir = "");

  int steps_done() const;
  const SessionConfig& config() const;  // after the planner, when memory_budget_bytes chose the plan
  ModelShape model() const;
  size_t parameters() const;
  size_t trainable_parameters() const;
  Device& device();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- Forecasts and the budget planner (no GPU: the sim backend) ------------------------------

// What to forecast: a model (checkpoint directory, config.json or built-in name), a batch shape, a
// training mode and a plan, timed with a device profile.
struct ForecastSpec {
  std::string model = "Llama-3.2-1B";
  int seq = 2048, batch = 1;
  std::string mode = "full";  // full | frozen | lora
  int lora_rank = 16;
  float lora_alpha = 16.0f;
  std::vector<std::string> lora_target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  int loss_chunk_tokens = 512;
  int pad_vocab_multiple = 64;  // as SessionConfig's: the forecast runs the padded shape
  MemoryPlan plan;
  std::string profile = "h100_80gb";  // built-in name or profile JSON file
  std::string mirror = "cuda";        // the backend whose allocations the sim reproduces: cuda | cpu
  size_t budget_bytes = 0;            // arena budget; 0 = unbounded
  bool layer_offloading = false;      // true: the same as plan.layer_weights = "page" (kept for older code)
  std::string master_weights = "fp32", optimizer_state = "fp32", gradients = "fp32";
  int gpus = 1;  // data-parallel ranks (strata-plan --gpus); 1 with sequence_parallel N: N. The forecast is rank 0's

  // Any training setting by its YAML key, as SessionConfig's set/get: set("zero_stage", "1"),
  // set("max_grad_norm", "0"), set("mlp_tiles", "4"). The typed fields above are the same settings
  // (set("sequence_len", "4096") sets `seq`; lora_r and freeze_base set `mode`). ConfigError naming
  // the key for a bad value or an unknown key.
  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key) const;
  // The settings the typed fields do not hold, (key, YAML value), kept by set().
  std::vector<std::pair<std::string, std::string>> more;
};

struct ForecastItem {
  std::string name;
  size_t bytes = 0;
  int count = 0;
};

// One row of a resolved plan: a slot class with layers folded ("L*.attn.q").
struct PlanTableRow {
  std::string cls, decision;
  size_t bytes = 0;
  int count = 0;
};

// One training step, forecast by running the real engine on the sim backend.
struct ForecastReport {
  bool fits = true;
  std::string oom;  // !fits: what could not be allocated
  size_t peak_bytes = 0, high_water_bytes = 0, persistent_bytes = 0, saved_bytes = 0;
  std::string peak_phase;               // forward, backward or optimizer
  std::vector<ForecastItem> breakdown;  // at the peak; sums to peak_bytes
  std::vector<ForecastItem> activations;
  size_t peak_host_bytes = 0, peak_disk_bytes = 0;
  double step_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0, recompute_s = 0;
  double tokens_per_s = 0;
  size_t parameters = 0, trainable = 0;
  std::vector<PlanTableRow> plan_rows;
  std::string device;  // the sim's description
};

ForecastReport forecast(const ForecastSpec& spec);

struct Budgets {
  size_t device = 0;  // required
  size_t host = 0;    // 0: no host tier
  size_t disk = 0;    // 0: no disk tier
};

struct PlanReport {
  bool found = false;
  MemoryPlan plan;                // found: the fastest plan that fits; else the lowest-memory one
  bool layer_offloading = false;  // plan.layer_weights == "page" (read by plan_yaml too: true pages)
  std::string label;
  Budgets budgets;              // what it was planned for
  ForecastReport forecast;      // of that plan
  size_t minimum_bytes = 0;     // !found: the smallest device budget a plan fits
  size_t persistent_bytes = 0;  // weights, gradients, optimizer state: no plan lowers these
  std::string short_tier;       // !found: "host" or "disk" when a larger tier budget would do
  size_t short_tier_needs = 0;
  int sim_runs = 0;
};

// The budget planner (docs/PLANNER.md): the fastest plan whose step fits the budgets.
PlanReport plan_for_budget(const ForecastSpec& spec, const Budgets& budgets);
// A YAML file strata-train --config (and apply_yaml) accepts: the spec's shape and mode, the
// report's device budget and its plan as explicit rules.
std::string plan_yaml(const ForecastSpec& spec, const PlanReport& report);

// 1536 -> "1.50 KiB" (the tools' byte format).
std::string format_bytes(size_t bytes);

}  // namespace strata
