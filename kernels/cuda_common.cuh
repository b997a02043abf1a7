// Shared pieces of the hand-written CUDA kernels: launch checking that throws strata::Error,
// bf16 pack loads/stores (16-byte vectors), warp/block reductions and grid sizing.
// No fmt here: its compile-time format strings do not build under nvcc in C++20 mode.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/error.h"

namespace strata::cuda {

using bf16 = __nv_bfloat16;

namespace detail {
[[noreturn]] inline void cuda_failed(cudaError_t e, const std::string& what, const char* file, int line) {
  throw ::strata::Error("cuda error in " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") [" +
                        file + ":" + std::to_string(line) + "]");
}
}  // namespace detail

}  // namespace strata::cuda

// Runs a CUDA runtime call and throws strata::Error naming the statement and file:line on failure.
#define STRATA_CUDA_CHECK(stmt)                                                                \
  do {                                                                                         \
    cudaError_t e_ = (stmt);                                                                   \
    if (e_ != cudaSuccess) ::strata::cuda::detail::cuda_failed(e_, #stmt, __FILE__, __LINE__); \
  } while (0)

// Checks the launch just made (bad configuration, missing kernel image) and names the kernel.
#define STRATA_LAUNCH_CHECK(kernel_name)                                                                      \
  do {                                                                                                        \
    cudaError_t e_ = cudaGetLastError();                                                                      \
    if (e_ != cudaSuccess)                                                                                    \
      ::strata::cuda::detail::cuda_failed(e_, std::string("launch of ") + (kernel_name), __FILE__, __LINE__); \
  } while (0)

namespace strata::cuda {

// ---- host-side helpers -------------------------------------------------------------------------

// Multiprocessor count of the current device, cached per thread and device.
inline int num_sms() {
  static thread_local int cached_dev = -1, cached_sms = 0;
  int dev = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev != cached_dev) {
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&cached_sms, cudaDevAttrMultiProcessorCount, dev));
    cached_dev = dev;
  }
  return cached_sms;
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}
inline bool aligned8(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 7) == 0;
}
// True when every pointer is null or 16-byte aligned (null ones are skipped by the kernel).
template <class... P>
inline bool all_aligned16(const P*... p) {
  return (... && (p == nullptr || aligned16(p)));
}

inline unsigned ceil_div(size_t a, size_t b) {
  return unsigned((a + b - 1) / b);
}

// Grid for a grid-stride loop over `items` work items: enough blocks to fill the device a few
// times over, never more than the work needs.
inline unsigned stride_grid(size_t items, int threads) {
  const size_t cap = size_t(num_sms()) * (2048 / threads) * 4;
  const size_t need = (items + threads - 1) / threads;
  return unsigned(need < cap ? (need > 0 ? need : 1) : cap);
}

// Threads for a block that walks one row of `packs` work items: one pass if it fits, 32..max_threads.
inline int row_threads(int packs, int max_threads = 512) {
  const int t = (packs + 31) / 32 * 32;
  return t < 32 ? 32 : (t > max_threads ? max_threads : t);
}

// ---- device-side helpers -----------------------------------------------------------------------

// Loads V consecutive bf16 as floats; for V a multiple of 8, 16-byte loads (p 16-byte aligned);
// for V == 4, one 8-byte load (p 8-byte aligned).
template <int V>
__device__ __forceinline__ void load_bf16(float (&o)[V], const bf16* p) {
  if constexpr (V % 8 == 0) {
#pragma unroll
    for (int j = 0; j < V / 8; j++) {
      const int4 raw = reinterpret_cast<const int4*>(p)[j];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float2 f = __bfloat1622float2(h[k]);
        o[8 * j + 2 * k] = f.x;
        o[8 * j + 2 * k + 1] = f.y;
      }
    }
  } else if constexpr (V == 4) {  // one 8-byte load
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 f0 = __bfloat1622float2(h[0]), f1 = __bfloat1622float2(h[1]);
    o[0] = f0.x, o[1] = f0.y, o[2] = f1.x, o[3] = f1.y;
  } else {
#pragma unroll
    for (int k = 0; k < V; k++) o[k] = __bfloat162float(p[k]);
  }
}

// A bf16 gradient's value before a backward adds its term: loaded when accumulating, zeros when
// the write overwrites it (its old contents are never read).
template <int V>
__device__ __forceinline__ void load_grad_bf16(float (&o)[V], const bf16* p, bool accumulate) {
  if (accumulate) {
    load_bf16(o, p);
  } else {
#pragma unroll
    for (int k = 0; k < V; k++) o[k] = 0.0f;
  }
}

