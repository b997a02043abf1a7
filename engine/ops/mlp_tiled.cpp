// mlp_tiled: the SwiGLU MLP over row tiles (ops::mlp_tiled), built from the linear, bias and swiglu ops.
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>

#include "engine/ops/op_common.h"

namespace strata::ops {
namespace {
using namespace detail;

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
    for_each_tile(be, N, [&](int64_t r0, int64_t n) {
      Tile t = gate_up_act(be, a, row_slice(a.in[0], r0, n), false);
      const Tensor y = row_slice(a.out[0], r0, n);  // [n, C]
      be.linear_fwd(y, t.act.view(), a.in[3]);
      if (bias_) be.bias_fwd(y, a.in[6]);
    });
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (!a.gout[0].defined()) return;
    const int64_t N = a.in[0].shape[0];
    for_each_tile(be, N, [&](int64_t r0, int64_t n) {
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
    });
  }
  // x to recompute every tile from, the weights (and biases); nothing [N, F].
  bool saves_input(int) const override { return true; }
  bool saves_output(int) const override { return false; }

 private:
  // tile(r0, n) for each tile of rows [r0, r0 + n) in order. Tiles 1 .. k-2 of k are alike (full rows; the first
  // writes the weight gradients, the last may be short): where the backend can apply one of them again without
  // running it (Backend::begin_repeat: the sim), tile 1 runs once and the backend repeats it for the rest.
  template <class F>
  void for_each_tile(Backend& be, int64_t N, F&& tile) {
    const int64_t k = (N + rows_ - 1) / rows_;
    for (int64_t i = 0; i < k; ++i) {
      const bool record = i == 1 && k >= 4 && be.begin_repeat();
      tile(i * rows_, std::min(rows_, N - i * rows_));
      if (record && be.end_repeat(k - 3)) i = k - 2;  // tiles 2 .. k-2 applied: the last tile next
    }
  }
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

}  // namespace

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

}  // namespace strata::ops
