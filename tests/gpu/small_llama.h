// The small Llama the GPU model tests train (4 query heads of 64, 2 kv heads, width 256, vocab 1000):
// big enough for the cuDNN attention path and the chunked loss, small enough for seconds per test.
#pragma once
#include "io/hf_config.h"

namespace gpu_test {

inline strata::io::LlamaConfig small_llama_config(int layers) {
  strata::io::LlamaConfig c;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.hidden_size = 256;
  c.intermediate_size = 768;
  c.num_hidden_layers = layers;
  c.vocab_size = 1000;
  c.rms_norm_eps = 1e-5f;
  return c;
}

}  // namespace gpu_test
