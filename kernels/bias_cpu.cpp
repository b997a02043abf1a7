#include <vector>

#include "kernels/bias.h"
#include "kernels/op_dispatch.h"

namespace strata::cpu {

void bias_fwd(float* y, const float* b, long N, long O) {
  for (long n = 0; n < N; ++n)
    for (long o = 0; o < O; ++o) y[n * O + o] += b[o];
}

void bias_bwd(GradOut g, const float* dy, long N, long O, bool acc) {
  if (g.is_bf16()) {
    std::vector<float> sums(size_t(O), 0.0f);
    for (long n = 0; n < N; ++n)
      for (long o = 0; o < O; ++o) sums[size_t(o)] += dy[n * O + o];
    return g.write(0, sums.data(), size_t(O), acc);
  }
  float* db = g.f32();
  if (!acc)
    for (long o = 0; o < O; ++o) db[o] = 0.0f;
  for (long n = 0; n < N; ++n)
    for (long o = 0; o < O; ++o) db[o] += dy[n * O + o];
}

}  // namespace strata::cpu

namespace strata {
// bias_fwd(y, b) in place and bias_bwd(db, dy; acc_db).
void bias_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  if (!c.backward) return cpu::bias_fwd(f32(t[0]), f32(t[1]), long(rows(t[0])), long(cols(t[0])));
  if (t[0].defined()) cpu::bias_bwd(grad_out(t[0]), f32(t[1]), long(rows(t[1])), long(cols(t[1])), c.acc[0]);
}
}  // namespace strata
