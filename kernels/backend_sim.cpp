// The sim backend (see backend_sim.h). Each op: the cost of its kernels onto the model clock,
// then (mirror = cuda) the same arena allocations kernels/backend_cuda.cpp makes in that op,
// in the same order, with the same tags, freed in the same (reverse-declaration) order.
#include "engine/backend_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <vector>

#include "engine/op_scratch.h"
#include "kernels/attention_workspace.h"
#include "kernels/tune_costs.h"

namespace strata {

namespace {

constexpr size_t kUnbounded = size_t(1) << 50;

double B(const Tensor& t) {
  return t.defined() ? double(t.bytes()) : 0.0;
}

// Host memory that does not exist: the slot store and the pager only compute offsets from it.
class SimHostReservation final : public HostReservation {
 public:
  explicit SimHostReservation(size_t bytes) : bytes_(bytes) {}
  std::byte* base() const override { return nullptr; }
  size_t bytes() const override { return bytes_; }
  bool pinned() const override { return true; }  // the cuda backend pins its host pool

 private:
  size_t bytes_;
};

class SimBackendImpl;

// The disk tier on the sim (backend_sim.h): no file is created and no byte moves. Each ticket is a
// request on the backend's one disk queue; it checks requests and reports failures (the test hook)
// with UringFile's messages, so the slot store sees the same file.
class SimDiskFile final : public DiskFile {
 public:
  SimDiskFile(SimBackendImpl& be, const std::string& dir, size_t capacity_bytes);
  const std::string& path() const override { return path_; }
  bool moves_bytes() const override { return false; }
  Ticket write_async(size_t offset, const void*, size_t bytes) override { return submit(true, offset, bytes); }
  Ticket read_async(size_t offset, void*, size_t bytes) override { return submit(false, offset, bytes); }
  bool done(Ticket t) override;
  void wait(Ticket t) override;
  void wait_all() override;
  void inject_write_failure(int nth, int err) override;
  void inject_read_failure(int nth, int err) override;

 private:
  static constexpr size_t kPieceBytes = size_t(1) << 20;  // UringFile's request size: the hook counts these
  struct Request {
    double end_s = 0;  // model time the request completes
    size_t offset = 0;
    bool write = false;
    int err = 0;  // injected failure, reported once the request has ended
    bool reported = false;
  };
  Ticket submit(bool write, size_t offset, size_t bytes);
  Request& at(Ticket t);
  bool finished(Ticket t);  // true once ended; IoError if it failed

  SimBackendImpl& be_;
  std::string path_;
  size_t capacity_;
  std::vector<Request> requests_;  // per ticket (1-based)
  long inject_countdown_ = 0, inject_read_countdown_ = 0;
  int inject_err_ = 0, inject_read_err_ = 0;
};

class SimBackendImpl final : public SimBackend {
 public:
  explicit SimBackendImpl(const SimOptions& o)
      : opt_(o), cost_(o.profile), arena_("device", o.budget ? o.budget : kUnbounded, nullptr) {
    arena_.set_clock([this] { return now_; });
    arena_.set_logging(o.log_events);
    if (cuda()) gemm_ws_ = ScratchSet(arena_, gemm_scratch());
    desc_ = fmt::format("sim ({} profile, mirrors the {} backend)", o.profile.name, sim_mirror_name(o.mirror));
  }

  // --- SimBackend
  double now_s() const override { return now_; }
  double mark_clock_s() const override { return now_; }
  const SimTimes& times() const override { return times_; }
  double tuning_s() const override { return tuning_s_; }
  void reset_times() override {
    unrepeatable();
    times_ = {};
    backward_ended_ = false;
  }
  void backward_ended() override {
    unrepeatable();
    backward_ended_ = true;
    backward_end_s_ = now_;
  }
  SimMirror mirror() const override { return opt_.mirror; }
  const CostModel& cost() const override { return cost_; }
  void slow_compute(double s) override {
    unrepeatable();
    settle();
    now_ += s;
    times_.comm_contention_s += s;
  }
  void wait_for_event(double t_s, bool host) override {
    unrepeatable();
    if (!host) {
      comm_after_ = std::max(comm_after_, t_s);
      return;
    }
    settle();
    wait_until(t_s, times_.comm_wait_s);
  }

