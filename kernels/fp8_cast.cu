// fp8_cast on cuda: a tensor's amax, then its FP8 codes in one or both layouts (or, from a kept scale block, the
// codes alone), code for code as the cpu reference
// (kernels/fp8_cast_cpu.cpp): the same scale (an IEEE divide), the same product, round to nearest even with
// saturation to the finite range (cvt's satfinite), NaN kept.
#include <cuda_fp8.h>

#include <string>

#include "engine/op_scratch.h"
#include "kernels/cuda_common.cuh"
#include "kernels/fp8_cuda.h"
#include "kernels/op_dispatch.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;                                 // the amax pass's loads in flight a thread
constexpr int kTileR = 128, kTileC = 64;                   // a cast block's tile: 128 rows x 64 columns
constexpr int kPitch = kTileC + 1;                         // the codes' shared rows: 16 rows apart land 4 banks apart
constexpr int kLoads = kTileR * kTileC / 8 / kThreads;     // 16-byte loads a thread (4)
constexpr int kStoresT = kTileR * kTileC / 16 / kThreads;  // 16-byte transposed stores a thread (2)

__device__ __forceinline__ float nanmax(float a, float b) {
  return (a > b || a != a) ? a : b;  // NaN wins, as the cpu reference's amax
}

__device__ __forceinline__ float nanmax8(float m, const uint4& c) {
  const bf16* e = reinterpret_cast<const bf16*>(&c);
#pragma unroll
  for (int j = 0; j < 8; j++) m = nanmax(m, fabsf(__bfloat162float(e[j])));
  return m;
}

__device__ float block_nanmax(float m) {
  __shared__ float warp_max[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) m = nanmax(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  m = lane < kThreads / 32 ? warp_max[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) m = nanmax(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;  // every thread of warp 0 holds the block's maximum
}

// One partial maximum of |x| per block, grid-striding over 8-element (16-byte) chunks, kUnroll loads in flight.
__global__ void __launch_bounds__(kThreads) amax_partial_kernel(const bf16* x, size_t n8, float* partial) {
  float m = 0.0f;
  const uint4* v = reinterpret_cast<const uint4*>(x);
  const size_t stride = size_t(gridDim.x) * kThreads;
  size_t i = blockIdx.x * size_t(kThreads) + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n8; i += kUnroll * stride) {
    uint4 c[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) c[u] = v[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) m = nanmax8(m, c[u]);
  }
  for (; i < n8; i += stride) m = nanmax8(m, v[i]);
  m = block_nanmax(m);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

__device__ __forceinline__ float scale_for(float amax, float max_finite) {
  if (!(amax > 0.0f) || !isfinite(amax)) return 1.0f;
  const float s = __fdiv_rn(max_finite, amax);
  return isfinite(s) ? s : 1.0f;
}

// One 128 x 64 tile a block. Its loads are issued first (they do not wait for the scale), then the partials are
// folded into the scale, then the codes are written row-major (8 bytes a chunk) and, through shared memory,
// transposed (16 bytes a thread-store, 128 contiguous bytes a column). Two codes a cvt (x in the low byte).
template <__nv_fp8_interpretation_t F>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(const bf16* x, int64_t rows, int64_t cols, uint8_t* out, uint8_t* out_t, const float* partial,
                float* sb, float max_finite) {
  __shared__ float amax_s;
  __shared__ uint8_t tile[kTileR][kPitch];
  const int64_t col_tiles = (cols + kTileC - 1) / kTileC;
  const int64_t r0 = (int64_t(blockIdx.x) / col_tiles) * kTileR, c0 = (int64_t(blockIdx.x) % col_tiles) * kTileC;
  uint4 raw[kLoads];
#pragma unroll
  for (int j = 0; j < kLoads; j++) {
    const int k = threadIdx.x + j * kThreads, r = k / 8, c = (k % 8) * 8;
    raw[j] = (r0 + r < rows && c0 + c < cols) ? *reinterpret_cast<const uint4*>(x + (r0 + r) * cols + c0 + c)
                                              : make_uint4(0, 0, 0, 0);
  }
  float s;
  if (partial) {
    float m = 0.0f;
    for (int i = threadIdx.x; i < int(kFp8AmaxBlocks); i += kThreads) m = nanmax(m, partial[i]);
    m = block_nanmax(m);
    if (threadIdx.x == 0) amax_s = m;
    __syncthreads();
    const float amax = amax_s;
    s = scale_for(amax, max_finite);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      sb[fp8::kInvScale] = __frcp_rn(s), sb[fp8::kScale] = s, sb[fp8::kAmax] = amax, sb[3] = 0.0f;
    }
  } else {
    s = sb[fp8::kScale];  // a kept block: the scale this tensor was cast at before
  }
#pragma unroll
  for (int j = 0; j < kLoads; j++) {
    const int k = threadIdx.x + j * kThreads, r = k / 8, c = (k % 8) * 8;
    if (r0 + r >= rows || c0 + c >= cols) continue;
    const bf16* e = reinterpret_cast<const bf16*>(&raw[j]);
    uint8_t q[8];
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(
          make_float2(__bfloat162float(e[i]) * s, __bfloat162float(e[i + 1]) * s), __NV_SATFINITE, F);
      q[i] = uint8_t(p & 0xffu), q[i + 1] = uint8_t(p >> 8);
    }
    if (out_t) {
#pragma unroll
      for (int i = 0; i < 8; i++) tile[r][c + i] = q[i];
    }
    if (out) {
      uint2 packed;
      memcpy(&packed, q, 8);
      *reinterpret_cast<uint2*>(out + (r0 + r) * cols + c0 + c) = packed;
    }
  }
  if (!out_t) return;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kStoresT; j++) {
    const int k = threadIdx.x + j * kThreads, c = k / 8, r = (k % 8) * 16;
    if (c0 + c >= cols || r0 + r >= rows) continue;
    uint8_t q[16];
#pragma unroll
    for (int i = 0; i < 16; i++) q[i] = tile[r + i][c];
    uint4 packed;
    memcpy(&packed, q, 16);
    *reinterpret_cast<uint4*>(out_t + (c0 + c) * rows + r0 + r) = packed;
  }
}

}  // namespace

