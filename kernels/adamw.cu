// torch.optim.AdamW over every state recipe (engine/state_recipe.h): fp32 masters stored split
// (engine/master_split.h: the bf16 compute weights plus an i16 low half) or none, moments fp32, bf16 or 8-bit; the
// gradients' sum of squares is kernels/grad_norm.cu. The clip scale is computed on device from norm_sq (no host sync).
// Per-element math uses explicit round-to-nearest intrinsics (no FMA contraction) in the cpu reference's order, and the
// scalars are formed on the host the same way, so results match kernels/adamw_cpu.cpp.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

#include "engine/master_split.h"
#include "kernels/adamw.h"
#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"
#include "kernels/optimizer_lists.cuh"
#include "kernels/quant8.h"

namespace strata::cuda {
namespace {

using namespace optimizer_lists;

// Scalars of one step, formed on the host exactly as the cpu reference does.
struct AdamWScalars {
  float decay, w1, b2, w2, neg_step, bc2_sqrt, eps, max_norm;
};

// The clip scale, torch clip_grad_norm_: max_norm / (norm + 1e-6) when the norm exceeds it.
__device__ __forceinline__ float clip_scale(const float* norm_sq, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const float norm = __fsqrt_rn(norm_sq[0]);
  return norm > max_norm ? __fdiv_rn(max_norm, __fadd_rn(norm, 1e-6f)) : 1.0f;
}

// One element's update, in the cpu reference's order (kernels/adamw_cpu.cpp), explicitly rounded.
__device__ __forceinline__ void adamw_core(float& p, float& m, float& v, float g, float scale, const AdamWScalars& k) {
  const float gi = __fmul_rn(g, scale);
  const float pi = __fmul_rn(p, k.decay);
  // torch.lerp(m, g, w1): two forms, picked by the weight
  const float d = __fsub_rn(gi, m);
  m = k.w1 < 0.5f ? __fadd_rn(m, __fmul_rn(k.w1, d)) : __fsub_rn(gi, __fmul_rn(d, __fsub_rn(1.0f, k.w1)));
  v = __fadd_rn(__fmul_rn(v, k.b2), __fmul_rn(__fmul_rn(k.w2, gi), gi));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bc2_sqrt), k.eps);
  p = __fadd_rn(pi, __fmul_rn(k.neg_step, __fdiv_rn(m, denom)));
}

// ---- 8-bit moments (engine/state_recipe.h) ------------------------------------------------------------
// One warp per quantisation block of kQuantBlock elements: each lane takes 4 consecutive elements in
// each half of the block (so every load of the warp is contiguous), and 8-bit scales come from a warp
// max, with no block-wide barrier. Chunk starts are multiples of kChunk, so every warp's block is a
// quantisation block of its tensor; a tensor's partial last block is read element by element.
constexpr int kAnyThreads = 256;
static_assert(kChunk % kQuantBlock == 0 && kQuantBlock == 256, "a warp covers one block as 2 x 32 lanes x 4");

struct AnyTable {
  int16_t* lo[kListMax];  // split masters' low halves (null: master_weights none)
  bf16* hi[kListMax];     // the bf16 weights
  void* m[kListMax];
  void* v[kListMax];
  float* ms[kListMax];  // 8-bit scales
  float* vs[kListMax];
  const void* g[kListMax];  // f32, or bf16 (gradients: bf16)
  size_t n[kListMax];
  size_t first_chunk[kListMax + 1];
  int count = 0;
};
static_assert(sizeof(AnyTable) <= 4000, "kernel parameter over the classic 4 KB limit");

// A moment's 8-bit codes [i, i + 4) (or [i, end) element by element) as floats, and back. scale: the block's
// largest value; inv: its q8::inverse_scale (formed once a block by the caller); levels: q8::level(0..255).
__device__ __forceinline__ void load_moment_q8(float (&x)[4], const void* base, size_t i, size_t end, float scale,
                                               bool is_m, const float* levels) {
  const uint8_t* p = static_cast<const uint8_t*>(base) + i;
  uint8_t c[4] = {0, 0, 0, 0};
  if (i + 4 <= end) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p);
    for (int e = 0; e < 4; e++) c[e] = uint8_t(u >> (8 * e));
  } else {
    for (int e = 0; e < 4; e++) c[e] = i + e < end ? p[e] : 0;
  }
  for (int e = 0; e < 4; e++)
    x[e] = is_m ? q8::decode_signed(c[e], scale, levels) : q8::decode_unsigned(c[e], scale, levels);
}

