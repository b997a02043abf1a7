// SwiGLU out = silu(gate) * up, cpu reference. silu is x / (1 + exp(-x)) as torch computes it.
#include <cmath>

#include "kernels/grad_cpu.h"
#include "kernels/op_dispatch.h"
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

namespace strata {
// swiglu_fwd(out, gate, up) and swiglu_bwd(dgate, dup, dout, gate, up; acc_dgate, acc_dup).
void swiglu_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  if (!c.backward) return cpu::swiglu_fwd(f32(t[0]), f32(t[1]), f32(t[2]), long(t[1].numel()));
  cpu::swiglu_bwd(f32(t[0]), f32(t[1]), f32(t[2]), f32(t[3]), f32(t[4]), long(t[3].numel()), c.acc[0], c.acc[1]);
}
}  // namespace strata
