// The op table: one entry per OpKind with its name, the scratch tags its description (engine/op_scratch.h) may
// return, and its cost where it is memory-bound (bytes as a function of the arguments; the sim's cost model turns
// them into time). GEMM- and attention-shaped ops price flops in the sim (kernels/backend_sim.cpp). Each entry is
// written beside the op's tape op (engine/ops/<op>.cpp); this header lists the ops.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/cost_model.h"
#include "engine/op_params.h"
#include "engine/op_scratch.h"
#include "engine/tensor.h"

namespace strata {

// Every op, in OpKind order. An op's description (OpInfo) and its tape op live together in engine/ops/<op>.cpp
// (op_desc::<op>()); its kernels in kernels/<op>_cpu.cpp and kernels/<op>.cu.
// clang-format off
#define STRATA_OPS(X)                                                                                   \
  X(embedding) X(rmsnorm) X(linear) X(rope) X(attention) X(swiglu) X(add) X(bias) X(lm_head_ce)         \
  X(lm_head_logits) X(adamw) X(grad_norm) X(block_copy) X(fp8_cast) X(linear_fp8)
// clang-format on

enum class OpKind {
#define STRATA_OP_KIND(op) op,
  STRATA_OPS(STRATA_OP_KIND)
#undef STRATA_OP_KIND
      count_
};

// Every op reaches the backends through Backend::run: each backend's implementation sits beside the op's kernels
// (kernels/<op>_cpu.cpp, kernels/<op>.cu or <op>_cuda.cpp, declared in kernels/op_dispatch.h); the sim reads cost
// and scratch here.
// An op's call: its tensors in the order of its Backend method (outputs first), its gradient outputs' accumulate
// flags, its float parameter (add's scale, rmsnorm's eps, adamw's max_norm, the LM head's assumed dloss), whether
// it is the backward, which of the op's forms it is (grad_norm: one tensor, a list, a part, the parts' sum; the LM
// head's four passes), integer parameters (adamw's step, a norm part's index, the LM head's chunk and vocabulary),
// attention's packed pairs, a parameter struct (AdamWParams, BlockCopy) and the list forms' tensors or slots.
struct OpCall {
  std::array<Tensor, 10> t;
  std::array<bool, 4> acc{};
  float scalar = 0;
  bool backward = false;
  uint8_t form = 0;
  int64_t n = 0, n2 = 0;
  double pairs = 0;
  const void* params = nullptr;
  std::span<const Tensor> tensors{};
  std::span<const AdamWSlot> slots{};
};

// HBM bytes of each kernel a memory-bound op launches, in launch order (none: nothing runs).
struct OpKernelBytes {
  std::array<double, 4> bytes{};
  int n = 0;
  OpKernelBytes& add(double b) {
    bytes[size_t(n++)] = b;
    return *this;
  }
};
// What a scratch description asks of the backend that runs the op: the cuda backend answers from the cuDNN plans
// it builds, the sim mirroring it from the same sizing rules (kernels/attention_workspace.h).
class OpEnv {
 public:
  // The cuDNN attention workspace for q [b, t, hq, d], k/v [b, t, hkv, d]; 0: none (the flash kernel).
  // accumulate: a backward that adds to the gradients (it takes more scratch on the cudnn path).
  virtual size_t attention_workspace_bytes(int b, int t, int hq, int hkv, int d, bool backward, bool accumulate) = 0;

 protected:
  ~OpEnv() = default;
};
using OpCost = OpKernelBytes (*)(const OpCall&);
using OpScratch = ScratchList (*)(const OpCall&, OpEnv&);

// What an op's price (below) reads of the sim backend: its cost model, the backend it mirrors, which attention
// kernel cuda takes for a head size, a memset charged at once (a gradient the kernel adds into, zeroed first) and
// the optimizer's phase mark.
class OpSim : public OpEnv {
 public:
  virtual const CostModel& cost() const = 0;
  virtual bool mirrors_cuda() const = 0;
  virtual bool attention_uses_cudnn(int head_dim) const = 0;
  virtual void zero_first(const Tensor& t) = 0;
  virtual void optimizer_starts() = 0;
  // The GEMM and attention problems an op runs, for the first call's tuning (the sim mirroring cuda forecasts it
  // once per problem: Forecast::setup_tuning_s). layout: 0 y = x w^T, 1 dx = dy w, 2 dw = dy^T x.
  virtual void gemm_problem(double m, double n, double k, double bytes, int layout, bool fp8) = 0;
  virtual void attention_problem(int b, int t, int hq, int hkv, int d, bool backward) = 0;

 protected:
  ~OpSim() = default;
};
// An op's time on the sim's clock, its kernel launches and whether it counts as forward work (a replay in backward
// is recompute).
struct OpTime {
  double s = 0;
  int kernels = 1;
  bool fwd = true;
};
// Ops that are not one memory-bound kernel per pass (GEMMs, the optimizer, the list forms) price themselves.
using OpPrice = OpTime (*)(const OpCall&, OpSim&);

struct OpInfo {
  OpKind kind;
  const char* name;
  std::vector<std::string_view> scratch_tags;  // what the cuda backend (and the sim mirroring it) may take
  OpCost fwd_cost = nullptr;                   // memory-bound: bytes per kernel; null: priced by flops in the sim
  OpCost bwd_cost = nullptr;
  OpScratch scratch = nullptr;      // dispatched ops: the cuda backend's scratch for a call (null: none)
  const char* fwd_label = nullptr;  // the profiler's names (dispatched ops)
  const char* bwd_label = nullptr;
  OpPrice price = nullptr;                   // set: the sim charges this instead of fwd_cost / bwd_cost
  std::array<const char*, 4> form_labels{};  // set: the profiler's name of each form (the LM head's passes)
};

const OpInfo& op_info(OpKind k);
const char* op_kind_name(OpKind k);

// Each op's description, defined in engine/ops/<op>.cpp.
namespace op_desc {
#define STRATA_OP_DESC(op) const OpInfo& op();
STRATA_OPS(STRATA_OP_DESC)
#undef STRATA_OP_DESC
}  // namespace op_desc

}  // namespace strata
