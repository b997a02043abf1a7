// strata-train's settings: defaults, then a YAML file (axolotl-style keys), then the command
// line. Unknown keys and bad values are ConfigErrors naming the file and the key.
#pragma once
#include <cstdint>
#include <string>

#include "engine/plan.h"
#include "model/llama.h"

namespace strata {

struct TrainConfig {
  std::string model_dir;
  std::string data_path;
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
  uint64_t seed = 0;
  std::string offload_dir;        // disk tier directory ("" = $TMPDIR or /tmp)
  bool layer_offloading = false;  // page the frozen layer weights from host (ModelOptions::page_frozen_layers)
  std::string output_dir;         // where the trained model / adapter is saved (empty: not saved)
};

// "20GiB", "512MiB", "1e9", "4096" -> bytes. ConfigError naming `where` on a bad value.
size_t parse_bytes(const std::string& s, const std::string& where);

// Applies the keys of a YAML file on top of `cfg`.
void apply_yaml(TrainConfig& cfg, const std::string& path);
// Same, from YAML text (tests); `path` is used in error messages.
void apply_yaml_text(TrainConfig& cfg, const std::string& text, const std::string& path);

}  // namespace strata
