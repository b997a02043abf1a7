// Built-in Llama shapes, so tools run without a checkpoint (random weights).
#pragma once
#include <cstdint>
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

// fp8: true: how many of a layer's 7 projections (q, k, v, o, gate, up, down) take the FP8 GEMMs at `tokens`
// tokens a micro-batch (ops::fp8_shape_ok; the MLP over row tiles, mlp_tiled, keeps its 3 in bf16), and the setup
// line saying so ("projections: ...").
int fp8_projections(const io::LlamaConfig& c, int64_t tokens, bool mlp_tiled = false);
std::string fp8_line(bool fp8, const io::LlamaConfig& c, int64_t tokens, bool mlp_tiled = false);

}  // namespace strata
