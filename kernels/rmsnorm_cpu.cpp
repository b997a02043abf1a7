// RMSNorm, cpu reference. Matches Hugging Face's LlamaRMSNorm in fp32:
// rstd = rsqrt(mean(x^2) + eps) in float, out = w * (x * rstd).
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/grad_cpu.h"
#include "kernels/op_dispatch.h"
#include "kernels/rmsnorm.h"

namespace strata::cpu {

void rmsnorm_fwd(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
  STRATA_CHECK(C > 0, "rmsnorm_fwd: C must be positive");
  for (int n = 0; n < N; n++) {
    const float* xr = x + size_t(n) * C;  // [C]
    float* yr = out + size_t(n) * C;      // [C]
    double ss = 0.0;                      // double sum, rounded once: closest to torch's float mean
    for (int c = 0; c < C; c++) ss += double(xr[c]) * double(xr[c]);
    float mean = float(ss / C);
    float r = 1.0f / std::sqrt(mean + eps);
    for (int c = 0; c < C; c++) yr[c] = w[c] * (xr[c] * r);
    if (rstd) rstd[n] = r;
  }
}

// With y_c = w_c x_c r and r = (mean(x^2) + eps)^-1/2:
//   dx_c = r w_c dy_c - x_c r^3 / C * sum_k(dy_k w_k x_k),   dw_c = sum_n dy_c x_c r.
void rmsnorm_bwd(float* dx, GradOut dw, const float* dout, const float* x, const float* w, const float* rstd, int N,
                 int C, bool acc_dx, bool acc_dw) {
  std::vector<double> dw_acc(dw ? C : 0, 0.0);  // [C], summed over rows before touching dw
  for (int n = 0; n < N; n++) {
    const float* xr = x + size_t(n) * C;
    const float* dy = dout + size_t(n) * C;
    float r = rstd[n];
    if (dx) {
      double dot = 0.0;
      for (int c = 0; c < C; c++) dot += double(dy[c]) * w[c] * xr[c];
      float k = float(dot * double(r) * r * r / C);
      float* dxr = dx + size_t(n) * C;
      for (int c = 0; c < C; c++) write_grad(dxr[c], r * w[c] * dy[c] - xr[c] * k, acc_dx);
    }
    if (dw)
      for (int c = 0; c < C; c++) dw_acc[c] += double(dy[c]) * xr[c] * r;
  }
  if (dw) {
    std::vector<float> sums(static_cast<size_t>(C));
    for (int c = 0; c < C; c++) sums[size_t(c)] = float(dw_acc[size_t(c)]);
    dw.write(0, sums.data(), size_t(C), acc_dw);
  }
}

}  // namespace strata::cpu

namespace strata {
// rmsnorm_fwd(out, rstd, x, w; eps) and rmsnorm_bwd(dx, dw, dout, x, w, rstd; acc_dx, acc_dw).
void rmsnorm_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  if (!c.backward)
    return cpu::rmsnorm_fwd(f32(t[0]), f32(t[1]), f32(t[2]), f32(t[3]), int(rows(t[2])), int(cols(t[2])), c.scalar);
  cpu::rmsnorm_bwd(f32(t[0]), grad_out(t[1]), f32(t[2]), f32(t[3]), f32(t[4]), f32(t[5]), int(rows(t[3])),
                   int(cols(t[3])), c.acc[0], c.acc[1]);
}
}  // namespace strata
