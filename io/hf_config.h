// Hugging Face Llama config.json: reading (transformers 4 and 5 rope styles), validation and
// writing back a config that transformers loads.
#pragma once
#include <string>

#include "kernels/rope.h"

namespace strata::io {

struct LlamaConfig {
  int hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, num_attention_heads = 0, num_key_value_heads = 0,
      head_dim = 0, vocab_size = 0, max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f, rope_theta = 10000.0f;
  RopeScaling rope_scaling;  // llama3 or none
  bool tie_word_embeddings = false;
  std::string torch_dtype = "float32";  // from "torch_dtype" or "dtype"
};

// Throws ConfigError naming `path_for_errors` and the field (missing, wrong type, bad value).
LlamaConfig parse_llama_config(const std::string& json_text, const std::string& path_for_errors);
// `path` is config.json or a directory containing it. IoError if it cannot be read.
LlamaConfig read_llama_config(const std::string& path);
// A HF-compatible config.json (model_type llama, architectures [LlamaForCausalLM], rope_scaling, ...).
std::string llama_config_to_json(const LlamaConfig& c);

}  // namespace strata::io
