// Autograd ops over the Backend, and the builders the model uses to record them on a tape.
// Activations are 2-D [tokens, features]; ops that need heads reshape views internally.
#pragma once
#include <string>
#include <utility>

#include "engine/tape.h"

namespace strata {
class Communicator;
}

namespace strata::ops {

// tokens [N] i32, wte [V, C] -> [N, C]
VId embedding(Tape& t, VId tokens, VId wte, std::string cls);
// x [N, C], w [C] -> (out [N, C] as prefix.out, rstd [N] f32 as prefix.rstd)
std::pair<VId, VId> rmsnorm(Tape& t, VId x, VId w, float eps, const std::string& prefix);
// Per-head RMSNorm (Qwen3's q_norm/k_norm): x [N, H*D], w [D], each head's D values normalised on
// their own -> (out [N, H*D] as prefix.out, rstd [N*H] f32 as prefix.rstd)
std::pair<VId, VId> rmsnorm_heads(Tape& t, VId x, VId w, int heads, float eps, const std::string& prefix);
// x [N, I], w [O, I] -> [N, O]
VId linear(Tape& t, VId x, VId w, std::string cls);
// x [N, I], w [O, I], b [O] -> x w^T + b [N, O]; the bias is added in place after the GEMM and
// needs nothing saved for its gradient. b < 0: no bias (as linear above).
VId linear(Tape& t, VId x, VId w, VId b, std::string cls);
// FP8 linear layers (fp8: true; engine/fp8.h). fp8_cast: x [N, C]'s E4M3 codes for the layers that read it (x an
// activation, or a weight): `rows` [N, C] (the forward GEMM's operand, read in forward only), `cols` [C, N] (their
// transpose, which backward reads: x's for a trainable weight's gradient, a weight's for its input's; with transpose
// false, none: -1) and `scale` (the scale block). Classes cls, cls + "t", cls + ".scale". No gradient flows through
// the codes: it reaches x and w through linear_fp8.
struct Fp8Codes {
  VId rows = -1, cols = -1, scale = -1;
};
Fp8Codes fp8_cast(Tape& t, VId x, bool transpose, const std::string& cls);
// Whether a linear layer over x [n, in] with `out` outputs can take the FP8 GEMMs (every dimension a multiple of
// fp8::kDimMultiple, engine/fp8.h).
bool fp8_shape_ok(int64_t n, int64_t in, int64_t out);
// y = x w^T (+ b) [N, O] through FP8 GEMMs from x's codes q (q.cols defined when w is trainable) and w's codes wq
// (wq.cols defined when x takes a gradient); the output gradient is cast to E5M2 in backward. dx reaches x in bf16.
VId linear_fp8(Tape& t, VId x, const Fp8Codes& q, VId w, const Fp8Codes& wq, VId b, std::string cls);
// x [N, H*D] with H heads; pos [N] i32; inv_freq [D/2] f32 -> [N, H*D]; cos and sin scaled by attention_factor.
VId rope(Tape& t, VId x, VId pos, VId inv_freq, int heads, std::string cls, float attention_factor = 1.0f);
// q [B*T, Hq*D], k/v [B*T, Hkv*D] -> (out [B*T, Hq*D] as prefix.out, lse [B, Hq, T] f32 as prefix.lse)
// Sample packing: `packed_pos` [B*T] i32, the positions restarting at 0 per example (an external
// input, batch data), confines each query to its own example; `pairs` is AttnSegments::pairs.
// packed_pos < 0: one causal sequence a row.
std::pair<VId, VId> attention(Tape& t, VId q, VId k, VId v, int B, int T, int Hq, int Hkv, int D,
                              const std::string& prefix, VId packed_pos = -1, double pairs = 0);
// Sequence parallelism (engine/ops/seq.cpp): each rank holds Tl = T/n consecutive tokens of every row (n = the
// communicator's ranks). seq_to_heads: x [B*Tl, H*D] (this rank's tokens, every head) -> [B*T, (H/n)*D] (every token,
// this rank's H/n heads: [B, T, H/n, D] for attention), by an all-to-all; heads_to_seq: the reverse. Each is the
// other's backward; they save nothing (a replay runs the collective again, as every rank does). UnsupportedError
// when `heads` is not a multiple of n.
VId seq_to_heads(Tape& t, VId x, int B, int heads, Communicator& comm, std::string cls);
VId heads_to_seq(Tape& t, VId x, int B, int heads, Communicator& comm, std::string cls);
// x [N, H*D] -> [N, H*times*D], each head repeated `times` times in a row (GQA's KV heads replicated so that they
// split over more ranks than there are KV heads); backward sums the copies' gradients.
VId repeat_heads(Tape& t, VId x, int heads, int times, std::string cls);
// gate, up [N, F] -> [N, F]
VId swiglu(Tape& t, VId gate, VId up, std::string cls);
// The SwiGLU MLP down(swiglu(gate(x), up(x))) over row tiles of x [N, C] (mlp_tiles): wg, wu [F, C],
// wd [C, F]; biases bg, bu [F], bd [C] (all three or none: bg < 0) -> [N, C] as `cls`. One fused op,
// so only one tile's gate, up and activation ([rows, F] each, arena blocks tagged prefix + ".gate.tile",
// ...) exist at once, in forward and in backward, which recomputes them per tile from the saved x; the
// weight gradients add up across tiles. It saves x and the weights, never an [N, F] tensor.
VId mlp_tiled(Tape& t, VId x, VId wg, VId wu, VId wd, VId bg, VId bu, VId bd, int tiles, const std::string& prefix,
              std::string cls);
// Rows per tile of mlp_tiled over n rows in `tiles` tiles: ceil(n / tiles), rounded up to a multiple of
// 64 above 64 rows (GEMM-friendly shapes); the last tile takes the rest, so fewer tiles may run.
int64_t mlp_tile_rows(int64_t n, int tiles);
// The number of tiles mlp_tiled runs: ceil(n / mlp_tile_rows(n, tiles)).
int mlp_tile_count(int64_t n, int tiles);
// a + scale * b
VId add(Tape& t, VId a, VId b, float scale, std::string cls);
// x [N, C], w [V, C], targets [N] i32 -> loss [1] f32 ("loss"), saving lse [N] ("loss.lse"); backward
// recomputes each chunk's logits. grad_in_forward (training steps only: the forward then writes
// the weight's gradient): the variant that forms the gradients from the forward's logits, saving
// dx [N, C] ("loss.dx") instead of x and lse; used when x requires grad and w, if it does, is a
// parameter. The loss must be the tape's (seeded with Tape::kLossSeed) and read by no other op.
// vocab > 0: only w's first `vocab` rows are the vocabulary, the rest padding that takes no part in the
// softmax (Backend::lm_head_ce_fwd); 0: every row.
VId lm_head_ce(Tape& t, VId x, VId w, VId targets, int chunk_tokens, bool grad_in_forward = false, int vocab = 0);

}  // namespace strata::ops
