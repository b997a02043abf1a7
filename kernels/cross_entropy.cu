// Cross-entropy over chunks of fp32 logits [n, V] (the LM-head GEMM runs elsewhere), fp32 math.
// Forward: one block per row, one pass with an online max / sum of exp; lse is kept for backward.
// Backward: one block per row, recomputes softmax = exp(logit - lse) and writes bf16 dlogits.
// Training variant: both in one launch per row, from the forward's logits (no recompute).
// A target < 0 is ignored (loss 0, gradient 0); a target >= vocab makes that row's loss and gradient
// NaN, since the device cannot throw and a silent out-of-range read would hide the bug.
// Rows are V long (the row stride); only the first `vocab` columns are the vocabulary, the rest is
// padding (model/llama/llama.h pads it to a multiple of 64): masked to -inf in the log-sum-exp and given
// dlogits 0, so the padded rows of the LM head's gradient are exact zeros.
// count_valid and finalize are single-block, fixed-order reductions (deterministic).
#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

constexpr int kRowThreads = 512;
constexpr int kReduceThreads = 1024;

// s * exp(m - m_new), treating an empty partial (m = -inf) as 0 rather than NaN.
__device__ __forceinline__ float rescale(float s, float m, float m_new) {
  return m == -INFINITY ? 0.0f : s * expf(m - m_new);
}

