// Gradient accumulation: several micro-batches' gradients summed into one optimizer step.
//
// Backward overwrites each parameter's gradient, so the sum is kept beside it, in host memory (4
// bytes a trainable parameter, also for bf16 gradients, whose sum is rounded once when written back
// where the optimizer reads it): micro-batch i's gradient g_i, weighted by w_i (its share of the
// step's loss tokens), is folded in as acc = w_1 g_1, then acc + w_i g_i in micro-batch order; after
// the last one the sum is written back where the optimizer reads the gradient (the device buffer or
// the host-tier array) and the squared norm for clipping is summed again over it. One batch of all
// the rows sums the same rows inside each GEMM instead, so the two agree to float rounding, not bit
// for bit. On cuda each gradient crosses the link once per micro-batch (a device-side sum needs an
// f32 add kernel, which the backend interface does not have yet).
#pragma once
#include <vector>

#include "model/llama/llama.h"
#include "model/train/optimizer.h"

namespace strata {

class GradAccumulator {
 public:
  GradAccumulator(Backend& be, LlamaModel& model, Optimizer& opt) : be_(be), model_(model), opt_(opt) {}
  // After micro-batch i (0-based) of k has run backward: folds its gradients in with weight w. At
  // i == k - 1 the sum replaces the gradients and the optimizer's norm_sq() is its squared norm.
  void add(size_t i, size_t k, float w);

 private:
  void renorm();
  Backend& be_;
  LlamaModel& model_;
  Optimizer& opt_;
  std::vector<std::vector<float>> acc_;  // per parameter, empty for a frozen one
  std::vector<float> scratch_;
};

}  // namespace strata
