// One scratch description per op: the arena blocks an op takes while it runs (workspaces, chunk buffers,
// gradient scratch), as pure functions of its shapes and the backend's choices. The cuda backend allocates from
// these, the sim backend mirroring cuda allocates from the same ones, and the forecast's "workspaces" category is
// scratch_tags(): no tag or byte count is typed twice. The cpu backend takes no arena scratch.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/tensor.h"

namespace strata {

// One scratch block: its tag, element type and shape.
struct ScratchSpec {
  const char* tag;
  DType dtype;
  Shape shape;
};
using ScratchList = std::vector<ScratchSpec>;

// The tags, one constant each (engine/op_table.cpp lists every one of them).
namespace scratch_tag {
inline constexpr const char* cublaslt = "workspace.cublaslt";
inline constexpr const char* attn_workspace = "workspace.attn";
inline constexpr const char* attn_unused_grad = "attn.unused_grad";
inline constexpr const char* grad_sums = "workspace.grad_sums";
inline constexpr const char* grad_rows = "workspace.grad_rows";
inline constexpr const char* grad_row_map = "workspace.grad_row_map";
inline constexpr const char* logits_chunk = "loss.logits_chunk";
inline constexpr const char* dlogits_chunk = "loss.dlogits_chunk";
inline constexpr const char* token_loss = "loss.token_loss";
inline constexpr const char* n_valid = "loss.n_valid";
inline constexpr const char* seq_parallel = "workspace.seq_parallel";
inline constexpr const char* fp8_amax = "fp8.amax";
inline constexpr const char* fp8_grad = "fp8.grad";
inline constexpr const char* fp8_grad_t = "fp8.grad_t";
inline constexpr const char* fp8_grad_scale = "fp8.grad_scale";
}  // namespace scratch_tag

// The FP8 casts' amax: one fp32 partial maximum per block of the reduction, folded by the cast kernel.
inline constexpr int64_t kFp8AmaxBlocks = 528;

// Every tag a scratch description can return, and whether `tag` is one of them.
const std::vector<std::string_view>& scratch_tags();
bool is_scratch_tag(std::string_view tag);

// The cuBLASLt workspace: what cuBLASLt wants on Hopper; taken once at backend construction.
inline constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;
ScratchList gemm_scratch();

// Attention, cuda. A gradient nobody needs still lands somewhere: bf16 scratch shaped like its input, for each
// undefined one of dq, dk, dv (in that order).
ScratchList attention_unused_grad_scratch(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                                          const Tensor& k, const Tensor& v);
// The cuDNN workspace (forward or backward) of `bytes` (the backend's: kernels/attention_workspace.h); 0: none
// (the flash kernel, or packed rows).
ScratchList attention_workspace_scratch(size_t bytes);

// A bf16 parameter gradient whose kernel sums with fp32 atomics (rmsnorm's weight, a bias): the fp32 column sums
// [n], folded into the bf16 gradient in one pass.
ScratchList grad_sums_scratch(int64_t n);
// The embedding's bf16 gradient: the rows its N > 0 tokens hit, compacted: fp32 sums [slots, C] and an i32 map
// [V + slots + 1] (each vocabulary row's slot, each slot's row, the slot count), slots = min(N, V). Bounded by
// the tokens rather than the vocabulary: an fp32 [V, C] table would be 2 GiB for Llama 3 8B's embedding.
int64_t embedding_grad_slots(int64_t tokens, int64_t vocab);
ScratchList embedding_grad_scratch(int64_t tokens, int64_t vocab, int64_t C);

// The fused LM head and cross-entropy over N rows in chunks of `chunk`, vocabulary (padded) V: the f32 logits of
// one chunk, the bf16 dlogits (passes with a gradient), the f32 per-token loss (passes with a loss), the count of
// valid targets.
enum class LmHeadPass { fwd, bwd, fwd_grad };
ScratchList lm_head_ce_scratch(LmHeadPass pass, int64_t N, int64_t V, int64_t chunk);

// The arena blocks of one ScratchList, taken in its order and freed in reverse (as locals declared in that order
// would be), so the arena's event log is the same whichever backend takes them.
class ScratchSet {
 public:
  ScratchSet() = default;
  ScratchSet(Arena& arena, const ScratchList& specs);
  ScratchSet(ScratchSet&&) = default;
  ScratchSet& operator=(ScratchSet&& o) noexcept;
  ~ScratchSet() { release(); }
  void release();                         // frees the blocks, last first
  Tensor at(std::string_view tag) const;  // the block of that tag; undefined when none
  Tensor operator[](size_t i) const { return bufs_[i].view(); }
  size_t size() const { return bufs_.size(); }

 private:
  std::vector<const char*> tags_;
  std::vector<Buffer> bufs_;
};

// The LM head's blocks by name (undefined where the pass takes none).
struct LossScratch {
  LossScratch(Arena& arena, LmHeadPass pass, int64_t N, int64_t V, int64_t chunk)
      : blocks(arena, lm_head_ce_scratch(pass, N, V, chunk)),
        logits(blocks.at(scratch_tag::logits_chunk)),
        dlogits(blocks.at(scratch_tag::dlogits_chunk)),
        token_loss(blocks.at(scratch_tag::token_loss)),
        n_valid(blocks.at(scratch_tag::n_valid)) {}
  ScratchSet blocks;
  Tensor logits, dlogits, token_loss, n_valid;
};

}  // namespace strata
