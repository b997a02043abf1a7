// What the files of LlamaModel (llama.cpp, llama_forward.cpp, llama_weights.cpp, llama_state_disk.cpp) share:
// the Hugging Face names of its parameters and the state tiers' alignment. Internal to those files.
#pragma once
#include <fmt/format.h>

#include <cstddef>
#include <string>

namespace strata::llama_detail {

inline std::string layer_name(int i, const std::string& rest) {
  return fmt::format("model.layers.{}.{}", i, rest);
}
inline std::string module_path(const std::string& m) {
  return (m == "gate_proj" || m == "up_proj" || m == "down_proj") ? "mlp." + m : "self_attn." + m;
}
// RMSNorm weights by their Hugging Face names: "...layernorm.weight", "model.norm.weight", "...q_norm.weight".
inline bool is_norm(const std::string& name) {
  return name.find("norm.weight") != std::string::npos;
}
// Host-tier arrays and disk-tier requests: whole 4 KiB pages.
inline size_t host_align(size_t b) {
  return (b + 4095) / 4096 * 4096;
}

}  // namespace strata::llama_detail
