// LM head fused with cross-entropy, cpu reference, chunked over tokens: only [chunk, V] logits
// exist at a time. lse is written for every token, ignored ones included (the logits are computed
// for the whole chunk anyway, and evaluation can reuse it); the backward never reads it for them.
// The training variant (lm_head_ce_fwd_grad) runs the same per-chunk code in the same order as
// the forward followed by the backward, so its loss and gradients are the same bits.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/dot_cpu.h"
#include "kernels/grad_cpu.h"
#include "kernels/lm_head_ce.h"
#include "kernels/op_dispatch.h"

namespace strata::cpu {
namespace {

// logits[r, :] = x[r0 + r, :] @ w^T for r < rows.  logits [rows, V]
void chunk_logits(float* logits, const float* x, const float* w, int r0, int rows, int C, int V) {
  for (int r = 0; r < rows; r++) {
    const float* xr = x + size_t(r0 + r) * C;
    for (int v = 0; v < V; v++) logits[size_t(r) * V + v] = dot(xr, w + size_t(v) * C, C);
  }
}

// lse [rows] of a chunk's logits [rows, V] over their first Vr columns (the rest is vocabulary
// padding); adds its rows' losses to loss_sum in token order.
void chunk_lse_loss(float* lse, double& loss_sum, const float* logits, const int32_t* targets, int rows, int V,
                    int Vr) {
  for (int r = 0; r < rows; r++) {
    const float* l = logits + size_t(r) * V;
    const float m = *std::max_element(l, l + Vr);
    float sum = 0.0f;
    for (int v = 0; v < Vr; v++) sum += std::exp(l[v] - m);
    const float row_lse = m + std::log(sum);
    if (lse) lse[r] = row_lse;
    const int t = targets[r];
    if (t >= 0) loss_sum += double(row_lse) - double(l[t]);  // -log softmax(l)[t]
  }
}

// A chunk's gradient from its logits g [rows, V] (overwritten by dL/dlogits = (exp(logit - lse) -
// [v == target]) * g_scale for valid rows and real columns v < Vr, 0 otherwise): dx rows [rows, C]
// (+)= dlogits @ w and dw [V, C] (+)= dlogits^T @ x rows (padded rows v >= Vr: zeros). x, dx,
// targets and lse point at the chunk's first row. tmp [C].
void chunk_grads(float* g, float* dx, GradOut dw, const float* x, const float* w, const int32_t* targets,
                 const float* lse, int rows, int C, int V, int Vr, float g_scale, bool acc_dx, bool acc_dw,
                 float* tmp) {
  for (int r = 0; r < rows; r++) {
    float* gr = g + size_t(r) * V;
    const int t = targets[r];
    if (t < 0) {
      std::fill(gr, gr + V, 0.0f);
      continue;
    }
    for (int v = 0; v < Vr; v++) gr[v] = std::exp(gr[v] - lse[r]) * g_scale;
    std::fill(gr + Vr, gr + V, 0.0f);
    gr[t] -= g_scale;
  }
  if (dx)
    for (int r = 0; r < rows; r++) {
      float* dxr = dx + size_t(r) * C;
      if (targets[r] < 0) {
        if (!acc_dx) std::fill(dxr, dxr + C, 0.0f);
        continue;
      }
      std::fill(tmp, tmp + C, 0.0f);
      const float* gr = g + size_t(r) * V;
      for (int v = 0; v < Vr; v++) {  // padded columns add nothing
        const float* wv = w + size_t(v) * C;
        for (int c = 0; c < C; c++) tmp[c] += gr[v] * wv[c];
      }
      for (int c = 0; c < C; c++) write_grad(dxr[c], tmp[c], acc_dx);
    }
  if (dw)
    for (int v = 0; v < V; v++) {
      std::fill(tmp, tmp + C, 0.0f);
      for (int r = 0; r < rows && v < Vr; r++) {  // a padded row's gradient is exactly 0
        const float gv = g[size_t(r) * V + v];
        const float* xr = x + size_t(r) * C;
        for (int c = 0; c < C; c++) tmp[c] += gv * xr[c];
      }
      dw.write(size_t(v) * C, tmp, size_t(C), acc_dw);
    }
}

int count_valid(const int32_t* targets, int N, int V) {
  int n = 0;
  for (int i = 0; i < N; i++) {
    STRATA_CHECK(targets[i] < V, "lm_head_ce: target id out of range");
    n += targets[i] >= 0;
  }
  return n;
}

// The real vocabulary (0: all V rows), checked against V.
int check_shapes(int N, int C, int V, int chunk, int vocab) {
  STRATA_CHECK(N >= 0 && C > 0 && V > 0, "lm_head_ce: bad shape");
  STRATA_CHECK(chunk > 0, "lm_head_ce: chunk must be positive");
  STRATA_CHECK(vocab >= 0 && vocab <= V, "lm_head_ce: vocab must be in [1, V] (0: V)");
  return vocab > 0 ? vocab : V;
}

// No valid target: no gradient at all, but an overwrite still writes its zeros.
void zero_grads(float* dx, GradOut dw, int N, int C, int V, bool acc_dx, bool acc_dw) {
  if (dx && !acc_dx) std::fill(dx, dx + size_t(N) * C, 0.0f);
  if (dw && !acc_dw) dw.zero(0, size_t(V) * C);
}

}  // namespace

float lm_head_ce_fwd(float* lse, const float* x, const float* w, const int32_t* targets, int N, int C, int V, int chunk,
                     int* n_valid_out, int vocab) {
  const int Vr = check_shapes(N, C, V, chunk, vocab);
  const int n_valid = count_valid(targets, N, Vr);
  if (n_valid_out) *n_valid_out = n_valid;
  std::vector<float> logits(size_t(std::min(chunk, std::max(N, 1))) * V);  // [chunk, V]
  double loss_sum = 0.0;  // rows are summed in token order whatever the chunk, so the loss is chunk-invariant
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int rows = std::min(chunk, N - r0);
    chunk_logits(logits.data(), x, w, r0, rows, C, V);
    chunk_lse_loss(lse ? lse + r0 : nullptr, loss_sum, logits.data(), targets + r0, rows, V, Vr);
  }
  return n_valid > 0 ? float(loss_sum / n_valid) : 0.0f;
}

