// RMSNorm as in Llama: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps).
// Shapes: x, out [N, C]; w [C]; rstd [N] (saved for backward).
#pragma once

namespace strata::cpu {
void rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps);
// dx, dw: added into when acc_dx / acc_dw, else overwritten (either may be null to skip).
void rmsnorm_bwd(float* dx, float* dw, const float* dout, const float* x, const float* w, const float* rstd, int N,
                 int C, bool acc_dx, bool acc_dw);
}  // namespace strata::cpu
