#include "model/llama/shapes.h"

#include <fmt/format.h>

#include <utility>

#include "engine/error.h"
#include "engine/ops.h"

namespace strata {

namespace {
io::LlamaConfig make(int hidden, int layers, int heads, int kv, int mlp, int vocab, bool tied, float theta, bool llama3,
                     float factor) {
  io::LlamaConfig c;
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv;
  c.head_dim = hidden / heads;
  c.intermediate_size = mlp;
  c.vocab_size = vocab;
  c.tie_word_embeddings = tied;
  c.rope_theta = theta;
  c.rms_norm_eps = 1e-5f;
  c.max_position_embeddings = 131072;
  if (llama3) {
    c.rope_scaling.type = RopeType::llama3;
    c.rope_scaling.factor = factor;
    c.rope_scaling.low_freq_factor = 1.0f;
    c.rope_scaling.high_freq_factor = 4.0f;
    c.rope_scaling.original_max_position_embeddings = 8192;
  }
  c.torch_dtype = "bfloat16";
  return c;
}
// Qwen and Mistral shapes from their config.json files: explicit head_dim, eps 1e-6 (Qwen) or 1e-5.
io::LlamaConfig make_arch(io::Arch arch, int hidden, int layers, int heads, int kv, int head_dim, int mlp, int vocab,
                          bool tied, float theta, int max_pos) {
  io::LlamaConfig c = make(hidden, layers, heads, kv, mlp, vocab, tied, theta, false, 1.0f);
  c.arch = arch;
  c.head_dim = head_dim;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = arch == io::Arch::mistral ? 1e-5f : 1e-6f;
  c.qk_norm = arch == io::Arch::qwen3;
  c.qkv_bias = arch == io::Arch::qwen2;
  return c;
}
}  // namespace

const std::vector<NamedShape>& builtin_shapes() {
  static const std::vector<NamedShape> shapes = {
      {"Llama-3.2-1B", make(2048, 16, 32, 8, 8192, 128256, true, 500000.0f, true, 32.0f)},
      {"Llama-3.2-3B", make(3072, 28, 24, 8, 8192, 128256, true, 500000.0f, true, 32.0f)},
      {"Llama-3-8B", make(4096, 32, 32, 8, 14336, 128256, false, 500000.0f, false, 1.0f)},
      {"Llama-3.1-8B", make(4096, 32, 32, 8, 14336, 128256, false, 500000.0f, true, 8.0f)},
      {"Llama-3-70B", make(8192, 80, 64, 8, 28672, 128256, false, 500000.0f, false, 1.0f)},
      {"Qwen3-1.7B", make_arch(io::Arch::qwen3, 2048, 28, 16, 8, 128, 6144, 151936, true, 1e6f, 40960)},
      {"Qwen3-8B", make_arch(io::Arch::qwen3, 4096, 36, 32, 8, 128, 12288, 151936, false, 1e6f, 40960)},
      {"Qwen2.5-7B", make_arch(io::Arch::qwen2, 3584, 28, 28, 4, 128, 18944, 152064, false, 1e6f, 32768)},
      // v0.3: no sliding window, 32768 tokens of vocabulary (v0.1 windows at 4096; give its config.json).
      {"Mistral-7B", make_arch(io::Arch::mistral, 4096, 32, 32, 8, 128, 14336, 32768, false, 1e6f, 32768)},
      {"tiny", make(64, 2, 4, 2, 128, 256, false, 10000.0f, false, 1.0f)},
  };
  return shapes;
}

io::LlamaConfig builtin_shape(const std::string& name) {
  std::string known;
  for (auto& s : builtin_shapes()) {
    if (s.name == name) return s.config;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw ConfigError(fmt::format("unknown model name '{}' (known: {})", name, known), "command line", "model");
}

double step_flops(const io::LlamaConfig& c, long tokens, int seq, bool weights_train) {
  const double C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const double Q = double(c.num_attention_heads) * D, KV = double(c.num_key_value_heads) * D;
  const double per_layer = C * Q + 2 * C * KV + Q * C + 3 * C * F;
  const double n_matmul = c.num_hidden_layers * per_layer + double(c.vocab_size) * C;
  const double fwd = 2.0 * n_matmul * double(tokens);
  const double rows = double(tokens) / seq;
  const double attn_fwd = c.num_hidden_layers * rows * 2.0 * 2.0 * double(seq) * seq * c.num_attention_heads * D / 2;
  return fwd * (weights_train ? 3.0 : 2.0) + attn_fwd * 3.5;
}

int fp8_projections(const io::LlamaConfig& c, int64_t tokens, bool mlp_tiled) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, q = int64_t(c.num_attention_heads) * c.head_dim,
                kv = int64_t(c.num_key_value_heads) * c.head_dim;
  int n = 0, i = 0;
  for (auto [in, out] : {std::pair{C, q}, {C, kv}, {C, kv}, {q, C}, {C, F}, {C, F}, {F, C}}) {
    const bool mlp = i++ >= 4;
    n += ops::fp8_shape_ok(tokens, in, out) && !(mlp && mlp_tiled) ? 1 : 0;
  }
  return n;
}

std::string fp8_line(bool fp8, const io::LlamaConfig& c, int64_t tokens, bool mlp_tiled) {
  if (!fp8) return "projections: bf16 GEMMs\n";
  const int n = fp8_projections(c, tokens, mlp_tiled);
  return fmt::format(
      "projections: FP8 GEMMs (E4M3 weights and activations, E5M2 gradients, scaled by each tensor's current amax) "
      "in {} of a layer's 7 at {} tokens a micro-batch{}\n",
      n, tokens,
      mlp_tiled ? "; the MLP over row tiles in bf16"
      : n < 7   ? "; the rest bf16 (FP8 needs tokens, inputs and outputs in multiples of 16)"
                : "");
}

}  // namespace strata
