// cuBLASLt GEMMs for the linear layers and the LM head (bf16 in, fp32 accumulate).
// Row-major tensors throughout; w is in Hugging Face layout [O, I] (y = x @ w^T).
// One Gemm per device: it owns the cuBLASLt handle and caches a matmul descriptor and an
// algorithm per (problem, operand alignment). The algorithm is tuned at the problem's first
// overwriting call: the heuristic's top 8 are timed on that call's operands and the fastest kept
// (STRATA_GEMM_TUNE=0 keeps the heuristic's first; STRATA_GEMM_VERBOSE=1 prints the times).
// Not thread-safe.
// The workspace is carved by the caller (from the arena); Gemm never allocates device memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/op_scratch.h"

namespace strata::cuda {

using bf16 = __nv_bfloat16;

class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = kGemmWorkspaceBytes;  // engine/op_scratch.h: the sim takes the same

  // workspace: device memory, >= 256-byte aligned, alive as long as this object.
  Gemm(void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[N, O] = x[N, I] @ w[O, I]^T
  void linear_fwd(bf16* y, const bf16* x, const bf16* w, int N, int I, int O, cudaStream_t s);
  // dx[N, I] (+)= dy[N, O] @ w[O, I]; accumulate=true adds onto the existing bf16 dx (beta = 1),
  // false overwrites it (beta = 0: dx is never read)
  void linear_bwd_dx(bf16* dx, const bf16* dy, const bf16* w, int N, int I, int O, bool accumulate, cudaStream_t s);
  // dw[O, I] (fp32) (+)= dy[N, O]^T @ x[N, I], the same way
  void linear_bwd_dw(float* dw, const bf16* dy, const bf16* x, int N, int I, int O, bool accumulate, cudaStream_t s);
  // The same into a bf16 dw (gradients: bf16): fp32 accumulation, C and D bf16, so each element is
  // rounded once per call (dw = bf16(alpha * dy^T x + beta * dw), beta 1 when accumulating)
  void linear_bwd_dw(bf16* dw, const bf16* dy, const bf16* x, int N, int I, int O, bool accumulate, cudaStream_t s);
  // FP8: d[M, N] (bf16 or fp32, row-major) (+)= (a[M, K] @ b[N, K]^T) * a_inv * b_inv, a and b FP8 codes (E4M3, or
  // E5M2 where a_e5m2 / b_e5m2; not both E5M2), both K-contiguous, a_inv / b_inv device pointers to their 1 / scale.
  // M, N, K multiples of 16. fast_accum: the tensor cores' fast accumulation (the forward's).
  void fp8(void* d, bool d_bf16, const uint8_t* a, bool a_e5m2, const float* a_inv, const uint8_t* b, bool b_e5m2,
           const float* b_inv, int M, int N, int K, bool accumulate, bool fast_accum, cudaStream_t s);
  // logits[n, V] (fp32) = x[n, C] @ w[V, C]^T
  void logits_f32(float* logits, const bf16* x, const bf16* w, int n, int C, int V, cudaStream_t s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::cuda
