// The op table: one entry per OpKind with its name, the scratch tags its description (engine/op_scratch.h) may
// return, and its cost where it is memory-bound (bytes as a function of the arguments; the sim's cost model turns
// them into time). GEMM- and attention-shaped ops price flops in the sim (kernels/backend_sim.cpp).
#pragma once
#include <array>
#include <string_view>
#include <vector>

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

// An op's tensors in the order of its Backend method (outputs first), and its gradient outputs' accumulate flags.
struct OpCostArgs {
  std::array<Tensor, 8> t;
  std::array<bool, 4> acc{};
};
using OpBytes = double (*)(const OpCostArgs&);

struct OpInfo {
  OpKind kind;
  const char* name;
  std::vector<std::string_view> scratch_tags;  // what the cuda backend (and the sim mirroring it) may take
  OpBytes fwd_bytes = nullptr;                 // HBM bytes moved; null: priced by flops in the sim
  OpBytes bwd_bytes = nullptr;                 // the same for the backward (f32 parameter gradients)
};

const OpInfo& op_info(OpKind k);
const char* op_kind_name(OpKind k);

}  // namespace strata
