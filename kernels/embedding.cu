// Token embedding: out[n, :] = wte[tokens[n], :]; backward dwte[tokens[n], :] += dout[n, :] (fp32).
// One block per token row, 16-byte accesses when C % 8 == 0 and the pointers are aligned.
// bf16 gradients: the rows the tokens hit get compacted fp32 sums first (mark the rows, number them,
// add the tokens' rows into their slot by atomics), then one rounding each into dwte (fold).
// The vocabulary size is not passed, so ids are not range-checked here: a negative id gives a
// zero row (fwd) and is skipped (bwd); the data loader owns the upper bound.
#include <algorithm>

#include "engine/backend.h"
#include "engine/op_scratch.h"
#include "kernels/cuda_common.cuh"
#include "kernels/op_dispatch.h"
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

// bf16 gradients (embedding_bwd_bf16). map: [V] each vocabulary row's slot (-1: not hit; -2: hit, no
// slot yet), then [slots] each slot's row, then the slot count.
constexpr int32_t kHit = -2;

__global__ void embedding_mark_kernel(int32_t* __restrict__ map, const int32_t* __restrict__ tokens, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n < N && tokens[n] >= 0) map[tokens[n]] = kHit;  // every writer stores the same value
}

__global__ void embedding_slots_kernel(int32_t* __restrict__ map, int V, int slots) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= V || map[v] != kHit) return;
  const int s = atomicAdd(map + V + slots, 1);
  map[v] = s;
  map[V + s] = v;
}

template <int V>
__global__ void embedding_rows_kernel(float* __restrict__ rows, const int32_t* __restrict__ map,
                                      const bf16* __restrict__ dout, const int32_t* __restrict__ tokens, int C) {
  const int n = blockIdx.x;
  const int tok = tokens[n];
  if (tok < 0) return;
  const bf16* src = dout + size_t(n) * C;    // [C]
  float* dst = rows + size_t(map[tok]) * C;  // [C]
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float d[V];
    load_bf16(d, src + c);
    atomic_add_f32(dst + c, d);
  }
}

// Block s: slot s's row of dwte += its fp32 sums, rounded once.
template <int V>
__global__ void embedding_fold_kernel(bf16* __restrict__ dwte, const float* __restrict__ rows,
                                      const int32_t* __restrict__ map, int vocab, int slots, int C) {
  const int s = blockIdx.x;
  if (s >= map[vocab + slots]) return;
  bf16* dst = dwte + size_t(map[vocab + s]) * C;  // [C]
  const float* src = rows + size_t(s) * C;        // [C]
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float a[V], b[V];
    load_bf16(a, dst + c);
    load_f32(b, src + c);
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = __fadd_rn(a[k], b[k]);
    store_bf16(dst + c, a);
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

namespace strata::cuda {

void embedding_bwd_bf16(bf16* dwte, const bf16* dout, const int32_t* tokens, int N, int C, int V, float* rows,
                        int32_t* map, int slots, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0 && V > 0, "embedding_bwd_bf16: bad shape");
  if (N == 0 || !dwte) return;
  STRATA_CHECK(slots == std::min(N, V) && rows && map, "embedding_bwd_bf16: the scratch is not min(N, V) rows");
  STRATA_CUDA_CHECK(cudaMemsetAsync(map, 0xff, sizeof(int32_t) * size_t(V + slots), stream));  // -1: no slot
  STRATA_CUDA_CHECK(cudaMemsetAsync(map + V + slots, 0, sizeof(int32_t), stream));             // no slots yet
  STRATA_CUDA_CHECK(cudaMemsetAsync(rows, 0, sizeof(float) * size_t(slots) * C, stream));
  constexpr int kThreads = 256;
  embedding_mark_kernel<<<ceil_div(size_t(N), kThreads), kThreads, 0, stream>>>(map, tokens, N);
  STRATA_LAUNCH_CHECK("embedding_mark_kernel");
  embedding_slots_kernel<<<ceil_div(size_t(V), kThreads), kThreads, 0, stream>>>(map, V, slots);
  STRATA_LAUNCH_CHECK("embedding_slots_kernel");
  if (C % 8 == 0 && all_aligned16(dwte, dout, rows)) {
    embedding_rows_kernel<8><<<N, row_threads(C / 8, 256), 0, stream>>>(rows, map, dout, tokens, C);
    STRATA_LAUNCH_CHECK("embedding_rows_kernel");
    embedding_fold_kernel<8><<<slots, row_threads(C / 8, 256), 0, stream>>>(dwte, rows, map, V, slots, C);
  } else {
    embedding_rows_kernel<1><<<N, row_threads(C, 256), 0, stream>>>(rows, map, dout, tokens, C);
    STRATA_LAUNCH_CHECK("embedding_rows_kernel");
    embedding_fold_kernel<1><<<slots, row_threads(C, 256), 0, stream>>>(dwte, rows, map, V, slots, C);
  }
  STRATA_LAUNCH_CHECK("embedding_fold_kernel");
}

}  // namespace strata::cuda

namespace strata {
// embedding_fwd(out, tokens, wte) and embedding_bwd(dwte, dout, tokens; acc_dwte): the kernel adds rows by atomics
// (an overwrite zeroes dwte first; rows no token hit stay zero); a bf16 dwte through the op's compacted fp32 rows.
void embedding_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  if (!c.backward)
    return cuda::embedding_fwd(bf16(t[0]), t[1].i32(), bf16(t[2]), int(t[1].numel()), int(cols(t[2])), s);
  const Tensor &dwte = t[0], &dout = t[1], &tokens = t[2];
  if (!dwte.defined()) return;
  if (!c.acc[0]) ctx.be.zero(dwte);
  const int N = int(tokens.numel()), C = int(cols(dout)), V = int(dwte.shape[0]);
  if (dwte.dtype != DType::bf16) return cuda::embedding_bwd(f32(dwte), bf16(dout), tokens.i32(), N, C, s);
  if (N == 0) return;
  cuda::embedding_bwd_bf16(bf16(dwte), bf16(dout), tokens.i32(), N, C, V, f32(ctx.scratch.at(scratch_tag::grad_rows)),
                           ctx.scratch.at(scratch_tag::grad_row_map).i32(), int(embedding_grad_slots(N, V)), s);
}
}  // namespace strata
