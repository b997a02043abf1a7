// Sequence parallelism's tape ops (DeepSpeed-Ulysses, Arctic Long Sequence Training): the all-to-alls around
// attention and GQA's KV-head replication (ops.h). Layouts, for B rows, n ranks, this rank's Tl = T/n tokens of each
// row, H heads of D values and Hl = H/n (E = Hl*D):
//   sequence-sharded  [B*Tl, H*D]  this rank's tokens, every head: what every other op of a layer sees
//   head-sharded      [B*T, Hl*D]  every token, this rank's heads: [B, T, Hl, D] for the attention kernels
// Sequence to heads: pack [B*Tl, n, E] into send [n, B*Tl, E] (chunk j: rank j's heads), all-to-all, so chunk r of
// recv [n, B, Tl, E] holds rank r's tokens, and unpack [n, B, Tl*E] into [B, n, Tl*E] = [B, T, E] (for B = 1 the
// all-to-all lands in the output itself). Heads to sequence is the exact reverse; each is the other's backward.
// The scratch blocks are the op's own, allocated and freed in a fixed order by code every backend shares (as
// mlp_tiled's), so the sim's arena schedule is the cpu and cuda ones'. Nothing is saved: a replay (recompute)
// re-runs the collective, which every rank does at the same point, since every rank records the same graph and plan.
#include <fmt/format.h>

#include <cstddef>

#include "engine/comm.h"
#include "engine/op_scratch.h"
#include "engine/ops.h"

namespace strata::ops {
namespace {

constexpr const char* kScratch = scratch_tag::seq_parallel;

Tensor flat(const Tensor& t) {
  return Tensor(t.data, t.dtype, Shape{t.numel()});
}

// Elements [off, end) of a contiguous tensor as a flat view.
Tensor from(const Tensor& t, int64_t off) {
  void* p = t.data ? static_cast<std::byte*>(t.data) + size_t(off) * dtype_size(t.dtype) : nullptr;
  return Tensor(p, t.dtype, Shape{t.numel() - off});
}

class SeqAllToAllOp final : public Op {
 public:
  SeqAllToAllOp(bool to_heads, int B, Communicator& comm) : to_heads_(to_heads), B_(B), comm_(comm) {}
  const char* name() const override { return to_heads_ ? "seq_to_heads" : "heads_to_seq"; }
  OpKind kind() const override { return OpKind::block_copy; }
  void forward(Backend& be, const OpArgs& a) override {
    if (to_heads_)
      seq_to_heads(be, a.out[0], a.in[0], false);
    else
      heads_to_seq(be, a.out[0], a.in[0], false);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (!a.gout[0].defined() || !a.gin[0].defined()) return;
    if (to_heads_)
      heads_to_seq(be, a.gin[0], a.gout[0], a.acc[0]);
    else
      seq_to_heads(be, a.gin[0], a.gout[0], a.acc[0]);
  }
  bool saves_input(int) const override { return false; }
  bool saves_output(int) const override { return false; }

 private:
  // in [B*Tl, n*E] -> out [B*T, E] (+= when acc).
  void seq_to_heads(Backend& be, const Tensor& out, const Tensor& in, bool acc) {
    const int64_t n = comm_.world(), A = in.shape[0], E = out.shape[1], Tl = A / B_;
    Arena& arena = be.arena();
    Buffer send(arena, in.dtype, Shape{n * A * E}, kScratch);  // [n, A, E]
    be.block_copy(send.view(), in, BlockCopy::swap_axes(A, n, E), false);
    const bool direct = B_ == 1 && !acc;
    Buffer recv;
    if (!direct) recv = Buffer(arena, in.dtype, Shape{n * A * E}, kScratch);  // [n, B, Tl, E]
    const Tensor r = direct ? flat(out) : recv.view();
    comm_.wait_compute(comm_.all_to_all(r, send.view()));
    send.reset();
    if (!direct) be.block_copy(out, r, BlockCopy::swap_axes(n, B_, Tl * E), acc);
  }
  // in [B*T, E] -> out [B*Tl, n*E] (+= when acc).
  void heads_to_seq(Backend& be, const Tensor& out, const Tensor& in, bool acc) {
    const int64_t n = comm_.world(), A = out.shape[0], E = in.shape[1], Tl = A / B_;
    Arena& arena = be.arena();
    Buffer send;
    if (B_ != 1) {  // [B, n, Tl*E] -> [n, B, Tl*E]; one row is in that order already
      send = Buffer(arena, in.dtype, Shape{n * A * E}, kScratch);
      be.block_copy(send.view(), in, BlockCopy::swap_axes(B_, n, Tl * E), false);
    }
    Buffer recv(arena, in.dtype, Shape{n * A * E}, kScratch);  // [n, A, E]
    comm_.wait_compute(comm_.all_to_all(recv.view(), B_ == 1 ? flat(in) : send.view()));
    send.reset();
    be.block_copy(out, recv.view(), BlockCopy::swap_axes(n, A, E), acc);
  }

