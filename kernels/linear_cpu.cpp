// Linear layer y = x @ w^T (w [O, I], Hugging Face layout), cpu reference.
// Loops keep the innermost index contiguous in every operand; temporaries make each result
// reach the caller's gradient in one write (added, or overwriting it).
#include <cstring>
#include <vector>

#include "kernels/dot_cpu.h"
#include "kernels/grad_cpu.h"
#include "kernels/linear.h"
#include "kernels/op_dispatch.h"

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

namespace strata {
// linear_fwd(y, x, w) and linear_bwd(dx, dw, dy, x, w; acc_dx, acc_dw). x is undefined when the weight is frozen
// (it was not saved): shapes come from dy and w.
void linear_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  if (!c.backward)
    return cpu::linear_fwd(f32(t[0]), f32(t[1]), f32(t[2]), int(rows(t[1])), int(cols(t[1])), int(t[2].shape[0]));
  cpu::linear_bwd(f32(t[0]), grad_out(t[1]), f32(t[2]), f32(t[3]), f32(t[4]), int(rows(t[2])), int(cols(t[4])),
                  int(t[4].shape[0]), c.acc[0], c.acc[1]);
}
}  // namespace strata
