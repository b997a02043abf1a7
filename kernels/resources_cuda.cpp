#include "kernels/resources_cuda.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/switches.h"
#include "kernels/cuda_check.h"

namespace strata::cuda {

Stream make_stream() {
  cudaStream_t s = nullptr;
  STRATA_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

Event make_event() {
  cudaEvent_t e = nullptr;
  STRATA_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return Event(e);
}

HostPinning default_host_pinning() {
  return switches().host_register ? HostPinning::touch_register : HostPinning::alloc;
}

bool CudaHostMemory::try_register(size_t bytes) {
  const size_t page = 4096, len = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  madvise(p, len, MADV_HUGEPAGE);  // advice only: 2 MiB pages fault in (and register) faster where THP allows
  // One write a page faults every page in; the kernel zeroes each as it maps it, so the threads split the zeroing.
  const size_t per_thread = size_t(256) << 20;
  const unsigned n =
      unsigned(std::clamp<size_t>(len / per_thread, 1, std::clamp(std::thread::hardware_concurrency(), 1u, 16u)));
  const size_t pages = len / page, share = (pages + n - 1) / n;
  auto touch = [&](size_t first) {
    volatile char* c = static_cast<char*>(p);
    for (size_t i = first, end = std::min(pages, first + share); i < end; ++i) c[i * page] = 0;
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < n; ++t) threads.emplace_back(touch, t * share);
  touch(0);
  for (auto& t : threads) t.join();
  if (cudaHostRegister(p, len, cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();  // not sticky; cudaHostAlloc gets its turn
    munmap(p, len);
    return false;
  }
  p_ = p, mapped_ = len, pinned_ = true;
  return true;
}

CudaHostMemory::CudaHostMemory(size_t bytes, HostPinning how) : bytes_(bytes) {
  if (bytes == 0) return;
  if (how == HostPinning::touch_register && try_register(bytes)) return;
  cudaError_t e = cudaHostAlloc(&p_, bytes, cudaHostAllocDefault);
  if (e == cudaSuccess) {
    pinned_ = true;
    if (reinterpret_cast<uintptr_t>(p_) % 4096 == 0) return;
    cudaFreeHost(p_);  // the destructor will not run for a throwing constructor
    STRATA_THROW(Error, "cudaHostAlloc returned memory that is not page-aligned");
  }
  cudaGetLastError();  // a failed allocation is not sticky; clear it so later checks stay clean
  p_ = nullptr;
  note = fmt::format(
      "cuda backend: could not pin {} ({} bytes) of host memory: cudaHostAlloc failed with {} ({}); using "
      "pageable memory instead, so host-tier copies will be slower and will not overlap compute. Raise the "
      "locked-memory limit (`ulimit -l unlimited`, memlock in /etc/security/limits.conf, or docker "
      "--ulimit memlock=-1) or lower the host-tier size",
      format_bytes(bytes), bytes, cudaGetErrorString(e), int(e));
  const size_t rounded = (bytes + 4095) / 4096 * 4096;  // aligned_alloc wants a multiple of the alignment
  p_ = std::aligned_alloc(4096, rounded);
  if (!p_)
    STRATA_THROW(OutOfMemoryError, note + "; and the pageable fallback of the same size failed too", "host",
                 "host reservation", bytes, 0, bytes);
}

CudaHostMemory::~CudaHostMemory() {
  if (!p_) return;
  if (mapped_) {
    if (cudaHostUnregister(p_) != cudaSuccess) std::fprintf(stderr, "strata: cudaHostUnregister failed\n");
    munmap(p_, mapped_);
    return;
  }
  if (!pinned_) {
    std::free(p_);
    return;
  }
  cudaError_t e = cudaFreeHost(p_);
  if (e != cudaSuccess) std::fprintf(stderr, "strata: cudaFreeHost failed: %s\n", cudaGetErrorString(e));
}

DeviceReservation::DeviceReservation(size_t bytes) {
  if (bytes) STRATA_CUDA(cudaMalloc(&p_, bytes));
}

DeviceReservation::~DeviceReservation() {
  if (p_) cudaFree(p_);
}

size_t checked_budget(size_t requested, std::string& desc) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    throw UnsupportedError(fmt::format("cuda backend: no CUDA device found ({}); use --backend cpu",
                                       e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)));
  }
  cudaDeviceProp prop{};
  STRATA_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 9)
    throw UnsupportedError(fmt::format("cuda backend: found {} (sm_{}{}), but strata needs Hopper (sm_90) or newer",
                                       prop.name, prop.major, prop.minor));
  size_t free_b = 0, total_b = 0;
  STRATA_CUDA(cudaMemGetInfo(&free_b, &total_b));
  desc = fmt::format("{}, sm_{}{}, {} total", prop.name, prop.major, prop.minor, format_bytes(total_b));
  const size_t headroom = size_t(2) << 30;  // CUDA context, cuDNN/cuBLAS internals
  if (requested == 0) return free_b > headroom ? free_b - headroom : free_b / 2;
  if (requested > free_b)
    throw ConfigError(fmt::format("cuda backend: arena budget {} is larger than the GPU's free memory {} ({} total) "
                                  "on {}; pass --device-memory at most {}",
                                  format_bytes(requested), format_bytes(free_b), format_bytes(total_b), prop.name,
                                  format_bytes(free_b > headroom ? free_b - headroom : free_b)),
                      "command line", "device-memory");
  return requested;
}

ProfileOptions ProfileOptions::from_env() {
  ProfileOptions o;
  o.on = switches().op_profile;
  o.skip = switches().op_profile_skip;
  return o;
}

OpProfiler::~OpProfiler() {
  if (!on_) return;
  collect();
  double total = 0;
  for (auto& [k, v] : totals_) total += v.first;
  std::vector<std::pair<std::string, std::pair<double, long>>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  std::fprintf(stderr,
               "strata profile (GPU time per op, steps after the first STRATA_PROFILE_SKIP):\n  %-22s %10s %7s %8s\n",
               "op", "ms", "share", "calls");
  for (auto& [k, v] : rows)
    std::fprintf(stderr, "  %-22s %10.2f %6.1f%% %8ld\n", k.c_str(), v.first, 100.0 * v.first / total, v.second);
}

OpProfiler::Scope::Scope(OpProfiler* p, const char* name, cudaStream_t s) : p_(p), name_(name), s_(s) {
  if (!p_->on_) return;
  cudaEventCreate(&a_);
  cudaEventCreate(&b_);
  cudaEventRecord(a_, s_);
}

OpProfiler::Scope::~Scope() {
  if (!p_->on_) return;
  cudaEventRecord(b_, s_);
  p_->pending_.push_back({name_, a_, b_});
}

void OpProfiler::collect() {
  const bool keep = skip_-- <= 0;
  for (auto& e : pending_) {
    float ms = 0;
    cudaEventSynchronize(e.b);
    cudaEventElapsedTime(&ms, e.a, e.b);
    auto& t = totals_[e.name];
    if (keep) {
      t.first += ms;
      t.second++;
    }
    cudaEventDestroy(e.a);
    cudaEventDestroy(e.b);
  }
  pending_.clear();
}

}  // namespace strata::cuda
