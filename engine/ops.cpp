#include "engine/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

namespace strata::ops {
namespace {

DType act(Tape& t) {
  return t.backend().compute_dtype();
}
Shape rows_by(const Shape& x, int64_t cols) {
  return Shape{x.numel() / x[x.nd - 1], cols};
}

class EmbeddingOp final : public Op {
 public:
  const char* name() const override { return "embedding"; }
  OpKind kind() const override { return OpKind::embedding; }
  void forward(Backend& be, const OpArgs& a) override { be.embedding_fwd(a.out[0], a.in[0], a.in[1]); }
  void backward(Backend& be, const OpArgs& a) override {
    if (a.gin[1].defined()) be.embedding_bwd(a.gin[1], a.gout[0], a.in[0], a.acc[1]);
  }
  bool saves_input(int i) const override { return i == 0; }
  bool saves_output(int) const override { return false; }
};

// heads > 1: x [N, H*D] with w [D] normalises each head's D values, as rows of an [N*H, D] view.
class RmsNormOp final : public Op {
 public:
  RmsNormOp(float eps, int heads) : eps_(eps), heads_(heads) {}
  const char* name() const override { return "rmsnorm"; }
  OpKind kind() const override { return OpKind::rmsnorm; }
  void forward(Backend& be, const OpArgs& a) override {
    be.rmsnorm_fwd(rows(a.out[0]), a.out[1], rows(a.in[0]), a.in[1], eps_);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (a.gout[0].defined())
      be.rmsnorm_bwd(rows(a.gin[0]), a.gin[1], rows(a.gout[0]), rows(a.in[0]), a.in[1], a.out[1], a.acc[0], a.acc[1]);
  }
  bool saves_input(int) const override { return true; }
  bool saves_output(int i) const override { return i == 1; }

 private:
  Tensor rows(Tensor x) const {
    if (heads_ == 1 || !x.defined()) return x;
    const int64_t cols = x.shape[x.shape.nd - 1] / heads_;
    return x.reshape(Shape{x.numel() / cols, cols});
  }
  float eps_;
  int heads_;
};

// Inputs x, w and, with a bias, b.
class LinearOp final : public Op {
 public:
  LinearOp(bool weight_trainable, bool bias) : weight_trainable_(weight_trainable), bias_(bias) {}
  const char* name() const override { return "linear"; }
  OpKind kind() const override { return OpKind::linear; }
  void forward(Backend& be, const OpArgs& a) override {
    be.linear_fwd(a.out[0], a.in[0], a.in[1]);
    if (bias_) be.bias_fwd(a.out[0], a.in[2]);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (bias_ && a.gin[2].defined()) be.bias_bwd(a.gin[2], a.gout[0], a.acc[2]);
    be.linear_bwd(a.gin[0], a.gin[1], a.gout[0], a.in[0], a.in[1], a.acc[0], a.acc[1]);
  }
  // x is needed only for the weight gradient: a frozen linear saves nothing but its weight (and bias).
  bool saves_input(int i) const override { return i >= 1 || weight_trainable_; }
  bool saves_output(int) const override { return false; }

 private:
  bool weight_trainable_, bias_;
};

class RopeOp final : public Op {
 public:
  explicit RopeOp(int heads) : heads_(heads) {}
  const char* name() const override { return "rope"; }
  OpKind kind() const override { return OpKind::rope; }
  Tensor heads(const Tensor& x) const {
    if (!x.defined()) return x;
    int64_t n = x.shape[0], hd = x.shape[1];
    return x.reshape(Shape{n, heads_, hd / heads_});
  }
  void forward(Backend& be, const OpArgs& a) override {
    be.rope_fwd(heads(a.out[0]), heads(a.in[0]), a.in[1], a.in[2]);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (a.gin[0].defined()) be.rope_bwd(heads(a.gin[0]), heads(a.gout[0]), a.in[1], a.in[2], a.acc[0]);
  }
  bool saves_input(int i) const override { return i != 0; }  // positions and frequencies (external)
  bool saves_output(int) const override { return false; }

