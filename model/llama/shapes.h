// Built-in Llama shapes, so tools run without a checkpoint (random weights).
#pragma once
#include <string>
#include <vector>

#include "io/hf_config.h"

namespace strata {

struct NamedShape {
  std::string name;
  io::LlamaConfig config;
};

const std::vector<NamedShape>& builtin_shapes();
// Throws ConfigError listing the known names when `name` is unknown.
io::LlamaConfig builtin_shape(const std::string& name);

// Model FLOPs of one step over `tokens` tokens in rows of `seq`: 2·N per token forward for the
// matmul weights (embeddings excluded, LM head included), twice that backward when the weights
// train (input and weight gradients) or once when they are frozen, plus causal attention
// (2·2·T²·H·D/2 per layer and row forward, 2.5x that backward).
double step_flops(const io::LlamaConfig& c, long tokens, int seq, bool weights_train);

}  // namespace strata
