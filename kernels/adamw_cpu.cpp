// AdamW, cpu reference. Follows torch.optim.AdamW's single-tensor path operation by operation:
// scalars (bias corrections, step size) in double, per-element math in float.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "engine/error.h"
#include "engine/parallel.h"
#include "kernels/adamw.h"
#include "kernels/op_dispatch.h"
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

namespace {
// adamw_step's loops over one block of at most kQuantBlock elements, each a plain loop over arrays so the
// compiler vectorises it (kernels/CMakeLists.txt builds this file with -fno-math-errno, so std::sqrt is the
// IEEE instruction and not a libm call; no FMA contraction exists on the baseline ISA): the same
// operations in the same order per element, so the bits equal the scalar form's.
void load_block(const AdamWState& s, size_t base, size_t len, float* pb, float* mb, float* vb, float* gb) {
  const auto* wb = static_cast<const uint16_t*>(s.weights);
  const auto* wf = static_cast<const float*>(s.weights);
  if (s.master)
    for (size_t e = 0; e < len; e++) pb[e] = s.master[base + e];
  else if (s.weights_dtype == DType::bf16)
    for (size_t e = 0; e < len; e++) pb[e] = bf16_to_f32(wb[base + e]);
  else
    for (size_t e = 0; e < len; e++) pb[e] = wf[base + e];
  switch (s.moments) {
    case OptimizerState::fp32:
      std::memcpy(mb, static_cast<const float*>(s.m) + base, len * sizeof(float));
      std::memcpy(vb, static_cast<const float*>(s.v) + base, len * sizeof(float));
      break;
    case OptimizerState::bf16: {
      const auto* m = static_cast<const uint16_t*>(s.m) + base;
      const auto* v = static_cast<const uint16_t*>(s.v) + base;
      for (size_t e = 0; e < len; e++) mb[e] = bf16_to_f32(m[e]);
      for (size_t e = 0; e < len; e++) vb[e] = bf16_to_f32(v[e]);
      break;
    }
    case OptimizerState::q8: {
      const auto* m = static_cast<const uint8_t*>(s.m) + base;
      const auto* v = static_cast<const uint8_t*>(s.v) + base;
      const float ms = s.m_scale[base / kQuantBlock], vs = s.v_scale[base / kQuantBlock];
      for (size_t e = 0; e < len; e++) mb[e] = q8::decode_signed(m[e], ms);
      for (size_t e = 0; e < len; e++) vb[e] = q8::decode_unsigned(v[e], vs);
      break;
    }
  }
  if (s.grad_dtype == DType::bf16) {
    const auto* g = static_cast<const uint16_t*>(s.g) + base;
    for (size_t e = 0; e < len; e++) gb[e] = bf16_to_f32(g[e]);
  } else {
    std::memcpy(gb, static_cast<const float*>(s.g) + base, len * sizeof(float));
  }
}

void update_block(size_t len, float* pb, float* mb, float* vb, const float* gb, float grad_scale, const Scalars& k) {
  for (size_t e = 0; e < len; e++) update(pb[e], mb[e], vb[e], gb[e], grad_scale, k);
}

void store_block(const AdamWState& s, size_t base, size_t len, const float* pb, const float* mb, const float* vb) {
  auto* wf = static_cast<float*>(s.weights);
  auto* wb = static_cast<uint16_t*>(s.weights);
  if (s.master) std::memcpy(s.master + base, pb, len * sizeof(float));
  if (s.weights && s.weights_dtype == DType::bf16)
    for (size_t e = 0; e < len; e++) wb[base + e] = f32_to_bf16(pb[e]);
  else if (wf && wf != s.master)
    std::memcpy(wf + base, pb, len * sizeof(float));
  switch (s.moments) {
    case OptimizerState::fp32:
      std::memcpy(static_cast<float*>(s.m) + base, mb, len * sizeof(float));
      std::memcpy(static_cast<float*>(s.v) + base, vb, len * sizeof(float));
      break;
    case OptimizerState::bf16: {
      auto* m = static_cast<uint16_t*>(s.m) + base;
      auto* v = static_cast<uint16_t*>(s.v) + base;
      for (size_t e = 0; e < len; e++) m[e] = f32_to_bf16(mb[e]);
      for (size_t e = 0; e < len; e++) v[e] = f32_to_bf16(vb[e]);
      break;
    }
    case OptimizerState::q8: {
      float m_max = 0.0f, v_max = 0.0f;
      for (size_t e = 0; e < len; e++) {
        m_max = std::fmax(m_max, std::fabs(mb[e]));
        v_max = std::fmax(v_max, vb[e]);
      }
      s.m_scale[base / kQuantBlock] = m_max;
      s.v_scale[base / kQuantBlock] = v_max;
      const float mi = q8::inverse_scale(m_max), vi = q8::inverse_scale(v_max);
      auto* m = static_cast<uint8_t*>(s.m) + base;
      auto* v = static_cast<uint8_t*>(s.v) + base;
      for (size_t e = 0; e < len; e++) m[e] = q8::encode_signed(mb[e], mi);
      for (size_t e = 0; e < len; e++) v[e] = q8::encode_unsigned(vb[e], vi);
      break;
    }
  }
}
}  // namespace

