// AdamW, cpu reference. Follows torch.optim.AdamW's single-tensor path operation by operation:
// scalars (bias corrections, step size) in double, per-element math in float.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "engine/error.h"
#include "kernels/adamw.h"
#include "kernels/quant8.h"

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

double sum_squares_bf16(const uint16_t* g, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double x = bf16_to_f32(g[i]);
    s += x * x;
  }
  return s;
}

namespace {
struct Scalars {
  float decay, w1, b2f, w2, neg_step, bc2_sqrt, eps;
};
Scalars scalars(const AdamWParams& p, int t) {
  const double lr = as_written(p.lr), b1 = as_written(p.beta1), b2 = as_written(p.beta2);
  Scalars k;
  k.decay = float(1.0 - lr * as_written(p.weight_decay));
  k.w1 = float(1.0 - b1);  // lerp weight
  k.b2f = float(b2);
  k.w2 = float(1.0 - b2);
  k.neg_step = float(-(lr / (1.0 - std::pow(b1, t))));
  k.bc2_sqrt = float(std::sqrt(1.0 - std::pow(b2, t)));
  k.eps = float(as_written(p.eps));
  return k;
}

// Per element, with g = grad * grad_scale:
//   param *= 1 - lr * wd                          (decoupled decay, before the update)
//   m = lerp(m, g, 1 - b1);  v = v * b2 + (1 - b2) * g * g
//   param -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which equals param -= lr * mhat / (sqrt(vhat) + eps).
inline void update(float& param, float& m, float& v, float g, float grad_scale, const Scalars& k) {
  const float gi = g * grad_scale;
  float pi = param * k.decay;
  // torch.lerp(m, g, w1): two forms, picked by the weight, for accuracy
  const float mi = k.w1 < 0.5f ? m + k.w1 * (gi - m) : gi - (gi - m) * (1.0f - k.w1);
  const float vi = v * k.b2f + k.w2 * gi * gi;
  const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
  pi = pi + k.neg_step * (mi / denom);
  m = mi;
  v = vi;
  param = pi;
}
}  // namespace

void adamw_step(float* param, float* m, float* v, const float* g, size_t n, const AdamWParams& p, int t,
                float grad_scale) {
  STRATA_CHECK(t >= 1, "adamw_step: step count is 1-based");
  const Scalars k = scalars(p, t);
  for (size_t i = 0; i < n; i++) update(param[i], m[i], v[i], g[i], grad_scale, k);
}

void adamw_step(const AdamWState& s, const AdamWParams& p, int t, float grad_scale) {
  STRATA_CHECK(t >= 1, "adamw_step: step count is 1-based");
  STRATA_CHECK(s.master || s.weights, "adamw_step: neither a master nor weights to update");
  STRATA_CHECK(!s.weights || s.weights_dtype == DType::f32 || s.weights_dtype == DType::bf16,
               "adamw_step: weights must be f32 or bf16");
  STRATA_CHECK(s.moments != OptimizerState::q8 || (s.m_scale && s.v_scale), "adamw_step: 8-bit moments need scales");
  STRATA_CHECK(s.grad_dtype == DType::f32 || s.grad_dtype == DType::bf16, "adamw_step: gradients must be f32 or bf16");
  const bool bf16_grads = s.grad_dtype == DType::bf16;
  const Scalars k = scalars(p, t);
  auto* wf = static_cast<float*>(s.weights);
  auto* wb = static_cast<uint16_t*>(s.weights);
  const bool bf16_weights = s.weights_dtype == DType::bf16;
  float pb[kQuantBlock], mb[kQuantBlock], vb[kQuantBlock];
  for (size_t base = 0; base < s.n; base += kQuantBlock) {
    const size_t len = std::min(kQuantBlock, s.n - base);
    for (size_t e = 0; e < len; e++) {
      const size_t i = base + e;
      pb[e] = s.master ? s.master[i] : bf16_weights ? bf16_to_f32(wb[i]) : wf[i];
      switch (s.moments) {
        case OptimizerState::fp32:
          mb[e] = static_cast<const float*>(s.m)[i];
          vb[e] = static_cast<const float*>(s.v)[i];
          break;
        case OptimizerState::bf16:
          mb[e] = bf16_to_f32(static_cast<const uint16_t*>(s.m)[i]);
          vb[e] = bf16_to_f32(static_cast<const uint16_t*>(s.v)[i]);
          break;
        case OptimizerState::q8:
          mb[e] = q8::decode_signed(static_cast<const uint8_t*>(s.m)[i], s.m_scale[base / kQuantBlock]);
          vb[e] = q8::decode_unsigned(static_cast<const uint8_t*>(s.v)[i], s.v_scale[base / kQuantBlock]);
          break;
      }
      const float gi =
          bf16_grads ? bf16_to_f32(static_cast<const uint16_t*>(s.g)[i]) : static_cast<const float*>(s.g)[i];
      update(pb[e], mb[e], vb[e], gi, grad_scale, k);
    }
    float m_max = 0.0f, v_max = 0.0f;
    if (s.moments == OptimizerState::q8) {
      for (size_t e = 0; e < len; e++) {
        m_max = std::fmax(m_max, std::fabs(mb[e]));
        v_max = std::fmax(v_max, vb[e]);
      }
      s.m_scale[base / kQuantBlock] = m_max;
      s.v_scale[base / kQuantBlock] = v_max;
    }
    for (size_t e = 0; e < len; e++) {
      const size_t i = base + e;
      if (s.master) s.master[i] = pb[e];
      if (bf16_weights)
        wb[i] = f32_to_bf16(pb[e]);
      else if (wf && wf != s.master)
        wf[i] = pb[e];
      switch (s.moments) {
        case OptimizerState::fp32:
          static_cast<float*>(s.m)[i] = mb[e];
          static_cast<float*>(s.v)[i] = vb[e];
          break;
        case OptimizerState::bf16:
          static_cast<uint16_t*>(s.m)[i] = f32_to_bf16(mb[e]);
          static_cast<uint16_t*>(s.v)[i] = f32_to_bf16(vb[e]);
          break;
        case OptimizerState::q8:
          static_cast<uint8_t*>(s.m)[i] = q8::encode_signed(mb[e], q8::inverse_scale(m_max));
          static_cast<uint8_t*>(s.v)[i] = q8::encode_unsigned(vb[e], q8::inverse_scale(v_max));
          break;
      }
    }
  }
}

}  // namespace strata::cpu
