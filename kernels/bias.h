// A projection's bias (Qwen2's q/k/v, Llama's attention_bias and mlp_bias): y += b over rows, and
// the bias gradient, a column sum. Shapes: y, dy [N, O]; b, db [O].
#pragma once

namespace strata::cpu {
void bias_fwd(float* y, const float* b, long N, long O);  // in place
// db (+)= sum over rows of dy, each column summed in row order: added into when acc, else overwritten.
void bias_bwd(float* db, const float* dy, long N, long O, bool acc);
}  // namespace strata::cpu
