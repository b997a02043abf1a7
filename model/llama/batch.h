// The model's input: rows of tokens, their targets and (sample packing) per-example positions.
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

// A batch: B rows of T input tokens and their targets (target < 0 is ignored).
// Sample packing: `positions` [B*T] restart at 0 where each example of a row starts and count up by
// one within it (the padding after the last example is one more run); attention then stays within
// each example and rope sees each example's own positions. Empty: one sequence a row (0..T-1).
struct Batch {
  int B = 0, T = 0;
  std::vector<int32_t> inputs, targets;
  std::vector<int32_t> positions;
  // Every input and target id is 0 (a forecast's batch: model/plan/forecast.h), so the upload skips the range
  // check a read batch gets.
  bool zeros = false;
};
}  // namespace strata
