// The small Llama shape the plan, tier and paging tests share: 4 layers, GQA 4/2 heads, odd vocab.
#pragma once
#include "io/hf_config.h"

namespace strata::test_util {

inline io::LlamaConfig tiny_config() {
  io::LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 61;
  c.rms_norm_eps = 1e-5f;
  return c;
}

}  // namespace strata::test_util
