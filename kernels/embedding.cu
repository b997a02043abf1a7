// Token embedding: out[n, :] = wte[tokens[n], :]; backward dwte[tokens[n], :] += dout[n, :] (fp32).
// One block per token row, 16-byte accesses when C % 8 == 0 and the pointers are aligned.
// The vocabulary size is not passed, so ids are not range-checked here: a negative id gives a
// zero row (fwd) and is skipped (bwd); the data loader owns the upper bound.
#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

template <int V>
__global__ void embedding_fwd_kernel(bf16* __restrict__ out, const int32_t* __restrict__ tokens,
                                     const bf16* __restrict__ wte, int C) {
  const int n = blockIdx.x;
  const int tok = tokens[n];
  bf16* dst = out + size_t(n) * C;  // [C]
  if (tok < 0) {
    float z[V] = {};
    for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) store_bf16(dst + c, z);
    return;
  }
  const bf16* src = wte + size_t(tok) * C;  // [C]
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    if constexpr (V % 8 == 0) {
      *reinterpret_cast<int4*>(dst + c) = *reinterpret_cast<const int4*>(src + c);  // a plain copy
    } else {
      dst[c] = src[c];
    }
  }
}

template <int V>
__global__ void embedding_bwd_kernel(float* __restrict__ dwte, const bf16* __restrict__ dout,
                                     const int32_t* __restrict__ tokens, int C) {
  const int n = blockIdx.x;
  const int tok = tokens[n];
  if (tok < 0) return;
  const bf16* src = dout + size_t(n) * C;  // [C]
  float* dst = dwte + size_t(tok) * C;     // [C]
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float d[V];
    load_bf16(d, src + c);
    atomic_add_f32(dst + c, d);
  }
}

}  // namespace

void embedding_fwd(bf16* out, const int32_t* tokens, const bf16* wte, int N, int C, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0, "embedding_fwd: bad shape");
  if (N == 0) return;
  if (C % 8 == 0 && all_aligned16(out, wte)) {
    embedding_fwd_kernel<8><<<N, row_threads(C / 8, 256), 0, stream>>>(out, tokens, wte, C);
  } else {
    embedding_fwd_kernel<1><<<N, row_threads(C, 256), 0, stream>>>(out, tokens, wte, C);
  }
  STRATA_LAUNCH_CHECK("embedding_fwd_kernel");
}

void embedding_bwd(float* dwte, const bf16* dout, const int32_t* tokens, int N, int C, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0, "embedding_bwd: bad shape");
  if (N == 0 || !dwte) return;
  if (C % 8 == 0 && all_aligned16(dwte, dout)) {
    embedding_bwd_kernel<8><<<N, row_threads(C / 8, 256), 0, stream>>>(dwte, dout, tokens, C);
  } else {
    embedding_bwd_kernel<1><<<N, row_threads(C, 256), 0, stream>>>(dwte, dout, tokens, C);
  }
  STRATA_LAUNCH_CHECK("embedding_bwd_kernel");
}

}  // namespace strata::cuda
