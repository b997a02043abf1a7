// libFuzzer target: config.json. A config that parses must be within the documented limits and
// must survive a round trip through llama_config_to_json unchanged.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  using L = io::LlamaConfigLimits;
  io::LlamaConfig c;
  try {
    c = io::parse_llama_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
  } catch (const Error&) {
    return 0;
  }
  auto check = [](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "accepted config violates: %s\n", what);
      std::abort();
    }
  };
  check(c.num_hidden_layers >= 1 && c.num_hidden_layers <= L::kMaxLayers, "layers");
  check(c.hidden_size >= 1 && c.hidden_size <= L::kMaxHidden, "hidden");
  check(c.vocab_size >= 1 && c.vocab_size <= L::kMaxVocab, "vocab");
  check(c.head_dim >= 1 && c.head_dim <= L::kMaxHeadDim, "head_dim");
  check(io::llama_parameter_count(c) <= L::kMaxParameters, "parameter count");
  check(c.rms_norm_eps > 0 && c.rope_theta > 0, "positive floats");
  io::LlamaConfig r;
  try {
    r = io::parse_llama_config(io::llama_config_to_json(c), "roundtrip/config.json");
  } catch (const Error& e) {
    std::fprintf(stderr, "round trip rejected: %s\n", e.what());
    std::abort();
  }
  check(r.hidden_size == c.hidden_size && r.num_hidden_layers == c.num_hidden_layers &&
            r.num_key_value_heads == c.num_key_value_heads && r.head_dim == c.head_dim &&
            r.rms_norm_eps == c.rms_norm_eps && r.rope_theta == c.rope_theta && r.rope_scaling == c.rope_scaling,
        "round trip equal");
  return 0;
}
