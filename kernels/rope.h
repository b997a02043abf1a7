// Rotary position embedding, Hugging Face "rotate_half" convention (not interleaved):
// out[..., i] = x[i] * cos(p*f_i) - x[i + D/2] * sin(p*f_i)            for i < D/2
// out[..., i + D/2] = x[i + D/2] * cos(p*f_i) + x[i] * sin(p*f_i)
// Shapes: x, out [N, H, D] (N tokens, H heads, D head_dim, D even); pos [N]; inv_freq [D/2].
#pragma once
#include <cstdint>

namespace strata {
// rope_scaling as in config.json; type "default" (none) or "llama3".
struct RopeScaling {
  bool llama3 = false;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};
}  // namespace strata

namespace strata::cpu {
// inv_freq[i] = 1 / theta^(2i/D), then llama3 frequency scaling when enabled (as transformers does).
void rope_inv_freq(float* inv_freq, int D, float theta, const RopeScaling& scaling);
// The angle is computed in float32 as float(pos) * inv_freq[i], exactly as transformers does.
void rope_fwd(float* out, const float* x, const int32_t* pos, const float* inv_freq, int N, int H, int D);
// dx (+)= R^T dout (rotation by the negative angle): added into when acc_dx, else overwritten.
void rope_bwd(float* dx, const float* dout, const int32_t* pos, const float* inv_freq, int N, int H, int D,
              bool acc_dx);
}  // namespace strata::cpu
