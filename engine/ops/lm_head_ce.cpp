// lm_head_ce: the LM head and cross-entropy fused over row chunks: x [N, C], w [V, C], targets [N] i32 -> the
// mean loss [1] f32, never the whole [N, V] logits.
#include <fmt/format.h>

#include <algorithm>

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

namespace {
using namespace ops::detail;

// The forms: 0 lm_head_ce_fwd(loss, lse, x, w, targets), 1 lm_head_ce_bwd(dx, dw, dloss, x, w, targets, lse),
// 2 lm_head_ce_fwd_grad(loss, dx, dw, x, w, targets), 3 lm_head_ce_bwd_saved(dx, dloss, saved_dx); n: the chunk
// rows, n2: the real vocabulary.
const Tensor& x_of(const OpCall& c) {
  return c.t[c.form == 0 ? 2 : 3];
}
const Tensor& w_of(const OpCall& c) {
  return c.t[c.form == 0 ? 3 : 4];
}
// One chunk's f32 logits, its bf16 dlogits, the per-token loss and the count of valid targets, by pass.
ScratchList lm_head_ce_op_scratch(const OpCall& c, OpEnv&) {
  if (c.form == 3) return {};
  const LmHeadPass pass = c.form == 0 ? LmHeadPass::fwd : c.form == 1 ? LmHeadPass::bwd : LmHeadPass::fwd_grad;
  const Tensor &x = x_of(c), &w = w_of(c);
  return lm_head_ce_scratch(pass, int64_t(rows(x)), w.shape[0], c.n);
}
// The cost is the padded shape's (w's rows): the cuda kernels run every column, masking the padding. Per chunk:
// the logits GEMM (f32), then the softmax statistics and token loss (forward), the dlogits (backward), and the dx
// and dw GEMMs; the backward recomputes the logits, the training variant reads them twice instead.
OpTime lm_head_ce_price(const OpCall& c, OpSim& sim) {
  const CostModel& cost = sim.cost();
  if (c.form == 3) {
    const Tensor &dx = c.t[0], &saved_dx = c.t[2];
    return {cost.memory(B(saved_dx) + rw(dx, c.acc[0]) + 4), 1, false};
  }
  const Tensor &x = x_of(c), &w = w_of(c);
  const int N = int(rows(x)), C = int(cols(x)), V = int(w.shape[0]), chunk = int(c.n);
  const double es = double(dtype_size(x.dtype)), dl = sim.mirrors_cuda() ? 2.0 : 4.0;  // dlogits element size
  // A chunk's terms depend on its rows (and, for dw, whether it is the first): every full chunk after the first
  // costs what the one before did, so its terms are priced once and added in the loop's order (the same sums, bit
  // for bit; a long sequence's LM head is thousands of chunks a sim run).
  if (c.form == 0) {
    double t = 0;
    int kernels = 0;
    double priced_n = -1, g = 0, m = 0;
    for (int r0 = 0; r0 < N; r0 += chunk) {
      const double n = std::min(chunk, N - r0);
      if (n != priced_n) {
        priced_n = n;
        g = gemm_time(sim, 0, n, V, C, n * C * es + B(w) + n * V * 4);  // logits chunk, f32
        m = cost.memory(n * V * 4 + n * 12);                            // softmax statistics and token loss
      }
      t += g;
      t += m;
      kernels += 2;
    }
    t += 2 * cost.memory(double(N) * 4);  // count valid targets, finalize the mean
    return {t, kernels + 2};
  }
  const bool bwd = c.form == 1;
  const Tensor &dx = bwd ? c.t[0] : c.t[1], &dw = bwd ? c.t[1] : c.t[2];
  const bool acc_dx = bwd && c.acc[0], acc_dw = c.acc[1];
  if (N == 0 && dw.defined() && !acc_dw) sim.zero_first(dw);  // no chunk runs: the overwrite still owes zeros
  double t = cost.memory(double(N) * 4);                      // count valid targets
  int kernels = 1;
  double priced_n = -1, g = 0, m = 0, gx = 0, gw = 0;
  bool priced_later = false;
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const double n = std::min(chunk, N - r0);
    if (n != priced_n || (r0 > 0) != priced_later) {
      priced_n = n;
      priced_later = r0 > 0;
      g = gemm_time(sim, 0, n, V, C, n * C * es + B(w) + n * V * 4);
      m = cost.memory(n * V * (bwd ? 4 + dl : 4 + 4 + dl) + n * 8);  // statistics (and token loss), dlogits
      if (dx.defined()) gx = gemm_time(sim, 1, n, C, V, n * V * dl + B(w) + (acc_dx ? 2 : 1) * n * C * es);
      if (dw.defined()) gw = gemm_time(sim, 2, V, C, n, n * V * dl + n * C * es + rw(dw, acc_dw || r0 > 0));
    }
    t += g;
    t += m;
    kernels += 2;
    if (dx.defined()) t += gx, ++kernels;
    if (dw.defined()) t += gw, ++kernels;
  }
  if (bwd) return {t, kernels, false};
  t += cost.memory(double(N) * 4);  // finalize the mean
  return {t, kernels + 1};
}

}  // namespace

const OpInfo& op_desc::lm_head_ce() {
  using namespace scratch_tag;
  static const OpInfo i{OpKind::lm_head_ce,
                        "lm_head_ce",
                        {logits_chunk, dlogits_chunk, token_loss, n_valid},
                        nullptr,
                        nullptr,
                        lm_head_ce_op_scratch,
                        "lm_head_ce_fwd",
                        "lm_head_ce_bwd",
                        lm_head_ce_price,
                        {"lm_head_ce_fwd", "lm_head_ce_bwd", "lm_head_ce_fwd_grad", "lm_head_ce_bwd_saved"}};
  return i;
}

}  // namespace strata