// dx (+)= dlogits @ w, dw (+)= dlogits^T @ x (chunks after the first always add).
void lm_head_ce_bwd(float* dx, GradOut dw, float dloss, const float* x, const float* w, const int32_t* targets,
                    const float* lse, int N, int C, int V, int chunk, bool acc_dx, bool acc_dw, int vocab) {
  const int Vr = check_shapes(N, C, V, chunk, vocab);
  const int n_valid = count_valid(targets, N, Vr);
  if (!dx && !dw) return;
  if (n_valid == 0) return zero_grads(dx, dw, N, C, V, acc_dx, acc_dw);
  const float g_scale = dloss / float(n_valid);
  std::vector<float> g(size_t(std::min(chunk, N)) * V);  // [chunk, V] logits, then their gradient
  std::vector<float> tmp(C);                             // [C]
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int rows = std::min(chunk, N - r0);
    chunk_logits(g.data(), x, w, r0, rows, C, V);
    chunk_grads(g.data(), dx ? dx + size_t(r0) * C : nullptr, dw, x + size_t(r0) * C, w, targets + r0, lse + r0, rows,
                C, V, Vr, g_scale, acc_dx, acc_dw || r0 > 0, tmp.data());
  }
}

float lm_head_ce_fwd_grad(float* dx, GradOut dw, float dloss, const float* x, const float* w, const int32_t* targets,
                          int N, int C, int V, int chunk, bool acc_dw, int* n_valid_out, int vocab) {
  const int Vr = check_shapes(N, C, V, chunk, vocab);
  const int n_valid = count_valid(targets, N, Vr);
  if (n_valid_out) *n_valid_out = n_valid;
  if (n_valid == 0) {  // loss 0, as lm_head_ce_fwd says
    zero_grads(dx, dw, N, C, V, false, acc_dw);
    return 0.0f;
  }
  const float g_scale = dloss / float(n_valid);
  const int cap = std::min(chunk, N);
  std::vector<float> g(size_t(cap) * V);             // [chunk, V] logits, then their gradient
  std::vector<float> lse(static_cast<size_t>(cap));  // [chunk]
  std::vector<float> tmp(C);                         // [C]
  double loss_sum = 0.0;
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int rows = std::min(chunk, N - r0);
    chunk_logits(g.data(), x, w, r0, rows, C, V);
    chunk_lse_loss(lse.data(), loss_sum, g.data(), targets + r0, rows, V, Vr);
    chunk_grads(g.data(), dx ? dx + size_t(r0) * C : nullptr, dw, x + size_t(r0) * C, w, targets + r0, lse.data(), rows,
                C, V, Vr, g_scale, false, acc_dw || r0 > 0, tmp.data());
  }
  return float(loss_sum / n_valid);
}

