// The op table: one entry per OpKind with its name, the scratch tags its description (engine/op_scratch.h) may
// return, and its cost where it is memory-bound (bytes as a function of the arguments; the sim's cost model turns
// them into time). GEMM- and attention-shaped ops price flops in the sim (kernels/backend_sim.cpp).
#pragma once
#include <array>
#include <string_view>
#include <vector>

#include "engine/op_scratch.h"
#include "engine/tensor.h"

namespace strata {

enum class OpKind {
  embedding,
  rmsnorm,
  linear,
  rope,
  attention,
  swiglu,
  add,
  bias,
  lm_head_ce,
  lm_head_logits,
  adamw,
  grad_norm,
  block_copy,
  count_
};

// The ops reached through Backend::run: each backend's implementation sits beside the op's kernels
// (kernels/<op>_cpu.cpp, kernels/<op>.cu, declared in kernels/op_dispatch.h); the sim reads cost and scratch here.
#define STRATA_DISPATCHED_OPS(X) X(rmsnorm) X(swiglu) X(add) X(bias)

// An op's call: its tensors in the order of its Backend method (outputs first), its gradient outputs' accumulate
// flags, its one float parameter (add's scale, rmsnorm's eps) and whether it is the backward.
struct OpCall {
  std::array<Tensor, 8> t;
  std::array<bool, 4> acc{};
  float scalar = 0;
  bool backward = false;
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
using OpCost = OpKernelBytes (*)(const OpCall&);
using OpScratch = ScratchList (*)(const OpCall&);

struct OpInfo {
  OpKind kind;
  const char* name;
  std::vector<std::string_view> scratch_tags;  // what the cuda backend (and the sim mirroring it) may take
  OpCost fwd_cost = nullptr;                   // memory-bound: bytes per kernel; null: priced by flops in the sim
  OpCost bwd_cost = nullptr;
  OpScratch scratch = nullptr;      // dispatched ops: the cuda backend's scratch for a call (null: none)
  const char* fwd_label = nullptr;  // the profiler's names (dispatched ops)
  const char* bwd_label = nullptr;
};

const OpInfo& op_info(OpKind k);
const char* op_kind_name(OpKind k);

}  // namespace strata
