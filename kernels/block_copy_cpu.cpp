// The strided block copy (kernels/block_copy.h), cpu reference: blocks in (i, j) order, elements in order.
#include "kernels/block_copy.h"
#include "kernels/op_dispatch.h"

namespace strata::cpu {

void block_copy(float* out, const float* in, const BlockCopy& c, bool accumulate) {
  for (int64_t i = 0; i < c.outer; ++i)
    for (int64_t j = 0; j < c.inner; ++j) {
      const float* src = in + i * c.in_outer + j * c.in_inner;
      float* dst = out + i * c.out_outer + j * c.out_inner;
      if (accumulate)
        for (int64_t k = 0; k < c.e; ++k) dst[k] += src[k];
      else
        for (int64_t k = 0; k < c.e; ++k) dst[k] = src[k];
    }
}

}  // namespace strata::cpu

namespace strata {
// block_copy(out, in; accumulate) with its BlockCopy (checked by Backend::block_copy).
void block_copy_cpu(const OpCall& c) {
  cpu::block_copy(dispatch::f32(c.t[0]), dispatch::f32(c.t[1]), *static_cast<const BlockCopy*>(c.params), c.acc[0]);
}
}  // namespace strata