__device__ __forceinline__ void store_moment_q8(void* base, const float (&x)[4], size_t i, size_t end, float inv,
                                                bool is_m) {
  uint8_t c[4];
  for (int e = 0; e < 4; e++) c[e] = is_m ? q8::encode_signed(x[e], inv) : q8::encode_unsigned(x[e], inv);
  uint8_t* p = static_cast<uint8_t*>(base) + i;
  if (i + 4 <= end) {
    *reinterpret_cast<uint32_t*>(p) =
        uint32_t(c[0]) | (uint32_t(c[1]) << 8) | (uint32_t(c[2]) << 16) | (uint32_t(c[3]) << 24);
    return;
  }
  for (int e = 0; e < 4; e++)
    if (i + e < end) p[e] = c[e];
}

// Four consecutive 16-bit values (the weights' bits, or the masters' low halves).
__device__ __forceinline__ void load_u16x4(uint16_t (&h)[4], const uint16_t* p, size_t i, size_t end) {
  if (i + 4 <= end) {
    const uint2 u = *reinterpret_cast<const uint2*>(p + i);
    h[0] = uint16_t(u.x), h[1] = uint16_t(u.x >> 16), h[2] = uint16_t(u.y), h[3] = uint16_t(u.y >> 16);
    return;
  }
  for (int e = 0; e < 4; e++) h[e] = i + e < end ? p[i + e] : 0;
}
__device__ __forceinline__ void store_u16x4(uint16_t* p, const uint16_t (&h)[4], size_t i, size_t end) {
  if (i + 4 <= end) {
    *reinterpret_cast<uint2*>(p + i) =
        make_uint2(uint32_t(h[0]) | (uint32_t(h[1]) << 16), uint32_t(h[2]) | (uint32_t(h[3]) << 16));
    return;
  }
  for (int e = 0; e < 4; e++)
    if (i + e < end) p[i + e] = h[e];
}

// 8-bit moments (fp32 and bf16 moments take adamw_wide_kernel below). The update is some 70 instructions an element
// (IEEE-rounded division and square root, as the cpu reference), so the kernel is bound by how many warps can issue,
// not by HBM (Nsight Compute on an H200, docs/BENCHMARKS.md "Where the time goes"). At 64 registers 4 blocks of 256
// fit an SM; at 48 (5 blocks) the 8-bit forms spilled.
constexpr int kAnyMinBlocks = 4;

template <bool kSplit, bool kGradBf16>
__global__ void __launch_bounds__(kAnyThreads, kAnyMinBlocks)
    adamw_q8_kernel(const __grid_constant__ AnyTable L, const float* __restrict__ norm_sq, AdamWScalars k) {
  const float scale = clip_scale(norm_sq, k.max_norm);
  __shared__ float levels[q8::kUnsignedTop + 1];  // q8::level(0..255), for the decodes
  for (int j = int(threadIdx.x); j <= q8::kUnsignedTop; j += int(blockDim.x)) levels[j] = q8::level(j);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (size_t c = blockIdx.x; c < L.first_chunk[L.count]; c += gridDim.x) {
    const int t = chunk_owner(L, c);
    const size_t begin = (c - L.first_chunk[t]) * kChunk, end = begin + kChunk < L.n[t] ? begin + kChunk : L.n[t];
    // Warp-uniform loop: each warp one quantisation block at a time.
    for (size_t base = begin + size_t(warp) * kQuantBlock; base < end; base += size_t(n_warps) * kQuantBlock) {
      const size_t qb = base / kQuantBlock;
      const float m_scale = L.ms[t][qb];
      const float v_scale = L.vs[t][qb];
      float p[2][4], m[2][4], v[2][4], g[2][4];
      float m_max = 0.0f, v_max = 0.0f;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const size_t i = base + size_t(h) * 128 + size_t(lane) * 4;
        uint16_t hi[4], lo[4] = {0, 0, 0, 0};
        load_u16x4(hi, reinterpret_cast<const uint16_t*>(L.hi[t]), i, end);
        if constexpr (kSplit) load_u16x4(lo, reinterpret_cast<const uint16_t*>(L.lo[t]), i, end);
        if (i + 4 <= end) {
          load_grad4<kGradBf16>(g[h], L.g[t], i);
        } else {
          for (int e = 0; e < 4; e++) g[h][e] = i + e < end ? grad_at<kGradBf16>(L.g[t], i + e) : 0.0f;
        }
        load_moment_q8(m[h], L.m[t], i, end, m_scale, true, levels);
        load_moment_q8(v[h], L.v[t], i, end, v_scale, false, levels);
#pragma unroll
        for (int e = 0; e < 4; e++) {
          p[h][e] = kSplit ? __uint_as_float(master_join_bits(hi[e], int16_t(lo[e])))
                           : __uint_as_float(uint32_t(hi[e]) << 16);
          adamw_core(p[h][e], m[h][e], v[h][e], g[h][e], scale, k);
          if (i + e < end) m_max = fmaxf(m_max, fabsf(m[h][e])), v_max = fmaxf(v_max, v[h][e]);
        }
      }
      m_max = warp_max(m_max);
      v_max = warp_max(v_max);
      if (lane == 0) L.ms[t][qb] = m_max, L.vs[t][qb] = v_max;
      const float m_inv = q8::inverse_scale(m_max), v_inv = q8::inverse_scale(v_max);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const size_t i = base + size_t(h) * 128 + size_t(lane) * 4;
        if (i >= end) continue;
        uint16_t hi[4], lo[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          if constexpr (kSplit) {
            int16_t l;
            master_split_bits(__float_as_uint(p[h][e]), hi[e], l);
            lo[e] = uint16_t(l);
          } else {
            hi[e] = __bfloat16_as_ushort(__float2bfloat16_rn(p[h][e]));
          }
        }
        store_u16x4(reinterpret_cast<uint16_t*>(L.hi[t]), hi, i, end);
        if constexpr (kSplit) store_u16x4(reinterpret_cast<uint16_t*>(L.lo[t]), lo, i, end);
        store_moment_q8(L.m[t], m[h], i, end, m_inv, true);
        store_moment_q8(L.v[t], v[h], i, end, v_inv, false);
      }
    }
  }
}

