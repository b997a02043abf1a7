// SwiGLU out = silu(gate) * up and its backward, silu(g) = g * sigmoid(g), fp32 math.
// Elementwise, 16-byte accesses where aligned. sigmoid uses the hardware exp2 (__expf) and a
// correctly rounded reciprocal: accurate to a few fp32 ulp, far below a bf16 ulp, and the accurate
// expf with an IEEE divide costs enough instructions to make the forward compute-bound.
#include "kernels/cuda_common.cuh"
#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

// 1 / (1 + e^-g); for g < -88 e^-g is inf and the reciprocal 0, as it should be.
__device__ __forceinline__ float sigmoid(float g) {
  return __frcp_rn(1.0f + __expf(-g));
}

struct SwigluFwd {
  bf16* out;
  const bf16* gate;
  const bf16* up;
  template <int V>
  __device__ void apply(size_t i) const {
    float g[V], u[V];
    load_bf16(g, gate + i);
    load_bf16(u, up + i);
#pragma unroll
    for (int k = 0; k < V; k++) g[k] = g[k] * sigmoid(g[k]) * u[k];
    store_bf16(out + i, g);
  }
};

// dgate (+)= dout * up * sig * (1 + g * (1 - sig)), dup (+)= dout * silu(g); a null gradient is skipped.
struct SwigluBwd {
  bf16* dgate;
  bf16* dup;
  const bf16* dout;
  const bf16* gate;
  const bf16* up;
  bool acc_dgate, acc_dup;
  template <int V>
  __device__ void apply(size_t i) const {
    float g[V], u[V], d[V], acc[V];
    load_bf16(g, gate + i);
    load_bf16(u, up + i);
    load_bf16(d, dout + i);
    float sig[V];
#pragma unroll
    for (int k = 0; k < V; k++) sig[k] = sigmoid(g[k]);
    if (dgate) {
      load_grad_bf16(acc, dgate + i, acc_dgate);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += d[k] * u[k] * (sig[k] * (1.0f + g[k] * (1.0f - sig[k])));
      store_bf16(dgate + i, acc);
    }
    if (dup) {
      load_grad_bf16(acc, dup + i, acc_dup);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += d[k] * (g[k] * sig[k]);
      store_bf16(dup + i, acc);
    }
  }
};

}  // namespace

void swiglu_fwd(bf16* out, const bf16* gate, const bf16* up, long n, cudaStream_t stream) {
  STRATA_CHECK(n >= 0, "swiglu_fwd: negative size");
  launch_elementwise<8>("swiglu_fwd", size_t(n), all_aligned16(out, gate, up), SwigluFwd{out, gate, up}, stream);
}

void swiglu_bwd(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, long n, bool acc_dgate,
                bool acc_dup, cudaStream_t stream) {
  STRATA_CHECK(n >= 0, "swiglu_bwd: negative size");
  if (!dgate && !dup) return;
  launch_elementwise<8>("swiglu_bwd", size_t(n), all_aligned16(dgate, dup, dout, gate, up),
                        SwigluBwd{dgate, dup, dout, gate, up, acc_dgate, acc_dup}, stream);
}

}  // namespace strata::cuda

namespace strata {
void swiglu_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  if (!c.backward) return cuda::swiglu_fwd(bf16(t[0]), bf16(t[1]), bf16(t[2]), long(t[1].numel()), s);
  cuda::swiglu_bwd(bf16(t[0]), bf16(t[1]), bf16(t[2]), bf16(t[3]), bf16(t[4]), long(t[2].numel()), c.acc[0], c.acc[1],
                   s);
}
}  // namespace strata
