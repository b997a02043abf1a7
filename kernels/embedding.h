// Token embedding. Shapes: tokens [N], wte [V, C], out [N, C].
#pragma once
#include <cstdint>

#include "kernels/grad_cpu.h"

namespace strata::cpu {
// out[n, :] = wte[tokens[n], :]
void embedding_fwd(float* out, const int32_t* tokens, const float* wte, int N, int C);
// dwte[tokens[n], :] += dout[n, :] (always adds: the backends zero dwte first for an overwrite).
// f32: each token's row adds into dwte in token order. bf16 (dwte [V, C]): each row the tokens hit is
// summed from 0 in f32 in token order first, then added into dwte once (rounded once).
void embedding_bwd(GradOut dwte, const float* dout, const int32_t* tokens, int N, int C, int V);
}  // namespace strata::cpu
