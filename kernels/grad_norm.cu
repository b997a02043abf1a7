// The gradients' sum of squares for global-norm clipping (engine/ops/grad_norm.cpp's cuda forms, kernels/
// grad_norm_cuda.cpp): per tensor, over lists of tensors, and ZeRO-2's parts added in order. Each launch adds its
// blocks' partial sums in a fixed order, so ranks summing the same gradients get the same bits.
#include <algorithm>
#include <string>

#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"
#include "kernels/optimizer_lists.cuh"

namespace strata::cuda {
namespace {

using namespace optimizer_lists;

constexpr int kReduceThreads = 512;

// The sums of squares add their blocks' partial sums in block order, not with one atomicAdd each: an
// atomic sum's order changes from run to run, so two data-parallel ranks summing the same gradients
// got norms a rounding apart, clipped differently and drifted apart bit by bit. Each block stores
// its partial in its slot; the last block to finish (a counter) adds the slots 0, 1, ... to out and
// resets the counter. One reduction in flight per device at a time: the compute stream runs them.
constexpr unsigned kMaxNormBlocks = 4096;
__device__ float g_norm_partials[kMaxNormBlocks];
__device__ unsigned int g_norm_blocks_done = 0;

// Thread 0's `acc` (the block's sum) into out[0], deterministically (above). Every thread calls it.
__device__ __forceinline__ void add_block_sum(float* out, float acc) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    g_norm_partials[blockIdx.x] = acc;
    __threadfence();  // the partial is visible before the counter says so
    last = atomicAdd(&g_norm_blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The last block adds the slots in a fixed order: thread i the slots i, i + blockDim.x, ... in turn, then the
  // block's fixed tree; a thread 0 alone walking some thousand slots one load at a time was the longest part of a
  // small gradient's launch.
  float part = 0.0f;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
    part = __fadd_rn(part, *(volatile float*)&g_norm_partials[b]);
  part = block_sum(part);
  if (threadIdx.x != 0) return;
  out[0] = __fadd_rn(out[0], part);
  g_norm_blocks_done = 0;  // the next launch on this stream starts after this kernel ends
}

template <int V>
__global__ void sum_squares_kernel(float* __restrict__ out, const float* __restrict__ g, size_t n) {
  const size_t n_vec = n / V;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  float acc = 0.0f;
  for (size_t i = tid; i < n_vec; i += stride) {
    float a[V];
    load_f32(a, g + i * V);
#pragma unroll
    for (int k = 0; k < V; k++) acc += a[k] * a[k];
  }
  if constexpr (V > 1) {
    const size_t j = n_vec * V + tid;
    if (j < n) acc += g[j] * g[j];
  }
  acc = block_sum(acc);
  add_block_sum(out, acc);
}

// The bf16 form (gradients: bf16): each value widened, the same per-thread order.
__global__ void sum_squares_bf16_kernel(float* __restrict__ out, const bf16* __restrict__ g, size_t n) {
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  float acc = 0.0f;
  for (size_t i = tid; i < n; i += stride) {
    const float a = __bfloat162float(g[i]);
    acc += a * a;
  }
  acc = block_sum(acc);
  add_block_sum(out, acc);
}

// The sums of squares' table (AdamW's is AnyTable below).
struct ListTable {
  const void* g[kListMax];  // f32, or bf16 for sum_squares_list_bf16
  size_t n[kListMax];
  size_t first_chunk[kListMax + 1];  // prefix sums of the tensors' chunk counts
  int count = 0;
};

template <bool kBf16>
__global__ void __launch_bounds__(kListThreads)
    sum_squares_list_kernel(float* __restrict__ out, const __grid_constant__ ListTable L) {
  float acc = 0.0f;
  for (size_t c = blockIdx.x; c < L.first_chunk[L.count]; c += gridDim.x) {
    const int t = chunk_owner(L, c);
    const size_t begin = (c - L.first_chunk[t]) * kChunk, end = begin + kChunk < L.n[t] ? begin + kChunk : L.n[t];
    const void* g = L.g[t];
    size_t i = begin + threadIdx.x * 4;
    if constexpr (kBf16) {  // whole spans of 2 x 256 x 8: two 16-byte loads in flight per thread
      constexpr size_t kSpan = 2 * kListThreads * 8;
      const bf16* gb = static_cast<const bf16*>(g);
      const size_t spans = (end - begin) / kSpan;
      for (size_t s = 0; s < spans; s++) {
        const size_t j = begin + s * kSpan + threadIdx.x * 8;
        float a[8], b[8];
        load_bf16<8>(a, gb + j);
        load_bf16<8>(b, gb + j + kListThreads * 8);
#pragma unroll
        for (int k = 0; k < 8; k++) acc += a[k] * a[k] + b[k] * b[k];
      }
      i = begin + spans * kSpan + threadIdx.x * 4;  // the rest (a tensor's last chunk) as the f32 form walks it
    }
    // Two 16-byte (bf16: 8-byte) loads in flight per thread.
    for (; i + 4 + kListThreads * 4 <= end; i += 2 * kListThreads * 4) {
      float a[4], b[4];
      load_grad4<kBf16>(a, g, i);
      load_grad4<kBf16>(b, g, i + kListThreads * 4);
#pragma unroll
      for (int k = 0; k < 4; k++) acc += a[k] * a[k] + b[k] * b[k];
    }
    for (; i + 4 <= end; i += kListThreads * 4) {
      float a[4];
      load_grad4<kBf16>(a, g, i);
#pragma unroll
      for (int k = 0; k < 4; k++) acc += a[k] * a[k];
    }
    for (; i < end; i++) {  // the tensor's last < 4 elements
      const float a = grad_at<kBf16>(g, i);
      acc += a * a;
    }
  }
  acc = block_sum(acc);
  add_block_sum(out, acc);
}

// Fills a table from items [from, from + count), returns its chunk total.
template <class Fill>
size_t fill_table(ListTable& L, int count, Fill fill) {
  L.count = count;
  L.first_chunk[0] = 0;
  for (int t = 0; t < count; t++) {
    fill(t);
    L.first_chunk[t + 1] = L.first_chunk[t] + ceil_div(L.n[t], kChunk);
  }
  return L.first_chunk[count];
}

unsigned list_grid(size_t chunks) {
  const unsigned g = unsigned(std::max<size_t>(1, std::min<size_t>(chunks, size_t(num_sms()) * (2048 / kListThreads))));
  STRATA_CHECK(g <= kMaxNormBlocks, "list kernels: more blocks than norm partial slots");
  return g;
}

}  // namespace

void sum_squares(float* out, const float* g, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(g);
  const size_t items = vec ? n / 4 + 1 : n;
  const unsigned blocks = std::min<size_t>(ceil_div(items, kReduceThreads), size_t(num_sms()) * 4);
  STRATA_CHECK(blocks <= kMaxNormBlocks, "sum_squares: more blocks than norm partial slots");
  if (vec)
    sum_squares_kernel<4><<<blocks, kReduceThreads, 0, stream>>>(out, g, n);
  else
    sum_squares_kernel<1><<<blocks, kReduceThreads, 0, stream>>>(out, g, n);
  STRATA_LAUNCH_CHECK("sum_squares_kernel");
}

namespace {
// One thread: out[0] += parts[k * stride] for k = 0..n-1 in order (ZeRO-2's norm parts, a fixed order on every rank).
__global__ void add_parts_kernel(float* __restrict__ out, const float* __restrict__ parts, int stride, int n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float acc = out[0];
  for (int k = 0; k < n; k++) acc = __fadd_rn(acc, parts[size_t(k) * size_t(stride)]);
  out[0] = acc;
}
}  // namespace

void add_parts(float* out, const float* parts, int stride, int n, cudaStream_t stream) {
  if (n <= 0) return;
  add_parts_kernel<<<1, 32, 0, stream>>>(out, parts, stride, n);
  STRATA_LAUNCH_CHECK("add_parts_kernel");
}

void sum_squares_bf16(float* out, const bf16* g, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = std::min<size_t>(ceil_div(n, kReduceThreads), size_t(num_sms()) * 4);
  STRATA_CHECK(blocks <= kMaxNormBlocks, "sum_squares_bf16: more blocks than norm partial slots");
  sum_squares_bf16_kernel<<<blocks, kReduceThreads, 0, stream>>>(out, g, n);
  STRATA_LAUNCH_CHECK("sum_squares_bf16_kernel");
}

namespace {
// Both list forms: one launch per kListMax tensors; `what` names the caller in its errors.
template <bool kBf16, class T>
void sum_squares_lists(float* out, const T* const* gs, const size_t* ns, int count, cudaStream_t stream,
                       const char* what) {
  for (int from = 0; from < count; from += kListMax) {
    ListTable L;
    const size_t chunks = fill_table(L, std::min(kListMax, count - from), [&](int t) {
      STRATA_CHECK(aligned16(gs[from + t]), std::string(what) + ": a gradient is not 16-byte aligned");
      L.g[t] = gs[from + t];
      L.n[t] = ns[from + t];
    });
    if (chunks == 0) continue;
    sum_squares_list_kernel<kBf16><<<list_grid(chunks), kListThreads, 0, stream>>>(out, L);
    STRATA_LAUNCH_CHECK("sum_squares_list_kernel");
  }
}
}  // namespace

void sum_squares_list(float* out, const float* const* gs, const size_t* ns, int count, cudaStream_t stream) {
  sum_squares_lists<false>(out, gs, ns, count, stream, "sum_squares_list");
}

void sum_squares_list_bf16(float* out, const bf16* const* gs, const size_t* ns, int count, cudaStream_t stream) {
  sum_squares_lists<true>(out, gs, ns, count, stream, "sum_squares_list_bf16");
}

}  // namespace strata::cuda