// ---- fp32 and bf16 moments: eight elements a thread ------------------------------------------------
// The same update as adamw_q8_kernel, with each thread taking 8 consecutive elements: every 16-bit array is one
// 16-byte access and every f32 one two, a chunk's pointers are formed once and its offsets are 32-bit, and a whole
// chunk (every chunk but a tensor's last) runs without bounds checks. Fewer instructions an element is what the
// update needs (it is bound by issue, above); 8-bit moments keep the warp-per-block kernel.
constexpr int kWideMinBlocks = 4;
constexpr unsigned kWideElems = 8;

// Elements [0, 8) at p as floats, and back: 16-bit values are bf16 bits (weights, bf16 moments and gradients).
__device__ __forceinline__ void load8(float (&x)[8], const uint16_t* p) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    x[2 * k] = __uint_as_float(w[k] << 16);
    x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ void load8(float (&x)[8], const float* p) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {  // element lo in the low half, as memory holds it
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}
__device__ __forceinline__ void store8(uint16_t* p, const float (&x)[8]) {
  *reinterpret_cast<uint4*>(p) =
      make_uint4(bf16_pair(x[0], x[1]), bf16_pair(x[2], x[3]), bf16_pair(x[4], x[5]), bf16_pair(x[6], x[7]));
}
__device__ __forceinline__ void store8(float* p, const float (&x)[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(x[4], x[5], x[6], x[7]);
}

// One tensor's slice as the wide kernel sees it: pointers at the chunk's first element. M is the moments' element
// type (float or uint16_t: bf16 bits), G the gradients'.
template <bool kSplit, class M, class G>
struct WideSlice {
  uint16_t* hi;
  uint16_t* lo;  // kSplit only
  M* m;
  M* v;
  const G* g;

  // Elements [j, j + 8).
  __device__ __forceinline__ void step8(unsigned j, float scale, const AdamWScalars& k) const {
    float p[8], mm[8], vv[8], gg[8];
    load8(p, hi + j);
    if constexpr (kSplit) {
      const uint4 u = *reinterpret_cast<const uint4*>(lo + j);
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int e = 0; e < 8; e++) {
        const int16_t l = int16_t(e % 2 ? w[e / 2] >> 16 : w[e / 2] & 0xffffu);
        p[e] = __uint_as_float(__float_as_uint(p[e]) + uint32_t(int32_t(l)));  // master_join_bits
      }
    }
    load8(gg, g + j);
    load8(mm, m + j);
    load8(vv, v + j);
#pragma unroll
    for (int e = 0; e < 8; e++) adamw_core(p[e], mm[e], vv[e], gg[e], scale, k);
    store8(m + j, mm);
    store8(v + j, vv);
    if constexpr (kSplit) {
      uint32_t hw[4], lw[4];
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        uint16_t h0, h1;
        int16_t l0, l1;
        master_split_bits(__float_as_uint(p[e]), h0, l0);
        master_split_bits(__float_as_uint(p[e + 1]), h1, l1);
        hw[e / 2] = uint32_t(h0) | (uint32_t(h1) << 16);
        lw[e / 2] = uint32_t(uint16_t(l0)) | (uint32_t(uint16_t(l1)) << 16);
      }
      *reinterpret_cast<uint4*>(hi + j) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
      *reinterpret_cast<uint4*>(lo + j) = make_uint4(lw[0], lw[1], lw[2], lw[3]);
    } else {
      store8(hi + j, p);
    }
  }

  // Element j alone (a tensor's last < 8).
  __device__ __forceinline__ void step1(unsigned j, float scale, const AdamWScalars& k) const {
    const auto widen = [](auto x) {
      if constexpr (std::is_same_v<decltype(x), uint16_t>)
        return __uint_as_float(uint32_t(x) << 16);
      else
        return x;
    };
    float p = kSplit ? __uint_as_float(master_join_bits(hi[j], int16_t(lo[j]))) : widen(hi[j]);
    float mm = widen(m[j]), vv = widen(v[j]);
    adamw_core(p, mm, vv, widen(g[j]), scale, k);
    if constexpr (std::is_same_v<M, uint16_t>) {
      m[j] = __bfloat16_as_ushort(__float2bfloat16_rn(mm));
      v[j] = __bfloat16_as_ushort(__float2bfloat16_rn(vv));
    } else {
      m[j] = mm, v[j] = vv;
    }
    if constexpr (kSplit) {
      int16_t l;
      master_split_bits(__float_as_uint(p), hi[j], l);
      lo[j] = uint16_t(l);
    } else {
      hi[j] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
    }
  }
};