 private:
  int heads_;
};

class AttentionOp final : public Op {
 public:
  AttentionOp(int B, int T, int Hq, int Hkv, int D, double pairs)
      : B_(B), T_(T), Hq_(Hq), Hkv_(Hkv), D_(D), pairs_(pairs) {}
  const char* name() const override { return "attention"; }
  OpKind kind() const override { return OpKind::attention; }
  Tensor q4(const Tensor& x) const { return x.defined() ? x.reshape(Shape{B_, T_, Hq_, D_}) : x; }
  Tensor kv4(const Tensor& x) const { return x.defined() ? x.reshape(Shape{B_, T_, Hkv_, D_}) : x; }
  // Packed rows: the positions are input 3 (batch data, external, like the token ids).
  AttnSegments segments(const OpArgs& a) const {
    return a.in.size() > 3 ? AttnSegments{a.in[3], pairs_} : AttnSegments{};
  }
  void forward(Backend& be, const OpArgs& a) override {
    be.attention_fwd(q4(a.out[0]), a.out[1], q4(a.in[0]), kv4(a.in[1]), kv4(a.in[2]), segments(a));
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (!a.gout[0].defined()) return;
    be.attention_bwd(q4(a.gin[0]), kv4(a.gin[1]), kv4(a.gin[2]), q4(a.gout[0]), q4(a.in[0]), kv4(a.in[1]), kv4(a.in[2]),
                     q4(a.out[0]), a.out[1], a.acc[0], a.acc[1], a.acc[2], segments(a));
  }
  bool saves_input(int) const override { return true; }
  bool saves_output(int) const override { return true; }

 private:
  int B_, T_, Hq_, Hkv_, D_;
  double pairs_;
};

class SwigluOp final : public Op {
 public:
  const char* name() const override { return "swiglu"; }
  OpKind kind() const override { return OpKind::swiglu; }
  void forward(Backend& be, const OpArgs& a) override { be.swiglu_fwd(a.out[0], a.in[0], a.in[1]); }
  void backward(Backend& be, const OpArgs& a) override {
    be.swiglu_bwd(a.gin[0], a.gin[1], a.gout[0], a.in[0], a.in[1], a.acc[0], a.acc[1]);
  }
  bool saves_input(int) const override { return true; }
  bool saves_output(int) const override { return false; }
};

// Rows r0 .. r0+n of a row-major [N, C] tensor: a view (contiguous, so every kernel takes it).
Tensor row_slice(const Tensor& x, int64_t r0, int64_t n) {
  if (!x.defined()) return x;
  const int64_t cols = x.numel() / x.shape[0];
  void* p = x.data ? static_cast<std::byte*>(x.data) + size_t(r0 * cols) * dtype_size(x.dtype) : nullptr;
  return Tensor(p, x.dtype, Shape{n, cols});
}

// The MLP of a layer over row tiles (ops::mlp_tiled). Why one fused op rather than row-slice and
// concat ops on the tape: the tape would make every tile's gate, up and activation values of their
// own (saved, or recomputed one node at a time), with backward's gradient buffers sized by the tape;
// here they are scratch blocks of this op, allocated and freed in a fixed order by code every
// backend shares, so the cpu, cuda and sim backends make the same arena schedule (the forecast stays
// exact) and at most one tile's [rows, F] tensors are alive. Backward always recomputes a tile's
// gate, up and activation (from the saved x): under gradient checkpointing that is the replay the
// untiled graph would have run anyway; otherwise it is the price of the memory.
// Inputs: x, wg, wu, wd, and with biases bg, bu, bd.
class MlpTiledOp final : public Op {
 public:
  MlpTiledOp(int64_t rows, bool bias, const std::string& prefix)
      : rows_(rows),
        bias_(bias),
        gate_tag_(prefix + ".gate.tile"),
        up_tag_(prefix + ".up.tile"),
        act_tag_(prefix + ".act.tile"),
        dgate_tag_("grad:" + gate_tag_),
        dup_tag_("grad:" + up_tag_),
        dact_tag_("grad:" + act_tag_) {}
  const char* name() const override { return "mlp_tiled"; }
  OpKind kind() const override { return OpKind::linear; }  // GEMMs, and swiglu (checked when recorded)
  void forward(Backend& be, const OpArgs& a) override {
    const int64_t N = a.in[0].shape[0];
    for (int64_t r0 = 0; r0 < N; r0 += rows_) {
      const int64_t n = std::min(rows_, N - r0);
      Tile t = gate_up_act(be, a, row_slice(a.in[0], r0, n), false);
      const Tensor y = row_slice(a.out[0], r0, n);  // [n, C]
      be.linear_fwd(y, t.act.view(), a.in[3]);
      if (bias_) be.bias_fwd(y, a.in[6]);
    }
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (!a.gout[0].defined()) return;
    const int64_t N = a.in[0].shape[0];
    for (int64_t r0 = 0; r0 < N; r0 += rows_) {
      const int64_t n = std::min(rows_, N - r0);
      const bool first = r0 == 0;  // the first tile writes each weight gradient as the tape says; later ones add
      auto acc = [&](int i) { return first ? bool(a.acc[size_t(i)]) : true; };
      const Tensor x = row_slice(a.in[0], r0, n), dy = row_slice(a.gout[0], r0, n), dx = row_slice(a.gin[0], r0, n);
      Tile t = gate_up_act(be, a, x, true);
      Arena& arena = be.arena();
      const DType dt = t.act.view().dtype;
      const Shape s = t.act.view().shape;  // [n, F]
      Buffer dact(arena, dt, s, dact_tag_);
      if (bias_ && a.gin[6].defined()) be.bias_bwd(a.gin[6], dy, acc(6));
      be.linear_bwd(dact.view(), a.gin[3], dy, t.act.view(), a.in[3], false, acc(3));
      t.act.reset();
      Buffer dgate(arena, dt, s, dgate_tag_), dup(arena, dt, s, dup_tag_);
      be.swiglu_bwd(dgate.view(), dup.view(), dact.view(), t.gate.view(), t.up.view(), false, false);
      dact.reset();
      t.gate.reset();
      t.up.reset();
      // Up, then gate: the order the untiled graph's backward takes, so dx gets the same bits.
      if (bias_ && a.gin[5].defined()) be.bias_bwd(a.gin[5], dup.view(), acc(5));
      be.linear_bwd(dx, a.gin[2], dup.view(), x, a.in[2], a.acc[0], acc(2));
      if (bias_ && a.gin[4].defined()) be.bias_bwd(a.gin[4], dgate.view(), acc(4));
      be.linear_bwd(dx, a.gin[1], dgate.view(), x, a.in[1], true, acc(1));
    }
  }
  // x to recompute every tile from, the weights (and biases); nothing [N, F].
  bool saves_input(int) const override { return true; }
  bool saves_output(int) const override { return false; }

