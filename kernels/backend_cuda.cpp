// The cuda backend: one device arena (a single reservation carved by our allocator), one compute
// stream, cuBLASLt GEMMs, cuDNN (or flash fallback) attention and the hand-written kernels of
// kernels/ops_cuda.h. bf16 activations and weights, fp32 master weights and moments (or lower, per the
// recipe); parameter gradients fp32, or bf16 with gradients: bf16 (each write rounds once: the GEMMs
// write bf16 directly, the atomics-summing kernels through the fp32 scratch of engine/op_scratch.h).
// Host/disk tier transfers run on a separate copy stream, handed off through events.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/master_split.h"
#include "engine/op_scratch.h"
#include "kernels/attention_cuda.h"
#include "kernels/cuda_check.h"
#include "kernels/gemm_cuda.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"
#include "kernels/resources_cuda.h"

namespace strata {

namespace {

using cuda::bf16;
using cuda::checked_budget;
using cuda::CudaHostMemory;
using cuda::DeviceReservation;
using cuda::Event;
using cuda::make_event;
using cuda::make_stream;
using cuda::OpProfiler;
using cuda::Stream;

bf16* B(const Tensor& t) {
  if (!t.defined()) return nullptr;
  STRATA_CHECK(t.dtype == DType::bf16, "cuda backend: expected a bf16 tensor");
  return static_cast<bf16*>(t.data);
}
float* F(const Tensor& t) {
  return t.defined() ? t.f32() : nullptr;
}
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(size_t budget)
      : prof_data_(),
        budget_(checked_budget(budget, desc_)),
        mem_(budget_),
        arena_("device", budget_, mem_.base()),
        gemm_ws_(arena_, gemm_scratch()),
        gemm_(gemm_ws_[0].data, cuda::Gemm::kWorkspaceBytes) {}

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_.get());
    for (const Stream& c : copy_streams_) cudaStreamSynchronize(c.get());
  }

  std::string_view name() const override { return "cuda"; }
  std::string device_name() override { return desc_; }
  Arena& arena() override { return arena_; }
  // adamw and grad_norm: the parameter gradients' dtype (f32, or bf16 with gradients: bf16).
  bool supports(OpKind op, DType dt) const override {
    if (op == OpKind::adamw || op == OpKind::grad_norm) return dt == DType::f32 || dt == DType::bf16;
    return dt == DType::bf16;
  }
  DType compute_dtype() const override { return DType::bf16; }
  size_t device_used_bytes() override {
    size_t f = 0, t = 0;
    STRATA_CUDA(cudaMemGetInfo(&f, &t));
    return t - f;
  }
  // Timing events (make_event's do not time), reused step after step.
  void time_mark() override {
    if (marks_used_ == time_marks_.size()) {
      cudaEvent_t e = nullptr;
      STRATA_CUDA(cudaEventCreate(&e));
      time_marks_.emplace_back(e);
    }
    STRATA_CUDA(cudaEventRecord(time_marks_[marks_used_++].get(), s()));
  }
  std::vector<double> time_marks_s() override {
    std::vector<double> out;
    if (marks_used_ == 0) return out;
    STRATA_CUDA(cudaEventSynchronize(time_marks_[marks_used_ - 1].get()));
    for (size_t i = 0; i < marks_used_; ++i) {
      float ms = 0;
      STRATA_CUDA(cudaEventElapsedTime(&ms, time_marks_[0].get(), time_marks_[i].get()));
      out.push_back(double(ms) / 1e3);
    }
    marks_used_ = 0;
    return out;
  }
  bool steps_may_overlap() const override { return !prof_data_.on(); }
  void synchronize() override {
    STRATA_CUDA(cudaStreamSynchronize(s()));
    if (prof_data_.on()) prof_data_.collect();
  }

  // Host transfers are step-boundary operations: they wait for the stream.
  void upload_f32(Tensor dst, const float* src) override {
    if (dst.dtype == DType::f32) return copy_in(dst.data, src, dst.bytes());
    std::vector<uint16_t> h(size_t(dst.numel()));
    convert_from_f32(h.data(), dst.dtype, src, h.size());
    copy_in(dst.data, h.data(), dst.bytes());
  }
  void download_f32(float* dst, Tensor src) override {
    if (src.dtype == DType::f32) return copy_out(dst, src.data, src.bytes());
    std::vector<uint16_t> h(size_t(src.numel()));
    copy_out(h.data(), src.data, src.bytes());
    convert_to_f32(dst, h.data(), src.dtype, h.size());
  }
  void upload_i32(Tensor dst, const int32_t* src) override { copy_in(dst.data, src, dst.bytes()); }
  // Into a pinned staging block on the compute stream; the host waits on an event recorded after the last copy,
  // not on the stream.
  void download_f32_queued(float* dst, Tensor src) override {
    STRATA_CHECK(src.defined() && src.contiguous(), "download_f32_queued: needs a defined contiguous tensor");
    const size_t bytes = src.bytes(), at = (read_used_ + 15) & ~size_t(15);
    if (bytes > kReadStageBytes) {  // not a small tensor: read it now
      wait_queued_downloads();
      return download_f32(dst, src);
    }
    if (at + bytes > kReadStageBytes) return wait_queued_downloads(), download_f32_queued(dst, src);
    if (!read_stage_) {
      void* p = nullptr;
      STRATA_CUDA(cudaHostAlloc(&p, kReadStageBytes, cudaHostAllocDefault));
      read_stage_.reset(static_cast<std::byte*>(p));
    }
    STRATA_CUDA(cudaMemcpyAsync(read_stage_.get() + at, src.data, bytes, cudaMemcpyDeviceToHost, s()));
    STRATA_CUDA(cudaEventRecord(read_done_.get(), s()));
    queued_reads_.push_back({dst, at, src.dtype, size_t(src.numel())});
    read_used_ = at + bytes;
  }
  void wait_queued_downloads() override {
    if (queued_reads_.empty()) return;
    const std::vector<QueuedRead> reads = std::move(queued_reads_);
    queued_reads_.clear();
    read_used_ = 0;
    STRATA_CUDA(cudaEventSynchronize(read_done_.get()));
    for (const QueuedRead& r : reads) {
      const std::byte* at = read_stage_.get() + r.at;
      if (r.dtype == DType::f32)
        std::memcpy(r.dst, at, r.n * sizeof(float));
      else
        convert_to_f32(r.dst, at, r.dtype, r.n);
    }
  }
  DType master_dtype() const override { return DType::i16; }
  void upload_master(Tensor lo, Tensor hi, const float* src) override {
    check_split_master(lo, hi);
    std::vector<uint16_t> h(size_t(hi.numel()));
    std::vector<int16_t> l(h.size());
    master_split(src, h.data(), l.data(), h.size());
    copy_in(hi.data, h.data(), hi.bytes());
    copy_in(lo.data, l.data(), lo.bytes());
  }
  void download_master(float* dst, Tensor lo, Tensor hi) override {
    check_split_master(lo, hi);
    std::vector<uint16_t> h(size_t(hi.numel()));
    std::vector<int16_t> l(h.size());
    copy_out(h.data(), hi.data, hi.bytes());
    copy_out(l.data(), lo.data, lo.bytes());
    master_join(dst, h.data(), l.data(), h.size());
  }
  void zero(Tensor t) override {
    OpProfiler::Scope prof_(&prof_data_, "zero", s());
    STRATA_CUDA(cudaMemsetAsync(t.data, 0, t.bytes(), s()));
  }
  void fill(Tensor t, float v) override {
    OpProfiler::Scope prof_(&prof_data_, "fill", s());
    if (t.dtype == DType::f32)
      cuda::fill_f32(F(t), v, size_t(t.numel()), s());
    else
      cuda::fill_bf16(B(t), v, size_t(t.numel()), s());
  }

  void cast(Tensor dst, Tensor src) override {
    check_cast(dst, src);
    OpProfiler::Scope prof_(&prof_data_, "cast", s());
    if (src.dtype == DType::f32)
      cuda::f32_to_bf16(B(dst), F(src), size_t(src.numel()), s());
    else
      cuda::bf16_to_f32(F(dst), B(src), size_t(src.numel()), s());
  }

  // --- tier transfers. Each copy is ordered after everything queued on the compute stream so
  // far (an event recorded there, waited on by the copy stream), so a source still being written
  // or a destination block still being read by queued ops is safe. One copy stream per CopyLane:
  // a lane's copies complete in issue order, so a finished ticket means every earlier ticket of
  // its lane finished too.
  std::unique_ptr<HostReservation> reserve_host(size_t bytes) override {
    return std::make_unique<CudaHostMemory>(bytes);
  }
  CopyTicket copy_to_host_async(void* host_dst, Tensor src, CopyLane lane) override {
    STRATA_CHECK(src.defined() && src.contiguous() && (host_dst || src.bytes() == 0),
                 "copy_to_host_async: needs a defined contiguous tensor and a host buffer");
    return enqueue_copy(host_dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, lane);
  }
  CopyTicket copy_to_device_async(Tensor dst, const void* host_src, CopyLane lane) override {
    STRATA_CHECK(dst.defined() && dst.contiguous() && (host_src || dst.bytes() == 0),
                 "copy_to_device_async: needs a defined contiguous tensor and a host buffer");
    return enqueue_copy(dst.data, host_src, dst.bytes(), cudaMemcpyHostToDevice, lane);
  }
  bool copy_done(CopyTicket t) override {
    auto it = in_flight_.find(t);
    if (it == in_flight_.end()) return true;  // finished earlier, or never issued
    cudaError_t e = cudaEventQuery(it->second.done.get());
    if (e == cudaErrorNotReady) {
      if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();  // not an error: keep launch checks clean
      return false;
    }
    STRATA_CUDA(e);
    retire_through(t);
    return true;
  }
  void copy_wait_host(CopyTicket t) override {
    auto it = in_flight_.find(t);
    if (it == in_flight_.end()) return;
    STRATA_CUDA(cudaEventSynchronize(it->second.done.get()));
    retire_through(t);
  }
  void copy_wait_compute(CopyTicket t) override {
    // The ticket stays in flight: the host has not seen it finish, so copy_done must still poll.
    auto it = in_flight_.find(t);
    if (it != in_flight_.end()) STRATA_CUDA(cudaStreamWaitEvent(s(), it->second.done.get(), 0));
  }
  void* native_stream() override { return s(); }
  void copy_wait_lane(CopyLane lane, CopyTicket t) override {
    auto it = in_flight_.find(t);
    if (it != in_flight_.end())
      STRATA_CUDA(cudaStreamWaitEvent(copy_streams_[size_t(lane)].get(), it->second.done.get(), 0));
  }

  // Every op (engine/op_table.h STRATA_OPS): the scratch of the op's description, then its implementation beside
  // its kernels (kernels/op_dispatch.h).
  void run(OpKind k, const OpCall& c) override {
    using Impl = void (*)(const OpCall&, const CudaOpContext&);
#define STRATA_CUDA_IMPL(op) op##_cuda,
    static const Impl impls[] = {STRATA_OPS(STRATA_CUDA_IMPL)};
#undef STRATA_CUDA_IMPL
    const OpInfo& info = op_info(k);
    const OpCost cost = c.backward ? info.bwd_cost : info.fwd_cost;
    if (cost && cost(c).n == 0) return;  // nothing to run (a bias without db)
    const char* label = info.form_labels[c.form]       ? info.form_labels[c.form]
                        : c.backward && info.bwd_label ? info.bwd_label
                        : info.fwd_label               ? info.fwd_label
                                                       : info.name;
    OpProfiler::Scope prof_(&prof_data_, label, s());
    Env env{attn_};
    const ScratchSet sc = info.scratch ? ScratchSet(arena_, info.scratch(c, env)) : ScratchSet();
    impls[size_t(k)](c, CudaOpContext{s(), sc, gemm_, attn_, *this});
  }

 private:
  // What the ops' scratch descriptions ask: the cuDNN attention workspace of the plan this backend builds.
  struct Env final : OpEnv {
    explicit Env(cuda::Attention& a) : attn(a) {}
    size_t attention_workspace_bytes(int b, int t, int hq, int hkv, int d, bool backward, bool accumulate) override {
      return attn.workspace_bytes(cuda::AttnShape{b, t, hq, hkv, d}, backward, accumulate);
    }
    cuda::Attention& attn;
  };
  cudaStream_t s() const {
    return stream_.get();
  }
  CopyTicket enqueue_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, CopyLane lane) {
    reap_finished();
    const cudaStream_t cs = copy_streams_[size_t(lane)].get();
    STRATA_CUDA(cudaEventRecord(compute_mark_.get(), s()));
    STRATA_CUDA(cudaStreamWaitEvent(cs, compute_mark_.get(), 0));
    STRATA_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, cs));
    Event done = take_event();
    STRATA_CUDA(cudaEventRecord(done.get(), cs));
    const CopyTicket t = ++last_ticket_;
    in_flight_.emplace(t, InFlight{std::move(done), lane});
    return t;
  }
  // Copies of one lane finish in issue order: ticket t done retires every ticket of its lane up to t.
  void retire_through(CopyTicket t) {
    const CopyLane lane = in_flight_.at(t).lane;
    for (auto it = in_flight_.begin(); it != in_flight_.end() && it->first <= t;) {
      if (it->second.lane != lane) {
        ++it;
        continue;
      }
      spare_events_.push_back(std::move(it->second.done));
      it = in_flight_.erase(it);
    }
  }
  // Keeps the in-flight map as small as the copies actually in flight, without blocking: each
  // lane's oldest copies, while they are done.
  void reap_finished() {
    for (CopyLane lane : {CopyLane::main, CopyLane::second})
      for (;;) {
        auto it = in_flight_.begin();
        while (it != in_flight_.end() && it->second.lane != lane) ++it;
        if (it == in_flight_.end()) break;
        cudaError_t e = cudaEventQuery(it->second.done.get());
        if (e == cudaErrorNotReady) {
          if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
          break;
        }
        STRATA_CUDA(e);
        retire_through(it->first);
      }
  }
  Event take_event() {
    if (spare_events_.empty()) return make_event();
    Event e = std::move(spare_events_.back());
    spare_events_.pop_back();
    return e;
  }
  void copy_in(void* dst, const void* src, size_t bytes) {
    STRATA_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s()));
    STRATA_CUDA(cudaStreamSynchronize(s()));  // the host buffer may die after return
  }
  void copy_out(void* dst, const void* src, size_t bytes) {
    STRATA_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s()));
    STRATA_CUDA(cudaStreamSynchronize(s()));
  }

  OpProfiler prof_data_;  // first member: destroyed last, after the stream drained
  std::string desc_;
  size_t budget_;
  DeviceReservation mem_;
  Arena arena_;
  Stream stream_ = make_stream();                            // compute: every op
  Stream copy_streams_[2] = {make_stream(), make_stream()};  // tier transfers only, per CopyLane
  Event compute_mark_ = make_event();  // "everything queued on compute so far", re-recorded per copy
  struct InFlight {
    Event done;  // recorded on its lane's stream after the copy
    CopyLane lane;
  };
  std::map<CopyTicket, InFlight> in_flight_;
  std::vector<Event> spare_events_;  // completion events to reuse
  std::vector<Event> time_marks_;    // time_mark's events; the first marks_used_ are queued
  // download_f32_queued: a pinned block the copies land in, the event after the last, and where each value goes.
  static constexpr size_t kReadStageBytes = 4096;
  struct QueuedRead {
    float* dst;
    size_t at;
    DType dtype;
    size_t n;
  };
  struct FreeHost {
    void operator()(std::byte* p) const { cudaFreeHost(p); }
  };
  std::unique_ptr<std::byte, FreeHost> read_stage_;  // pinned (cudaHostAlloc; small, so not page-aligned)
  Event read_done_ = make_event();
  std::vector<QueuedRead> queued_reads_;
  size_t read_used_ = 0;
  size_t marks_used_ = 0;
  CopyTicket last_ticket_ = 0;
  ScratchSet gemm_ws_;
  cuda::Gemm gemm_;
  cuda::Attention attn_;
};

}  // namespace

bool cuda_device_present() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::unique_ptr<Backend> make_cuda_backend(size_t budget) {
  return std::make_unique<CudaBackend>(budget);
}

}  // namespace strata