// Merges (m, s) partial log-sum-exp states across the block; every thread gets the result.
__device__ __forceinline__ void block_merge(float& m, float& s) {
  __shared__ float sm[32], ss[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mm = fmaxf(m, m2);
    s = rescale(s, m, mm) + rescale(s2, m2, mm);
    m = mm;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sm[warp] = m, ss[warp] = s;
  __syncthreads();
  m = lane < int(blockDim.x >> 5) ? sm[lane] : -INFINITY;
  s = lane < int(blockDim.x >> 5) ? ss[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    const float mm = fmaxf(m, m2);
    s = rescale(s, m, mm) + rescale(s2, m2, mm);
    m = mm;
  }
}

// One row's log-sum-exp over its first Vr columns (one online pass, then the block merge): every
// thread gets it. The forward and the training variant share it, so both give the same bits. A
// W-wide load at c < Vr stays inside the row (V % W == 0 when W > 1); its columns >= Vr count as -inf.
template <int W>
__device__ __forceinline__ float row_lse_of(const float* __restrict__ l, int Vr) {
  float m = -INFINITY, s = 0.0f;
#pragma unroll 2
  for (int c = threadIdx.x * W; c < Vr; c += blockDim.x * W) {
    float a[W];
    load_f32(a, l + c);
#pragma unroll
    for (int k = 1; k < W; k++)
      if (c + k >= Vr) a[k] = -INFINITY;
    float mx = a[0];
#pragma unroll
    for (int k = 1; k < W; k++) mx = fmaxf(mx, a[k]);
    if (mx > m) s = rescale(s, m, mx), m = mx;
    if (m != -INFINITY)
#pragma unroll
      for (int k = 0; k < W; k++) s += expf(a[k] - m);
  }
  block_merge(m, s);
  return m + logf(s);
}

// One row's dlogits = (exp(logit - row_lse) - onehot(t)) * scale for its first Vr columns, zeros
// for the padding after them and for an ignored row. The backward and the training variant share it.
template <int W>
__device__ __forceinline__ void row_dlogits(bf16* __restrict__ g, const float* __restrict__ l, float row_lse, int t,
                                            float scale, int V, int Vr) {
  for (int c = threadIdx.x * W; c < V; c += blockDim.x * W) {
    float a[W];
    if (t < 0 || c >= Vr) {
#pragma unroll
      for (int k = 0; k < W; k++) a[k] = 0.0f;
    } else {
      load_f32(a, l + c);
#pragma unroll
      for (int k = 0; k < W; k++)
        a[k] = c + k < Vr ? (expf(a[k] - row_lse) - (c + k == t ? 1.0f : 0.0f)) * scale : 0.0f;
    }
    store_bf16(g + c, a);
  }
}

template <int W>
__global__ void ce_fwd_kernel(float* __restrict__ lse, float* __restrict__ token_loss, const float* __restrict__ logits,
                              const int32_t* __restrict__ targets, int V, int Vr) {
  const size_t row = blockIdx.x;
  const float* l = logits + row * V;  // [V]
  const float row_lse = row_lse_of<W>(l, Vr);
  if (threadIdx.x == 0) {
    lse[row] = row_lse;
    const int t = targets[row];
    token_loss[row] = t < 0 ? 0.0f : (t >= Vr ? NAN : row_lse - l[t]);
  }
}

template <int W>
__global__ void ce_bwd_kernel(bf16* __restrict__ dlogits, const float* __restrict__ logits,
                              const float* __restrict__ lse, const int32_t* __restrict__ targets,
                              const float* __restrict__ dloss, const float* __restrict__ n_valid, int V, int Vr) {
  const size_t row = blockIdx.x;
  const int t = targets[row];
  const float scale = t < 0 ? 0.0f : (t >= Vr ? NAN : dloss[0] / fmaxf(1.0f, n_valid[0]));
  row_dlogits<W>(dlogits + row * V, logits + row * V, t < 0 ? 0.0f : lse[row], t, scale, V, Vr);
}

// The training variant: ce_fwd_kernel's lse and token loss, then ce_bwd_kernel's dlogits for
// dloss from that lse, in one launch (the row is read twice, as by the two kernels).
// WF and WB are the widths the two kernels would pick, so the results are the same bits.
template <int WF, int WB>
__global__ void ce_fwd_bwd_kernel(float* __restrict__ token_loss, bf16* __restrict__ dlogits,
                                  const float* __restrict__ logits, const int32_t* __restrict__ targets,
                                  const float* __restrict__ n_valid, float dloss, int V, int Vr) {
  const size_t row = blockIdx.x;
  const float* l = logits + row * V;  // [V]
  const float row_lse = row_lse_of<WF>(l, Vr);
  const int t = targets[row];
  if (threadIdx.x == 0) token_loss[row] = t < 0 ? 0.0f : (t >= Vr ? NAN : row_lse - l[t]);
  const float scale = t < 0 ? 0.0f : (t >= Vr ? NAN : dloss / fmaxf(1.0f, n_valid[0]));
  row_dlogits<WB>(dlogits + row * V, l, t < 0 ? 0.0f : row_lse, t, scale, V, Vr);
}

// dx (+)= saved * dloss[0] / dloss_assumed; NaN when the forward wrote dw for another dloss.
struct DxFromSaved {
  bf16* dx;
  const bf16* saved;
  const float* dloss;
  float dloss_assumed;
  bool dw_written, acc;
  template <int V>
  __device__ void apply(size_t i) const {
    const float d = dloss[0];
    const float scale = dw_written && d != dloss_assumed ? NAN : d / dloss_assumed;
    float v[V], old[V];
    load_bf16(v, saved + i);
    if (acc) load_bf16(old, dx + i);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = acc ? old[k] + v[k] * scale : v[k] * scale;  // scale 1: an exact copy
    store_bf16(dx + i, v);
  }
};

__global__ void ce_count_valid_kernel(float* __restrict__ n_valid, const int32_t* __restrict__ targets, int N) {
  int count = 0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) count += targets[i] >= 0;
  count = block_sum(count);
  if (threadIdx.x == 0) n_valid[0] = float(count);
}

__global__ void ce_finalize_kernel(float* __restrict__ loss, const float* __restrict__ token_loss,
                                   const float* __restrict__ n_valid, int N) {
  double sum = 0.0;  // double, as the cpu reference, so the mean does not drift with N
  for (int i = threadIdx.x; i < N; i += blockDim.x) sum += double(token_loss[i]);
  sum = block_sum(sum);
  if (threadIdx.x == 0) loss[0] = float(sum / fmax(1.0, double(n_valid[0])));
}

}  // namespace

