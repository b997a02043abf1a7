// Token embedding, cpu reference.
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "kernels/embedding.h"
#include "kernels/op_dispatch.h"

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

namespace strata {
// embedding_fwd(out, tokens, wte) and embedding_bwd(dwte, dout, tokens; acc_dwte): rows no token hit get zeros
// (an overwrite zeroes the table first), the others add, in token order.
void embedding_cpu(const OpCall& c) {
  using namespace dispatch;
  const auto& t = c.t;
  if (!c.backward) return cpu::embedding_fwd(f32(t[0]), t[1].i32(), f32(t[2]), int(t[1].numel()), int(cols(t[2])));
  if (!t[0].defined()) return;
  if (!c.acc[0]) std::memset(t[0].data, 0, t[0].bytes());
  cpu::embedding_bwd(grad_out(t[0]), f32(t[1]), t[2].i32(), int(t[2].numel()), int(cols(t[1])), int(t[0].shape[0]));
}
}  // namespace strata