template <bool kSplit, OptimizerState S, bool kGradBf16>
__global__ void __launch_bounds__(kAnyThreads, kWideMinBlocks)
    adamw_wide_kernel(const __grid_constant__ AnyTable L, const float* __restrict__ norm_sq, AdamWScalars k) {
  static_assert(S != OptimizerState::q8, "8-bit moments take adamw_q8_kernel");
  using M = std::conditional_t<S == OptimizerState::fp32, float, uint16_t>;
  using G = std::conditional_t<kGradBf16, uint16_t, float>;
  const float scale = clip_scale(norm_sq, k.max_norm);
  for (size_t c = blockIdx.x; c < L.first_chunk[L.count]; c += gridDim.x) {
    const int t = chunk_owner(L, c);
    const size_t begin = (c - L.first_chunk[t]) * kChunk;
    const unsigned n = unsigned(L.n[t] - begin < kChunk ? L.n[t] - begin : kChunk);
    const WideSlice<kSplit, M, G> s{
        reinterpret_cast<uint16_t*>(L.hi[t]) + begin, kSplit ? reinterpret_cast<uint16_t*>(L.lo[t]) + begin : nullptr,
        static_cast<M*>(L.m[t]) + begin, static_cast<M*>(L.v[t]) + begin, static_cast<const G*>(L.g[t]) + begin};
    const unsigned first = threadIdx.x * kWideElems, stride = kAnyThreads * kWideElems;
    if (n == kChunk) {
#pragma unroll 2
      for (unsigned j = first; j < unsigned(kChunk); j += stride) s.step8(j, scale, k);
      continue;
    }
    const unsigned whole = n / kWideElems * kWideElems;
    for (unsigned j = first; j < whole; j += stride) s.step8(j, scale, k);
    if (first == (whole % stride) && whole < n)  // the thread next in line takes the < 8 left
      for (unsigned j = whole; j < n; j++) s.step1(j, scale, k);
  }
}

// The shortest decimal that rounds to f, as a double: torch holds hyperparameters as Python
// doubles, so 1 - beta2 must be 0.001 for beta2 = 0.999f (same as adamw_cpu.cpp).
double as_written(float f) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof(buf), f).ptr;
  double d = f;
  std::from_chars(buf, end, d);
  return d;
}