void ce_chunk_fwd(float* lse, float* token_loss, const float* logits, const int32_t* targets, int n, int V, int vocab,
                  cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && V > 0 && vocab > 0 && vocab <= V, "ce_chunk_fwd: bad shape");
  if (n == 0) return;
  if (V % 4 == 0 && aligned16(logits))
    ce_fwd_kernel<4><<<n, kRowThreads, 0, stream>>>(lse, token_loss, logits, targets, V, vocab);
  else
    ce_fwd_kernel<1><<<n, kRowThreads, 0, stream>>>(lse, token_loss, logits, targets, V, vocab);
  STRATA_LAUNCH_CHECK("ce_fwd_kernel");
}

void ce_count_valid(float* n_valid, const int32_t* targets, int N, cudaStream_t stream) {
  STRATA_CHECK(N >= 0, "ce_count_valid: bad shape");
  ce_count_valid_kernel<<<1, kReduceThreads, 0, stream>>>(n_valid, targets, N);
  STRATA_LAUNCH_CHECK("ce_count_valid_kernel");
}

void ce_finalize(float* loss, const float* token_loss, const float* n_valid, int N, cudaStream_t stream) {
  STRATA_CHECK(N >= 0, "ce_finalize: bad shape");
  ce_finalize_kernel<<<1, kReduceThreads, 0, stream>>>(loss, token_loss, n_valid, N);
  STRATA_LAUNCH_CHECK("ce_finalize_kernel");
}

void ce_chunk_bwd(bf16* dlogits, const float* logits, const float* lse, const int32_t* targets, const float* dloss,
                  const float* n_valid, int n, int V, int vocab, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && V > 0 && vocab > 0 && vocab <= V, "ce_chunk_bwd: bad shape");
  if (n == 0) return;
  if (V % 8 == 0 && all_aligned16(dlogits, logits))
    ce_bwd_kernel<8><<<n, kRowThreads, 0, stream>>>(dlogits, logits, lse, targets, dloss, n_valid, V, vocab);
  else
    ce_bwd_kernel<1><<<n, kRowThreads, 0, stream>>>(dlogits, logits, lse, targets, dloss, n_valid, V, vocab);
  STRATA_LAUNCH_CHECK("ce_bwd_kernel");
}

void ce_chunk_fwd_bwd(float* token_loss, bf16* dlogits, const float* logits, const int32_t* targets,
                      const float* n_valid, float dloss, int n, int V, int vocab, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && V > 0 && vocab > 0 && vocab <= V, "ce_chunk_fwd_bwd: bad shape");
  if (n == 0) return;
  const bool wf = V % 4 == 0 && aligned16(logits), wb = V % 8 == 0 && all_aligned16(dlogits, logits);
  if (wf && wb)
    ce_fwd_bwd_kernel<4, 8>
        <<<n, kRowThreads, 0, stream>>>(token_loss, dlogits, logits, targets, n_valid, dloss, V, vocab);
  else if (wf)
    ce_fwd_bwd_kernel<4, 1>
        <<<n, kRowThreads, 0, stream>>>(token_loss, dlogits, logits, targets, n_valid, dloss, V, vocab);
  else if (wb)
    ce_fwd_bwd_kernel<1, 8>
        <<<n, kRowThreads, 0, stream>>>(token_loss, dlogits, logits, targets, n_valid, dloss, V, vocab);
  else
    ce_fwd_bwd_kernel<1, 1>
        <<<n, kRowThreads, 0, stream>>>(token_loss, dlogits, logits, targets, n_valid, dloss, V, vocab);
  STRATA_LAUNCH_CHECK("ce_fwd_bwd_kernel");
}

void ce_dx_from_saved(bf16* dx, const bf16* saved_dx, const float* dloss, float dloss_assumed, bool dw_written,
                      size_t n, bool acc_dx, cudaStream_t stream) {
  STRATA_CHECK(dloss_assumed != 0.0f, "ce_dx_from_saved: the assumed loss gradient must not be 0");
  launch_elementwise<8>("ce_dx_from_saved", n, all_aligned16(dx, saved_dx),
                        DxFromSaved{dx, saved_dx, dloss, dloss_assumed, dw_written, acc_dx}, stream);
}

}  // namespace strata::cuda