 private:
  struct Tile {
    Buffer gate, up, act;  // [n, F]; gate and up freed once act exists, unless backward wants them
  };
  // A tile's gate and up projections and their SwiGLU, as the untiled graph computes them.
  Tile gate_up_act(Backend& be, const OpArgs& a, const Tensor& x, bool keep_gate_up) {
    const int64_t n = x.shape[0], F = a.in[1].shape[0];
    const DType dt = be.compute_dtype();
    Arena& arena = be.arena();
    Tile t;
    t.gate = Buffer(arena, dt, Shape{n, F}, gate_tag_);
    be.linear_fwd(t.gate.view(), x, a.in[1]);
    if (bias_) be.bias_fwd(t.gate.view(), a.in[4]);
    t.up = Buffer(arena, dt, Shape{n, F}, up_tag_);
    be.linear_fwd(t.up.view(), x, a.in[2]);
    if (bias_) be.bias_fwd(t.up.view(), a.in[5]);
    t.act = Buffer(arena, dt, Shape{n, F}, act_tag_);
    be.swiglu_fwd(t.act.view(), t.gate.view(), t.up.view());
    if (!keep_gate_up) {
      t.gate.reset();
      t.up.reset();
    }
    return t;
  }

  int64_t rows_;
  bool bias_;
  std::string gate_tag_, up_tag_, act_tag_, dgate_tag_, dup_tag_, dact_tag_;
};

class AddOp final : public Op {
 public:
  explicit AddOp(float scale) : scale_(scale) {}
  const char* name() const override { return "add"; }
  OpKind kind() const override { return OpKind::add; }
  void forward(Backend& be, const OpArgs& a) override { be.add_fwd(a.out[0], a.in[0], a.in[1], scale_); }
  void backward(Backend& be, const OpArgs& a) override {
    be.add_bwd(a.gin[0], a.gin[1], a.gout[0], scale_, a.acc[0], a.acc[1]);
  }
  bool saves_input(int) const override { return false; }
  bool saves_output(int) const override { return false; }
  // The residual add: da = db = dout, which the tape serves by aliasing gradient buffers.
  bool passes_grad() const override { return scale_ == 1.0f; }

