// The optimizer's list kernels' shared pieces (kernels/adamw.cu, kernels/grad_norm.cu): the tensors' table travels
// as the kernel parameter (under the classic 4 KB limit); each tensor is cut into chunks of kChunk elements and
// blocks walk the chunks of all tensors, so no tensor's tail and no launch gap is paid per tensor. Chunk starts are
// multiples of 16 bytes.
#pragma once
#include <cstddef>

#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace strata::cuda::optimizer_lists {

constexpr int kListMax = kOptimizerListTensors;
constexpr size_t kChunk = 16384;
constexpr int kListThreads = 256;

// The tensor holding global chunk c (first_chunk[t] <= c < first_chunk[t + 1]).
template <class Table>
__device__ __forceinline__ int chunk_owner(const Table& L, size_t c) {
  int lo = 0, hi = L.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (L.first_chunk[mid] <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// A gradient's elements [i, i + 4) as floats: f32, or bf16 widened (gradients: bf16); one 16- or
// 8-byte load (i a multiple of 4, the tensor 16-byte aligned).
template <bool kBf16>
__device__ __forceinline__ void load_grad4(float (&a)[4], const void* g, size_t i) {
  if constexpr (kBf16)
    load_bf16<4>(a, static_cast<const bf16*>(g) + i);
  else
    load_f32(a, static_cast<const float*>(g) + i);
}
template <bool kBf16>
__device__ __forceinline__ float grad_at(const void* g, size_t i) {
  if constexpr (kBf16)
    return __bfloat162float(static_cast<const bf16*>(g)[i]);
  else
    return static_cast<const float*>(g)[i];
}

}  // namespace strata::cuda::optimizer_lists
