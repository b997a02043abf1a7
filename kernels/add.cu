// Residual add out = a + s * b and its backward. Elementwise, fp32 math, 16-byte accesses where aligned.
#include "kernels/cuda_common.cuh"
#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata::cuda {
namespace {

struct AddFwd {
  bf16* out;
  const bf16* a;
  const bf16* b;
  float s;
  template <int V>
  __device__ void apply(size_t i) const {
    float x[V], y[V];
    load_bf16(x, a + i);
    load_bf16(y, b + i);
#pragma unroll
    for (int k = 0; k < V; k++) x[k] += s * y[k];
    store_bf16(out + i, x);
  }
};

// da (+)= dout, db (+)= s * dout; a null gradient is skipped.
struct AddBwd {
  bf16* da;
  bf16* db;
  const bf16* dout;
  float s;
  bool acc_da, acc_db;
  template <int V>
  __device__ void apply(size_t i) const {
    float d[V], acc[V];
    load_bf16(d, dout + i);
    if (da) {
      load_grad_bf16(acc, da + i, acc_da);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += d[k];
      store_bf16(da + i, acc);
    }
    if (db) {
      load_grad_bf16(acc, db + i, acc_db);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] += s * d[k];
      store_bf16(db + i, acc);
    }
  }
};

}  // namespace

void add_fwd(bf16* out, const bf16* a, const bf16* b, float s, long n, cudaStream_t stream) {
  STRATA_CHECK(n >= 0, "add_fwd: negative size");
  launch_elementwise<8>("add_fwd", size_t(n), all_aligned16(out, a, b), AddFwd{out, a, b, s}, stream);
}

void add_bwd(bf16* da, bf16* db, const bf16* dout, float s, long n, bool acc_da, bool acc_db, cudaStream_t stream) {
  STRATA_CHECK(n >= 0, "add_bwd: negative size");
  if (!da && !db) return;
  launch_elementwise<8>("add_bwd", size_t(n), all_aligned16(da, db, dout), AddBwd{da, db, dout, s, acc_da, acc_db},
                        stream);
}

}  // namespace strata::cuda

namespace strata {
void add_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  if (!c.backward) return cuda::add_fwd(bf16(t[0]), bf16(t[1]), bf16(t[2]), c.scalar, long(t[1].numel()), s);
  cuda::add_bwd(bf16(t[0]), bf16(t[1]), bf16(t[2]), c.scalar, long(t[2].numel()), c.acc[0], c.acc[1], s);
}
}  // namespace strata