// Stores V floats as bf16 (round to nearest even); for V a multiple of 8, 16-byte stores; for
// V == 4, one 8-byte store.
template <int V>
__device__ __forceinline__ void store_bf16(bf16* p, const float (&v)[V]) {
  if constexpr (V % 8 == 0) {
#pragma unroll
    for (int j = 0; j < V / 8; j++) {
      int4 raw;
      __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
      for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(v[8 * j + 2 * k], v[8 * j + 2 * k + 1]);
      reinterpret_cast<int4*>(p)[j] = raw;
    }
  } else if constexpr (V == 4) {  // one 8-byte store
    uint2 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
    h[0] = __floats2bfloat162_rn(v[0], v[1]);
    h[1] = __floats2bfloat162_rn(v[2], v[3]);
    *reinterpret_cast<uint2*>(p) = raw;
  } else {
#pragma unroll
    for (int k = 0; k < V; k++) p[k] = __float2bfloat16_rn(v[k]);
  }
}

// Loads V consecutive floats; for V a multiple of 4, 16-byte loads (p 16-byte aligned).
// Prefer V == 4 for streams of floats: with V == 8 a warp's two 16-byte accesses each touch every
// other 16 bytes, and such half-sector stores ran at a third of the bandwidth (fill_f32 on an H200).
template <int V>
__device__ __forceinline__ void load_f32(float (&o)[V], const float* p) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int j = 0; j < V / 4; j++) {
      const float4 f = reinterpret_cast<const float4*>(p)[j];
      o[4 * j] = f.x, o[4 * j + 1] = f.y, o[4 * j + 2] = f.z, o[4 * j + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; k++) o[k] = p[k];
  }
}

template <int V>
__device__ __forceinline__ void store_f32(float* p, const float (&v)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int j = 0; j < V / 4; j++)
      reinterpret_cast<float4*>(p)[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
  } else {
#pragma unroll
    for (int k = 0; k < V; k++) p[k] = v[k];
  }
}

// p[0..V) += v[0..V) with fp32 atomics; for V a multiple of 4 on sm_90+, 16-byte vector atomics
// (p 16-byte aligned). The result is unused, so these compile to fire-and-forget reductions.
template <int V>
__device__ __forceinline__ void atomic_add_f32(float* p, const float (&v)[V]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool vec = V % 4 == 0;
#else
  constexpr bool vec = false;
#endif
  if constexpr (vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
    for (int j = 0; j < V / 4; j++)
      atomicAdd(reinterpret_cast<float4*>(p) + j, make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]));
#endif
  } else {
#pragma unroll
    for (int k = 0; k < V; k++) atomicAdd(p + k, v[k]);
  }
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block, returned to every thread. blockDim.x must be a multiple of 32 (<= 1024).
// Safe to call repeatedly: the leading barrier keeps a new call from overwriting the scratch
// while another warp still reads the previous result.
template <class T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : T(0);
  return warp_sum(v);
}

// ---- elementwise ops ---------------------------------------------------------------------------

// Grid-stride loop over n elements in packs of V; op.template apply<W>(i) handles elements
// [i, i + W). With V > 1 the n % V tail goes, one element each, to the first threads.
template <int V, class Op>
__global__ void elementwise_kernel(size_t n, Op op) {
  const size_t n_vec = n / V;
  const size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = tid; i < n_vec; i += stride) op.template apply<V>(i * V);
  if constexpr (V > 1) {
    const size_t j = n_vec * V + tid;
    if (j < n) op.template apply<1>(j);
  }
}

// Launches op over n elements, V per thread-step when vec (every pointer 16-byte aligned), else 1.
// V = 8 suits bf16-only ops (16-byte accesses); V = 4 suits ops with fp32 streams (16-byte fp32,
// 8-byte bf16 accesses, each warp access contiguous).
template <int V, class Op>
void launch_elementwise(const char* name, size_t n, bool vec, const Op& op, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int threads = 256;
  if (vec)
    elementwise_kernel<V, Op><<<stride_grid(n / V + 1, threads), threads, 0, stream>>>(n, op);
  else
    elementwise_kernel<1, Op><<<stride_grid(n, threads), threads, 0, stream>>>(n, op);
  STRATA_LAUNCH_CHECK(name);
}

}  // namespace strata::cuda
