// SwiGLU activation: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)). Shapes: all [N, F].
#pragma once

namespace strata::cpu {
void swiglu_fwd(float* out, const float* gate, const float* up, long n);
// dgate, dup (either may be null): added into when acc_dgate / acc_dup, else overwritten.
void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long n, bool acc_dgate,
                bool acc_dup);
}  // namespace strata::cpu
