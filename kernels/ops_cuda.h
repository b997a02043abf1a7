// Launchers of the hand-written bf16 CUDA kernels (one op per kernels/<op>.cu, beside its cpu
// reference kernels/<op>_cpu.cpp). Plain C++: includable from g++-compiled files.
// Conventions: outputs first, the stream last; activations bf16, math in fp32; a backward adds
// into a gradient when its acc_* flag is set and overwrites it otherwise (a null gradient pointer
// skips it); one without flags always accumulates.
// Launchers throw strata::Error on a bad launch; none of them synchronises or allocates.
// Elementwise ops (swiglu, add, convert) and rope may run in place (out aliasing an input).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/state_recipe.h"
#include "kernels/block_copy.h"

namespace strata::cuda {

using bf16 = __nv_bfloat16;

// Token embedding. tokens [N], wte [V, C]. A negative token gives a zero row (fwd) and is skipped (bwd).
void embedding_fwd(bf16* out, const int32_t* tokens, const bf16* wte, int N, int C, cudaStream_t stream);  // out [N, C]
// dwte [V, C] fp32 +=, by fp32 atomics (repeated tokens add in no fixed order); to overwrite,
// zero dwte first.
void embedding_bwd(float* dwte, const bf16* dout, const int32_t* tokens, int N, int C, cudaStream_t stream);
// dwte [V, C] bf16 += (gradients: bf16): each row the N tokens hit is summed in fp32 first (atomics,
// in no fixed order) in the compacted scratch engine/op_scratch.h describes, rows [slots, C] f32
// and map [V + slots + 1] i32 (slots = min(N, V)), then added into dwte once, rounded to nearest
// even. To overwrite, zero dwte first.
void embedding_bwd_bf16(bf16* dwte, const bf16* dout, const int32_t* tokens, int N, int C, int V, float* rows,
                        int32_t* map, int slots, cudaStream_t stream);

// RMSNorm: out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps). x, out [N, C]; w [C]; rstd [N] (may be null).
void rmsnorm_fwd(bf16* out, float* rstd, const bf16* x, const bf16* w, int N, int C, float eps, cudaStream_t stream);
// dx [N, C] bf16 (+)=, dw [C] fp32 (+)= (per-block partial sums, then atomics onto dw, which an
// overwrite zeroes first); either may be null.
void rmsnorm_bwd(bf16* dx, float* dw, const bf16* dout, const bf16* x, const bf16* w, const float* rstd, int N, int C,
                 bool acc_dx, bool acc_dw, cudaStream_t stream);

// Rotary embedding, rotate_half convention; x, out [N, H, D], pos [N], inv_freq [D/2];
// angle = float(pos) * inv_freq[i] in fp32, cos and sin times `scale` (the attention factor). D must be even.
void rope_fwd(bf16* out, const bf16* x, const int32_t* pos, const float* inv_freq, int N, int H, int D, float scale,
              cudaStream_t stream);
void rope_bwd(bf16* dx, const bf16* dout, const int32_t* pos, const float* inv_freq, int N, int H, int D, bool acc_dx,
              float scale, cudaStream_t stream);  // dx (+)=

// SwiGLU out = silu(gate) * up, all [n].
void swiglu_fwd(bf16* out, const bf16* gate, const bf16* up, long n, cudaStream_t stream);
void swiglu_bwd(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, long n, bool acc_dgate,
                bool acc_dup, cudaStream_t stream);  // (+)=

// A projection's bias: y [N, O] += b [O] (in place).
void bias_fwd(bf16* y, const bf16* b, long N, long O, cudaStream_t stream);
// db [O] fp32 (+)= column sums of dy [N, O] (block partial sums, then atomics; an overwrite zeroes db first).
void bias_bwd(float* db, const bf16* dy, long N, long O, bool acc, cudaStream_t stream);

// out = a + s * b, all [n].
void add_fwd(bf16* out, const bf16* a, const bf16* b, float s, long n, cudaStream_t stream);
// da (+)= dout, db (+)= s * dout.
void add_bwd(bf16* da, bf16* db, const bf16* dout, float s, long n, bool acc_da, bool acc_db, cudaStream_t stream);

// Cross-entropy over a chunk of fp32 logits [n, V] (the LM-head GEMM runs elsewhere). targets [n];
// a target < 0 is ignored; a target >= vocab gives NaN (loss and gradient) so the bug is seen.
// Columns vocab..V-1 (0 < vocab <= V) are vocabulary padding: no part of the softmax, dlogits 0.
// lse [n] is written for every row; token_loss [n] = lse - logit[target], 0 for ignored rows.
void ce_chunk_fwd(float* lse, float* token_loss, const float* logits, const int32_t* targets, int n, int V, int vocab,
                  cudaStream_t stream);
// n_valid[0] = count(targets[0..N) >= 0) (overwrite).
void ce_count_valid(float* n_valid, const int32_t* targets, int N, cudaStream_t stream);
// loss[0] = sum(token_loss[0..N)) / max(1, n_valid[0]) (overwrite).
void ce_finalize(float* loss, const float* token_loss, const float* n_valid, int N, cudaStream_t stream);
// dlogits [n, V] (overwrite) = (softmax - onehot(target)) * dloss[0] / max(1, n_valid[0]); ignored rows get 0.
void ce_chunk_bwd(bf16* dlogits, const float* logits, const float* lse, const int32_t* targets, const float* dloss,
                  const float* n_valid, int n, int V, int vocab, cudaStream_t stream);

// The training variant, per chunk: ce_chunk_fwd's token_loss and ce_chunk_bwd's dlogits for a host-side
// dloss, from one read of the logits (no lse kept). Bit for bit what the two kernels give.
void ce_chunk_fwd_bwd(float* token_loss, bf16* dlogits, const float* logits, const int32_t* targets,
                      const float* n_valid, float dloss, int n, int V, int vocab, cudaStream_t stream);
// dx [n] (+)= saved_dx * dloss[0] / dloss_assumed (scale 1 copies exactly). When dw_written (the forward
// wrote the weight gradient for dloss_assumed) and dloss[0] differs, dx is NaN: the device cannot throw.
void ce_dx_from_saved(bf16* dx, const bf16* saved_dx, const float* dloss, float dloss_assumed, bool dw_written,
                      size_t n, bool acc_dx, cudaStream_t stream);

// The strided block copy (kernels/block_copy.h) of bf16 elements: out (+)= in's blocks (fp32 math when adding).
void block_copy(bf16* out, const bf16* in, const BlockCopy& c, bool accumulate, cudaStream_t stream);

// out[0] += sum(g[0..n)^2), fp32 (per-block partials, then one atomic per block).
void sum_squares(float* out, const float* g, size_t n, cudaStream_t stream);
// The same over bf16 gradients (gradients: bf16), each value widened.
void sum_squares_bf16(float* out, const bf16* g, size_t n, cudaStream_t stream);
// out[0] += parts[k * stride] for k = 0..n-1, in order, fp32 round-to-nearest (one thread: n is the parameter count).
void add_parts(float* out, const float* parts, int stride, int n, cudaStream_t stream);
// A bf16 parameter gradient from its fp32 sums (gradients: bf16), n elements: g = bf16(g + sums) when
// accumulating, bf16(0 + sums) otherwise, rounded to nearest even (the cpu reference's write_grad).
void grad_fold_bf16(bf16* g, const float* sums, size_t n, bool accumulate, cudaStream_t stream);
// List forms: one launch per 48 tensors instead of one per tensor (all buffers 16-byte aligned).
// sum_squares_list adds every gs[i]'s sum of squares into out[0].
void sum_squares_list(float* out, const float* const* gs, const size_t* ns, int count, cudaStream_t stream);
void sum_squares_list_bf16(float* out, const bf16* const* gs, const size_t* ns, int count, cudaStream_t stream);

// One torch.optim.AdamW step (t is 1-based) on each tensor of a list, one launch per 48 tensors (all buffers
// 16-byte aligned), on any state precision (engine/state_recipe.h): `split` fp32 masters stored split
// (engine/master_split.h: lo the low halves, hi the bf16 compute weights; both read and written) or none (hi, the bf16
// weights, updated in place, rounded to nearest even); moments f32, bf16 (rounded to nearest even) or 8-bit codes
// with one f32 scale per kQuantBlock elements (kernels/quant8.h); gradients f32 (g) or bf16 (g_bf16, gradients: bf16,
// read widened), one kind for every tensor of a call. Global-norm clipping's scale is computed on device from
// norm_sq[0]: max_norm / (sqrt(norm_sq) + 1e-6) when max_norm > 0 and sqrt(norm_sq) > max_norm, else 1.
// Bit for bit the cpu reference (cpu::adamw_step on an AdamWState).
struct AdamWAnyTensors {
  int16_t* lo;
  bf16* hi;
  void* m;
  void* v;
  float* m_scale;
  float* v_scale;
  const float* g;
  size_t n;
  const bf16* g_bf16 = nullptr;  // instead of g
};
void adamw_step_any(const AdamWAnyTensors* ts, int count, bool split, OptimizerState moments, const float* norm_sq,
                    float max_norm, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                    cudaStream_t stream);

// Conversions (round to nearest even) and fills, all [n].
void f32_to_bf16(bf16* out, const float* in, size_t n, cudaStream_t stream);
void bf16_to_f32(float* out, const bf16* in, size_t n, cudaStream_t stream);
void fill_f32(float* out, float value, size_t n, cudaStream_t stream);
void fill_bf16(bf16* out, float value, size_t n, cudaStream_t stream);

}  // namespace strata::cuda