  bool to_heads_;
  int B_;
  Communicator& comm_;
};

// x [N, H*D] -> [N, H*m*D]: each head repeated m times in a row (head h's copies at h*m .. h*m + m - 1), so a GQA
// group keeps its KV head. Backward sums the m copies' gradients back into the head.
class RepeatHeadsOp final : public Op {
 public:
  RepeatHeadsOp(int heads, int times, int64_t head_dim) : H_(heads), m_(times), D_(head_dim) {}
  const char* name() const override { return "repeat_heads"; }
  OpKind kind() const override { return OpKind::block_copy; }
  void forward(Backend& be, const OpArgs& a) override {
    const int64_t N = a.in[0].shape[0];
    for (int j = 0; j < m_; ++j) be.block_copy(from(a.out[0], j * D_), a.in[0], spread(N), false);
  }
  void backward(Backend& be, const OpArgs& a) override {
    if (!a.gout[0].defined() || !a.gin[0].defined()) return;
    const int64_t N = a.gin[0].shape[0];
    for (int j = 0; j < m_; ++j) be.block_copy(a.gin[0], from(a.gout[0], j * D_), gather(N), j > 0 || a.acc[0]);
  }
  bool saves_input(int) const override { return false; }
  bool saves_output(int) const override { return false; }

 private:
  // Head h of each row of [N, H*D] to head h*m (+ the view's offset) of [N, H*m*D], and back.
  BlockCopy spread(int64_t N) const { return {N, H_, D_, H_ * D_, D_, H_ * m_ * D_, m_ * D_}; }
  BlockCopy gather(int64_t N) const { return {N, H_, D_, H_ * m_ * D_, m_ * D_, H_ * D_, D_}; }
  int64_t H_;
  int m_;
  int64_t D_;
};

VId all_to_all(Tape& t, VId x, int B, int heads, Communicator& comm, bool to_heads, std::string cls) {
  const Value& v = t.value(x);
  const int64_t n = comm.world();
  STRATA_CHECK(v.shape.nd == 2 && B >= 1 && heads >= 1, "sequence all-to-all: x must be [tokens, heads*D]");
  const int64_t rows = v.shape[0], cols = v.shape[1];
  if (heads % n != 0)
    STRATA_THROW(UnsupportedError, fmt::format("sequence parallelism over {} ranks: {} heads ('{}') do not split "
                                               "evenly over the ranks",
                                               n, heads, cls));
  if (to_heads) {
    STRATA_CHECK(rows % B == 0 && cols % heads == 0, "seq_to_heads: x is not [B*Tl, heads*D]");
    return t.record1(std::make_unique<SeqAllToAllOp>(true, B, comm), {x},
                     {std::move(cls), Shape{rows * n, cols / n}, v.dtype});
  }
  STRATA_CHECK(rows % (B * n) == 0, "heads_to_seq: x is not [B*T, (heads/n)*D] with T a multiple of n");
  return t.record1(std::make_unique<SeqAllToAllOp>(false, B, comm), {x},
                   {std::move(cls), Shape{rows / n, cols * n}, v.dtype});
}

}  // namespace

VId seq_to_heads(Tape& t, VId x, int B, int heads, Communicator& comm, std::string cls) {
  return all_to_all(t, x, B, heads, comm, true, std::move(cls));
}

VId heads_to_seq(Tape& t, VId x, int B, int heads, Communicator& comm, std::string cls) {
  return all_to_all(t, x, B, heads, comm, false, std::move(cls));
}

VId repeat_heads(Tape& t, VId x, int heads, int times, std::string cls) {
  const Value& v = t.value(x);
  STRATA_CHECK(v.shape.nd == 2 && heads >= 1 && times >= 1 && v.shape[1] % heads == 0,
               "repeat_heads: x must be [tokens, heads*D]");
  const int64_t D = v.shape[1] / heads;
  return t.record1(std::make_unique<RepeatHeadsOp>(heads, times, D), {x},
                   {std::move(cls), Shape{v.shape[0], v.shape[1] * times}, v.dtype});
}

}  // namespace strata::ops
