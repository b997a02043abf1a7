// ZeRO sharding over data-parallel ranks. Stage 1: each trainable parameter's AdamW moments and fp32
// master, or its master's low half, live on one owner rank only. Stage 2: its gradient too.
//
// Ownership is by whole parameter: greedy balance of element counts, largest first onto the least
// loaded rank (ties: the lower parameter index, then the lower rank), the same on every rank and for
// both stages (so a stage-1 checkpoint resumes as stage 2 and back: the shards' layout is the same).
// The owner alone runs AdamW on its parameters, then broadcasts the updated compute weights to the
// others (model/train/optimizer.h).
//
// Stage 1: every rank sums every gradient (all-reduce per group as backward makes them final), so the
// global-norm clipping is exact and the same everywhere. On cpu the weights after each step are
// bit-identical to stage 0's.
//
// Stage 2: each group of final gradients is reduced to the owners instead (Communicator::reduce_many).
// A rank keeps a persistent gradient buffer for its own parameters only; another rank's parameter gets
// a transient block in the arena at its gradient's first write (LazyGrad::transient), freed once its
// reduce has completed (the compute stream waits on the collective first). The global norm: each owner
// forms its parameters' squared norms into a small per-parameter vector (zero where not owned), one
// all-reduce sums it exactly (one nonzero a slot), and every rank adds the entries in backward's order
// with the single-rank arithmetic (Backend::grad_norm_sq_add_parts): on cpu the norm, losses and weights
// are bit-identical to stage 0/1's. Gradient accumulation reduces each micro-batch's gradients into
// the owner's accumulating buffer (the transient blocks never outlive a backward), which sums in
// another order than stage 0's (each rank's micro-batches first, then the ranks): equal to float
// rounding, not bit for bit.
//
// Stage 3: the weights of each layer's matrices (q/k/v/o, gate/up/down: the ones layer_offloading pages) are
// sharded too, at the same whole-parameter granularity: only a matrix's owner keeps its compute weights (and, as
// stage 2, its master, moments and gradient). The model's WeightPager, in its gathering mode (engine/weight_pager.h),
// all-gathers a layer's matrices into one of two device slots before the layer's forward and again before its
// backward, double-buffered (layer L+1 is gathered while L computes): the gather of a layer is one fused
// broadcast_many, each matrix from its owner, which the owner sends from its resident copy (it takes no slot space
// there) — an all-gather with unequal, whole-parameter pieces. Gradients are reduced to the owners as stage 2 does;
// the owner updates its resident weights in place and nothing is broadcast after the step. The embedding, the LM
// head, the norms and biases stay replicated as in stage 2 (their owner updates and broadcasts them). The owners
// are stage 1/2's, so checkpoints of any stage resume at any other, on any rank count, and the arithmetic is
// stage 2's: on cpu, losses, norms and weights are bit-identical to stage 2 (and so to stage 0 without
// accumulation).
#pragma once
#include <cstddef>
#include <vector>

namespace strata {

struct ZeroOptions {
  int stage =
      0;  // 0: every rank holds all the state; 1: optimizer state sharded; 2: gradients too; 3: layer weights too
  int rank = 0, world = 1;
  // Stage 1 or 2 with several ranks: something to shard (one rank: the unsharded path, a no-op).
  bool sharded() const { return stage >= 1 && world > 1; }
  // Stage 2 with several ranks: the gradients are sharded too.
  bool shards_grads() const { return stage >= 2 && world > 1; }
  // Stage 3 with several ranks: the layers' matrices' weights are sharded too, gathered per layer.
  bool shards_weights() const { return stage >= 3 && world > 1; }
};

// The owner rank of each parameter, from their element counts (0: no state, owner -1).
// Throws ConfigError for world < 1.
std::vector<int> zero_owner(const std::vector<size_t>& numel, int world);

// ConfigError outside 0..3; `where` names the key or flag.
void check_zero_stage(int stage, const char* where);

}  // namespace strata
