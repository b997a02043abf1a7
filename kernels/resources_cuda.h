// What the cuda backend owns besides its kernels (kernels/backend_cuda.cpp): RAII handles for streams
// and events, the device reservation (the engine's one cudaMalloc), the host tier's pinned memory, the
// budget check against the device, and the per-op profiler with its switches read once.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"

namespace strata::cuda {

// RAII handles (streams, events): one owner each, moves only.
template <class H, cudaError_t (*Destroy)(H)>
class CudaHandle {
 public:
  CudaHandle() = default;
  explicit CudaHandle(H h) : h_(h) {}
  ~CudaHandle() {
    if (h_) Destroy(h_);
  }
  CudaHandle(CudaHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CudaHandle& operator=(CudaHandle&& o) noexcept {
    std::swap(h_, o.h_);  // our old handle dies with o
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  H get() const { return h_; }

 private:
  H h_ = nullptr;
};
using Stream = CudaHandle<cudaStream_t, cudaStreamDestroy>;
using Event = CudaHandle<cudaEvent_t, cudaEventDestroy>;

// Non-blocking: never synchronises with the legacy default stream.
Stream make_stream();
// Hand-off events carry no timing (cheaper to record and wait on).
Event make_event();

// How pinned host memory is made. `touch_register` maps anonymous memory, faults its pages in from
// several threads (the kernel zeroes them in parallel) and registers the range with cudaHostRegister;
// `alloc` is one cudaHostAlloc, whose driver zeroes and pins the pages on one thread (about 1.4 GB/s on
// an H200 host: a minute for the 82 GB a 524,288-token plan pins). STRATA_HOST_REGISTER=0 picks `alloc`.
enum class HostPinning { touch_register, alloc };
HostPinning default_host_pinning();

// The host tier: `bytes` of pinned memory (exactly; the mapping is rounded up to whole pages). When
// the chosen way fails, the other is tried; when pinning fails altogether (memlock limits, a
// container without IPC_LOCK) it falls back to pageable memory and says why in `note`: copies still
// work, but a device->host copy then blocks the host and nothing overlaps.
class CudaHostMemory final : public HostReservation {
 public:
  explicit CudaHostMemory(size_t bytes, HostPinning how = default_host_pinning());
  ~CudaHostMemory() override;
  CudaHostMemory(const CudaHostMemory&) = delete;
  CudaHostMemory& operator=(const CudaHostMemory&) = delete;
  std::byte* base() const override { return static_cast<std::byte*>(p_); }
  size_t bytes() const override { return bytes_; }
  bool pinned() const override { return pinned_ || bytes_ == 0; }

 private:
  bool try_register(size_t bytes);

  void* p_ = nullptr;
  size_t bytes_;
  size_t mapped_ = 0;  // the mapping's length when p_ is registered anonymous memory, else 0
  bool pinned_ = false;
};

// The arena's backing store: one cudaMalloc of the whole budget, the only one in the engine.
class DeviceReservation {
 public:
  explicit DeviceReservation(size_t bytes);
  ~DeviceReservation();
  DeviceReservation(const DeviceReservation&) = delete;
  DeviceReservation& operator=(const DeviceReservation&) = delete;
  std::byte* base() const { return static_cast<std::byte*>(p_); }

 private:
  void* p_ = nullptr;
};

// The arena budget on device 0: `requested`, or (0) the free memory less 2 GiB of headroom.
// UnsupportedError without a Hopper-or-newer device, ConfigError for a budget over the free memory.
// `desc` gets the device's name, architecture and memory.
size_t checked_budget(size_t requested, std::string& desc);

// The profiler's switches, read once when a backend is made: STRATA_PROFILE=1 turns it on;
// STRATA_PROFILE_SKIP (default 1) leaves out that many steps at the start (the first builds cuDNN plans
// and cuBLASLt heuristics).
struct ProfileOptions {
  bool on = false;
  int skip = 1;
  static ProfileOptions from_env();
};

// Every op is bracketed by events; times are summed per op at each synchronize (collect) and printed
// as a table when the profiler is destroyed.
class OpProfiler {
 public:
  explicit OpProfiler(ProfileOptions o = ProfileOptions::from_env()) : on_(o.on), skip_(o.skip) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;
  bool on() const { return on_; }
  // Brackets one op with events on its stream (only when profiling).
  class Scope {
   public:
    Scope(OpProfiler* p, const char* name, cudaStream_t s);
    ~Scope();

   private:
    OpProfiler* p_;
    const char* name_;
    cudaStream_t s_;
    cudaEvent_t a_ = nullptr, b_ = nullptr;
  };
  void collect();

 private:
  struct Pending {
    std::string name;
    cudaEvent_t a, b;
  };
  bool on_ = false;
  int skip_ = 1;  // collects (steps) left out at the start
  std::vector<Pending> pending_;
  std::map<std::string, std::pair<double, long>> totals_;
};

}  // namespace strata::cuda
