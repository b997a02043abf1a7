// Token embedding. Shapes: tokens [N], wte [V, C], out [N, C].
#pragma once
#include <cstdint>

namespace strata::cpu {
// out[n, :] = wte[tokens[n], :]
void embedding_fwd(float* out, const int32_t* tokens, const float* wte, int N, int C);
// dwte[tokens[n], :] += dout[n, :] (always adds: the backends zero dwte first for an overwrite)
void embedding_bwd(float* dwte, const float* dout, const int32_t* tokens, int N, int C);
}  // namespace strata::cpu
