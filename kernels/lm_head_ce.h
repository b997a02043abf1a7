// The LM head fused with cross-entropy, chunked over tokens: the full [N, V] logits are never
// materialised; at most [chunk, V] exist at a time.
// Shapes: x [N, C] (final-norm output), w [V, C] (lm_head or tied embedding), targets [N]
// (a target < 0 is ignored, like Hugging Face's -100), lse [N] (saved: log-sum-exp of the logits).
// The loss is the mean over non-ignored tokens.
// `vocab` (0: V) is the real vocabulary: w's rows vocab..V-1 are padding (a vocabulary padded to a
// multiple of 64, model/llama/llama.h). Their logits take no part in the softmax: probability 0, so their
// dlogits, their dw rows (overwritten or added) and their share of dx are exact zeros, and the loss,
// lse and the real rows' gradients are the same bits as with w's first `vocab` rows alone. A target
// >= vocab is out of range.
#pragma once
#include <cstdint>

#include "kernels/grad_cpu.h"

namespace strata::cpu {
// Returns the mean loss; writes lse. n_valid_out (optional) gets the count of non-ignored targets.
float lm_head_ce_fwd(float* lse, const float* x, const float* w, const int32_t* targets, int N, int C, int V, int chunk,
                     int* n_valid_out, int vocab = 0);
// dx (+)= dL/dx and dw (+)= dL/dw (either may be null; added into when acc_dx / acc_dw, else
// overwritten) for dL = dloss * loss, rebuilding each chunk's logits from x and w and
// normalising with the saved lse. dw may be bf16: each chunk's term is written once (chunks after the
// first add), as the cuda backend's one dw GEMM per chunk rounds.
void lm_head_ce_bwd(float* dx, GradOut dw, float dloss, const float* x, const float* w, const int32_t* targets,
                    const float* lse, int N, int C, int V, int chunk, bool acc_dx, bool acc_dw, int vocab = 0);
// The training variant: the forward (returns the mean loss) and, from the same logits at once,
// the gradients for dL = dloss * loss: dx [N, C] overwritten (may be null) and dw [V, C] (+)= by
// acc_dw (null: a frozen head). The same bits as lm_head_ce_fwd then lm_head_ce_bwd(acc_dx false).
float lm_head_ce_fwd_grad(float* dx, GradOut dw, float dloss, const float* x, const float* w, const int32_t* targets,
                          int N, int C, int V, int chunk, bool acc_dw, int* n_valid_out, int vocab = 0);
// Its backward: dx [n] (+)= saved_dx * dloss / dloss_assumed. Throws when dw_written (the forward
// wrote dw for dloss_assumed) and dloss differs: that weight gradient would be wrong.
void lm_head_ce_bwd_saved(float* dx, const float* saved_dx, float dloss, float dloss_assumed, bool dw_written, long n,
                          bool acc_dx);
// Plain logits [N, V] for evaluation and golden tests only (small N).
void lm_head_logits(float* logits, const float* x, const float* w, int N, int C, int V);
}  // namespace strata::cpu