 private:
  float scale_;
};

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

VId embedding(Tape& t, VId tokens, VId wte, std::string cls) {
  const Shape& w = t.value(wte).shape;
  return t.record1(std::make_unique<EmbeddingOp>(), {tokens, wte},
                   {std::move(cls), Shape{t.value(tokens).shape.numel(), w[1]}, act(t)});
}

std::pair<VId, VId> rmsnorm(Tape& t, VId x, VId w, float eps, const std::string& prefix) {
  const Shape& s = t.value(x).shape;
  auto ids = t.record(std::make_unique<RmsNormOp>(eps, 1), {x, w},
                      {{prefix + ".out", s, act(t)}, {prefix + ".rstd", Shape{s.numel() / s[s.nd - 1]}, DType::f32}});
  return {ids[0], ids[1]};
}

std::pair<VId, VId> rmsnorm_heads(Tape& t, VId x, VId w, int heads, float eps, const std::string& prefix) {
  const Shape& s = t.value(x).shape;
  const int64_t D = t.value(w).shape.numel();
  STRATA_CHECK(heads > 0 && s[s.nd - 1] == heads * D,
               "rmsnorm_heads: the last dimension is not heads x the weight's length");
  auto ids = t.record(std::make_unique<RmsNormOp>(eps, heads), {x, w},
                      {{prefix + ".out", s, act(t)}, {prefix + ".rstd", Shape{s.numel() / D}, DType::f32}});
  return {ids[0], ids[1]};
}

VId linear(Tape& t, VId x, VId w, std::string cls) {
  return linear(t, x, w, -1, std::move(cls));
}

VId linear(Tape& t, VId x, VId w, VId b, std::string cls) {
  Shape out = rows_by(t.value(x).shape, t.value(w).shape[0]);
  const bool bias = b >= 0;
  if (bias) STRATA_CHECK(t.value(b).shape.numel() == out[1], "linear: the bias length is not the output width");
  std::vector<VId> in = {x, w};
  if (bias) in.push_back(b);
  return t.record1(std::make_unique<LinearOp>(t.value(w).requires_grad, bias), in, {std::move(cls), out, act(t)});
}

VId rope(Tape& t, VId x, VId pos, VId inv_freq, int heads, std::string cls) {
  return t.record1(std::make_unique<RopeOp>(heads), {x, pos, inv_freq}, {std::move(cls), t.value(x).shape, act(t)});
}

std::pair<VId, VId> attention(Tape& t, VId q, VId k, VId v, int B, int T, int Hq, int Hkv, int D,
                              const std::string& prefix, VId packed_pos, double pairs) {
  std::vector<VId> in = {q, k, v};
  if (packed_pos >= 0) {
    STRATA_CHECK(t.value(packed_pos).dtype == DType::i32 && t.value(packed_pos).shape.numel() == int64_t(B) * T,
                 "attention: the packed positions are not [B*T] i32");
    in.push_back(packed_pos);
  }
  auto ids = t.record(std::make_unique<AttentionOp>(B, T, Hq, Hkv, D, pairs), in,
                      {{prefix + ".out", t.value(q).shape, act(t)}, {prefix + ".lse", Shape{B, Hq, T}, DType::f32}});
  return {ids[0], ids[1]};
}

VId swiglu(Tape& t, VId gate, VId up, std::string cls) {
  return t.record1(std::make_unique<SwigluOp>(), {gate, up}, {std::move(cls), t.value(gate).shape, act(t)});
}

int64_t mlp_tile_rows(int64_t n, int tiles) {
  STRATA_CHECK(n >= 1 && tiles >= 1, "mlp_tile_rows: rows and tiles must be positive");
  int64_t rows = (n + tiles - 1) / tiles;
  if (rows > 64) rows = (rows + 63) / 64 * 64;
  return std::min(rows, n);
}

int mlp_tile_count(int64_t n, int tiles) {
  const int64_t rows = mlp_tile_rows(n, tiles);
  return int((n + rows - 1) / rows);
}

VId mlp_tiled(Tape& t, VId x, VId wg, VId wu, VId wd, VId bg, VId bu, VId bd, int tiles, const std::string& prefix,
              std::string cls) {
  const Shape& xs = t.value(x).shape;
  const Shape &gs = t.value(wg).shape, &ds = t.value(wd).shape;
  STRATA_CHECK(xs.nd == 2 && gs[1] == xs[1] && t.value(wu).shape == gs && ds[0] == xs[1] && ds[1] == gs[0],
               "mlp_tiled: x [N, C] needs gate/up weights [F, C] and a down weight [C, F]");
  const bool bias = bg >= 0;
  STRATA_CHECK(bias == (bu >= 0) && bias == (bd >= 0), "mlp_tiled: biases for all three projections or none");
  const DType dt = t.value(x).dtype;
  if (!t.backend().supports(OpKind::swiglu, dt))
    STRATA_THROW(UnsupportedError, fmt::format("the {} backend has no {} swiglu (mlp_tiled '{}'); it runs: {}",
                                               t.backend().name(), dtype_name(dt), cls, support_summary(t.backend())));
  std::vector<VId> in = {x, wg, wu, wd};
  if (bias) in.insert(in.end(), {bg, bu, bd});
  return t.record1(std::make_unique<MlpTiledOp>(mlp_tile_rows(xs[0], tiles), bias, prefix), in,
                   {std::move(cls), xs, act(t)});
}

VId add(Tape& t, VId a, VId b, float scale, std::string cls) {
  return t.record1(std::make_unique<AddOp>(scale), {a, b}, {std::move(cls), t.value(a).shape, act(t)});
}

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

}  // namespace strata::ops