void adamw_step(const AdamWState& s, const AdamWParams& p, int t, float grad_scale) {
  STRATA_CHECK(t >= 1, "adamw_step: step count is 1-based");
  STRATA_CHECK(s.master || s.weights, "adamw_step: neither a master nor weights to update");
  STRATA_CHECK(!s.weights || s.weights_dtype == DType::f32 || s.weights_dtype == DType::bf16,
               "adamw_step: weights must be f32 or bf16");
  STRATA_CHECK(s.moments != OptimizerState::q8 || (s.m_scale && s.v_scale), "adamw_step: 8-bit moments need scales");
  STRATA_CHECK(s.grad_dtype == DType::f32 || s.grad_dtype == DType::bf16, "adamw_step: gradients must be f32 or bf16");
  const Scalars k = scalars(p, t);
  alignas(64) float pb[kQuantBlock], mb[kQuantBlock], vb[kQuantBlock], gb[kQuantBlock];
  for (size_t base = 0; base < s.n; base += kQuantBlock) {
    const size_t len = std::min(kQuantBlock, s.n - base);
    load_block(s, base, len, pb, mb, vb, gb);
    update_block(len, pb, mb, vb, gb, grad_scale, k);
    store_block(s, base, len, pb, mb, vb);
  }
}

void adamw_step_parallel(const AdamWState& s, const AdamWParams& p, int t, float grad_scale, size_t max_threads) {
  // Pieces start on multiples of kQuantBlock, so 8-bit moments' scales split with their codes; AdamW is
  // elementwise, so the split changes no bits.
  constexpr size_t kGrain = size_t(64) * kQuantBlock;
  parallel_chunks(
      s.n, kGrain,
      [&](size_t b, size_t e) {
        AdamWState c = s;
        c.n = e - b;
        c.master = s.master ? s.master + b : nullptr;
        const size_t wsz = s.weights_dtype == DType::bf16 ? 2 : 4;
        c.weights = s.weights ? static_cast<std::byte*>(s.weights) + b * wsz : nullptr;
        const size_t msz = s.moments == OptimizerState::fp32 ? 4 : s.moments == OptimizerState::bf16 ? 2 : 1;
        c.m = static_cast<std::byte*>(s.m) + b * msz;
        c.v = static_cast<std::byte*>(s.v) + b * msz;
        if (s.moments == OptimizerState::q8) {
          c.m_scale = s.m_scale + b / kQuantBlock;
          c.v_scale = s.v_scale + b / kQuantBlock;
        }
        c.g = static_cast<const std::byte*>(s.g) + b * (s.grad_dtype == DType::bf16 ? 2 : 4);
        adamw_step(c, p, t, grad_scale);
      },
      max_threads);
}

}  // namespace strata::cpu

namespace strata {
namespace {

void step_one(const AdamWSlot& s, const Tensor& norm_sq, float max_norm, const AdamWParams& p, int t) {
  float scale = 1.0f;
  if (max_norm > 0) {
    float norm = std::sqrt(norm_sq.f32()[0]);
    if (norm > max_norm) scale = max_norm / (norm + 1e-6f);
  }
  const size_t n = size_t(s.g.numel());
  STRATA_CHECK(s.m.dtype == s.v.dtype && size_t(s.m.numel()) == n && size_t(s.v.numel()) == n,
               "adamw_step: m and v must match the gradient");
  AdamWState st;
  st.master = s.master.defined() ? s.master.f32() : nullptr;
  STRATA_CHECK(!st.master || size_t(s.master.numel()) == n, "adamw_step: the master must match the gradient");
  if (s.param_out.defined()) {
    STRATA_CHECK(size_t(s.param_out.numel()) == n, "adamw_step: the weights must match the gradient");
    st.weights = s.param_out.data;
    st.weights_dtype = s.param_out.dtype;
  }
  st.m = s.m.data;
  st.v = s.v.data;
  st.moments = s.m.dtype == DType::f32    ? OptimizerState::fp32
               : s.m.dtype == DType::bf16 ? OptimizerState::bf16
                                          : OptimizerState::q8;
  if (st.moments == OptimizerState::q8) {
    STRATA_CHECK(s.m.dtype == DType::u8 && s.m_scale.defined() && s.v_scale.defined() &&
                     size_t(s.m_scale.numel()) == quant_blocks(n) && size_t(s.v_scale.numel()) == quant_blocks(n),
                 "adamw_step: 8-bit moments need u8 codes and one f32 scale per block");
    st.m_scale = s.m_scale.f32();
    st.v_scale = s.v_scale.f32();
  }
  STRATA_CHECK(s.g.dtype == DType::f32 || s.g.dtype == DType::bf16, "adamw_step: gradients must be f32 or bf16");
  st.g = s.g.data;
  st.grad_dtype = s.g.dtype;
  st.n = n;
  cpu::adamw_step_parallel(st, p, t, scale, 16);
}

}  // namespace

// adamw_step(norm_sq; slots, max_norm, params, t) and its list form: the slots one after another.
void adamw_cpu(const OpCall& c) {
  const auto& p = *static_cast<const AdamWParams*>(c.params);
  for (const AdamWSlot& s : c.slots) step_one(s, c.t[0], c.scalar, p, int(c.n));
}

}  // namespace strata
