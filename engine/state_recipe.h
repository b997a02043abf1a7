// The precision of the persistent training state: a recipe option, independent of where the state
// lives (the plan's state table) and of the backend.
//
//   master_weights: fp32  the update runs on an fp32 master (on a bf16 backend stored split: the
//                         compute weights plus an i16 low half, engine/master_split.h)
//                   none  no master: the compute weights are updated in place, in fp32 arithmetic,
//                         rounded to the compute dtype once per step (round to nearest even).
//                         Hugging Face's recipe for a model loaded in bf16. On an f32 backend (cpu)
//                         the compute weights are fp32, so `none` stores and computes what `fp32` does.
//   optimizer_state: fp32 AdamW's m and v in fp32
//                    bf16 each moment read as fp32, updated in fp32, stored rounded to nearest even
//                    8bit block-wise quantised: per block of kQuantBlock elements an fp32 scale (the
//                         block's largest magnitude after the update) and one code byte per element
//                         (kernels/quant8.h gives the code maps)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

enum class MasterWeights : uint8_t { fp32, none };
enum class OptimizerState : uint8_t { fp32, bf16, q8 };

struct StateRecipe {
  MasterWeights master = MasterWeights::fp32;
  OptimizerState moments = OptimizerState::fp32;
  bool operator==(const StateRecipe&) const = default;
};

// Elements per quantisation block of 8-bit moments.
inline constexpr size_t kQuantBlock = 256;
constexpr size_t quant_blocks(size_t n) {
  return (n + kQuantBlock - 1) / kQuantBlock;
}

// The names the configs and flags use: "fp32", "none"; "fp32", "bf16", "8bit".
const char* master_weights_name(MasterWeights m);
const char* optimizer_state_name(OptimizerState s);
// Parse those names; ConfigError naming `where` and the field otherwise.
MasterWeights parse_master_weights(std::string_view s, const std::string& where);
OptimizerState parse_optimizer_state(std::string_view s, const std::string& where);

// Bytes one moment of n elements takes in a given precision (codes and scales for 8-bit; the scales
// start at the next multiple of 16 bytes after the codes, see moment_scale_offset).
size_t moment_bytes(OptimizerState s, size_t n);
inline size_t moment_scale_offset(size_t n) {
  return (n + 15) / 16 * 16;
}

}  // namespace strata
