// Residual add out = a + s * b, cpu reference.
#include "kernels/add.h"

namespace strata::cpu {

void add_fwd(float* out, const float* a, const float* b, float s, long n) {
  for (long i = 0; i < n; i++) out[i] = a[i] + s * b[i];
}

void add_bwd(float* da, float* db, const float* dout, float s, long n) {
  if (da)
    for (long i = 0; i < n; i++) da[i] += dout[i];
  if (db)
    for (long i = 0; i < n; i++) db[i] += s * dout[i];
}

}  // namespace strata::cpu
