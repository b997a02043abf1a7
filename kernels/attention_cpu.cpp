// Causal grouped-query attention, cpu reference. The forward keeps one row of scores at a time and
// saves lse; the backward is the flash-attention formula, recomputing p from lse row by row.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/attention.h"
#include "kernels/grad_cpu.h"
#include "kernels/op_dispatch.h"

namespace strata::cpu {
namespace {

float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

struct Layout {
  int T, Hq, Hkv, D;
  size_t q(int b, int t, int h) const { return ((size_t(b) * T + t) * Hq + h) * D; }    // q, out, dout
  size_t kv(int b, int t, int h) const { return ((size_t(b) * T + t) * Hkv + h) * D; }  // k, v
  size_t lse(int b, int h, int t) const { return (size_t(b) * Hq + h) * T + t; }
};

void check_shapes(int B, int T, int Hq, int Hkv, int D) {
  STRATA_CHECK(B > 0 && T > 0 && D > 0, "attention: empty shape");
  STRATA_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: Hq must be a multiple of Hkv");
}

// The first key query i of row b attends: its example's first token (sample packing), else 0.
int first_key(const int32_t* pos, int b, int T, int i) {
  if (!pos) return 0;
  const int p = pos[size_t(b) * T + i];
  STRATA_CHECK(p >= 0 && p <= i, "attention: a position outside [0, its index in the row]");
  return i - p;
}

}  // namespace

void attention_fwd(float* out, float* lse, const float* q, const float* k, const float* v, int B, int T, int Hq,
                   int Hkv, int D, const int32_t* pos) {
  check_shapes(B, T, Hq, Hkv, D);
  const Layout L{T, Hq, Hkv, D};
  const int group = Hq / Hkv;
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> s(T);  // [T] scores of one query row
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++) {
      const int kh = h / group;
      for (int i = 0; i < T; i++) {
        const float* qi = q + L.q(b, i, h);
        const int j0 = first_key(pos, b, T, i);
        float m = -INFINITY;
        for (int j = j0; j <= i; j++) {  // causal: keys j0..i
          s[j] = dot(qi, k + L.kv(b, j, kh), D) * scale;
          m = std::max(m, s[j]);
        }
        float sum = 0.0f;
        for (int j = j0; j <= i; j++) {
          s[j] = std::exp(s[j] - m);
          sum += s[j];
        }
        float* oi = out + L.q(b, i, h);
        std::fill(oi, oi + D, 0.0f);
        for (int j = j0; j <= i; j++) {
          const float p = s[j] / sum;
          const float* vj = v + L.kv(b, j, kh);
          for (int d = 0; d < D; d++) oi[d] += p * vj[d];
        }
        if (lse) lse[L.lse(b, h, i)] = m + std::log(sum);
      }
    }
}

// For each query row i: Di = dout_i . out_i, and for keys j <= i:
//   p = exp(s_ij - lse_i), dv_j += p dout_i, ds = p (dout_i . v_j - Di),
//   dq_i += scale ds k_j, dk_j += scale ds q_i.
void attention_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                   const float* out, const float* lse, int B, int T, int Hq, int Hkv, int D, bool acc_dq, bool acc_dk,
                   bool acc_dv, const int32_t* pos) {
  check_shapes(B, T, Hq, Hkv, D);
  if (!dq && !dk && !dv) return;
  const Layout L{T, Hq, Hkv, D};
  const int group = Hq / Hkv;
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> dk_acc(size_t(T) * D), dv_acc(size_t(T) * D);  // [T, D] for one kv head
  std::vector<float> dq_acc(D);                                     // [D] for one query row
  for (int b = 0; b < B; b++)
    for (int kh = 0; kh < Hkv; kh++) {
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
      for (int h = kh * group; h < (kh + 1) * group; h++)
        for (int i = 0; i < T; i++) {
          const float* qi = q + L.q(b, i, h);
          const float* doi = dout + L.q(b, i, h);
          const float Di = dot(doi, out + L.q(b, i, h), D);
          const float lse_i = lse[L.lse(b, h, i)];
          std::fill(dq_acc.begin(), dq_acc.end(), 0.0f);
          for (int j = first_key(pos, b, T, i); j <= i; j++) {
            const float* kj = k + L.kv(b, j, kh);
            const float* vj = v + L.kv(b, j, kh);
            const float p = std::exp(dot(qi, kj, D) * scale - lse_i);
            const float ds = p * (dot(doi, vj, D) - Di) * scale;
            float* dkj = dk_acc.data() + size_t(j) * D;
            float* dvj = dv_acc.data() + size_t(j) * D;
            for (int d = 0; d < D; d++) {
              dq_acc[d] += ds * kj[d];
              dkj[d] += ds * qi[d];
              dvj[d] += p * doi[d];
            }
          }
          if (dq) {
            float* dqi = dq + L.q(b, i, h);
            for (int d = 0; d < D; d++) write_grad(dqi[d], dq_acc[d], acc_dq);
          }
        }
      for (int j = 0; j < T; j++) {
        const size_t o = L.kv(b, j, kh);
        for (int d = 0; d < D; d++) {
          if (dk) write_grad(dk[o + d], dk_acc[size_t(j) * D + d], acc_dk);
          if (dv) write_grad(dv[o + d], dv_acc[size_t(j) * D + d], acc_dv);
        }
      }
    }
}

}  // namespace strata::cpu

namespace strata {
// attention_fwd(out, lse, q, k, v, pos) and attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, pos; acc_dq, acc_dk,
// acc_dv): pos [B*T] i32 defined for packed rows.
void attention_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  const Tensor &q = t[c.backward ? 4 : 2], &k = t[c.backward ? 5 : 3], &pos = t[c.backward ? 9 : 5];
  const int B = int(q.shape[0]), T = int(q.shape[1]), Hq = int(q.shape[2]), Hkv = int(k.shape[2]), D = int(q.shape[3]);
  const int32_t* packed = nullptr;
  if (pos.defined()) {
    STRATA_CHECK(pos.dtype == DType::i32 && pos.numel() == q.shape[0] * q.shape[1],
                 "attention: the packed positions are not [B*T] i32");
    packed = pos.i32();
  }
  if (!c.backward) return cpu::attention_fwd(f32(t[0]), f32(t[1]), f32(q), f32(k), f32(t[4]), B, T, Hq, Hkv, D, packed);
  cpu::attention_bwd(f32(t[0]), f32(t[1]), f32(t[2]), f32(t[3]), f32(q), f32(k), f32(t[6]), f32(t[7]), f32(t[8]), B, T,
                     Hq, Hkv, D, c.acc[0], c.acc[1], c.acc[2], packed);
}
}  // namespace strata
