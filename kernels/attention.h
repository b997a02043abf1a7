// Causal grouped-query attention (softmax(q k^T * scale + causal mask) v), one sequence of T
// tokens per batch row. Query head h reads kv head h / (Hq / Hkv).
// Sample packing: with `pos` [B*T] (positions restarting at 0 where each example of a row starts),
// query i of a row attends keys j with i - pos[i] <= j <= i, i.e. only its own example; null: one
// causal sequence a row (pos[i] = i).
// Shapes: q, out [B, T, Hq, D]; k, v [B, T, Hkv, D]; lse [B, Hq, T] (log-sum-exp of the scaled
// scores, saved for backward like cuDNN's softmax stats). scale = 1/sqrt(D).
#pragma once
#include <cstdint>

namespace strata::cpu {
void attention_fwd(float* out, float* lse, const float* q, const float* k, const float* v, int B, int T, int Hq,
                   int Hkv, int D, const int32_t* pos = nullptr);
// dq, dk, dv (any may be null): added into when acc_dq / acc_dk / acc_dv, else overwritten.
// Uses out and lse from the forward; never stores [T, T].
void attention_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                   const float* out, const float* lse, int B, int T, int Hq, int Hkv, int D, bool acc_dq, bool acc_dk,
                   bool acc_dv, const int32_t* pos = nullptr);
}  // namespace strata::cpu