  // --- Backend
  std::string_view name() const override { return "sim"; }
  std::string device_name() override { return desc_; }
  Arena& arena() override { return arena_; }
  bool supports(OpKind op, DType dt) const override {
    // adamw and grad_norm: the parameter gradients' dtype (f32, or bf16 with gradients: bf16).
    if (op == OpKind::adamw || op == OpKind::grad_norm) return dt == DType::f32 || dt == DType::bf16;
    return dt == (cuda() ? DType::bf16 : DType::f32);
  }
  DType compute_dtype() const override { return cuda() ? DType::bf16 : DType::f32; }
  // What cudaMemGetInfo would say: the context plus the arena's single reservation (cuda only).
  size_t device_used_bytes() override {
    if (!cuda()) return 0;
    return opt_.profile.context_bytes + (opt_.budget ? arena_.budget() : arena_.high_water());
  }

  // Repeats: one run of the block recorded (rec_), then applied again (apply, the Recording below).
  bool begin_repeat() override {
    rec_ = {};
    if (arena_.logging()) return false;  // the event log wants every allocation
    rec_.on = rec_.clean = true;
    rec_.arena = arena_.mark();
    return true;
  }
  bool end_repeat(int64_t times) override {
    Recording r = std::move(rec_);
    rec_ = {};
    if (!r.on || !r.clean || !arena_.unchanged_since(r.arena)) return false;
    for (int64_t i = 0; i < times; ++i)
      for (const Charge& c : r.charges) apply(c);
    times_.repeats += times;
    return true;
  }

  void synchronize() override {
    unrepeatable();
    settle();
    wait_until(std::max(copy_free_[0], copy_free_[1]), times_.copy_wait_s);
  }

  // --- host tier and weight pager transfers (no bytes move).
  std::unique_ptr<HostReservation> reserve_host(size_t bytes) override {
    return std::make_unique<SimHostReservation>(bytes);
  }
  CopyTicket copy_to_host_async(void*, Tensor src, CopyLane lane) override {
    times_.d2h_bytes += src.bytes();
    return issue(cost_.d2h(B(src)), lane, true);
  }
  CopyTicket copy_to_device_async(Tensor dst, const void*, CopyLane lane) override {
    times_.h2d_bytes += dst.bytes();
    return issue(cost_.h2d(B(dst)), lane, false);
  }
  bool copy_done(CopyTicket t) override { return now_ >= copy_end(t); }
  void copy_wait_host(CopyTicket t) override {
    unrepeatable();
    settle();
    wait_until(copy_end(t), times_.copy_wait_s);
  }
  // Read at the next compute op (settle): a copy issued before it can still stretch this one (issue).
  void copy_wait_compute(CopyTicket t) override {
    unrepeatable();
    compute_waits_.push_back(t);
  }
  void copy_wait_lane(CopyLane lane, CopyTicket t) override {
    unrepeatable();
    if (cuda()) copy_free_[size_t(lane)] = std::max(copy_free_[size_t(lane)], copy_end(t));
  }

  // --- the disk tier (SimDiskFile over one serial disk queue).
  std::unique_ptr<DiskFile> open_disk_file(const std::string& dir, size_t bytes) override {
    cost_.require_disk();  // ConfigError naming the profile and the missing field
    return std::make_unique<SimDiskFile>(*this, dir, bytes);
  }
  // Queues one request; returns when it ends: after the previous one, and no earlier than now (its issue).
  double disk_request(bool write, size_t bytes) {
    unrepeatable();
    const double s = write ? cost_.disk_write(double(bytes)) : cost_.disk_read(double(bytes));
    (write ? times_.disk_write_bytes : times_.disk_read_bytes) += bytes;
    times_.disk_busy_s += s;
    disk_free_ = std::max(disk_free_, now_) + s;
    return disk_free_;
  }
  // The host blocks until `end` (copy_wait_host's mechanism; the stall counts as disk wait).
  void disk_wait(double end) {
    unrepeatable();
    settle();
    wait_until(end, times_.disk_wait_s);
  }

