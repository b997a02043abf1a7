// AdamW, cpu reference. Follows torch.optim.AdamW's single-tensor path operation by operation:
// scalars (bias corrections, step size) in double, per-element math in float.
#include <charconv>
#include <cmath>

#include "engine/error.h"
#include "kernels/adamw.h"

namespace strata::cpu {
namespace {

// AdamWParams holds floats, but torch holds hyperparameters as Python doubles. Recover the decimal
// the config most likely wrote (the shortest one that rounds to this float), so that 1 - beta2 is
// 0.001 for beta2 = 0.999 and not 1 - 0.999f = 0.00099998713 (a 1.3e-5 relative error in v).
double as_written(float f) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof(buf), f).ptr;
  double d = f;
  std::from_chars(buf, end, d);
  return d;
}

}  // namespace

double sum_squares(const float* g, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += double(g[i]) * double(g[i]);
  return s;
}

// Per element, with g = grad * grad_scale:
//   param *= 1 - lr * wd                          (decoupled decay, before the update)
//   m = lerp(m, g, 1 - b1);  v = v * b2 + (1 - b2) * g * g
//   param -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which equals param -= lr * mhat / (sqrt(vhat) + eps).
void adamw_step(float* param, float* m, float* v, const float* g, size_t n, const AdamWParams& p, int t,
                float grad_scale) {
  STRATA_CHECK(t >= 1, "adamw_step: step count is 1-based");
  const double lr = as_written(p.lr), b1 = as_written(p.beta1), b2 = as_written(p.beta2);
  const float decay = float(1.0 - lr * as_written(p.weight_decay));
  const float w1 = float(1.0 - b1);  // lerp weight
  const float b2f = float(b2), w2 = float(1.0 - b2);
  const double bc1 = 1.0 - std::pow(b1, t);
  const double bc2 = 1.0 - std::pow(b2, t);
  const float neg_step = float(-(lr / bc1));
  const float bc2_sqrt = float(std::sqrt(bc2));
  const float eps = float(as_written(p.eps));
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i] * grad_scale;
    float pi = param[i] * decay;
    // torch.lerp(m, g, w1): two forms, picked by the weight, for accuracy
    const float mi = w1 < 0.5f ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - w1);
    const float vi = v[i] * b2f + w2 * gi * gi;
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    pi = pi + neg_step * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    param[i] = pi;
  }
}

}  // namespace strata::cpu
