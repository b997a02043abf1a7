// lm_head_ce: the LM head and cross-entropy fused over row chunks: x [N, C], w [V, C], targets [N] i32 -> the
// mean loss [1] f32, never the whole [N, V] logits.
#include <fmt/format.h>

#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

class LmHeadCeOp final : public Op {
 public:
  LmHeadCeOp(int chunk, int vocab) : chunk_(chunk), vocab_(vocab) {}
  const char* name() const override { return "lm_head_ce"; }
  OpKind kind() const override { return OpKind::lm_head_ce; }
  void forward(Backend& be, const OpArgs& a) override {
    be.lm_head_ce_fwd(a.out[0], a.out[1], a.in[0], a.in[1], a.in[2], chunk_, vocab_);
  }
  void backward(Backend& be, const OpArgs& a) override {
    be.lm_head_ce_bwd(a.gin[0], a.gin[1], a.gout[0], a.in[0], a.in[1], a.in[2], a.out[1], chunk_, vocab_, a.acc[0],
                      a.acc[1]);
  }
  bool saves_input(int) const override { return true; }
  bool saves_output(int i) const override { return i == 1; }

 private:
  int chunk_;
  int vocab_;  // w's real rows; the rest is padding
};

// The training variant: forward computes each chunk's logits once and from them the loss and the
// gradients for the tape's loss seed (Tape::loss_seed() when recorded): dx into its saved output
// "loss.dx", dw straight into the weight's gradient (grad_in_forward, so the tape never replays it).
// Backward only scales loss.dx into x's gradient: no logits recompute, and neither x nor lse is saved.
class LmHeadCeGradOp final : public Op {
 public:
  LmHeadCeGradOp(int chunk, int vocab, float seed) : chunk_(chunk), vocab_(vocab), seed_(seed) {}
  const char* name() const override { return "lm_head_ce"; }
  OpKind kind() const override { return OpKind::lm_head_ce; }
  void forward(Backend& be, const OpArgs& a) override {
    dw_written_ = a.gin[1].defined();
    be.lm_head_ce_fwd_grad(a.out[0], a.out[1], a.gin[1], a.in[0], a.in[1], a.in[2], chunk_, vocab_, seed_, a.acc[1]);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (a.gin[0].defined()) be.lm_head_ce_bwd_saved(a.gin[0], a.gout[0], a.out[1], seed_, dw_written_, a.acc[0]);
  }
  bool saves_input(int) const override { return false; }
  bool saves_output(int i) const override { return i == 1; }
  bool grad_in_forward(int i) const override { return i == 1; }

 private:
  int chunk_;
  int vocab_;                // w's real rows; the rest is padding
  float seed_;               // the gradient of the loss backward will start from
  bool dw_written_ = false;  // this step's forward wrote dw (for seed_)
};

}  // namespace

VId lm_head_ce(Tape& t, VId x, VId w, VId targets, int chunk_tokens, bool grad_in_forward, int vocab) {
  int64_t n = t.value(targets).shape.numel();
  const int64_t rows = t.value(w).shape[0];
  if (vocab <= 0) vocab = int(rows);
  STRATA_CHECK(vocab <= rows, fmt::format("lm_head_ce: vocab {} > the weight's {} rows", vocab, rows));
  // The variant needs a gradient to deliver for x (else backward has nothing left to do) and a
  // weight that is a parameter when it wants a gradient (its buffer exists before backward).
  const Value &xv = t.value(x), &wv = t.value(w);
  if (grad_in_forward && xv.requires_grad && x != w && (wv.external || !wv.requires_grad)) {
    const Shape xs = xv.shape;
    const DType xd = xv.dtype;
    auto ids = t.record(std::make_unique<LmHeadCeGradOp>(chunk_tokens, vocab, t.loss_seed()), {x, w, targets},
                        {{"loss", Shape{1}, DType::f32}, {"loss.dx", xs, xd}});
    t.set_loss(ids[0]);
    return ids[0];
  }
  auto ids = t.record(std::make_unique<LmHeadCeOp>(chunk_tokens, vocab), {x, w, targets},
                      {{"loss", Shape{1}, DType::f32}, {"loss.lse", Shape{n}, DType::f32}});
  t.set_loss(ids[0]);
  return ids[0];
}

}  // namespace ops

// Priced by flops in the sim; its scratch is one chunk's logits and dlogits, the per-token loss and the count.
const OpInfo& op_desc::lm_head_ce() {
  using namespace scratch_tag;
  static const OpInfo i{OpKind::lm_head_ce, "lm_head_ce", {logits_chunk, dlogits_chunk, token_loss, n_valid}};
  return i;
}

}  // namespace strata
