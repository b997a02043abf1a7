// Hugging Face config.json of the Llama family (model_type llama, mistral, qwen2, qwen3): reading
// (transformers 4 and 5 rope styles), validation and writing back a config that transformers loads.
#pragma once
#include <cstdint>
#include <string>

#include "engine/op_params.h"

namespace strata::io {

// The architectures strata trains. They share Llama's layer (RMSNorm, GQA attention with rope,
// SwiGLU MLP) and differ only in the pieces LlamaConfig's flags below describe.
enum class Arch { llama, mistral, qwen2, qwen3 };
const char* arch_model_type(Arch a);    // "llama", "mistral", "qwen2", "qwen3"
const char* arch_architecture(Arch a);  // "LlamaForCausalLM", ...

struct LlamaConfig {
  Arch arch = Arch::llama;
  int hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, num_attention_heads = 0, num_key_value_heads = 0,
      head_dim = 0, vocab_size = 0, max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f, rope_theta = 10000.0f;
  RopeScaling rope_scaling;  // rope_scaling / rope_parameters: its type (default: none) and fields
  bool tie_word_embeddings = false;
  std::string torch_dtype = "float32";  // from "torch_dtype" or "dtype"
  // Per-architecture pieces (from model_type and its fields):
  bool qkv_bias = false;  // biases on q_proj, k_proj, v_proj (qwen2; attention_bias in llama and qwen3)
  bool o_bias = false;    // a bias on o_proj (attention_bias in llama and qwen3)
  bool mlp_bias = false;  // biases on gate_proj, up_proj, down_proj (llama's mlp_bias)
  bool qk_norm = false;   // qwen3: an RMSNorm over each head of q and of k ([head_dim] weights) before rope
  // Tokens a query may look back in a sliding-window layer (mistral's sliding_window; qwen's where
  // use_sliding_window or layer_types enables it); 0: every layer attends to the whole causal prefix.
  // strata runs full causal attention, so a sequence longer than the window is refused.
  int sliding_window = 0;
  // The source config's fields that strata does not interpret (token ids, layer_types, ...), as a
  // JSON object's text, written back unchanged by llama_config_to_json.
  std::string passthrough_json;
};

// Upper bounds on config.json sizes, checked before anything is sized from them (a hostile
// `num_hidden_layers: 2147483647` must be an error, not an out-of-memory kill). Generous next to
// the largest public Llamas (405B: 126 layers, hidden 16384, 128 heads, intermediate 53248,
// vocab 128256; Llama 4 Scout: 10M positions).
struct LlamaConfigLimits {
  static constexpr int kMaxLayers = 1024;
  static constexpr int kMaxHidden = 65536;
  static constexpr int kMaxHeads = 1024;  // num_attention_heads and num_key_value_heads
  static constexpr int kMaxHeadDim = 1024;
  static constexpr int kMaxIntermediate = 1 << 18;
  static constexpr int kMaxVocab = 1 << 24;
  static constexpr int kMaxPositions = 1 << 24;  // max_position_embeddings, original_max_position_embeddings
  static constexpr uint64_t kMaxParameters = 2'000'000'000'000;  // 2e12
};

// Parameters of the Llama that `c` describes (embeddings, attention, MLP, norms, untied lm_head).
// Exact in 64 bits for any config within LlamaConfigLimits' per-field bounds.
uint64_t llama_parameter_count(const LlamaConfig& c);

// Throws ConfigError naming `path_for_errors` and the field (missing, wrong type, bad value, out
// of LlamaConfigLimits' range, or a total parameter count over kMaxParameters).
LlamaConfig parse_llama_config(const std::string& json_text, const std::string& path_for_errors);
// `path` is config.json or a directory containing it. IoError if it cannot be read or is not a
// regular file (a FIFO or device is refused without blocking).
LlamaConfig read_llama_config(const std::string& path);
// A HF-compatible config.json (model_type llama, architectures [LlamaForCausalLM], rope_scaling, ...).
std::string llama_config_to_json(const LlamaConfig& c);

}  // namespace strata::io