  bool holds_values() const override { return false; }
  void upload_f32(Tensor dst, const float*) override { copy(cost_.h2d(B(dst))); }
  void download_f32(float* dst, Tensor src) override {
    std::memset(dst, 0, size_t(src.numel()) * sizeof(float));  // no data: the loss reads as 0
    copy(cost_.d2h(B(src)));
  }
  void upload_i32(Tensor dst, const int32_t*) override { copy(cost_.h2d(B(dst))); }
  DType master_dtype() const override { return cuda() ? DType::i16 : DType::f32; }
  void upload_master(Tensor lo, Tensor hi, const float*) override { copy(cost_.h2d(B(lo) + B(hi))); }
  void download_master(float* dst, Tensor lo, Tensor hi) override {
    std::memset(dst, 0, size_t(lo.numel()) * sizeof(float));
    copy(cost_.d2h(B(lo) + B(hi)));
  }
  void zero(Tensor t) override { memset(cost_.memory(B(t))); }
  void fill(Tensor t, float value) override {
    if (t.numel() == 1) unrepeatable();
    // The tape seeds backward with fill(grad:loss, seed): the phase mark for recompute accounting.
    if (t.numel() == 1) {
      if (times_.backward_start_s < 0)
        times_.backward_start_s = now_;
      else if (backward_ended_)  // the next micro-batch's backward: its forward ran since the last one ended
        times_.between_backwards_s += now_ - backward_end_s_;
      backward_ended_ = false;
    }
    memset(cost_.memory(B(t)));
  }

  void cast(Tensor dst, Tensor src) override {
    check_cast(dst, src);
    memset(cost_.memory(B(dst) + B(src)));
  }

  // The table-dispatched ops: their scratch from the op table, then their price, or their memory-bound cost (one
  // kernel per entry).
  void run(OpKind k, const OpCall& c) override {
    const OpInfo& info = op_info(k);
    Pricer p(*this);
    const ScratchSet sc = take(info.scratch ? info.scratch(c, p) : ScratchList{});
    if (info.price) {
      const OpTime t = info.price(c, p);
      return charge(k, t.s, t.kernels, t.fwd);
    }
    const OpKernelBytes kb = (c.backward ? info.bwd_cost : info.fwd_cost)(c);
    if (kb.n == 0) return;
    double t = 0;
    for (int i = 0; i < kb.n; ++i) t += cost_.memory(kb.bytes[size_t(i)]);
    charge(k, t, kb.n, !c.backward);
  }

 private:
  bool cuda() const { return opt_.mirror == SimMirror::cuda; }
  // What an op's price reads of this backend (engine/op_table.h OpSim).
  class Pricer final : public OpSim {
   public:
    explicit Pricer(SimBackendImpl& b) : b_(b) {}
    const CostModel& cost() const override { return b_.cost_; }
    bool mirrors_cuda() const override { return b_.cuda(); }
    size_t attention_workspace_bytes(int b, int t, int hq, int hkv, int d, bool backward, bool accumulate) override {
      return strata::attention_workspace_bytes(b, t, hq, hkv, d, backward, b_.attn_params(), accumulate);
    }
    bool attention_uses_cudnn(int head_dim) const override { return strata::attention_uses_cudnn(head_dim); }
    void zero_first(const Tensor& t) override { b_.zero(t); }
    void optimizer_starts() override { b_.mark_optimizer(); }
    // cuBLASLt times its top candidates of each problem once (gemm_cuda.cpp; a problem first met accumulating
    // is tuned at its first overwriting call, so every problem counts once here too).
    void gemm_problem(double m, double n, double k, double bytes, int layout, bool fp8) override {
      if (!b_.cuda()) return;
      const CostModel& c = b_.cost_;
      b_.tuned_once({double(fp8), double(layout), m, n, k, 0}, [&] {
        return (fp8 ? c.gemm_fp8(m, n, k, bytes) : c.gemm(m, n, k, bytes)) * kGemmTuneCandidates * (1 + kGemmTuneReps);
      });
    }
    // cuDNN times each eligible plan of a shape once, past kAttentionTuneMaxT tokens on the stand-in shape, which
    // every longer shape of those heads shares (attention_cudnn_cuda.cpp); cuDNN's own plan alone is not timed.
    // A shape's first call builds its plans, a long shape's then its stand-in's (attention_plan_build_s, _stand_in_).
    void attention_problem(int b, int t, int hq, int hkv, int d, bool backward) override {
      if (!b_.cuda() || !strata::attention_uses_cudnn(d)) return;
      const DeviceProfile& p = b_.opt_.profile;
      b_.tuned_once({4, double(b), double(t), double(hq), double(hkv), double(d)},
                    [&] { return p.attention_plan_build_s; });
      if (attention_tunes_by_stand_in(t)) {
        b = 1;
        t = kAttentionTuneMaxT;
        b_.tuned_once({5, double(b), double(t), double(hq), double(hkv), double(d)},
                      [&] { return p.attention_stand_in_build_s; });
      }
      const int candidates = backward ? p.attention_tune_candidates_bwd : p.attention_tune_candidates_fwd;
      if (candidates < 2) return;
      b_.tuned_once({2.0 + double(backward), double(b), double(t), double(hq), double(hkv), double(d)},
                    [&] { return b_.cost_.attention(b, t, hq, d, backward) * candidates * (1 + kAttentionTuneReps); });
    }

