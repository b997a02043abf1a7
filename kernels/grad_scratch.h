// The arena scratch the cuda backend takes to write a bf16 parameter gradient (the recipe's
// gradients: bf16, engine/state_recipe.h) where its kernel sums with fp32 atomics, described once so
// the sim backend (mirroring cuda) allocates the same blocks in the same order with the same tags.
//  - RMSNorm weights and biases: the column sums in fp32 [C] ("workspace.grad_sums"), folded into the
//    bf16 gradient in one pass (kernels/ops_cuda.h grad_fold_bf16). C floats: a few KiB.
//  - The embedding: the rows its N tokens hit, compacted: fp32 sums [slots, C] ("workspace.grad_rows")
//    and an i32 map [V + slots + 1] ("workspace.grad_row_map": each vocabulary row's slot, each slot's
//    row, the slot count), slots = min(N, V); the sums are added into the hit rows once. At most
//    4 (N C + V + N + 1) bytes, bounded by the tokens rather than the vocabulary: an fp32 [V, C] table
//    would be 2 GiB for Llama 3 8B's 128k x 4096 embedding.
// The cpu backend sums the same way in memory of its own (no arena block), as the sim mirroring cpu does.
#pragma once
#include <algorithm>
#include <cstdint>

#include "engine/tensor.h"

namespace strata {

inline Buffer grad_sums_scratch(Arena& arena, int64_t n) {
  return Buffer(arena, DType::f32, Shape{n}, "workspace.grad_sums");
}

struct EmbeddingGradScratch {
  int64_t slots = 0;
  Buffer rows;  // f32 [slots, C]
  Buffer map;   // i32 [V + slots + 1]
};

// For N > 0 tokens (no scratch is taken without tokens).
inline EmbeddingGradScratch embedding_grad_scratch(Arena& arena, int64_t tokens, int64_t vocab, int64_t C) {
  EmbeddingGradScratch s;
  s.slots = std::min(tokens, vocab);
  s.rows = Buffer(arena, DType::f32, Shape{s.slots, C}, "workspace.grad_rows");
  s.map = Buffer(arena, DType::i32, Shape{vocab + s.slots + 1}, "workspace.grad_row_map");
  return s;
}

}  // namespace strata
