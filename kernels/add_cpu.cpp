// Residual add out = a + s * b, cpu reference.
#include "kernels/add.h"
#include "kernels/grad_cpu.h"

namespace strata::cpu {

void add_fwd(float* out, const float* a, const float* b, float s, long n) {
  for (long i = 0; i < n; i++) out[i] = a[i] + s * b[i];
}

void add_bwd(float* da, float* db, const float* dout, float s, long n, bool acc_da, bool acc_db) {
  if (da)
    for (long i = 0; i < n; i++) write_grad(da[i], dout[i], acc_da);
  if (db)
    for (long i = 0; i < n; i++) write_grad(db[i], s * dout[i], acc_db);
}

}  // namespace strata::cpu