void lm_head_ce_bwd_saved(float* dx, const float* saved_dx, float dloss, float dloss_assumed, bool dw_written, long n,
                          bool acc_dx) {
  if (dw_written && dloss != dloss_assumed)
    STRATA_THROW(Error, fmt::format("lm_head_ce: its training variant wrote the weight gradient in forward for a loss "
                                    "gradient of {}, but backward got {}; record the LM head without grad_in_forward "
                                    "when the loss is scaled or read by other ops",
                                    dloss_assumed, dloss));
  const float scale = dloss / dloss_assumed;  // exactly 1 for the tape's seed: the copy keeps every bit
  for (long i = 0; i < n; i++) write_grad(dx[i], saved_dx[i] * scale, acc_dx);
}

void lm_head_logits(float* logits, const float* x, const float* w, int N, int C, int V) {
  chunk_logits(logits, x, w, 0, N, C, V);
}

}  // namespace strata::cpu

namespace strata {
// The four passes (engine/ops/lm_head_ce.cpp): 0 lm_head_ce_fwd(loss, lse, x, w, targets), 1 lm_head_ce_bwd(dx, dw,
// dloss, x, w, targets, lse; acc_dx, acc_dw), 2 lm_head_ce_fwd_grad(loss, dx, dw, x, w, targets; dloss_assumed,
// acc_dw), 3 lm_head_ce_bwd_saved(dx, dloss, saved_dx; acc_dx, dw_written); n: chunk rows, n2: the vocabulary.
void lm_head_ce_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  const int chunk = int(c.n), vocab = int(c.n2);
  switch (c.form) {
    case 0: {
      const Tensor &x = t[2], &w = t[3];
      t[0].f32()[0] = cpu::lm_head_ce_fwd(f32(t[1]), f32(x), f32(w), t[4].i32(), int(rows(x)), int(cols(x)),
                                          int(w.shape[0]), chunk, nullptr, vocab);
      return;
    }
    case 1: {
      const Tensor &x = t[3], &w = t[4];
      return cpu::lm_head_ce_bwd(f32(t[0]), grad_out(t[1]), t[2].f32()[0], f32(x), f32(w), t[5].i32(), f32(t[6]),
                                 int(rows(x)), int(cols(x)), int(w.shape[0]), chunk, c.acc[0], c.acc[1], vocab);
    }
    case 2: {
      const Tensor &x = t[3], &w = t[4];
      t[0].f32()[0] =
          cpu::lm_head_ce_fwd_grad(f32(t[1]), grad_out(t[2]), c.scalar, f32(x), f32(w), t[5].i32(), int(rows(x)),
                                   int(cols(x)), int(w.shape[0]), chunk, c.acc[1], nullptr, vocab);
      return;
    }
    default:
      cpu::lm_head_ce_bwd_saved(f32(t[0]), f32(t[2]), t[1].f32()[0], c.scalar, c.acc[1], long(t[0].numel()), c.acc[0]);
  }
}
}  // namespace strata
