// Token embedding, cpu reference.
#include <cstring>

#include "engine/error.h"
#include "kernels/embedding.h"

namespace strata::cpu {

void embedding_fwd(float* out, const int32_t* tokens, const float* wte, int N, int C) {
  for (int n = 0; n < N; n++) {
    STRATA_CHECK(tokens[n] >= 0, "embedding_fwd: negative token id");
    std::memcpy(out + size_t(n) * C, wte + size_t(tokens[n]) * C, sizeof(float) * C);
  }
}

void embedding_bwd(float* dwte, const float* dout, const int32_t* tokens, int N, int C) {
  if (!dwte) return;
  // Tokens in order, so a repeated token accumulates deterministically.
  for (int n = 0; n < N; n++) {
    STRATA_CHECK(tokens[n] >= 0, "embedding_bwd: negative token id");
    float* dst = dwte + size_t(tokens[n]) * C;  // [C]
    const float* src = dout + size_t(n) * C;    // [C]
    for (int c = 0; c < C; c++) dst[c] += src[c];
  }
}

}  // namespace strata::cpu
