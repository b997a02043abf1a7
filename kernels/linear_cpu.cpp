// Linear layer y = x @ w^T (w [O, I], Hugging Face layout), cpu reference.
// Loops keep the innermost index contiguous in every operand; temporaries make each result
// reach the caller's gradient in one write (added, or overwriting it).
#include <cstring>
#include <vector>

#include "kernels/dot_cpu.h"
#include "kernels/grad_cpu.h"
#include "kernels/linear.h"

namespace strata::cpu {

void linear_fwd(float* y, const float* x, const float* w, int N, int I, int O) {
  for (int n = 0; n < N; n++) {
    const float* xr = x + size_t(n) * I;  // [I]
    float* yr = y + size_t(n) * O;        // [O]
    for (int o = 0; o < O; o++) yr[o] = dot(xr, w + size_t(o) * I, I);
  }
}

void linear_bwd(float* dx, GradOut dw, const float* dy, const float* x, const float* w, int N, int I, int O,
                bool acc_dx, bool acc_dw) {
  std::vector<float> tmp(I);  // [I]
  if (dx) {
    // dx[n, :] += sum_o dy[n, o] * w[o, :]
    for (int n = 0; n < N; n++) {
      std::memset(tmp.data(), 0, sizeof(float) * I);
      const float* dyr = dy + size_t(n) * O;
      for (int o = 0; o < O; o++) {
        float g = dyr[o];
        const float* wr = w + size_t(o) * I;
        for (int i = 0; i < I; i++) tmp[i] += g * wr[i];
      }
      float* dxr = dx + size_t(n) * I;
      for (int i = 0; i < I; i++) write_grad(dxr[i], tmp[i], acc_dx);
    }
  }
  if (dw) {
    // dw[o, :] += sum_n dy[n, o] * x[n, :]
    for (int o = 0; o < O; o++) {
      std::memset(tmp.data(), 0, sizeof(float) * I);
      for (int n = 0; n < N; n++) {
        float g = dy[size_t(n) * O + o];
        const float* xr = x + size_t(n) * I;
        for (int i = 0; i < I; i++) tmp[i] += g * xr[i];
      }
      dw.write(size_t(o) * I, tmp.data(), size_t(I), acc_dw);
    }
  }
}

}  // namespace strata::cpu
