// Rotary position embedding, Hugging Face "rotate_half" convention (not interleaved):
// out[..., i] = x[i] * cos(p*f_i) - x[i + D/2] * sin(p*f_i)            for i < D/2
// out[..., i + D/2] = x[i + D/2] * cos(p*f_i) + x[i] * sin(p*f_i)
// Shapes: x, out [N, H, D] (N tokens, H heads, D head_dim, D even); pos [N]; inv_freq [D/2].
// `scale` (yarn's and longrope's attention factor) multiplies cos and sin; 1 leaves the rotation bit for bit.
#pragma once
#include <cstdint>

#include "engine/op_params.h"

namespace strata::cpu {
// The angle is computed in float32 as float(pos) * inv_freq[i], exactly as transformers does.
void rope_fwd(float* out, const float* x, const int32_t* pos, const float* inv_freq, int N, int H, int D,
              float scale = 1.0f);
// dx (+)= R^T dout (rotation by the negative angle): added into when acc_dx, else overwritten.
void rope_bwd(float* dx, const float* dout, const int32_t* pos, const float* inv_freq, int N, int H, int D, bool acc_dx,
              float scale = 1.0f);
}  // namespace strata::cpu
