// RMSNorm as in Llama: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps).
// Shapes: x, out [N, C]; w [C]; rstd [N] (saved for backward).
#pragma once
#include "kernels/grad_cpu.h"

namespace strata::cpu {
void rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps);
// dx, dw: added into when acc_dx / acc_dw, else overwritten (either may be null to skip). dw may be
// bf16: each element is summed over the rows first and written once.
void rmsnorm_bwd(float* dx, GradOut dw, const float* dout, const float* x, const float* w, const float* rstd, int N,
                 int C, bool acc_dx, bool acc_dw);
}  // namespace strata::cpu
