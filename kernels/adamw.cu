// Optimizer kernels: the sum of squares for global-norm clipping, and torch.optim.AdamW on fp32
// master weights. The clip scale is computed on device from norm_sq (no host sync). Per-element math
// uses explicit round-to-nearest intrinsics (no FMA contraction) in the cpu reference's order, and
// the scalars are formed on the host the same way, so results match kernels/adamw_cpu.cpp.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

constexpr int kReduceThreads = 512;

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
  if (threadIdx.x == 0) atomicAdd(out, acc);
}

// Scalars of one step, formed on the host exactly as the cpu reference does.
struct AdamWScalars {
  float decay, w1, b2, w2, neg_step, bc2_sqrt, eps, max_norm;
};

struct AdamWOp {
  float* master;
  float* m;
  float* v;
  const float* g;
  bf16* param_out;
  const float* norm_sq;
  AdamWScalars k;
  template <int V>
  __device__ void apply(size_t i) const {
    float scale = 1.0f;  // torch clip_grad_norm_: max_norm / (norm + 1e-6) when the norm exceeds it
    if (k.max_norm > 0.0f) {
      const float norm = __fsqrt_rn(norm_sq[0]);
      if (norm > k.max_norm) scale = __fdiv_rn(k.max_norm, __fadd_rn(norm, 1e-6f));
    }
    float p[V], mm[V], vv[V], gg[V];
    load_f32(p, master + i);
    load_f32(mm, m + i);
    load_f32(vv, v + i);
    load_f32(gg, g + i);
#pragma unroll
    for (int e = 0; e < V; e++) {
      const float gi = __fmul_rn(gg[e], scale);
      const float pi = __fmul_rn(p[e], k.decay);
      // torch.lerp(m, g, w1): two forms, picked by the weight
      const float d = __fsub_rn(gi, mm[e]);
      mm[e] = k.w1 < 0.5f ? __fadd_rn(mm[e], __fmul_rn(k.w1, d)) : __fsub_rn(gi, __fmul_rn(d, __fsub_rn(1.0f, k.w1)));
      vv[e] = __fadd_rn(__fmul_rn(vv[e], k.b2), __fmul_rn(__fmul_rn(k.w2, gi), gi));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vv[e]), k.bc2_sqrt), k.eps);
      p[e] = __fadd_rn(pi, __fmul_rn(k.neg_step, __fdiv_rn(mm[e], denom)));
    }
    store_f32(master + i, p);
    store_f32(m + i, mm);
    store_f32(v + i, vv);
    if (param_out) store_bf16(param_out + i, p);
  }
};

// The shortest decimal that rounds to f, as a double: torch holds hyperparameters as Python
// doubles, so 1 - beta2 must be 0.001 for beta2 = 0.999f (same as adamw_cpu.cpp).
double as_written(float f) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof(buf), f).ptr;
  double d = f;
  std::from_chars(buf, end, d);
  return d;
}

}  // namespace

void sum_squares(float* out, const float* g, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(g);
  const size_t items = vec ? n / 4 + 1 : n;
  const unsigned blocks = std::min<size_t>(ceil_div(items, kReduceThreads), size_t(num_sms()) * 4);
  if (vec)
    sum_squares_kernel<4><<<blocks, kReduceThreads, 0, stream>>>(out, g, n);
  else
    sum_squares_kernel<1><<<blocks, kReduceThreads, 0, stream>>>(out, g, n);
  STRATA_LAUNCH_CHECK("sum_squares_kernel");
}

void adamw_step(float* master, float* m, float* v, const float* g, bf16* param_out, size_t n, const float* norm_sq,
                float max_norm, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                cudaStream_t stream) {
  STRATA_CHECK(t >= 1, "adamw_step: step count is 1-based");
  STRATA_CHECK(max_norm <= 0.0f || norm_sq != nullptr, "adamw_step: clipping needs norm_sq");
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
  const bool vec = all_aligned16(master, m, v, g, param_out);
  launch_elementwise<4>("adamw_step", n, vec, AdamWOp{master, m, v, g, param_out, norm_sq, k}, stream);
}

}  // namespace strata::cuda
