#include "engine/state_recipe.h"

#include <fmt/format.h>

#include "engine/error.h"

namespace strata {

const char* master_weights_name(MasterWeights m) {
  return m == MasterWeights::none ? "none" : "fp32";
}

const char* optimizer_state_name(OptimizerState s) {
  switch (s) {
    case OptimizerState::fp32:
      return "fp32";
    case OptimizerState::bf16:
      return "bf16";
    case OptimizerState::q8:
      return "8bit";
  }
  return "?";
}

const char* gradients_name(GradPrecision g) {
  return g == GradPrecision::bf16 ? "bf16" : "fp32";
}

MasterWeights parse_master_weights(std::string_view s, const std::string& where) {
  if (s == "fp32") return MasterWeights::fp32;
  if (s == "none") return MasterWeights::none;
  STRATA_THROW(ConfigError, fmt::format("{}: master_weights must be fp32 or none, got '{}'", where, s), where,
               "master_weights");
}

OptimizerState parse_optimizer_state(std::string_view s, const std::string& where) {
  if (s == "fp32") return OptimizerState::fp32;
  if (s == "bf16") return OptimizerState::bf16;
  if (s == "8bit") return OptimizerState::q8;
  STRATA_THROW(ConfigError, fmt::format("{}: optimizer_state must be fp32, bf16 or 8bit, got '{}'", where, s), where,
               "optimizer_state");
}

GradPrecision parse_gradients(std::string_view s, const std::string& where) {
  if (s == "fp32") return GradPrecision::fp32;
  if (s == "bf16") return GradPrecision::bf16;
  STRATA_THROW(ConfigError, fmt::format("{}: gradients must be fp32 or bf16, got '{}'", where, s), where, "gradients");
}

size_t moment_bytes(OptimizerState s, size_t n) {
  switch (s) {
    case OptimizerState::fp32:
      return n * 4;
    case OptimizerState::bf16:
      return n * 2;
    case OptimizerState::q8:
      return moment_scale_offset(n) + quant_blocks(n) * sizeof(float);
  }
  return 0;
}

}  // namespace strata
