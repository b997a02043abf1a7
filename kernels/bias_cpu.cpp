#include <vector>

#include "kernels/bias.h"

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
