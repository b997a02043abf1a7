// strata-bench's measurement: training steps of a Job on random weights of a shape and random tokens,
// timed. The tool reads its flags into a BenchQuestion and prints the BenchResult.
#pragma once
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/hf_config.h"
#include "model/run/job.h"

namespace strata {

// The command line as read (unset: not given).
struct BenchQuestion {
  std::string model;           // a checkpoint directory whose config.json gives the shape ("": `shape`)
  std::string shape = "tiny";  // a built-in shape
  std::string config;          // a strata-train YAML whose plan runs as written, unplanned ("": none)
  std::vector<std::pair<std::string, std::string>> flags;  // the settings' flags given (apply_flags, Tool::bench)
  std::optional<long long> seq, batch, steps, warmup, lora_rank, pack;  // range-checked, the error naming the flag
  std::optional<double> peak_tflops;                                    // the device's, for MFU
  std::string mode = "full";                                            // full|frozen|lora
  std::optional<std::string> plan;                                      // a preset (neither it nor config: keep)
  std::string backend = "auto";
  bool loss_recompute = false;  // the LM head's backward recomputes the logits
  bool eager_update = false;    // host-tier state updated right after backward
};

struct BenchHooks {
  std::FILE* info = nullptr;                         // the setup line after the first step (null: none)
  std::function<void()> before_timed_steps;          // after the warmup (not called without timed steps)
  std::function<void(int timed_steps)> after_steps;  // the last step done, the run still built
};

struct BenchResult {
  // What ran.
  io::LlamaConfig shape;
  int seq = 0, batch = 0, pack = 1, steps = 0;
  int grad_accum = 1;      // micro-batches a step (--grad-accum, gradient_accumulation_steps), each of `batch` rows
  std::string mode, plan;  // plan: the preset's name, or "config:PATH (preset)"
  std::string backend, device;
  ModelOptions options;  // the model's: paging, the LM head's backward, MLP tiles, the state's precision
  int64_t padded_vocab = 0;
  float max_grad_norm = 0;
  std::string state_offloading;  // the plan's persistent-state placement
  size_t params = 0, trainable = 0;
  // What it measured.
  double step_s = 0;  // the median timed step
  double tokens_per_s = 0, mfu = 0;
  size_t peak_arena_bytes = 0, peak_host_bytes = 0, peak_disk_bytes = 0, device_used_bytes = 0;
  size_t offloaded_bytes_per_step = 0, state_host_bytes = 0, state_disk_bytes = 0;
  bool state_host_pinned = false;
  float loss = 0;  // the last step's
};

// ConfigError naming the flag or the YAML key for bad settings; whatever Job throws.
BenchResult run_bench(const BenchQuestion& q, const Platform& platform, const BenchHooks& hooks = {});

}  // namespace strata
