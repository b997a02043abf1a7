#include "kernels/bias.h"

namespace strata::cpu {

void bias_fwd(float* y, const float* b, long N, long O) {
  for (long n = 0; n < N; ++n)
    for (long o = 0; o < O; ++o) y[n * O + o] += b[o];
}

void bias_bwd(float* db, const float* dy, long N, long O, bool acc) {
  if (!acc)
    for (long o = 0; o < O; ++o) db[o] = 0.0f;
  for (long n = 0; n < N; ++n)
    for (long o = 0; o < O; ++o) db[o] += dy[n * O + o];
}

}  // namespace strata::cpu
