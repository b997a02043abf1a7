// The cpu backend: fp32 reference kernels over an arena carved from one anonymous mapping.
#include <sys/mman.h>

#include <cstring>

#include "engine/backend.h"
#include "kernels/op_dispatch.h"

namespace strata {

namespace {

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

  // Every op (engine/op_table.h STRATA_OPS): its cpu implementation beside its kernels (kernels/op_dispatch.h).
  void run(OpKind k, const OpCall& c) override {
    using Impl = void (*)(const OpCall&);
#define STRATA_CPU_IMPL(op) op##_cpu,
    static const Impl impls[] = {STRATA_OPS(STRATA_CPU_IMPL)};
#undef STRATA_CPU_IMPL
    impls[size_t(k)](c);
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
