// Conversions between fp32 and bf16, and fills. Elementwise, 16-byte accesses where aligned.
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

}  // namespace

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
