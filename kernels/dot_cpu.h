// The cpu kernels' dot product: 8 independent partial sums (vectorisable) in a fixed order, so
// every kernel that uses it (linear, the LM head) sums the same way, bit for bit.
#pragma once

namespace strata::cpu {

inline float dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

}  // namespace strata::cpu
