#include "engine/backend.h"

#include <fmt/format.h>

#include <chrono>

#include "engine/uring_file.h"

namespace strata {

std::string support_summary(const Backend& be) {
  std::string s;
  for (int k = 0; k < int(OpKind::count_); ++k) {
    std::string types;
    for (DType t : {DType::f32, DType::bf16, DType::f16})
      if (be.supports(OpKind(k), t)) {
        // Appended in place: `"" + std::string(...)` trips GCC 12's -Wrestrict (a false positive).
        if (!types.empty()) types += '/';
        types += dtype_name(t);
      }
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", op_kind_name(OpKind(k)), types.empty() ? "none" : types);
  }
  return s;
}

double Backend::mark_clock_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Backend::time_mark() {
  marks_.push_back(mark_clock_s());
}

std::vector<double> Backend::time_marks_s() {
  std::vector<double> s;
  for (double t : marks_) s.push_back(t - marks_.front());
  marks_.clear();
  return s;
}

namespace {
[[noreturn]] void no_tiers(const Backend& b) {
  throw UnsupportedError(fmt::format("the {} backend has no host/disk tier transfers", b.name()));
}
}  // namespace

std::unique_ptr<HostReservation> Backend::reserve_host(size_t) {
  no_tiers(*this);
}
CopyTicket Backend::copy_to_host_async(void*, Tensor, CopyLane) {
  no_tiers(*this);
}
CopyTicket Backend::copy_to_device_async(Tensor, const void*, CopyLane) {
  no_tiers(*this);
}
bool Backend::copy_done(CopyTicket) {
  no_tiers(*this);
}
void Backend::copy_wait_host(CopyTicket) {
  no_tiers(*this);
}
void Backend::copy_wait_compute(CopyTicket) {
  no_tiers(*this);
}
void Backend::copy_wait_lane(CopyLane, CopyTicket t) {
  copy_wait_compute(t);
}
void Backend::cast(Tensor dst, Tensor src) {
  throw UnsupportedError(
      fmt::format("the {} backend has no cast {} -> {}", name(), dtype_name(src.dtype), dtype_name(dst.dtype)));
}

void Backend::check_cast(const Tensor& dst, const Tensor& src) {
  const bool ok =
      (src.dtype == DType::f32 && dst.dtype == DType::bf16) || (src.dtype == DType::bf16 && dst.dtype == DType::f32);
  if (!ok || dst.numel() != src.numel() || (dst.data && dst.data == src.data))  // the sim's tensors have no data
    STRATA_THROW(Error, fmt::format("cast: {} [{} elements] -> {} [{} elements]: expected f32 <-> bf16, equal "
                                    "element counts, distinct buffers",
                                    dtype_name(src.dtype), src.numel(), dtype_name(dst.dtype), dst.numel()));
}

void Backend::check_norm_parts(const Tensor& parts, size_t k) {
  STRATA_CHECK(parts.dtype == DType::i32 && parts.contiguous() && size_t(parts.numel()) >= 2 * (k + 1),
               fmt::format("gradient norm parts: part {} of an {} {} tensor (want i32 [2 * parts])", k,
                           dtype_name(parts.dtype), parts.shape.str()));
}

void Backend::check_block_copy(const Tensor& out, const Tensor& in, const BlockCopy& c) {
  if (c.outer < 0 || c.inner < 0 || c.e < 0 || c.in_outer < 0 || c.in_inner < 0 || c.out_outer < 0 || c.out_inner < 0)
    STRATA_THROW(Error,
                 fmt::format("block_copy: negative counts or strides ({} x {} blocks of {})", c.outer, c.inner, c.e));
  if (out.dtype != in.dtype || !out.contiguous() || !in.contiguous() || c.in_span() > in.numel() ||
      c.out_span() > out.numel())
    STRATA_THROW(Error, fmt::format("block_copy: {} x {} blocks of {} read {} of the {} input's {} elements and write "
                                    "{} of the {} output's {}: expected one dtype, contiguous tensors, spans within",
                                    c.outer, c.inner, c.e, c.in_span(), dtype_name(in.dtype), in.numel(), c.out_span(),
                                    dtype_name(out.dtype), out.numel()));
}

void Backend::upload_master(Tensor, Tensor, const float*) {
  throw UnsupportedError(fmt::format("the {} backend keeps whole f32 masters (no split masters)", name()));
}
void Backend::download_master(float*, Tensor, Tensor) {
  throw UnsupportedError(fmt::format("the {} backend keeps whole f32 masters (no split masters)", name()));
}
std::unique_ptr<DiskFile> Backend::open_disk_file(const std::string& dir, size_t bytes) {
  return std::make_unique<UringFile>(dir, bytes);
}

}  // namespace strata
