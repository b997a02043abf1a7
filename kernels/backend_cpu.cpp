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