   private:
    SimBackendImpl& b_;
  };
  AttnWorkspaceParams attn_params() const {
    return {opt_.profile.attention_plan_ws_fwd_bytes, opt_.profile.attention_plan_ws_bwd_bytes,
            opt_.profile.attention_plan_ws_bwd_gqa_copies, opt_.profile.attention_dq_accum};
  }
  bool in_backward() const { return times_.backward_start_s >= 0 && times_.optimizer_start_s < 0; }
  // The optimizer phase starts at the first update after backward: a deferred update applied in
  // forward (model/train/optimizer.h) is forward time, and one during backward (no clipping) backward time.
  void mark_optimizer() {
    unrepeatable();
    if (times_.backward_start_s >= 0 && times_.optimizer_start_s < 0 && backward_ended_)
      times_.optimizer_start_s = now_;
  }
  // A compute-stream op starts no earlier than the copies it was told to wait for.
  void settle() {
    if (!compute_waits_.empty() || compute_after_ > now_ || comm_after_ > now_) unrepeatable();
    for (CopyTicket t : compute_waits_) compute_after_ = std::max(compute_after_, copy_end(t));
    compute_waits_.clear();
    if (compute_after_ > now_) wait_until(compute_after_, times_.copy_wait_s);
    compute_after_ = 0;
    if (comm_after_ > now_) wait_until(comm_after_, times_.comm_wait_s);
    comm_after_ = 0;
  }
  // The clock stalls until t; `stalled_s` (copy or disk wait) counts the stall.
  void wait_until(double t, double& stalled_s) {
    if (t <= now_) return;
    stalled_s += t - now_;
    now_ = t;
  }
  // One copy on its lane's copy stream (the two lanes run concurrently, each direction at its own
  // rate). mirror = cpu: synchronous, done at issue (cpu semantics).
  // A copy of `s` seconds at its direction's rate. cpu: synchronous. cuda: queued on its lane's copy stream.
  // Where the other lane is still busy, the two share the link: while both run, each moves at a share f of
  // its rate: the profile's duplex share for the other direction (CostModel::duplex_share; the link's total
  // is then copy_both_gbps, as measured), one half for the same direction (the optimizer's downloads on the
  // second lane beside activation offloads on the main one). The new copy and the other lane's copies still
  // in flight are stretched over the time they run together, their tickets' ends moved (a compute wait on a
  // ticket is read when the next compute op runs: settle). The other lane's work left is taken at its full
  // rate, and its direction as its last copy's.
  CopyTicket issue(double s, CopyLane lane, bool to_host) {
    unrepeatable();
    if (!cuda()) {
      times_.copy_busy_s += s;
      now_ += s;
      times_.copy_s += s;
      copy_ends_.push_back(now_);
      return CopyTicket(copy_ends_.size());
    }
    const size_t i = size_t(lane), other = 1 - i;
    const double start = std::max(copy_free_[i], now_);
    const double f = lane_to_host_[other] != to_host ? cost_.duplex_share() : 0.5;
    double took = s;
    // The other lane's copies done before this one starts leave its list for good. A lane's copies land in the
    // order they were queued (each starts after the one before; the stretch below keeps their order), so those are
    // a prefix: the list's head moves past them.
    const std::vector<CopyTicket>& theirs = lane_tickets_[other];
    size_t& head = lane_head_[other];
    while (head < theirs.size() && copy_end(theirs[head]) <= start) ++head;
    if (f < 1 && copy_free_[other] > start) {
      const double left = copy_free_[other] - start;  // the other lane's work after `start`, at its full rate
      const double shared = std::min(left, s);        // each one's work done while both run
      took = s <= left ? s / f : left / f + (s - left);
      for (size_t j = head; j < theirs.size(); ++j)
        copy_ends_[size_t(theirs[j] - 1)] += std::min(copy_end(theirs[j]) - start, shared) * (1 / f - 1);
      copy_free_[other] += shared * (1 / f - 1);
      times_.copy_busy_s += shared * (1 / f - 1);
    }
    times_.copy_busy_s += took;
    copy_free_[i] = start + took;
    lane_to_host_[i] = to_host;
    copy_ends_.push_back(copy_free_[i]);
    lane_tickets_[i].push_back(CopyTicket(copy_ends_.size()));
    return CopyTicket(copy_ends_.size());
  }
  double copy_end(CopyTicket t) const {
    STRATA_CHECK(t >= 1 && t <= copy_ends_.size(), fmt::format("sim: unknown copy ticket {}", t));
    return copy_ends_[size_t(t - 1)];
  }
  // What a compute-stream op adds to the clock and the sums; a recorded block's ops (begin_repeat) are applied
  // again from these by the same code, so a repeat adds the same doubles in the same order.
  struct Charge {
    enum What : uint8_t { op, memset, copy } what;
    OpKind k;
    int kernels;
    bool fwd;
    double s;
  };
  void apply(const Charge& c) {
    now_ += c.s;
    switch (c.what) {
      case Charge::op:
        times_.op_s[size_t(c.k)] += c.s;
        times_.kernels += c.kernels;
        if (c.fwd && in_backward() && !backward_ended_) times_.recompute_s += c.s;  // not a later micro-batch's
        break;
      case Charge::memset:
        times_.memset_s += c.s;
        times_.kernels++;
        break;
      case Charge::copy:
        times_.copy_s += c.s;
        break;
    }
  }
  void charge(const Charge& c) {
    settle();
    apply(c);
    if (rec_.on) rec_.charges.push_back(c);
  }
  void charge(OpKind k, double s, int kernels, bool is_fwd) { charge(Charge{Charge::op, k, kernels, is_fwd, s}); }
  void fwd(OpKind k, double s, int kernels = 1) { charge(k, s, kernels, true); }
  void bwd(OpKind k, double s, int kernels = 1) { charge(k, s, kernels, false); }
  void memset(double s) { charge(Charge{Charge::memset, OpKind::count_, 0, false, s}); }
  void copy(double s) {
    unrepeatable();
    charge(Charge{Charge::copy, OpKind::count_, 0, false, s});
  }

