// Rotary position embedding, Hugging Face rotate_half convention, bf16 in/out, fp32 math:
//   y[i] = x[i] c - x[i + D/2] s,  y[i + D/2] = x[i + D/2] c + x[i] s,
//   c, s = cos, sin(float(pos) * inv_freq[i]) * scale (yarn's and longrope's attention factor; 1: unscaled).
// One block per token: the token's cos/sin table [2, D/2] is built once in shared memory (accurate
// sincosf, as the cpu reference's std::cos/sin) and reused by all its heads. 16-byte accesses when
// D % 16 == 0 and the pointers are aligned. Backward rotates by the negative angle (R^T) and
// adds into dx or overwrites it. `out` may alias `x`.
#include "kernels/cuda_common.cuh"
#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

template <int V, bool kBackward>
__global__ void rope_kernel(bf16* out, const bf16* x, const int32_t* __restrict__ pos,
                            const float* __restrict__ inv_freq, int H, int D, float scale, bool accumulate) {
  extern __shared__ __align__(16) float table[];  // [2][D/2]: cos, then sin
  const int half = D / 2;
  const int n = blockIdx.x;
  const float p = float(pos[n]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(p * inv_freq[i], &s, &c);  // float32 angle, exactly as transformers forms it
    table[i] = c * scale;              // as transformers scales cos and sin before the rotation
    table[half + i] = s * scale;
  }
  __syncthreads();
  const int per_head = half / V;
  for (int item = threadIdx.x; item < H * per_head; item += blockDim.x) {
    const int h = item / per_head, i = (item % per_head) * V;
    const size_t base = (size_t(n) * H + h) * D;  // x[n, h, :]
    float x1[V], x2[V], c[V], s[V];
    load_bf16(x1, x + base + i);
    load_bf16(x2, x + base + i + half);
    load_f32(c, table + i);
    load_f32(s, table + half + i);
    float y1[V], y2[V];
#pragma unroll
    for (int k = 0; k < V; k++) {
      if constexpr (kBackward) {
        y1[k] = x1[k] * c[k] + x2[k] * s[k];
        y2[k] = x2[k] * c[k] - x1[k] * s[k];
      } else {
        y1[k] = x1[k] * c[k] - x2[k] * s[k];
        y2[k] = x2[k] * c[k] + x1[k] * s[k];
      }
    }
    if (kBackward && accumulate) {
      float a1[V], a2[V];
      load_bf16(a1, out + base + i);
      load_bf16(a2, out + base + i + half);
#pragma unroll
      for (int k = 0; k < V; k++) y1[k] += a1[k], y2[k] += a2[k];
    }
    store_bf16(out + base + i, y1);
    store_bf16(out + base + i + half, y2);
  }
}

template <bool kBackward>
void launch(const char* name, bf16* out, const bf16* x, const int32_t* pos, const float* inv_freq, int N, int H, int D,
            float scale, bool accumulate, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && H > 0 && D > 0 && D % 2 == 0, std::string(name) + ": bad shape (D must be even)");
  if (N == 0) return;
  const int half = D / 2;
  const size_t smem = sizeof(float) * D;  // cos and sin tables
  if (half % 8 == 0 && all_aligned16(out, x)) {
    rope_kernel<8, kBackward>
        <<<N, row_threads(H * half / 8, 256), smem, stream>>>(out, x, pos, inv_freq, H, D, scale, accumulate);
  } else {
    rope_kernel<1, kBackward>
        <<<N, row_threads(H * half, 256), smem, stream>>>(out, x, pos, inv_freq, H, D, scale, accumulate);
  }
  STRATA_LAUNCH_CHECK(name);
}

}  // namespace

void rope_fwd(bf16* out, const bf16* x, const int32_t* pos, const float* inv_freq, int N, int H, int D, float scale,
              cudaStream_t stream) {
  launch<false>("rope_fwd", out, x, pos, inv_freq, N, H, D, scale, false, stream);
}

void rope_bwd(bf16* dx, const bf16* dout, const int32_t* pos, const float* inv_freq, int N, int H, int D, bool acc_dx,
              float scale, cudaStream_t stream) {
  if (!dx) return;
  launch<true>("rope_bwd", dx, dout, pos, inv_freq, N, H, D, scale, acc_dx, stream);
}

}  // namespace strata::cuda

namespace strata {
// rope_fwd(out, x, pos, inv_freq; scalar: the attention factor) and rope_bwd(dx, dout, pos, inv_freq; acc_dx,
// scalar); x [N, H, D].
void rope_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  const Tensor& x = t[1];
  const int N = int(t[2].numel()), H = int(x.shape[x.shape.nd - 2]), D = int(cols(x));
  if (!c.backward) return cuda::rope_fwd(bf16(t[0]), bf16(x), t[2].i32(), f32(t[3]), N, H, D, c.scalar, s);
  cuda::rope_bwd(bf16(t[0]), bf16(x), t[2].i32(), f32(t[3]), N, H, D, c.acc[0], c.scalar, s);
}
}  // namespace strata
