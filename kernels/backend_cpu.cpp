// The cpu backend: fp32 reference kernels over an arena carved from one anonymous mapping.
#include <sys/mman.h>

#include <cmath>
#include <cstring>

#include "engine/backend.h"
#include "kernels/adamw.h"
#include "kernels/add.h"
#include "kernels/attention.h"
#include "kernels/bias.h"
#include "kernels/block_copy.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/lm_head_ce.h"
#include "kernels/op_dispatch.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace strata {

namespace {

float* F(const Tensor& t) {
  return t.defined() ? t.f32() : nullptr;
}
// A parameter gradient the kernels write: f32, bf16 (gradients: bf16), or none.
cpu::GradOut G(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.dtype == DType::bf16) return cpu::GradOut::bf16(static_cast<uint16_t*>(t.data));
  return t.f32();
}
int I(int64_t x) {
  return int(x);
}
int rows(const Tensor& t) {
  return I(t.numel() / t.shape[t.shape.nd - 1]);
}
int cols(const Tensor& t) {
  return I(t.shape[t.shape.nd - 1]);
}

// One anonymous mapping backs the whole arena; pages are only touched as blocks are used.
class AnonMapping {
 public:
  explicit AnonMapping(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) STRATA_THROW(Error, "cpu backend: cannot reserve " + format_bytes(bytes) + " for the arena");
    base_ = static_cast<std::byte*>(p);
  }
  ~AnonMapping() {
    if (base_) munmap(base_, bytes_);
  }
  AnonMapping(const AnonMapping&) = delete;
  AnonMapping& operator=(const AnonMapping&) = delete;
  std::byte* base() const { return base_; }

 private:
  size_t bytes_;
  std::byte* base_ = nullptr;
};

// The cpu backend's "host tier" is ordinary memory: copies are plain memcpy and finish at once.
class PlainHostMemory final : public HostReservation {
 public:
  explicit PlainHostMemory(size_t bytes) : mem_(bytes), bytes_(bytes) {}
  std::byte* base() const override { return mem_.base(); }
  size_t bytes() const override { return bytes_; }
  bool pinned() const override { return false; }

 private:
  AnonMapping mem_;
  size_t bytes_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(size_t budget) : mem_(budget), arena_("device", budget, mem_.base()) {}
  std::string_view name() const override { return "cpu"; }
  Arena& arena() override { return arena_; }
  // f32 compute; the optimizer ops also read bf16 parameter gradients (gradients: bf16).
  bool supports(OpKind op, DType dt) const override {
    return dt == DType::f32 || (dt == DType::bf16 && (op == OpKind::adamw || op == OpKind::grad_norm));
  }
  DType compute_dtype() const override { return DType::f32; }

  std::unique_ptr<HostReservation> reserve_host(size_t bytes) override {
    return std::make_unique<PlainHostMemory>(bytes);
  }
  CopyTicket copy_to_host_async(void* host_dst, Tensor src, CopyLane) override {
    std::memcpy(host_dst, src.data, src.bytes());
    return ++tickets_;
  }
  CopyTicket copy_to_device_async(Tensor dst, const void* host_src, CopyLane) override {
    std::memcpy(dst.data, host_src, dst.bytes());
    return ++tickets_;
  }
  bool copy_done(CopyTicket) override { return true; }
  void copy_wait_host(CopyTicket) override {}
  void copy_wait_compute(CopyTicket) override {}

  // f32 tensors by memcpy; bf16 ones (gradients: bf16) converted, rounding to nearest even.
  void upload_f32(Tensor dst, const float* src) override {
    if (dst.dtype == DType::f32) return (void)std::memcpy(dst.f32(), src, dst.bytes());
    convert_from_f32(dst.data, dst.dtype, src, size_t(dst.numel()));
  }
  void download_f32(float* dst, Tensor src) override {
    if (src.dtype == DType::f32) return (void)std::memcpy(dst, src.f32(), src.bytes());
    convert_to_f32(dst, src.data, src.dtype, size_t(src.numel()));
  }
  void upload_i32(Tensor dst, const int32_t* src) override { std::memcpy(dst.i32(), src, dst.bytes()); }
  void zero(Tensor t) override { std::memset(t.data, 0, t.bytes()); }
  void fill(Tensor t, float value) override {
    float* p = t.f32();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
  }

  void cast(Tensor dst, Tensor src) override {
    check_cast(dst, src);
    if (src.dtype == DType::f32)
      convert_from_f32(dst.data, dst.dtype, src.f32(), size_t(src.numel()));
    else
      convert_to_f32(dst.f32(), src.data, src.dtype, size_t(src.numel()));
  }

  void block_copy(Tensor out, Tensor in, const BlockCopy& c, bool accumulate) override {
    check_block_copy(out, in, c);
    cpu::block_copy(F(out), F(in), c, accumulate);
  }

