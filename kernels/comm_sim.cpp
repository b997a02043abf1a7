#include "engine/comm_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace strata {

double collective_seconds(const DeviceProfile& p, Collective op, double bytes, int world) {
  const double n = world;
  const double lat = p.nccl_latency_us * 1e-6;
  const double bw = p.nccl_busbw_gbps * 1e9;
  if (world <= 1) {
    const bool out_of_place =
        op == Collective::reduce_scatter || op == Collective::all_gather || op == Collective::all_to_all;
    return out_of_place ? 2 * bytes / (p.hbm_gbps * 1e9) : 0.0;
  }
  switch (op) {
    case Collective::all_reduce:
      return lat + bytes * 2 * (n - 1) / n / bw;
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all:
      return lat + bytes * (n - 1) / n / bw;
    case Collective::broadcast:
    case Collective::reduce:
      return lat + bytes / bw;
    case Collective::barrier:
      return lat;
  }
  return 0;
}

namespace {

class SimComm final : public SimCommunicator {
 public:
  SimComm(SimBackend& be, int rank, int world) : be_(be), rank_(rank), world_(world) {
    if (world < 1 || rank < 0 || rank >= world)
      STRATA_THROW(Error, fmt::format("sim communicator: rank {} of world size {}", rank, world));
  }
  std::string_view name() const override { return "sim"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  bool supports(DType dt) const override { return dt != DType::i16; }
  const SimCommTimes& times() const override { return times_; }

  CommTicket all_reduce(Tensor t) override { return issue(Collective::all_reduce, t, t, 0, t.bytes()); }
  CommTicket all_reduce_many(const std::vector<Tensor>& ts) override {
    if (ts.empty()) STRATA_THROW(Error, "all_reduce_many: no tensors");
    // As nccl: one fused collective (one latency) over the summed bytes.
    size_t bytes = 0;
    for (const Tensor& t : ts) {
      check_collective(*this, Collective::all_reduce, t, t, 0);
      bytes += t.bytes();
    }
    return issue(Collective::all_reduce, ts.front(), ts.front(), 0, bytes);
  }
  CommTicket broadcast_many(const std::vector<Tensor>& ts, const std::vector<int>& roots) override {
    if (ts.empty() || roots.size() != ts.size())
      STRATA_THROW(Error, fmt::format("broadcast_many: {} tensors, {} roots", ts.size(), roots.size()));
    // As nccl: one group (one latency) over the summed bytes.
    size_t bytes = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      check_collective(*this, Collective::broadcast, ts[i], ts[i], roots[i]);
      bytes += ts[i].bytes();
    }
    return issue(Collective::broadcast, ts.front(), ts.front(), roots.front(), bytes);
  }
  CommTicket reduce(Tensor t, int root) override { return issue(Collective::reduce, t, t, root, t.bytes()); }
  CommTicket reduce_many(const std::vector<Tensor>& ts, const std::vector<int>& roots) override {
    if (ts.empty() || roots.size() != ts.size())
      STRATA_THROW(Error, fmt::format("reduce_many: {} tensors, {} roots", ts.size(), roots.size()));
    // As nccl: one group (one latency) over the summed bytes.
    size_t bytes = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      check_collective(*this, Collective::reduce, ts[i], ts[i], roots[i]);
      bytes += ts[i].bytes();
    }
    return issue(Collective::reduce, ts.front(), ts.front(), roots.front(), bytes);
  }
  CommTicket reduce_scatter(Tensor out, Tensor in) override {
    return issue(Collective::reduce_scatter, out, in, 0, in.bytes());
  }
  CommTicket all_gather(Tensor out, Tensor in) override {
    return issue(Collective::all_gather, out, in, 0, out.bytes());
  }
  CommTicket all_to_all(Tensor out, Tensor in) override {
    return issue(Collective::all_to_all, out, in, 0, in.bytes());
  }
  CommTicket broadcast(Tensor t, int root) override { return issue(Collective::broadcast, t, t, root, t.bytes()); }
  void barrier() override {
    const double end =
        std::max(free_, be_.now_s()) + collective_seconds(be_.cost().profile(), Collective::barrier, 0, world_);
    be_.wait_for_event(end, true);
  }
  bool done(CommTicket t) override { return be_.now_s() >= end(t); }
  void wait_host(CommTicket t) override { be_.wait_for_event(end(t), true); }
  void wait_compute(CommTicket t) override { be_.wait_for_event(end(t), false); }

 private:
  CommTicket issue(Collective op, const Tensor& out, const Tensor& in, int root, size_t bytes) {
    check_collective(*this, op, out, in, root);
    const double s = collective_seconds(be_.cost().profile(), op, double(bytes), world_);
    free_ = std::max(free_, be_.now_s()) + s;  // after the compute queued so far and the previous collective
    ends_.push_back(free_);
    // What compute beside it does not hide slows that compute (charged now: compute that instead
    // waits for this collective's end absorbs it, as the collective ends later than that).
    if (be_.mirror() == SimMirror::cuda && world_ > 1)
      be_.slow_compute((1.0 - be_.cost().profile().nccl_compute_overlap) * s);
    times_.busy_s += s;
    if (op == Collective::all_to_all) times_.all_to_all_s += s;
    times_.bytes += double(bytes);
    ++times_.collectives;
    if (be_.mirror() == SimMirror::cpu) be_.wait_for_event(free_, true);  // the cpu communicator is synchronous
    return CommTicket(ends_.size());
  }
  double end(CommTicket t) const {
    if (t == 0 || t > ends_.size()) STRATA_THROW(Error, fmt::format("sim communicator: unknown ticket {}", t));
    return ends_[size_t(t - 1)];
  }

  SimBackend& be_;
  int rank_, world_;
  double free_ = 0;           // the communication timeline is busy until then
  std::vector<double> ends_;  // per ticket (1-based)
  SimCommTimes times_;
};

}  // namespace

std::unique_ptr<SimCommunicator> make_sim_communicator(SimBackend& be, int rank, int world) {
  return std::make_unique<SimComm>(be, rank, world);
}

}  // namespace strata
