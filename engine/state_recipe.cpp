#include "engine/state_recipe.h"

#include <fmt/format.h>

#include "engine/error.h"
#include "engine/names.h"

namespace strata {

namespace {
constexpr EnumName<MasterWeights> kMasterWeights[] = {{MasterWeights::fp32, "fp32"}, {MasterWeights::none, "none"}};
constexpr EnumName<OptimizerState> kOptimizerStates[] = {
    {OptimizerState::fp32, "fp32"}, {OptimizerState::bf16, "bf16"}, {OptimizerState::q8, "8bit"}};
constexpr EnumName<GradPrecision> kGradients[] = {{GradPrecision::fp32, "fp32"}, {GradPrecision::bf16, "bf16"}};

template <class E, size_t N>
E parse_field(const EnumName<E> (&table)[N], std::string_view s, const std::string& where, const char* field) {
  if (auto v = parse_name(table, s)) return *v;
  STRATA_THROW(ConfigError, fmt::format("{}: {} must be {}, got '{}'", where, field, name_choices(table), s), where,
               field);
}
}  // namespace

const char* master_weights_name(MasterWeights m) {
  return name_of(kMasterWeights, m);
}
const char* optimizer_state_name(OptimizerState s) {
  return name_of(kOptimizerStates, s);
}
const char* gradients_name(GradPrecision g) {
  return name_of(kGradients, g);
}

MasterWeights parse_master_weights(std::string_view s, const std::string& where) {
  return parse_field(kMasterWeights, s, where, "master_weights");
}

OptimizerState parse_optimizer_state(std::string_view s, const std::string& where) {
  return parse_field(kOptimizerStates, s, where, "optimizer_state");
}

GradPrecision parse_gradients(std::string_view s, const std::string& where) {
  return parse_field(kGradients, s, where, "gradients");
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
