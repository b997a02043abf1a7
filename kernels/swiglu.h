// SwiGLU activation: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)). Shapes: all [N, F].
#pragma once

namespace strata::cpu {
void swiglu_fwd(float* out, const float* gate, const float* up, long n);
// Accumulates dgate, dup.
void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long n);
}  // namespace strata::cpu
