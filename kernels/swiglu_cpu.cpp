// SwiGLU out = silu(gate) * up, cpu reference. silu is x / (1 + exp(-x)) as torch computes it.
#include <cmath>

#include "kernels/grad_cpu.h"
#include "kernels/swiglu.h"

namespace strata::cpu {

void swiglu_fwd(float* out, const float* gate, const float* up, long n) {
  for (long i = 0; i < n; i++) {
    float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long n, bool acc_dgate,
                bool acc_dup) {
  for (long i = 0; i < n; i++) {
    float g = gate[i];
    float sig = 1.0f / (1.0f + std::exp(-g));
    float silu = g * sig;
    // d silu / dg = sig + g * sig * (1 - sig)
    if (dgate) write_grad(dgate[i], dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig))), acc_dgate);
    if (dup) write_grad(dup[i], dout[i] * silu, acc_dup);
  }
}

}  // namespace strata::cpu
