// Rotary position embedding (rotate_half convention), cpu reference.
// Every float operation follows transformers' order so inv_freq, cos and sin match it to ~1 ulp.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/error.h"
#include "kernels/grad_cpu.h"
#include "kernels/op_dispatch.h"
#include "kernels/rope.h"

namespace strata::cpu {

namespace {

// theta^(2i/D) as transformers forms it: the exponent float(2i) / float(D) in float32, the power correctly
// rounded to float32 (torch's pow gives the same).
float theta_pow(double theta, int i, int D) {
  const float e = float(2 * i) / float(D);
  return float(std::pow(theta, double(e)));
}

// _compute_llama3_parameters, all float32:
//   wavelen  = 2 * math.pi / inv_freq       (torch evaluates scalar / tensor as reciprocal(t) * scalar)
//   low-frequency band (wavelen > old_ctx / low_freq_factor): inv_freq / factor
//   medium band: smooth = (old_ctx / wavelen - low) / (high - low),
//                (1 - smooth) * inv_freq / factor + smooth * inv_freq
//   high-frequency band (wavelen < old_ctx / high_freq_factor): unchanged
void llama3(float* inv_freq, int D, const RopeScaling& s) {
  STRATA_CHECK(s.high_freq_factor != s.low_freq_factor, "rope_inv_freq: llama3 needs high != low factor");
  const float two_pi = float(2.0 * std::numbers::pi);
  const float factor = float(s.factor);
  const float old_ctx = float(s.original_max_position_embeddings);
  const float low_wavelen = float(double(s.original_max_position_embeddings) / s.low_freq_factor);
  const float high_wavelen = float(double(s.original_max_position_embeddings) / s.high_freq_factor);
  const float band = float(double(s.high_freq_factor) - double(s.low_freq_factor));
  for (int i = 0; i < D / 2; i++) {
    float f = inv_freq[i];
    float wavelen = (1.0f / f) * two_pi;
    if (wavelen > low_wavelen) {
      f = f / factor;
    } else if (!(wavelen < high_wavelen)) {
      float smooth = ((1.0f / wavelen) * old_ctx - s.low_freq_factor) / band;
      f = (1.0f - smooth) * f / factor + smooth * f;
    }
    inv_freq[i] = f;
  }
}

// _compute_dynamic_ntk_parameters at a length L > max_position_embeddings (a 0-d int64 tensor there, so the new
// base is float32 arithmetic): base' = theta * ((factor * L / max_pos) - (factor - 1)) ** (D / (D - 2)).
void dynamic(float* inv_freq, int D, float theta, const RopeScaling& s, const RopeTableKey& k) {
  STRATA_CHECK(D > 2, "rope_inv_freq: dynamic needs head_dim > 2");
  float r = float(s.factor) * float(k.seq_len);
  r = r / float(k.max_position_embeddings);
  r = r - float(s.factor - 1.0);
  const float scaled = std::pow(r, float(double(D) / double(D - 2)));  // powf, as torch's pow of a float32 scalar
  const float base = theta * scaled;
  for (int i = 0; i < D / 2; i++) inv_freq[i] = 1.0f / theta_pow(double(base), i, D);
}

// _compute_yarn_parameters: a ramp over dimensions [low, high] (from the rotations beta_fast and beta_slow
// complete in the original context, in Python doubles) blends interpolated (inv_freq / factor) and extrapolated
// (inv_freq) frequencies, in float32.
void yarn(float* inv_freq, int D, float theta, const RopeScaling& s) {
  const double beta_fast = s.beta_fast != 0 ? s.beta_fast : 32.0, beta_slow = s.beta_slow != 0 ? s.beta_slow : 1.0;
  const double base = double(theta), ctx = double(s.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (double(D) * std::log(ctx / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(D - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const float lo = float(low), width = float(high - low), factor = float(s.factor);
  for (int i = 0; i < D / 2; i++) {
    const float pos_freq = theta_pow(base, i, D);
    const float extrapolated = 1.0f / pos_freq, interpolated = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((float(i) - lo) / width, 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    inv_freq[i] = interpolated * (1.0f - extrapolation) + extrapolated * extrapolation;
  }
}

}  // namespace

// transformers' _compute_*_parameters (modeling_rope_utils.py); the default table is
//   inv_freq = 1.0 / (base ** (arange(0, D, 2).float() / D))            all float32
// linear divides it by factor; longrope divides by short_factor[i] (long_factor[i] past the original context)
// before the reciprocal: 1.0 / (ext[i] * base ** (2i/D)).
void rope_inv_freq(float* inv_freq, int D, float theta, const RopeScaling& s, const RopeTableKey& k) {
  STRATA_CHECK(D > 0 && D % 2 == 0, "rope_inv_freq: head_dim must be even");
  switch (s.type) {
    case RopeType::dynamic:
      if (k.seq_len > k.max_position_embeddings) return dynamic(inv_freq, D, theta, s, k);
      break;
    case RopeType::yarn:
      return yarn(inv_freq, D, theta, s);
    case RopeType::longrope: {
      const std::vector<float>& ext = k.seq_len > s.original_max_position_embeddings ? s.long_factor : s.short_factor;
      STRATA_CHECK(int(ext.size()) == D / 2, "rope_inv_freq: longrope factors must have head_dim/2 entries");
      for (int i = 0; i < D / 2; i++) inv_freq[i] = 1.0f / (ext[size_t(i)] * theta_pow(double(theta), i, D));
      return;
    }
    default:
      break;
  }
  for (int i = 0; i < D / 2; i++) inv_freq[i] = 1.0f / theta_pow(double(theta), i, D);
  if (s.type == RopeType::linear)
    for (int i = 0; i < D / 2; i++) inv_freq[i] /= float(s.factor);
  if (s.type == RopeType::llama3) llama3(inv_freq, D, s);
}

// yarn: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are given, else
// get_mscale(factor) = 0.1 * ln(factor) + 1 (1 for factor <= 1). longrope: sqrt(1 + ln(factor) / ln(original))
// (1 for factor <= 1), factor defaulting to max_position_embeddings / original. An explicit attention_factor wins.
float rope_attention_factor(const RopeScaling& s, int max_position_embeddings) {
  if (s.type != RopeType::yarn && s.type != RopeType::longrope) return 1.0f;
  if (s.attention_factor != 0) return float(s.attention_factor);
  const double ctx = double(s.original_max_position_embeddings);
  if (s.type == RopeType::longrope) {
    const double factor = s.factor != 0 ? s.factor : double(max_position_embeddings) / ctx;
    return factor <= 1.0 ? 1.0f : float(std::sqrt(1 + std::log(factor) / std::log(ctx)));
  }
  auto mscale = [&](double m) { return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0; };
  if (s.mscale != 0 && s.mscale_all_dim != 0) return float(mscale(s.mscale) / mscale(s.mscale_all_dim));
  return float(mscale(1.0));
}

}  // namespace strata::cpu

namespace strata {
int rope_table_length(const RopeScaling& s, int max_position_embeddings, int held, int seq_len) {
  if (s.type == RopeType::dynamic) {
    // dynamic_frequency_update: max_seq_len_cached starts at max_position_embeddings.
    const int cached = std::max(held, max_position_embeddings);
    if (seq_len > cached) return seq_len;                                                 // growth
    if (seq_len < max_position_embeddings && cached > max_position_embeddings) return 0;  // reset
    return held;
  }
  if (s.type == RopeType::longrope) {
    const int original = s.original_max_position_embeddings;
    return (seq_len > original) == (held > original) ? held : seq_len;
  }
  return held;
}
}  // namespace strata

namespace strata::cpu {
namespace {

// Rotates every head of every token by angle(pos) * sign, scaled by `scale` (cos and sin both multiplied, as
// transformers applies its attention_scaling); sign -1 gives the transpose (backward).
// write(out element, value) stores each result.
template <class Write>
void rotate(float* out, const float* x, const int32_t* pos, const float* inv_freq, int N, int H, int D, float sign,
            float scale, Write write) {
  STRATA_CHECK(D % 2 == 0, "rope: head_dim must be even");
  const int half = D / 2;
  for (int n = 0; n < N; n++) {
    float p = float(pos[n]);
    for (int i = 0; i < half; i++) {
      float angle = p * inv_freq[i];  // float32 product, as transformers' matmul of inv_freq and positions
      float c = std::cos(angle) * scale;
      float s = sign * (std::sin(angle) * scale);
      for (int h = 0; h < H; h++) {
        size_t base = (size_t(n) * H + h) * D;  // x[n, h, :]
        float x1 = x[base + i], x2 = x[base + i + half];
        // q * cos + rotate_half(q) * sin, rotate_half(q) = cat(-q2, q1)
        float y1 = x1 * c + (-x2) * s;
        float y2 = x2 * c + x1 * s;
        write(out[base + i], y1);
        write(out[base + i + half], y2);
      }
    }
  }
}

}  // namespace

void rope_fwd(float* out, const float* x, const int32_t* pos, const float* inv_freq, int N, int H, int D, float scale) {
  rotate(out, x, pos, inv_freq, N, H, D, 1.0f, scale, [](float& o, float y) { o = y; });
}

void rope_bwd(float* dx, const float* dout, const int32_t* pos, const float* inv_freq, int N, int H, int D, bool acc_dx,
              float scale) {
  if (!dx) return;
  rotate(dx, dout, pos, inv_freq, N, H, D, -1.0f, scale, [acc_dx](float& o, float y) { write_grad(o, y, acc_dx); });
}

}  // namespace strata::cpu

namespace strata {
// rope_fwd(out, x, pos, inv_freq; scalar: the attention factor) and rope_bwd(dx, dout, pos, inv_freq; acc_dx,
// scalar); x is [N, H, D] (or [B, T, H, D], flattened over tokens).
void rope_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  const Tensor& x = t[1];
  const int D = int(cols(x)), H = int(x.shape[x.shape.nd - 2]), N = int(t[2].numel());
  if (!c.backward) return cpu::rope_fwd(f32(t[0]), f32(x), t[2].i32(), f32(t[3]), N, H, D, c.scalar);
  cpu::rope_bwd(f32(t[0]), f32(x), t[2].i32(), f32(t[3]), N, H, D, c.acc[0], c.scalar);
}
}  // namespace strata
