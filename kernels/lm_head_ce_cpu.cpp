// LM head fused with cross-entropy, cpu reference, chunked over tokens: only [chunk, V] logits
// exist at a time. lse is written for every token, ignored ones included (the logits are computed
// for the whole chunk anyway, and evaluation can reuse it); the backward never reads it for them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/dot_cpu.h"
#include "kernels/grad_cpu.h"
#include "kernels/lm_head_ce.h"

namespace strata::cpu {
namespace {

// logits[r, :] = x[r0 + r, :] @ w^T for r < rows.  logits [rows, V]
void chunk_logits(float* logits, const float* x, const float* w, int r0, int rows, int C, int V) {
  for (int r = 0; r < rows; r++) {
    const float* xr = x + size_t(r0 + r) * C;
    for (int v = 0; v < V; v++) logits[size_t(r) * V + v] = dot(xr, w + size_t(v) * C, C);
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

void check_shapes(int N, int C, int V, int chunk) {
  STRATA_CHECK(N >= 0 && C > 0 && V > 0, "lm_head_ce: bad shape");
  STRATA_CHECK(chunk > 0, "lm_head_ce: chunk must be positive");
}

}  // namespace

float lm_head_ce_fwd(float* lse, const float* x, const float* w, const int32_t* targets, int N, int C, int V, int chunk,
                     int* n_valid_out) {
  check_shapes(N, C, V, chunk);
  const int n_valid = count_valid(targets, N, V);
  if (n_valid_out) *n_valid_out = n_valid;
  std::vector<float> logits(size_t(std::min(chunk, std::max(N, 1))) * V);  // [chunk, V]
  double loss_sum = 0.0;  // rows are summed in token order whatever the chunk, so the loss is chunk-invariant
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int rows = std::min(chunk, N - r0);
    chunk_logits(logits.data(), x, w, r0, rows, C, V);
    for (int r = 0; r < rows; r++) {
      const float* l = logits.data() + size_t(r) * V;
      const float m = *std::max_element(l, l + V);
      float sum = 0.0f;
      for (int v = 0; v < V; v++) sum += std::exp(l[v] - m);
      const float row_lse = m + std::log(sum);
      if (lse) lse[r0 + r] = row_lse;
      const int t = targets[r0 + r];
      if (t >= 0) loss_sum += double(row_lse) - double(l[t]);  // -log softmax(l)[t]
    }
  }
  return n_valid > 0 ? float(loss_sum / n_valid) : 0.0f;
}

// dlogits[r, v] = (exp(logit - lse) - [v == target]) * dloss / n_valid for valid rows, 0 otherwise;
// dx (+)= dlogits @ w, dw (+)= dlogits^T @ x (chunks after the first always add).
void lm_head_ce_bwd(float* dx, float* dw, float dloss, const float* x, const float* w, const int32_t* targets,
                    const float* lse, int N, int C, int V, int chunk, bool acc_dx, bool acc_dw) {
  check_shapes(N, C, V, chunk);
  const int n_valid = count_valid(targets, N, V);
  if (!dx && !dw) return;
  if (n_valid == 0) {  // no gradient at all: an overwrite still writes its zeros
    if (dx && !acc_dx) std::fill(dx, dx + size_t(N) * C, 0.0f);
    if (dw && !acc_dw) std::fill(dw, dw + size_t(V) * C, 0.0f);
    return;
  }
  const float g_scale = dloss / float(n_valid);
  const int cap = std::min(chunk, N);
  std::vector<float> g(size_t(cap) * V);  // [chunk, V] logits, then their gradient
  std::vector<float> tmp(C);              // [C]
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int rows = std::min(chunk, N - r0);
    chunk_logits(g.data(), x, w, r0, rows, C, V);
    for (int r = 0; r < rows; r++) {
      float* gr = g.data() + size_t(r) * V;
      const int t = targets[r0 + r];
      if (t < 0) {
        std::fill(gr, gr + V, 0.0f);
        continue;
      }
      const float row_lse = lse[r0 + r];
      for (int v = 0; v < V; v++) gr[v] = std::exp(gr[v] - row_lse) * g_scale;
      gr[t] -= g_scale;
    }
    if (dx)
      for (int r = 0; r < rows; r++) {
        float* dxr = dx + size_t(r0 + r) * C;
        if (targets[r0 + r] < 0) {
          if (!acc_dx) std::fill(dxr, dxr + C, 0.0f);
          continue;
        }
        std::fill(tmp.begin(), tmp.end(), 0.0f);
        const float* gr = g.data() + size_t(r) * V;
        for (int v = 0; v < V; v++) {
          const float* wv = w + size_t(v) * C;
          for (int c = 0; c < C; c++) tmp[c] += gr[v] * wv[c];
        }
        for (int c = 0; c < C; c++) write_grad(dxr[c], tmp[c], acc_dx);
      }
    if (dw)
      for (int v = 0; v < V; v++) {
        std::fill(tmp.begin(), tmp.end(), 0.0f);
        for (int r = 0; r < rows; r++) {
          const float gv = g[size_t(r) * V + v];
          const float* xr = x + size_t(r0 + r) * C;
          for (int c = 0; c < C; c++) tmp[c] += gv * xr[c];
        }
        float* dwv = dw + size_t(v) * C;
        for (int c = 0; c < C; c++) write_grad(dwv[c], tmp[c], acc_dw || r0 > 0);
      }
  }
}

void lm_head_logits(float* logits, const float* x, const float* w, int N, int C, int V) {
  chunk_logits(logits, x, w, 0, N, C, V);
}

}  // namespace strata::cpu
