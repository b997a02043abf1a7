// The nccl communicator (kernels/comm_nccl.h): NCCL in non-blocking mode on its own stream, with a
// watchdog that aborts the communicator when a collective outlives the timeout.
#include "kernels/comm_nccl.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "engine/switches.h"
#include "kernels/cuda_check.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_message(ncclResult_t r, ncclComm_t c) {
  std::string s = fmt::format("{} (ncclResult_t {})", ncclGetErrorString(r), int(r));
  if (const char* last = ncclGetLastError(c); last && *last) s += fmt::format(": {}", last);
  if (r == ncclRemoteError) s += "; a remote rank failed or went away";
  if (r == ncclSystemError)
    s += "; a system call, socket or shared-memory operation failed (NCCL_DEBUG=INFO says which)";
  return s;
}

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::u8:
      return ncclUint8;
    default:
      STRATA_THROW(UnsupportedError, fmt::format("nccl communicator: no NCCL type for {}", dtype_name(dt)));
  }
}

struct InFlight {
  CommTicket ticket;
  cudaEvent_t done;
  Clock::time_point issued;
  const char* what;
  size_t bytes;
};

class NcclComm final : public Communicator {
 public:
  NcclComm(Rendezvous& rdv, const NcclOptions& o)
      : rdv_(rdv),
        device_(o.device),
        rank_(o.group_size > 0 ? rdv.rank() % o.group_size : rdv.rank()),
        world_(o.group_size > 0 ? o.group_size : rdv.world()),
        timeout_s_(o.timeout_s) {
    if (o.group_size < 0 || rdv.world() % world_ != 0)
      STRATA_THROW(ConfigError,
                   fmt::format("nccl communicator: groups of {} ranks do not divide the {} ranks", world_, rdv.world()),
                   "communicator", "group_size");
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || o.device < 0 || o.device >= n) {
      cudaGetLastError();
      STRATA_THROW(UnsupportedError,
                   fmt::format("nccl communicator: rank {} wants GPU {} (LOCAL_RANK), but {} GPU{} visible; start at "
                               "most one rank per GPU (CUDA_VISIBLE_DEVICES={})",
                               rank_, o.device, n, n == 1 ? " is" : "s are", switches().visible_devices));
    }
    STRATA_CUDA(cudaSetDevice(device_));
    compute_ = o.compute_stream ? static_cast<cudaStream_t>(o.compute_stream) : cudaStreamLegacy;
    // The highest priority: a collective's kernels start as soon as its inputs are ready, between the
    // backward kernels queued on the compute stream.
    int lo = 0, hi = 0;
    STRATA_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    STRATA_CUDA(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, hi));
    STRATA_CUDA(cudaEventCreateWithFlags(&mark_, cudaEventDisableTiming));

    ncclUniqueId id{};
    try {
      if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId", false);
    } catch (const Error& e) {
      rdv.abort(e.what());
      throw;
    }
    std::vector<std::byte> got;
    if (world_ == rdv.world()) {
      got = rdv.broadcast(std::as_bytes(std::span(id.internal)));
    } else {  // every group's first rank made its id: each rank takes its group's
      std::vector<std::vector<std::byte>> all = rdv.all_gather(std::as_bytes(std::span(id.internal)));
      got = all[size_t(rdv.rank() - rank_)];
    }
    if (got.size() != sizeof(id.internal))
      STRATA_THROW(Error, fmt::format("nccl communicator: rank {} received a {}-byte unique id (expected {})", rank_,
                                      got.size(), sizeof(id.internal)));
    std::memcpy(id.internal, got.data(), sizeof(id.internal));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // every call returns; we poll against the timeout instead of hanging
    check(ncclCommInitRankConfig(&comm_, world_, id, rank_, &cfg), "ncclCommInitRankConfig", true);
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclComm() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (comm_ && aborted_.empty()) {
      // Drain, then finalize; anything past the timeout is aborted (a destructor never throws).
      const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
      bool drained = true;
      for (const InFlight& f : inflight_)
        while (cudaEventQuery(f.done) == cudaErrorNotReady)
          if (Clock::now() > deadline) {
            drained = false;
            break;
          } else {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          }
      ncclResult_t st = drained ? ncclCommFinalize(comm_) : ncclInternalError;
      while (st == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ncclCommGetAsyncError(comm_, &st);
      }
      if (st == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        std::fprintf(stderr, "strata: nccl communicator (rank %d): finalize did not complete; aborting it\n", rank_);
        ncclCommAbort(comm_);
      }
    } else if (comm_) {
      // Already aborted by the watchdog or an error: nothing more to release in NCCL.
    }
    for (const InFlight& f : inflight_) cudaEventDestroy(f.done);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (mark_) cudaEventDestroy(mark_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string_view name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  bool supports(DType dt) const override {
    return dt == DType::f32 || dt == DType::bf16 || dt == DType::f16 || dt == DType::i32 || dt == DType::u8;
  }

  CommTicket all_reduce(Tensor t) override {
    return enqueue(Collective::all_reduce, t, t, 0, t.bytes(), [&] {
      return ncclAllReduce(t.data, t.data, size_t(t.numel()), nccl_type(t.dtype), ncclSum, comm_, stream_);
    });
  }
  CommTicket all_reduce_many(const std::vector<Tensor>& ts) override {
    if (ts.empty()) STRATA_THROW(Error, "all_reduce_many: no tensors");
    for (const Tensor& t : ts) check_collective(*this, Collective::all_reduce, t, t, 0);
    size_t bytes = 0;
    for (const Tensor& t : ts) bytes += t.bytes();
    // One group: NCCL fuses the all-reduces into one launch (per-call latency paid once).
    return enqueue(Collective::all_reduce, ts.front(), ts.front(), 0, bytes, [&] {
      ncclResult_t first = ncclGroupStart();
      for (const Tensor& t : ts) {
        if (first != ncclSuccess) break;
        first = ncclAllReduce(t.data, t.data, size_t(t.numel()), nccl_type(t.dtype), ncclSum, comm_, stream_);
      }
      ncclResult_t end = ncclGroupEnd();
      return first != ncclSuccess ? first : end;
    });
  }
  CommTicket reduce_scatter(Tensor out, Tensor in) override {
    return enqueue(Collective::reduce_scatter, out, in, 0, in.bytes(), [&] {
      return ncclReduceScatter(in.data, out.data, size_t(out.numel()), nccl_type(out.dtype), ncclSum, comm_, stream_);
    });
  }
  CommTicket all_gather(Tensor out, Tensor in) override {
    return enqueue(Collective::all_gather, out, in, 0, out.bytes(), [&] {
      return ncclAllGather(in.data, out.data, size_t(in.numel()), nccl_type(in.dtype), comm_, stream_);
    });
  }
  CommTicket all_to_all(Tensor out, Tensor in) override {
    return enqueue(Collective::all_to_all, out, in, 0, in.bytes(), [&] {
      // Grouped point-to-point (ncclAlltoAll is only in NCCL >= 2.28).
      const size_t chunk = size_t(in.numel() / world_), step = chunk * dtype_size(in.dtype);
      const ncclDataType_t dt = nccl_type(in.dtype);
      ncclResult_t first = ncclGroupStart();
      for (int r = 0; r < world_ && first == ncclSuccess; ++r) {
        ncclResult_t a = ncclSend(static_cast<const char*>(in.data) + r * step, chunk, dt, r, comm_, stream_);
        ncclResult_t b = ncclRecv(static_cast<char*>(out.data) + r * step, chunk, dt, r, comm_, stream_);
        if (a != ncclSuccess) first = a;
        if (b != ncclSuccess && first == ncclSuccess) first = b;
      }
      ncclResult_t end = ncclGroupEnd();
      return first != ncclSuccess ? first : end;
    });
  }
  CommTicket broadcast(Tensor t, int root) override {
    return enqueue(Collective::broadcast, t, t, root, t.bytes(), [&] {
      return ncclBroadcast(t.data, t.data, size_t(t.numel()), nccl_type(t.dtype), root, comm_, stream_);
    });
  }
  CommTicket broadcast_many(const std::vector<Tensor>& ts, const std::vector<int>& roots) override {
    if (ts.empty() || roots.size() != ts.size())
      STRATA_THROW(Error, fmt::format("broadcast_many: {} tensors, {} roots", ts.size(), roots.size()));
    size_t bytes = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      check_collective(*this, Collective::broadcast, ts[i], ts[i], roots[i]);
      bytes += ts[i].bytes();
    }
    // One group: the broadcasts from their several roots in one launch (per-call latency paid once).
    return enqueue(Collective::broadcast, ts.front(), ts.front(), roots.front(), bytes, [&] {
      ncclResult_t first = ncclGroupStart();
      for (size_t i = 0; i < ts.size() && first == ncclSuccess; ++i)
        first = ncclBroadcast(ts[i].data, ts[i].data, size_t(ts[i].numel()), nccl_type(ts[i].dtype), roots[i], comm_,
                              stream_);
      ncclResult_t end = ncclGroupEnd();
      return first != ncclSuccess ? first : end;
    });
  }
  CommTicket reduce(Tensor t, int root) override {
    return enqueue(Collective::reduce, t, t, root, t.bytes(), [&] {
      return ncclReduce(t.data, t.data, size_t(t.numel()), nccl_type(t.dtype), ncclSum, root, comm_, stream_);
    });
  }
  CommTicket reduce_many(const std::vector<Tensor>& ts, const std::vector<int>& roots) override {
    if (ts.empty() || roots.size() != ts.size())
      STRATA_THROW(Error, fmt::format("reduce_many: {} tensors, {} roots", ts.size(), roots.size()));
    size_t bytes = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      check_collective(*this, Collective::reduce, ts[i], ts[i], roots[i]);
      bytes += ts[i].bytes();
    }
    // One group: the reduces to their several roots in one launch (per-call latency paid once).
    return enqueue(Collective::reduce, ts.front(), ts.front(), roots.front(), bytes, [&] {
      ncclResult_t first = ncclGroupStart();
      for (size_t i = 0; i < ts.size() && first == ncclSuccess; ++i)
        first = ncclReduce(ts[i].data, ts[i].data, size_t(ts[i].numel()), nccl_type(ts[i].dtype), ncclSum, roots[i],
                           comm_, stream_);
      ncclResult_t end = ncclGroupEnd();
      return first != ncclSuccess ? first : end;
    });
  }
  void barrier() override {
    CommTicket last;
    {
      std::lock_guard lk(mu_);
      last = issued_;
    }
    wait_host(last);
    rdv_.barrier();
  }

  bool done(CommTicket t) override {
    std::lock_guard lk(mu_);
    throw_if_aborted();
    retire();
    return t <= completed_;
  }
  void wait_host(CommTicket t) override {
    const auto spin_until = Clock::now() + kSpin;
    for (;;) {
      {
        std::lock_guard lk(mu_);
        throw_if_aborted();  // the watchdog aborts a collective past the timeout
        retire();
        if (t <= completed_) return;
      }
      pause(spin_until);
    }
  }
  void wait_compute(CommTicket t) override {
    std::lock_guard lk(mu_);
    throw_if_aborted();
    retire();
    if (t <= completed_ || inflight_.empty()) return;
    const size_t i = size_t(t - inflight_.front().ticket);
    if (i >= inflight_.size()) STRATA_THROW(Error, fmt::format("nccl communicator: unknown ticket {}", t));
    STRATA_CUDA(cudaStreamWaitEvent(compute_, inflight_[i].done, 0));
  }

 private:
  template <class F>
  CommTicket enqueue(Collective op, const Tensor& out, const Tensor& in, int root, size_t bytes, F&& call) {
    check_collective(*this, op, out, in, root);
    std::lock_guard lk(mu_);
    throw_if_aborted();
    STRATA_CUDA(cudaSetDevice(device_));
    // After everything queued on compute so far: the collective reads finished data.
    STRATA_CUDA(cudaEventRecord(mark_, compute_));
    STRATA_CUDA(cudaStreamWaitEvent(stream_, mark_, 0));
    check(call(), collective_name(op), true);
    cudaEvent_t ev = nullptr;
    if (!free_events_.empty()) {
      ev = free_events_.back();
      free_events_.pop_back();
    } else {
      STRATA_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    }
    STRATA_CUDA(cudaEventRecord(ev, stream_));
    inflight_.push_back(InFlight{++issued_, ev, Clock::now(), collective_name(op), bytes});
    return issued_;
  }

  // An NCCL call's result: ncclInProgress is polled until it settles or the timeout passes (then the
  // communicator is aborted). Failures throw; those that leave the communicator broken abort it first.
  void check(ncclResult_t r, const char* what, bool has_comm) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    const auto spin_until = Clock::now() + kSpin;
    while (r == ncclInProgress && has_comm) {
      if (Clock::now() > deadline) {
        abort_locked(
            fmt::format("{} on rank {} (GPU {}) did not complete within {} s: a rank did not join or stopped "
                        "(is every rank running? NCCL_DEBUG=INFO shows the transports)",
                        what, rank_, device_, timeout_s_));
        throw_if_aborted();
      }
      pause(spin_until);
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r == ncclSuccess) return;
    const std::string msg = fmt::format("nccl communicator: {} failed on rank {} of {} (GPU {}): {}", what, rank_,
                                        world_, device_, nccl_message(r, has_comm ? comm_ : nullptr));
    if (has_comm && r != ncclInvalidArgument && r != ncclInvalidUsage) {
      abort_locked(msg);
      throw_if_aborted();
    }
    STRATA_THROW(Error, msg);
  }

  // A poll's pause: yield while the first kSpin of a wait lasts (an enqueue that reports
  // ncclInProgress usually settles within microseconds, and a 100 us sleep per collective was paid
  // on every one of a step's ~150 gradient all-reduces), then sleep 100 us between polls.
  static constexpr auto kSpin = std::chrono::milliseconds(2);
  static void pause(Clock::time_point spin_until) {
    if (Clock::now() < spin_until)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

  void abort_locked(const std::string& why) {
    if (!aborted_.empty()) return;
    aborted_ = why;
    if (comm_) ncclCommAbort(comm_);  // also ends kernels stuck waiting for a peer
  }
  void throw_if_aborted() const {
    if (!aborted_.empty())
      STRATA_THROW(Error, fmt::format("nccl communicator (rank {} of {}, GPU {}) was aborted: {}", rank_, world_,
                                      device_, aborted_));
  }
  // Moves finished collectives out of flight (in issue order: one stream).
  void retire() {
    while (!inflight_.empty() && cudaEventQuery(inflight_.front().done) == cudaSuccess) {
      completed_ = inflight_.front().ticket;
      free_events_.push_back(inflight_.front().done);
      inflight_.pop_front();
    }
  }

  void watch() {
    std::unique_lock lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::milliseconds(100));
      if (stop_ || !aborted_.empty() || !comm_) continue;
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      if (st != ncclSuccess && st != ncclInProgress) {
        abort_locked(fmt::format("an asynchronous NCCL error on rank {}: {}", rank_, nccl_message(st, comm_)));
        continue;
      }
      retire();
      if (inflight_.empty()) continue;
      const InFlight& f = inflight_.front();
      const double age = std::chrono::duration<double>(Clock::now() - f.issued).count();
      if (age > timeout_s_)
        abort_locked(
            fmt::format("{} #{} ({} bytes) has not finished {:.0f} s after it was issued (timeout {} s): a "
                        "peer rank died, hangs, or called a different collective",
                        f.what, f.ticket, f.bytes, age, timeout_s_));
    }
  }

  Rendezvous& rdv_;
  int device_, rank_, world_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr, compute_ = nullptr;
  cudaEvent_t mark_ = nullptr;
  std::mutex mu_;  // every NCCL call and the in-flight list (the watchdog runs beside the caller)
  std::condition_variable cv_;
  std::deque<InFlight> inflight_;
  std::vector<cudaEvent_t> free_events_;
  CommTicket issued_ = 0, completed_ = 0;
  std::string aborted_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Rendezvous& rdv, const NcclOptions& o) {
  return std::make_unique<NcclComm>(rdv, o);
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

}  // namespace strata
