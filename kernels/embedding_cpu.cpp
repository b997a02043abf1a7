// Token embedding, cpu reference.
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "kernels/embedding.h"

namespace strata::cpu {

void embedding_fwd(float* out, const int32_t* tokens, const float* wte, int N, int C) {
  for (int n = 0; n < N; n++) {
    STRATA_CHECK(tokens[n] >= 0, "embedding_fwd: negative token id");
    std::memcpy(out + size_t(n) * C, wte + size_t(tokens[n]) * C, sizeof(float) * C);
  }
}

void embedding_bwd(GradOut g, const float* dout, const int32_t* tokens, int N, int C, int V) {
  if (!g) return;
  if (g.is_bf16()) {
    // The rows hit, in order of first appearance, and their fp32 sums [rows, C].
    std::vector<int> slot(size_t(V), -1), row_of;
    std::vector<float> sums;
    for (int n = 0; n < N; n++) {
      STRATA_CHECK(tokens[n] >= 0 && tokens[n] < V, "embedding_bwd: token id outside the vocabulary");
      int& s = slot[size_t(tokens[n])];
      if (s < 0) {
        s = int(row_of.size());
        row_of.push_back(tokens[n]);
        sums.resize(sums.size() + size_t(C), 0.0f);
      }
      float* dst = sums.data() + size_t(s) * C;
      const float* src = dout + size_t(n) * C;
      for (int c = 0; c < C; c++) dst[c] += src[c];
    }
    for (size_t s = 0; s < row_of.size(); s++) g.write(size_t(row_of[s]) * C, sums.data() + s * C, size_t(C), true);
    return;
  }
  float* dwte = g.f32();
  // Tokens in order, so a repeated token accumulates deterministically.
  for (int n = 0; n < N; n++) {
    STRATA_CHECK(tokens[n] >= 0, "embedding_bwd: negative token id");
    float* dst = dwte + size_t(tokens[n]) * C;  // [C]
    const float* src = dout + size_t(n) * C;    // [C]
    for (int c = 0; c < C; c++) dst[c] += src[c];
  }
}

}  // namespace strata::cpu
