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
//   gradients: fp32       every trainable parameter's gradient stored and accumulated in fp32 (4 bytes)
//              bf16       stored in bf16 (2 bytes; Hugging Face's recipe for a model loaded in bf16), on
//                         every backend and tier (device buffers, host-tier arrays, the all-reduce). Each
//                         op that writes a parameter gradient forms its term in fp32 and rounds once to
//                         nearest even per write: g = bf16(g + term) when adding, bf16(term) when
//                         overwriting. A write is one GEMM (a linear weight, a LoRA factor; each MLP row
//                         tile and each LM-head chunk is its own GEMM, beta = 1 after the first, as
//                         PyTorch with bf16 parameters), or one whole op for the column sums of RMSNorm
//                         weights and biases and for the embedding's rows (summed in fp32 over the op's
//                         tokens first: an fp32 scratch on cuda, engine/op_scratch.h). The norm,
//                         clipping and AdamW read the bf16 values widened (exact). The cpu backend
//                         (f32 compute) stores and rounds the same way at the same points, so its bf16
//                         gradients are the reference the tests check every plan and tier against.
//                         Data parallel: bf16 gradients are all-reduced as they are, in bf16
//                         (OptimizerOptions::reduce_dtype applies to fp32 gradients only).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/dtype.h"

namespace strata {

enum class MasterWeights : uint8_t { fp32, none };
enum class OptimizerState : uint8_t { fp32, bf16, q8 };
enum class GradPrecision : uint8_t { fp32, bf16 };

struct StateRecipe {
  MasterWeights master = MasterWeights::fp32;
  OptimizerState moments = OptimizerState::fp32;
  GradPrecision gradients = GradPrecision::fp32;
  bool operator==(const StateRecipe&) const = default;
};

// The element type of the trainable parameters' gradients: f32 or bf16 (on every backend).
inline DType grad_dtype(const StateRecipe& r) {
  return r.gradients == GradPrecision::bf16 ? DType::bf16 : DType::f32;
}

// Elements per quantisation block of 8-bit moments.
inline constexpr size_t kQuantBlock = 256;
constexpr size_t quant_blocks(size_t n) {
  return (n + kQuantBlock - 1) / kQuantBlock;
}

// The names the configs and flags use: "fp32", "none"; "fp32", "bf16", "8bit"; "fp32", "bf16".
const char* master_weights_name(MasterWeights m);
const char* optimizer_state_name(OptimizerState s);
const char* gradients_name(GradPrecision g);
// Parse those names; ConfigError naming `where` and the field otherwise.
MasterWeights parse_master_weights(std::string_view s, const std::string& where);
OptimizerState parse_optimizer_state(std::string_view s, const std::string& where);
GradPrecision parse_gradients(std::string_view s, const std::string& where);

// Bytes one moment of n elements takes in a given precision (codes and scales for 8-bit; the scales
// start at the next multiple of 16 bytes after the codes, see moment_scale_offset).
size_t moment_bytes(OptimizerState s, size_t n);
inline size_t moment_scale_offset(size_t n) {
  return (n + 15) / 16 * 16;
}

}  // namespace strata
