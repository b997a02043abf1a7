#include "engine/backend.h"

#include <fmt/format.h>

#include "io/uring_file.h"

namespace strata {

namespace {
[[noreturn]] void no_tiers(const Backend& b) {
  throw UnsupportedError(fmt::format("the {} backend has no host/disk tier transfers", b.name()));
}
}  // namespace

std::unique_ptr<HostReservation> Backend::reserve_host(size_t) {
  no_tiers(*this);
}
CopyTicket Backend::copy_to_host_async(void*, Tensor) {
  no_tiers(*this);
}
CopyTicket Backend::copy_to_device_async(Tensor, const void*) {
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
void Backend::upload_master(Tensor, Tensor, const float*) {
  throw UnsupportedError(fmt::format("the {} backend keeps whole f32 masters (no split masters)", name()));
}
void Backend::download_master(float*, Tensor, Tensor) {
  throw UnsupportedError(fmt::format("the {} backend keeps whole f32 masters (no split masters)", name()));
}
std::unique_ptr<DiskFile> Backend::open_disk_file(const std::string& dir, size_t bytes) {
  return std::make_unique<io::UringFile>(dir, bytes);
}

}  // namespace strata
