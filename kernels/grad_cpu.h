// How the cpu reference kernels write a gradient element: added into it, or, at its first write
// in a step, overwritten with 0 + v. That is the value zeroing it first and adding gave, bit for
// bit (-0 becomes +0), so a step gives the same bits whichever way it is asked.
//
// A parameter's gradient may be stored in bf16 (the recipe's gradients: bf16, engine/state_recipe.h):
// GradOut is where a kernel writes one, f32 or bf16. A kernel forms its whole term for an element in
// f32 first and writes it once: g = bf16(float(g) + v) when adding, bf16(0 + v) when overwriting,
// rounded to nearest even, the way the cuda backend's bf16 gradient writes round (a cuBLASLt GEMM
// with a bf16 C/D and beta 1, or the fold of an fp32 scratch).
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/dtype.h"

namespace strata::cpu {

inline void write_grad(float& g, float v, bool accumulate) {
  g = (accumulate ? g : 0.0f) + v;
}

inline void write_grad(uint16_t& g, float v, bool accumulate) {
  g = f32_to_bf16((accumulate ? bf16_to_f32(g) : 0.0f) + v);
}

class GradOut {
 public:
  GradOut() = default;
  GradOut(float* p) : data_(p) {}  // NOLINT(google-explicit-constructor): f32 callers pass their pointer
  static GradOut bf16(uint16_t* p) {
    GradOut g;
    g.data_ = p;
    g.bf16_ = true;
    return g;
  }
  explicit operator bool() const { return data_ != nullptr; }
  bool is_bf16() const { return bf16_; }
  // Elements [off, off + n) get v[0..n), each written once (added when acc).
  void write(size_t off, const float* v, size_t n, bool acc) const {
    if (bf16_) {
      uint16_t* g = static_cast<uint16_t*>(data_) + off;
      for (size_t i = 0; i < n; ++i) write_grad(g[i], v[i], acc);
    } else {
      float* g = static_cast<float*>(data_) + off;
      for (size_t i = 0; i < n; ++i) write_grad(g[i], v[i], acc);
    }
  }
  // Elements [off, off + n) set to zero.
  void zero(size_t off, size_t n) const {
    if (bf16_)
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(data_)[off + i] = 0;
    else
      for (size_t i = 0; i < n; ++i) static_cast<float*>(data_)[off + i] = 0.0f;
  }
  // The f32 buffer (null when bf16 or none): kernels whose f32 path adds in place keep it.
  float* f32() const { return bf16_ ? nullptr : static_cast<float*>(data_); }

 private:
  void* data_ = nullptr;
  bool bf16_ = false;
};

}  // namespace strata::cpu