void fp8_quantize(const bf16* x, int64_t rows, int64_t cols, fp8::Format f, uint8_t* out, uint8_t* out_t, float* sb,
                  float* partial, cudaStream_t s, bool scale_given) {
  const int64_t m = fp8::kDimMultiple;
  STRATA_CHECK(rows > 0 && cols > 0 && rows % m == 0 && cols % m == 0,
               "fp8 cast: [" + std::to_string(rows) + " x " + std::to_string(cols) + "] is not a multiple of " +
                   std::to_string(m) + " in both dimensions");
  STRATA_CHECK(aligned16(x) && (!out || aligned16(out)) && (!out_t || aligned16(out_t)),
               "fp8 cast: the tensors are not 16-byte aligned");
  const size_t n = size_t(rows) * size_t(cols);
  if (scale_given) {
    partial = nullptr;  // the cast reads sb's scale
  } else {
    amax_partial_kernel<<<unsigned(kFp8AmaxBlocks), kThreads, 0, s>>>(x, n / 8, partial);
    STRATA_LAUNCH_CHECK("fp8_amax");
  }
  const int64_t tiles = ((rows + kTileR - 1) / kTileR) * ((cols + kTileC - 1) / kTileC);
  STRATA_CHECK(tiles < (int64_t(1) << 31), "fp8 cast: too many tiles");
  if (f == fp8::Format::e4m3)
    cast_kernel<__NV_E4M3><<<unsigned(tiles), kThreads, 0, s>>>(x, rows, cols, out, out_t, partial, sb, fp8::kMaxE4M3);
  else
    cast_kernel<__NV_E5M2><<<unsigned(tiles), kThreads, 0, s>>>(x, rows, cols, out, out_t, partial, sb, fp8::kMaxE5M2);
  STRATA_LAUNCH_CHECK("fp8_cast");
}

}  // namespace strata::cuda

namespace strata {
// fp8_cast(out, out_t, sb, x; form: fp8::Format, | fp8::kScaleGiven), scratch {fp8.amax} (none when given).
void fp8_cast_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const Tensor &out = c.t[0], &out_t = c.t[1], &sb = c.t[2], &x = c.t[3];
  const bool given = (c.form & fp8::kScaleGiven) != 0;  // no amax pass, so no scratch (engine/ops/fp8_cast.cpp)
  cuda::fp8_quantize(
      bf16(x), rows(x), cols(x), fp8::form_format(c.form), out.defined() ? static_cast<uint8_t*>(out.data) : nullptr,
      out_t.defined() ? static_cast<uint8_t*>(out_t.data) : nullptr, f32(sb),
      given ? nullptr : f32(ctx.scratch.at(scratch_tag::fp8_amax)), static_cast<cudaStream_t>(ctx.stream), given);
}
}  // namespace strata
