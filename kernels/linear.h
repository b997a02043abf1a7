// Linear layer without bias, in Hugging Face's weight layout.
// Shapes: x [N, I], w [O, I], y [N, O]: y = x @ w^T.
#pragma once
#include "kernels/grad_cpu.h"

namespace strata::cpu {
void linear_fwd(float* y, const float* x, const float* w, int N, int I, int O);
// dx (+)= dy @ w (if dx), dw (+)= dy^T @ x (if dw): added into when acc_dx / acc_dw, else overwritten.
// dw may be bf16 (GradOut): each element's sum over the rows is rounded once, as one cuBLASLt GEMM does.
void linear_bwd(float* dx, GradOut dw, const float* dy, const float* x, const float* w, int N, int I, int O,
                bool acc_dx, bool acc_dw);
}  // namespace strata::cpu
