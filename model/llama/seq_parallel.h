// Sequence parallelism (DeepSpeed-Ulysses, Arctic Long Sequence Training): one long sequence spread over the n ranks
// of a group. Each rank holds Tl = T/n consecutive tokens of every row (rank r: tokens r*Tl .. (r+1)*Tl - 1), and
// everything but attention runs on them alone: embedding, norms, the projections, RoPE at the tokens' global
// positions, the MLP (and its row tiles), the chunked LM head and loss. Around attention, all-to-alls (ops::
// seq_to_heads, heads_to_seq) turn q, k, v from sequence-sharded [B*Tl, H*D] into head-sharded [B*T, H/n*D], so
// attention runs over the whole sequence on the rank's H/n heads, and its output back before o_proj.
//
// Heads: num_attention_heads must be a multiple of n. KV heads (GQA): used as they are when n divides
// num_key_value_heads; otherwise each is repeated lcm(Hkv, n)/Hkv times before the all-to-all (as Ulysses replicates
// them) when lcm(Hkv, n) divides num_attention_heads; anything else is refused.
//
// Gradients: each rank's weight gradients are the sums over its tokens; the trainer's data-parallel all-reduce
// (model/train/optimizer.h) sums them over every rank, and the loss is the token-weighted mean over every rank's
// tokens, so the step equals one rank training on the whole rows (to the rounding of another summation order).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/tensor.h"
#include "io/hf_config.h"

namespace strata {

class Communicator;
struct Batch;

// What LlamaModel::build needs to record a rank's share of the rows.
struct SeqShard {
  Communicator* comm = nullptr;  // the group's ranks; null (or one rank): whole rows, no all-to-alls
  Tensor packed_pos;             // packed rows: every token's position [B*T] (attention's segments); else undefined
  int size() const;              // ranks in the group (1 without one)
};

// The KV heads attention runs with over n ranks (see above). UnsupportedError naming the heads and n otherwise.
int seq_parallel_kv_heads(const io::LlamaConfig& c, int n);
// ConfigError (field "sequence_parallel") unless the row length T is a multiple of n.
void check_seq_parallel_len(int T, int n);

// Rank `rank` of n's share of a batch of whole rows: tokens [rank*Tl, (rank+1)*Tl) of every row ([B*Tl] each), with
// their positions: their index in the row, or, packed, the batch's positions there.
struct SeqSlice {
  std::vector<int32_t> inputs, targets, positions;
};
SeqSlice seq_slice(const Batch& b, int rank, int n);
// The same, shared: a zeros batch's slice (a forecast's, Batch::zeros) is made once per thread and shape (the last
// few kept), since every sim run of a search asks for it; any other batch's is made anew.
std::shared_ptr<const SeqSlice> seq_slice_shared(const Batch& b, int rank, int n);
// The targets >= 0 (the loss's tokens) in that share.
long seq_slice_targets(const Batch& b, int rank, int n);

}  // namespace strata
