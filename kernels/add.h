// Residual add with an optional scale on the second operand (LoRA uses it): out = a + s * b.
// Shapes: all [n].
#pragma once

namespace strata::cpu {
void add_fwd(float* out, const float* a, const float* b, float s, long n);
// da (+)= dout, db (+)= s * dout (either may be null): added into when acc_da / acc_db, else overwritten.
void add_bwd(float* da, float* db, const float* dout, float s, long n, bool acc_da, bool acc_db);
}  // namespace strata::cpu
