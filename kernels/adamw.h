// AdamW (engine/op_params.h AdamWParams) and global-norm gradient clipping: the cpu reference.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/dtype.h"
#include "engine/op_params.h"
#include "engine/state_recipe.h"

namespace strata {
// One tensor's state for the precision-generic step (engine/state_recipe.h), host pointers.
struct AdamWState {
  float* master = nullptr;  // the fp32 master; null: master_weights none, `weights` updated in place
  void* weights = nullptr;  // the compute weights (f32 or bf16): written from the master, or the
                            // master's stand-in when there is none; may be null with a master
  DType weights_dtype = DType::f32;
  void* m = nullptr;  // moments: float, bf16 bits or code bytes (kernels/quant8.h)
  void* v = nullptr;
  float* m_scale = nullptr;  // 8-bit only: one scale per kQuantBlock elements
  float* v_scale = nullptr;
  OptimizerState moments = OptimizerState::fp32;
  const void* g = nullptr;  // the gradient: floats, or bf16 bits (gradients: bf16), read widened
  DType grad_dtype = DType::f32;
  size_t n = 0;
};
}  // namespace strata

namespace strata::cpu {
// Sum of squares of g, accumulated in double (bf16: of the widened values, the same numbers).
double sum_squares(const float* g, size_t n);
double sum_squares_bf16(const uint16_t* g, size_t n);
// One step (t is the 1-based step count). grad_scale multiplies g first (clipping: min(1, max_norm/norm)).
void adamw_step(float* param, float* m, float* v, const float* g, size_t n, const AdamWParams& p, int t,
                float grad_scale);
// The same step on any state precision: each element's moments and weight are read as fp32, updated
// with the arithmetic above, and stored back in their precision (bf16 rounded to nearest even; 8-bit
// per block of kQuantBlock, scale = the block's largest updated magnitude).
void adamw_step(const AdamWState& s, const AdamWParams& p, int t, float grad_scale);
// The same step on up to max_threads host threads (engine/parallel.h), split on multiples of kQuantBlock:
// the same bits as adamw_step for any thread count. The cpu backend's update, and the host AdamW that
// strata-calibrate --adamw measures against the cuda backend's streamed one.
void adamw_step_parallel(const AdamWState& s, const AdamWParams& p, int t, float grad_scale, size_t max_threads);
}  // namespace strata::cpu
