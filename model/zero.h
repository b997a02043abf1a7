// ZeRO sharding of the optimizer state over data-parallel ranks (stage 1: each trainable parameter's
// AdamW moments and fp32 master, or its master's low half, live on one owner rank only).
//
// Ownership is by whole parameter: greedy balance of element counts, largest first onto the least
// loaded rank (ties: the lower parameter index, then the lower rank), the same on every rank. Every
// rank still sums every gradient (so the global-norm clipping is exact and the same everywhere); the
// owner alone runs AdamW on its parameters, then broadcasts the updated compute weights to the others
// (model/optimizer.cpp). On cpu the weights after each step are bit-identical to stage 0's.
#pragma once
#include <cstddef>
#include <vector>

namespace strata {

struct ZeroOptions {
  int stage = 0;  // 0: every rank holds all the state; 1: optimizer state sharded; 2, 3: not implemented
  int rank = 0, world = 1;
  // Stage 1 with several ranks: something to shard (one rank: the unsharded path, a no-op).
  bool sharded() const { return stage >= 1 && world > 1; }
};

// The owner rank of each parameter, from their element counts (0: no state, owner -1).
// Throws ConfigError for world < 1.
std::vector<int> zero_owner(const std::vector<size_t>& numel, int world);

// UnsupportedError for stage 2 or 3 ("not implemented yet"), ConfigError outside 0..3; `where`
// names the key or flag.
void check_zero_stage(int stage, const char* where);

}  // namespace strata
