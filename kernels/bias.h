// A projection's bias (Qwen2's q/k/v, Llama's attention_bias and mlp_bias): y += b over rows, and
// the bias gradient, a column sum. Shapes: y, dy [N, O]; b, db [O].
#pragma once
#include "kernels/grad_cpu.h"

namespace strata::cpu {
void bias_fwd(float* y, const float* b, long N, long O);  // in place
// db (+)= sum over rows of dy, each column summed in row order: added into when acc, else overwritten.
// f32: the rows add into db one by one. bf16: each column is summed from 0 in f32 first, then written
// once (cuda sums into an fp32 scratch and folds it in the same way).
void bias_bwd(GradOut db, const float* dy, long N, long O, bool acc);
}  // namespace strata::cpu
