// Rotary position embedding (rotate_half convention), cpu reference.
// Every float operation follows transformers' order so inv_freq, cos and sin match it to ~1 ulp.
#include <cmath>
#include <numbers>

#include "engine/error.h"
#include "kernels/grad_cpu.h"
#include "kernels/op_dispatch.h"
#include "kernels/rope.h"

namespace strata::cpu {

// transformers (_compute_default_rope_parameters, _compute_llama3_parameters), all float32:
//   inv_freq = 1.0 / (base ** (arange(0, D, 2).float() / D))
//   wavelen  = 2 * math.pi / inv_freq       (torch evaluates scalar / tensor as reciprocal(t) * scalar)
//   low-frequency band (wavelen > old_ctx / low_freq_factor): inv_freq / factor
//   medium band: smooth = (old_ctx / wavelen - low) / (high - low),
//                (1 - smooth) * inv_freq / factor + smooth * inv_freq
//   high-frequency band (wavelen < old_ctx / high_freq_factor): unchanged
void rope_inv_freq(float* inv_freq, int D, float theta, const RopeScaling& s) {
  STRATA_CHECK(D > 0 && D % 2 == 0, "rope_inv_freq: head_dim must be even");
  const float two_pi = float(2.0 * std::numbers::pi);
  const float old_ctx = float(s.original_max_position_embeddings);
  const float low_wavelen = float(double(s.original_max_position_embeddings) / s.low_freq_factor);
  const float high_wavelen = float(double(s.original_max_position_embeddings) / s.high_freq_factor);
  const float band = float(double(s.high_freq_factor) - double(s.low_freq_factor));
  for (int i = 0; i < D / 2; i++) {
    float e = float(2 * i) / float(D);
    // powf in double then rounded: the correctly rounded float32 result torch's pow also gives.
    float base_pow = float(std::pow(double(theta), double(e)));
    float f = 1.0f / base_pow;
    if (s.llama3) {
      STRATA_CHECK(s.high_freq_factor != s.low_freq_factor, "rope_inv_freq: llama3 needs high != low factor");
      float wavelen = (1.0f / f) * two_pi;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (!(wavelen < high_wavelen)) {
        float smooth = ((1.0f / wavelen) * old_ctx - s.low_freq_factor) / band;
        f = (1.0f - smooth) * f / s.factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
}

namespace {

// Rotates every head of every token by angle(pos) * sign; sign -1 gives the transpose (backward).
// write(out element, value) stores each result.
template <class Write>
void rotate(float* out, const float* x, const int32_t* pos, const float* inv_freq, int N, int H, int D, float sign,
            Write write) {
  STRATA_CHECK(D % 2 == 0, "rope: head_dim must be even");
  const int half = D / 2;
  for (int n = 0; n < N; n++) {
    float p = float(pos[n]);
    for (int i = 0; i < half; i++) {
      float angle = p * inv_freq[i];  // float32 product, as transformers' matmul of inv_freq and positions
      float c = std::cos(angle);
      float s = sign * std::sin(angle);
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

void rope_fwd(float* out, const float* x, const int32_t* pos, const float* inv_freq, int N, int H, int D) {
  rotate(out, x, pos, inv_freq, N, H, D, 1.0f, [](float& o, float y) { o = y; });
}

void rope_bwd(float* dx, const float* dout, const int32_t* pos, const float* inv_freq, int N, int H, int D,
              bool acc_dx) {
  if (!dx) return;
  rotate(dx, dout, pos, inv_freq, N, H, D, -1.0f, [acc_dx](float& o, float y) { write_grad(o, y, acc_dx); });
}

}  // namespace strata::cpu

namespace strata {
// rope_fwd(out, x, pos, inv_freq) and rope_bwd(dx, dout, pos, inv_freq; acc_dx); x is [N, H, D] (or [B, T, H, D],
// flattened over tokens).
void rope_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  const Tensor& x = t[1];
  const int D = int(cols(x)), H = int(x.shape[x.shape.nd - 2]), N = int(t[2].numel());
  if (!c.backward) return cpu::rope_fwd(f32(t[0]), f32(x), t[2].i32(), f32(t[3]), N, H, D);
  cpu::rope_bwd(f32(t[0]), f32(x), t[2].i32(), f32(t[3]), N, H, D, c.acc[0]);
}
}  // namespace strata
