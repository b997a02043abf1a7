// Conversions between fp32 and bf16, fills, and the fold of fp32 sums into a bf16 gradient. Elementwise, 16-byte
// accesses where aligned.
#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

struct F32ToBf16 {
  bf16* out;
  const float* in;
  template <int V>
  __device__ void apply(size_t i) const {
    float x[V];
    load_f32(x, in + i);
    store_bf16(out + i, x);
  }
};

struct Bf16ToF32 {
  float* out;
  const bf16* in;
  template <int V>
  __device__ void apply(size_t i) const {
    float x[V];
    load_bf16(x, in + i);
    store_f32(out + i, x);
  }
};

struct FillF32 {
  float* out;
  float value;
  template <int V>
  __device__ void apply(size_t i) const {
    float x[V];
#pragma unroll
    for (int k = 0; k < V; k++) x[k] = value;
    store_f32(out + i, x);
  }
};

struct FillBf16 {
  bf16* out;
  float value;
  template <int V>
  __device__ void apply(size_t i) const {
    float x[V];
#pragma unroll
    for (int k = 0; k < V; k++) x[k] = value;
    store_bf16(out + i, x);
  }
};

// g = bf16(g + sums), or bf16(0 + sums) when overwriting: one rounding per element (write_grad).
struct GradFoldBf16 {
  bf16* g;
  const float* sums;
  bool accumulate;
  template <int V>
  __device__ void apply(size_t i) const {
    float a[V], s[V];
    load_grad_bf16(a, g + i, accumulate);
    load_f32(s, sums + i);
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = __fadd_rn(a[k], s[k]);
    store_bf16(g + i, a);
  }
};

}  // namespace

void grad_fold_bf16(bf16* g, const float* sums, size_t n, bool accumulate, cudaStream_t stream) {
  launch_elementwise<4>("grad_fold_bf16", n, all_aligned16(g, sums), GradFoldBf16{g, sums, accumulate}, stream);
}

void f32_to_bf16(bf16* out, const float* in, size_t n, cudaStream_t stream) {
  launch_elementwise<4>("f32_to_bf16", n, all_aligned16(out, in), F32ToBf16{out, in}, stream);
}

void bf16_to_f32(float* out, const bf16* in, size_t n, cudaStream_t stream) {
  launch_elementwise<4>("bf16_to_f32", n, all_aligned16(out, in), Bf16ToF32{out, in}, stream);
}

void fill_f32(float* out, float value, size_t n, cudaStream_t stream) {
  launch_elementwise<4>("fill_f32", n, aligned16(out), FillF32{out, value}, stream);
}

void fill_bf16(bf16* out, float value, size_t n, cudaStream_t stream) {
  launch_elementwise<8>("fill_bf16", n, aligned16(out), FillBf16{out, value}, stream);
}

}  // namespace strata::cuda