  // --- repeats (Backend::begin_repeat): the block's charges are recorded; the block repeats when it did nothing
  // else the clock depends on (a copy, a wait, a phase mark: unrepeatable) and left the arena as it found it, so
  // running it again would make the same allocations, reach the same peak and add the same charges.
  struct Recording {
    bool on = false, clean = false;
    Arena::Mark arena;
    std::vector<Charge> charges;
  };
  Recording rec_;
  void unrepeatable() { rec_.clean = false; }
  // An op's scratch (engine/op_scratch.h), taken as backend_cuda.cpp takes it; the cpu backend takes none.
  ScratchSet take(const ScratchList& l) { return cuda() ? ScratchSet(arena_, l) : ScratchSet(); }

  SimOptions opt_;
  CostModel cost_;
  Arena arena_;
  ScratchSet gemm_ws_;
  // The first call's tuning: each problem's key once (Pricer::gemm_problem, attention_problem).
  std::set<std::array<double, 6>> tuned_;
  double tuning_s_ = 0;
  // `s()` prices a new key's tuning: a key met before (every chunk of a long LM head, every MLP tile) costs a lookup.
  template <class S>
  void tuned_once(const std::array<double, 6>& key, S&& s) {
    if (tuned_.insert(key).second) tuning_s_ += s();
  }
  std::string desc_;
  double now_ = 0;                           // the compute clock: end of the last compute-stream op
  double compute_after_ = 0;                 // the next compute op starts no earlier (copy_wait_compute)
  double comm_after_ = 0;                    // ... nor before this collective's end (wait_for_event, host false)
  double copy_free_[2] = {0, 0};             // each lane's copy stream is busy until then
  bool lane_to_host_[2] = {false, false};    // the direction of each lane's last queued copy
  std::vector<CopyTicket> lane_tickets_[2];  // each lane's copies, in the order queued (issue)
  size_t lane_head_[2] = {0, 0};             // ... the first that may still be in flight
  std::vector<CopyTicket> compute_waits_;    // copy_wait_compute's tickets, read at the next compute op
  bool backward_ended_ = false;              // backward_ended() since the last backward's seed
  double backward_end_s_ = 0;                // when backward_ended() was last called
  double disk_free_ = 0;                     // the disk queue is busy until then
  std::vector<double> copy_ends_;            // per ticket (1-based): when the copy lands
  SimTimes times_;
};

SimDiskFile::SimDiskFile(SimBackendImpl& be, const std::string& dir, size_t capacity_bytes)
    : be_(be), path_(fmt::format("{}/strata-offload-sim.bin", dir)), capacity_(capacity_bytes) {}

DiskFile::Ticket SimDiskFile::submit(bool write, size_t offset, size_t bytes) {
  const char* op = write ? "write" : "read";
  check_request(path_, capacity_, op, offset, bytes, nullptr, false);  // the sim's host memory has no address
  Request r;
  r.offset = offset;
  r.write = write;
  r.end_s = bytes ? be_.disk_request(write, bytes) : be_.now_s();  // nothing to do: done at once
  long& countdown = write ? inject_countdown_ : inject_read_countdown_;
  if (bytes && countdown > 0) {
    const auto pieces = long((bytes + kPieceBytes - 1) / kPieceBytes);
    if (countdown <= pieces)
      r.err = write ? inject_err_ : inject_read_err_, countdown = 0;
    else
      countdown -= pieces;
  }
  requests_.push_back(r);
  return Ticket(requests_.size());
}

SimDiskFile::Request& SimDiskFile::at(Ticket t) {
  if (t == 0 || t > requests_.size()) STRATA_THROW(Error, fmt::format("{}: unknown ticket {}", path_, t));
  return requests_[size_t(t - 1)];
}

bool SimDiskFile::finished(Ticket t) {
  Request& r = at(t);
  if (be_.now_s() < r.end_s) return false;
  if (r.err) {
    r.reported = true;
    STRATA_THROW(IoError,
                 fmt::format("{}: {} at offset {} failed: {} (ticket {})", path_, r.write ? "write" : "read", r.offset,
                             std::strerror(r.err), t),
                 path_);
  }
  return true;
}

bool SimDiskFile::done(Ticket t) {
  return finished(t);
}

void SimDiskFile::wait(Ticket t) {
  be_.disk_wait(at(t).end_s);
  finished(t);
}

void SimDiskFile::wait_all() {
  double end = 0;
  for (const Request& r : requests_) end = std::max(end, r.end_s);
  be_.disk_wait(end);
  for (size_t i = 0; i < requests_.size(); ++i)  // the oldest failure nobody has seen yet
    if (requests_[i].err && !requests_[i].reported) finished(Ticket(i + 1));
}

void SimDiskFile::inject_write_failure(int nth, int err) {
  if (nth < 1 || err <= 0)
    STRATA_THROW(Error, fmt::format("{}: inject_write_failure({}, {}): need nth >= 1 and err > 0", path_, nth, err));
  inject_countdown_ = nth;
  inject_err_ = err;
}

void SimDiskFile::inject_read_failure(int nth, int err) {
  if (nth < 1 || err <= 0)
    STRATA_THROW(Error, fmt::format("{}: inject_read_failure({}, {}): need nth >= 1 and err > 0", path_, nth, err));
  inject_read_countdown_ = nth;
  inject_read_err_ = err;
}

}  // namespace

std::unique_ptr<SimBackend> make_sim_backend(const SimOptions& opt) {
  return std::make_unique<SimBackendImpl>(opt);
}

}  // namespace strata
