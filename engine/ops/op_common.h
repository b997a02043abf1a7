// What the op files (engine/ops/*.cpp) share: the compute dtype, 2-D views, and the byte terms their costs sum.
#pragma once
#include "engine/op_table.h"
#include "engine/ops.h"

namespace strata::ops::detail {

inline DType act(Tape& t) {
  return t.backend().compute_dtype();
}
inline Shape rows_by(const Shape& x, int64_t cols) {
  return Shape{x.numel() / x[x.nd - 1], cols};
}
inline double B(const Tensor& t) {
  return t.defined() ? double(t.bytes()) : 0.0;
}
// Bytes a gradient write moves: read and written when it adds, written when it overwrites.
inline double rw(const Tensor& g, bool acc) {
  return (acc ? 2.0 : 1.0) * B(g);
}
inline double rows(const Tensor& t) {
  return double(t.numel() / t.shape[t.shape.nd - 1]);
}
inline double cols(const Tensor& t) {
  return double(t.shape[t.shape.nd - 1]);
}
// A GEMM's time on the sim's clock, its problem noted for the first call's tuning (OpSim::gemm_problem).
inline double gemm_time(OpSim& sim, int layout, double m, double n, double k, double bytes) {
  sim.gemm_problem(m, n, k, bytes, layout, false);
  return sim.cost().gemm(m, n, k, bytes);
}
inline double gemm_fp8_time(OpSim& sim, int layout, double m, double n, double k, double bytes) {
  sim.gemm_problem(m, n, k, bytes, layout, true);
  return sim.cost().gemm_fp8(m, n, k, bytes);
}
// Each cost sums its terms in the order the sim always has, so forecasts stay bit-identical.
inline OpKernelBytes one(double b) {
  return OpKernelBytes{}.add(b);
}

}  // namespace strata::ops::detail