  void embedding_fwd(Tensor out, Tensor tokens, Tensor wte) override {
    cpu::embedding_fwd(F(out), tokens.i32(), F(wte), I(tokens.numel()), cols(wte));
  }
  void embedding_bwd(Tensor dwte, Tensor dout, Tensor tokens, bool acc_dwte) override {
    if (!dwte.defined()) return;
    if (!acc_dwte) zero(dwte);  // rows no token hit get zeros; the others add, in token order
    cpu::embedding_bwd(G(dwte), F(dout), tokens.i32(), I(tokens.numel()), cols(dout), I(dwte.shape[0]));
  }
  void linear_fwd(Tensor y, Tensor x, Tensor w) override {
    cpu::linear_fwd(F(y), F(x), F(w), rows(x), cols(x), I(w.shape[0]));
  }
  void linear_bwd(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, bool acc_dx, bool acc_dw) override {
    // x is undefined when the weight is frozen (it was not saved): shapes come from dy and w.
    cpu::linear_bwd(F(dx), G(dw), F(dy), F(x), F(w), rows(dy), cols(w), I(w.shape[0]), acc_dx, acc_dw);
  }
  // x is [N, H, D] (or [B, T, H, D], flattened over tokens).
  void rope_fwd(Tensor out, Tensor x, Tensor pos, Tensor inv_freq) override {
    int D = cols(x), H = I(x.shape[x.shape.nd - 2]);
    cpu::rope_fwd(F(out), F(x), pos.i32(), F(inv_freq), I(pos.numel()), H, D);
  }
  void rope_bwd(Tensor dx, Tensor dout, Tensor pos, Tensor inv_freq, bool acc_dx) override {
    int D = cols(dout), H = I(dout.shape[dout.shape.nd - 2]);
    cpu::rope_bwd(F(dx), F(dout), pos.i32(), F(inv_freq), I(pos.numel()), H, D, acc_dx);
  }
  void attention_fwd(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, const AttnSegments& seg) override {
    cpu::attention_fwd(F(out), F(lse), F(q), F(k), F(v), I(q.shape[0]), I(q.shape[1]), I(q.shape[2]), I(k.shape[2]),
                       I(q.shape[3]), seg_pos(seg, q));
  }
  void attention_bwd(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,
                     bool acc_dq, bool acc_dk, bool acc_dv, const AttnSegments& seg) override {
    cpu::attention_bwd(F(dq), F(dk), F(dv), F(dout), F(q), F(k), F(v), F(out), F(lse), I(q.shape[0]), I(q.shape[1]),
                       I(q.shape[2]), I(k.shape[2]), I(q.shape[3]), acc_dq, acc_dk, acc_dv, seg_pos(seg, q));
  }
  // The packed rows' positions [B*T] (null: unpacked), checked against q [B, T, Hq, D].
  static const int32_t* seg_pos(const AttnSegments& seg, const Tensor& q) {
    if (!seg.packed()) return nullptr;
    STRATA_CHECK(seg.pos.dtype == DType::i32 && seg.pos.numel() == q.shape[0] * q.shape[1],
                 "attention: the packed positions are not [B*T] i32");
    return seg.pos.i32();
  }
  void run(OpKind k, const OpCall& c) override {
    using Impl = void (*)(const OpCall&);
#define STRATA_CPU_IMPL(op) {OpKind::op, op##_cpu},
    static const std::pair<OpKind, Impl> impls[] = {STRATA_DISPATCHED_OPS(STRATA_CPU_IMPL)};
#undef STRATA_CPU_IMPL
    for (const auto& [kind, impl] : impls)
      if (kind == k) return impl(c);
    throw UnsupportedError(std::string("the cpu backend has no dispatched ") + op_kind_name(k));
  }