AdamWScalars adamw_scalars(float max_norm, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
  const double lr_d = as_written(lr), b1 = as_written(beta1), b2 = as_written(beta2);
  AdamWScalars k;
  k.decay = float(1.0 - lr_d * as_written(weight_decay));
  k.w1 = float(1.0 - b1);
  k.b2 = float(b2);
  k.w2 = float(1.0 - b2);
  k.neg_step = float(-(lr_d / (1.0 - std::pow(b1, t))));
  k.bc2_sqrt = float(std::sqrt(1.0 - std::pow(b2, t)));
  k.eps = float(as_written(eps));
  k.max_norm = max_norm;
  return k;
}

}  // namespace

void adamw_step_any(const AdamWAnyTensors* ts, int count, bool split, OptimizerState moments, const float* norm_sq,
                    float max_norm, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                    cudaStream_t stream) {
  STRATA_CHECK(t >= 1, "adamw_step: step count is 1-based");
  STRATA_CHECK(max_norm <= 0.0f || norm_sq != nullptr, "adamw_step: clipping needs norm_sq");
  const AdamWScalars k = adamw_scalars(max_norm, lr, beta1, beta2, eps, weight_decay, t);
  const bool bf16_grads = count > 0 && ts[0].g_bf16 != nullptr;
  for (int from = 0; from < count; from += kListMax) {
    AnyTable L;
    L.count = std::min(kListMax, count - from);
    L.first_chunk[0] = 0;
    for (int i = 0; i < L.count; i++) {
      const AdamWAnyTensors& a = ts[from + i];
      const void* g = bf16_grads ? static_cast<const void*>(a.g_bf16) : static_cast<const void*>(a.g);
      STRATA_CHECK((a.g_bf16 != nullptr) == bf16_grads && (!bf16_grads || a.g == nullptr),
                   "adamw_step_any: every tensor of a call has f32 (g) or every one bf16 (g_bf16) gradients");
      STRATA_CHECK(a.n == 0 || (a.hi && a.m && a.v && g && (a.lo || !split)),
                   "adamw_step_any: a tensor lacks a buffer its precision needs");
      STRATA_CHECK(moments != OptimizerState::q8 || a.n == 0 || (a.m_scale && a.v_scale),
                   "adamw_step_any: 8-bit moments need their scales");
      STRATA_CHECK(all_aligned16(a.lo, a.hi, a.m, a.v, g), "adamw_step_any: a buffer is not 16-byte aligned");
      L.lo[i] = a.lo;
      L.hi[i] = a.hi;
      L.m[i] = a.m;
      L.v[i] = a.v;
      L.ms[i] = a.m_scale;
      L.vs[i] = a.v_scale;
      L.g[i] = g;
      L.n[i] = a.n;
      L.first_chunk[i + 1] = L.first_chunk[i] + ceil_div(a.n, kChunk);
    }
    const size_t chunks = L.first_chunk[L.count];
    if (chunks == 0) continue;
    // As many blocks as fit the SMs at once, each walking the chunks: no second, partial wave of blocks.
    auto launch = [&](auto kernel) {
      int per_sm = 0;
      STRATA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kAnyThreads, 0));
      const unsigned grid = unsigned(std::min<size_t>(chunks, size_t(num_sms()) * size_t(std::max(per_sm, 1))));
      kernel<<<grid, kAnyThreads, 0, stream>>>(L, norm_sq, k);
    };
    // One instance per (master, moments, gradient dtype).
    auto by_grads = [&](auto f32_kernel, auto bf16_kernel) { bf16_grads ? launch(bf16_kernel) : launch(f32_kernel); };
    switch (moments) {
      case OptimizerState::fp32:
        split ? by_grads(adamw_wide_kernel<true, OptimizerState::fp32, false>,
                         adamw_wide_kernel<true, OptimizerState::fp32, true>)
              : by_grads(adamw_wide_kernel<false, OptimizerState::fp32, false>,
                         adamw_wide_kernel<false, OptimizerState::fp32, true>);
        break;
      case OptimizerState::bf16:
        split ? by_grads(adamw_wide_kernel<true, OptimizerState::bf16, false>,
                         adamw_wide_kernel<true, OptimizerState::bf16, true>)
              : by_grads(adamw_wide_kernel<false, OptimizerState::bf16, false>,
                         adamw_wide_kernel<false, OptimizerState::bf16, true>);
        break;
      case OptimizerState::q8:
        split ? by_grads(adamw_q8_kernel<true, false>, adamw_q8_kernel<true, true>)
              : by_grads(adamw_q8_kernel<false, false>, adamw_q8_kernel<false, true>);
        break;
    }
    STRATA_LAUNCH_CHECK("adamw_step_any");
  }
}

}  // namespace strata::cuda
