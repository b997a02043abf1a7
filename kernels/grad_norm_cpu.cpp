// The gradient norm's cpu forms (engine/ops/grad_norm.cpp): sums of squares in double (kernels/adamw_cpu.cpp), added
// into the f32 scalar one tensor at a time.
#include <cstring>

#include "kernels/adamw.h"
#include "kernels/op_dispatch.h"

namespace strata {
namespace {

double sum_squares_of(const Tensor& g) {
  return g.dtype == DType::bf16 ? cpu::sum_squares_bf16(static_cast<const uint16_t*>(g.data), size_t(g.numel()))
                                : cpu::sum_squares(g.f32(), size_t(g.numel()));
}
void add_into(const Tensor& out, double s) {
  out.f32()[0] = float(double(out.f32()[0]) + s);
}

}  // namespace

// form 0: grad_norm_sq(out, g); 1: grad_norm_sq_list(out; tensors), the per-tensor sums in order; 2:
// grad_norm_sq_part(parts, g; n = k): a part is the double grad_norm_sq would add (its bits in two i32 words), so
// 3: grad_norm_sq_add_parts(out, parts; n), adding the parts in order, gives grad_norm_sq's steps bit for bit.
void grad_norm_cpu(const OpCall& c) {
  const auto& t = c.t;
  switch (c.form) {
    case 0:
      return add_into(t[0], sum_squares_of(t[1]));
    case 1:
      for (const Tensor& g : c.tensors) add_into(t[0], sum_squares_of(g));
      return;
    case 2: {
      std::byte* slot = static_cast<std::byte*>(t[0].data) + size_t(c.n) * sizeof(double);
      double d;
      std::memcpy(&d, slot, sizeof d);
      d += sum_squares_of(t[1]);
      std::memcpy(slot, &d, sizeof d);
      return;
    }
    default:
      for (int64_t k = 0; k < c.n; ++k) {
        double s;
        std::memcpy(&s, static_cast<const std::byte*>(t[1].data) + size_t(k) * sizeof(double), sizeof s);
        add_into(t[0], s);
      }
  }
}

}  // namespace strata
