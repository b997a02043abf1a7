// AdamW with decoupled weight decay (PyTorch's torch.optim.AdamW semantics) and global-norm
// gradient clipping. All buffers fp32 of n elements.
#pragma once
#include <cstddef>

namespace strata {
// Tensors per launch of the cuda backend's list-form optimizer kernels (kernels/adamw.cu); the sim
// charges one launch per this many.
constexpr int kOptimizerListTensors = 48;

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};
}  // namespace strata

namespace strata::cpu {
// Sum of squares of g, accumulated in double.
double sum_squares(const float* g, size_t n);
// One step (t is the 1-based step count). grad_scale multiplies g first (clipping: min(1, max_norm/norm)).
void adamw_step(float* param, float* m, float* v, const float* g, size_t n, const AdamWParams& p, int t,
                float grad_scale);
}  // namespace strata::cpu