  void lm_head_ce_fwd(Tensor loss, Tensor lse, Tensor x, Tensor w, Tensor targets, int chunk, int vocab) override {
    loss.f32()[0] =
        cpu::lm_head_ce_fwd(F(lse), F(x), F(w), targets.i32(), rows(x), cols(x), I(w.shape[0]), chunk, nullptr, vocab);
  }
  void lm_head_ce_bwd(Tensor dx, Tensor dw, Tensor dloss, Tensor x, Tensor w, Tensor targets, Tensor lse, int chunk,
                      int vocab, bool acc_dx, bool acc_dw) override {
    cpu::lm_head_ce_bwd(F(dx), G(dw), dloss.f32()[0], F(x), F(w), targets.i32(), F(lse), rows(x), cols(x),
                        I(w.shape[0]), chunk, acc_dx, acc_dw, vocab);
  }
  void lm_head_ce_fwd_grad(Tensor loss, Tensor dx, Tensor dw, Tensor x, Tensor w, Tensor targets, int chunk, int vocab,
                           float dloss_assumed, bool acc_dw) override {
    loss.f32()[0] = cpu::lm_head_ce_fwd_grad(F(dx), G(dw), dloss_assumed, F(x), F(w), targets.i32(), rows(x), cols(x),
                                             I(w.shape[0]), chunk, acc_dw, nullptr, vocab);
  }
  void lm_head_ce_bwd_saved(Tensor dx, Tensor dloss, Tensor saved_dx, float dloss_assumed, bool dw_written,
                            bool acc_dx) override {
    cpu::lm_head_ce_bwd_saved(F(dx), F(saved_dx), dloss.f32()[0], dloss_assumed, dw_written, long(dx.numel()), acc_dx);
  }
  void lm_head_logits(Tensor logits, Tensor x, Tensor w) override {
    cpu::lm_head_logits(F(logits), F(x), F(w), rows(x), cols(x), I(w.shape[0]));
  }
  void grad_norm_sq(Tensor out, Tensor g) override {
    const double s = g.dtype == DType::bf16
                         ? cpu::sum_squares_bf16(static_cast<const uint16_t*>(g.data), size_t(g.numel()))
                         : cpu::sum_squares(F(g), size_t(g.numel()));
    out.f32()[0] = float(double(out.f32()[0]) + s);
  }
  // A part is the double grad_norm_sq would add (its bits in two i32 words), so the parts added in order
  // give grad_norm_sq's float(double(out) + s) steps bit for bit.
  void grad_norm_sq_part(Tensor parts, size_t k, Tensor g) override {
    check_norm_parts(parts, k);
    const double s = g.dtype == DType::bf16
                         ? cpu::sum_squares_bf16(static_cast<const uint16_t*>(g.data), size_t(g.numel()))
                         : cpu::sum_squares(F(g), size_t(g.numel()));
    std::byte* slot = static_cast<std::byte*>(parts.data) + k * sizeof(double);
    double d;
    std::memcpy(&d, slot, sizeof d);
    d += s;
    std::memcpy(slot, &d, sizeof d);
  }
  void grad_norm_sq_add_parts(Tensor out, Tensor parts, size_t n) override {
    if (n == 0) return;
    check_norm_parts(parts, n - 1);
    for (size_t k = 0; k < n; ++k) {
      double s;
      std::memcpy(&s, static_cast<const std::byte*>(parts.data) + k * sizeof(double), sizeof s);
      out.f32()[0] = float(double(out.f32()[0]) + s);
    }
  }
  void adamw_step(const AdamWSlot& s, Tensor norm_sq, float max_norm, const AdamWParams& p, int t) override {
    float scale = 1.0f;
    if (max_norm > 0) {
      float norm = std::sqrt(norm_sq.f32()[0]);
      if (norm > max_norm) scale = max_norm / (norm + 1e-6f);
    }
    const size_t n = size_t(s.g.numel());
    STRATA_CHECK(s.m.dtype == s.v.dtype && size_t(s.m.numel()) == n && size_t(s.v.numel()) == n,
                 "adamw_step: m and v must match the gradient");
    AdamWState st;
    st.master = s.master.defined() ? F(s.master) : nullptr;
    STRATA_CHECK(!st.master || size_t(s.master.numel()) == n, "adamw_step: the master must match the gradient");
    if (s.param_out.defined()) {
      STRATA_CHECK(size_t(s.param_out.numel()) == n, "adamw_step: the weights must match the gradient");
      st.weights = s.param_out.data;
      st.weights_dtype = s.param_out.dtype;
    }
    st.m = s.m.data;
    st.v = s.v.data;
    st.moments = s.m.dtype == DType::f32    ? OptimizerState::fp32
                 : s.m.dtype == DType::bf16 ? OptimizerState::bf16
                                            : OptimizerState::q8;
    if (st.moments == OptimizerState::q8) {
      STRATA_CHECK(s.m.dtype == DType::u8 && s.m_scale.defined() && s.v_scale.defined() &&
                       size_t(s.m_scale.numel()) == quant_blocks(n) && size_t(s.v_scale.numel()) == quant_blocks(n),
                   "adamw_step: 8-bit moments need u8 codes and one f32 scale per block");
      st.m_scale = F(s.m_scale);
      st.v_scale = F(s.v_scale);
    }
    STRATA_CHECK(s.g.dtype == DType::f32 || s.g.dtype == DType::bf16, "adamw_step: gradients must be f32 or bf16");
    st.g = s.g.data;
    st.grad_dtype = s.g.dtype;
    st.n = n;
    cpu::adamw_step_parallel(st, p, t, scale, 16);
  }

 private:
  AnonMapping mem_;
  Arena arena_;
  CopyTicket tickets_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(size_t budget) {
  return std::make_unique<CpuBackend>(budget);
}

}  // namespace strata
