// Residual add out = a + s * b, cpu reference.
#include "kernels/add.h"
#include "kernels/grad_cpu.h"
#include "kernels/op_dispatch.h"

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

namespace strata {
// add_fwd(out, a, b; scale) and add_bwd(da, db, dout; scale, acc_da, acc_db).
void add_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  if (!c.backward) return cpu::add_fwd(f32(t[0]), f32(t[1]), f32(t[2]), c.scalar, long(t[1].numel()));
  cpu::add_bwd(f32(t[0]), f32(t[1]), f32(t[2]), c.scalar, long(t[2].numel()), c.acc[0], c.acc[1]);
}
}  // namespace strata
