// The Backend interface: cpu (reference), cuda (product) and sim (cost model) implement the
// same ops over Tensors in their own arena. Everything above it is written once.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/arena.h"
#include "engine/tensor.h"
#include "kernels/adamw.h"
#include "kernels/rope.h"

namespace strata {

enum class OpKind {
  embedding, rmsnorm, linear, rope, attention, swiglu, add, lm_head_ce, lm_head_logits, adamw, grad_norm,
  count_
};
const char* op_kind_name(OpKind k);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The device tier. All activations, weights, gradients and optimizer state live here.
  virtual Arena& arena() = 0;
  // Which ops (and element types) this backend runs: dispatch says it plainly.
  virtual bool supports(OpKind op, DType dtype) const = 0;
  // Activation / weight element type this backend computes in (f32 on cpu, bf16 on cuda).
  virtual DType compute_dtype() const = 0;

  // Data movement between host (plain memory, f32 or i32) and this backend's tensors.
  virtual void upload_f32(Tensor dst, const float* src) = 0;   // converts to dst.dtype
  virtual void download_f32(float* dst, Tensor src) = 0;       // converts from src.dtype
  virtual void upload_i32(Tensor dst, const int32_t* src) = 0;
  virtual void zero(Tensor t) = 0;
  virtual void fill(Tensor t, float value) = 0;
  // Blocks until all queued work finished (a step boundary; never inside a step).
  virtual void synchronize() {}
  // Device memory in use by the whole process as the driver sees it (cudaMemGetInfo: total -
  // free), beside the arena's own accounting; 0 where there is no such device.
  virtual size_t device_used_bytes() { return 0; }
  // A one-line description of the device ("cpu", "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB").
  virtual std::string device_name() { return std::string(name()); }

  // --- ops; every backward accumulates into its gradient outputs; undefined grads are skipped.
  virtual void embedding_fwd(Tensor out, Tensor tokens, Tensor wte) = 0;
  virtual void embedding_bwd(Tensor dwte, Tensor dout, Tensor tokens) = 0;
  virtual void rmsnorm_fwd(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps) = 0;
  virtual void rmsnorm_bwd(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd) = 0;
  virtual void linear_fwd(Tensor y, Tensor x, Tensor w) = 0;
  virtual void linear_bwd(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w) = 0;
  virtual void rope_fwd(Tensor out, Tensor x, Tensor pos, Tensor inv_freq) = 0;
  virtual void rope_bwd(Tensor dx, Tensor dout, Tensor pos, Tensor inv_freq) = 0;
  // q [B,T,Hq,D], k/v [B,T,Hkv,D], out [B,T,Hq,D], lse [B,Hq,T].
  virtual void attention_fwd(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v) = 0;
  virtual void attention_bwd(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out,
                             Tensor lse) = 0;
  virtual void swiglu_fwd(Tensor out, Tensor gate, Tensor up) = 0;
  virtual void swiglu_bwd(Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up) = 0;
  virtual void add_fwd(Tensor out, Tensor a, Tensor b, float scale) = 0;
  virtual void add_bwd(Tensor da, Tensor db, Tensor dout, float scale) = 0;
  // loss [1] f32 (mean over targets >= 0), lse [N] f32.
  virtual void lm_head_ce_fwd(Tensor loss, Tensor lse, Tensor x, Tensor w, Tensor targets, int chunk) = 0;
  // dloss [1] f32 is the incoming gradient of the loss.
  virtual void lm_head_ce_bwd(Tensor dx, Tensor dw, Tensor dloss, Tensor x, Tensor w, Tensor targets, Tensor lse,
                              int chunk) = 0;
  virtual void lm_head_logits(Tensor logits, Tensor x, Tensor w) = 0;
  // out [1] f32 += sum of squares of g.
  virtual void grad_norm_sq(Tensor out, Tensor g) = 0;
  // One AdamW step on fp32 master weights; `param_out` (may be undefined) receives the updated
  // weights in the compute dtype. The clip scale min(1, max_norm / sqrt(norm_sq)) is formed
  // from the device scalar norm_sq, so clipping never forces a host sync.
  virtual void adamw_step(Tensor master, Tensor m, Tensor v, Tensor g, Tensor param_out, Tensor norm_sq,
                          float max_norm, const AdamWParams& p, int t) = 0;
};

std::unique_ptr<Backend> make_cpu_backend(size_t arena_budget_bytes);

}  // namespace strata
