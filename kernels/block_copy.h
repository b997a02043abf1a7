// A strided copy of blocks: the layout changes around sequence parallelism's all-to-alls (engine/ops_seq.cpp) and
// GQA's KV-head replication. `outer` x `inner` blocks of `e` contiguous elements; block (i, j) goes from
// in + i * in_outer + j * in_inner to out + i * out_outer + j * out_inner (strides in elements), and is added into
// out when `accumulate` (a gradient's later write), else overwrites it. Blocks must not overlap in out.
// Example: swapping the two leading axes of [a, b, e] into [b, a, e] is BlockCopy::swap_axes(a, b, e).
#pragma once
#include <cstdint>

namespace strata {

struct BlockCopy {
  int64_t outer = 1, inner = 1, e = 1;
  int64_t in_outer = 0, in_inner = 0;    // elements between blocks of in
  int64_t out_outer = 0, out_inner = 0;  // elements between blocks of out
  // One past the last element read / written (0 for no blocks).
  int64_t in_span() const { return count() ? (outer - 1) * in_outer + (inner - 1) * in_inner + e : 0; }
  int64_t out_span() const { return count() ? (outer - 1) * out_outer + (inner - 1) * out_inner + e : 0; }
  int64_t count() const { return outer * inner * e; }  // elements copied
  // in [a, b, e] -> out [b, a, e]: out[j, i, :] = in[i, j, :].
  static BlockCopy swap_axes(int64_t a, int64_t b, int64_t e) { return {a, b, e, b * e, e, e, a * e}; }
};

namespace cpu {
void block_copy(float* out, const float* in, const BlockCopy& c, bool accumulate);
}  // namespace cpu

}  // namespace strata
