// Linear layer without bias, in Hugging Face's weight layout.
// Shapes: x [N, I], w [O, I], y [N, O]: y = x @ w^T.
#pragma once

namespace strata::cpu {
void linear_fwd(float* y, const float* x, const float* w, int N, int I, int O);
// dx (+)= dy @ w (if dx), dw (+)= dy^T @ x (if dw): added into when acc_dx / acc_dw, else overwritten.
void linear_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, int N, int I, int O, bool acc_dx,
                bool acc_dw);
}  // namespace strata::cpu
