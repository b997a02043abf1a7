// The cpu communicator (engine/comm.h): threads mode over a shared CpuGroup, processes mode over the
// TCP rendezvous. Both post a header (collective, dtype, sizes, root) and the input, see every rank's,
// check they agree, and compute this rank's output from all inputs in rank order 0..N-1, so the
// result is the same bits on every rank and in every run.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "engine/comm.h"
#include "engine/rendezvous.h"

namespace strata {

namespace {

struct Header {
  uint8_t op = 0, dtype = 0;
  uint8_t pad[2] = {};
  int32_t root = 0;
  int64_t in_numel = 0, out_numel = 0;
  bool operator==(const Header&) const = default;
  std::string str() const {
    return fmt::format("{}({} {} elements in, {} out{})", collective_name(Collective(op)), in_numel,
                       dtype_name(DType(dtype)), out_numel,
                       Collective(op) == Collective::broadcast || Collective(op) == Collective::reduce
                           ? fmt::format(", root {}", root)
                           : "");
  }
};

// Element i of a rank's input as the accumulator type; sums in rank order, rounded once.
float load(const std::byte* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::f32: {
      float v;
      std::memcpy(&v, p + i * 4, 4);
      return v;
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return bf16_to_f32(h);
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return f16_to_f32(h);
    }
    default:
      return 0;
  }
}

// out[i] = sum over ranks r (0..N-1, in order) of ins[r][offset + i], for n elements.
void sum_ranks(std::byte* out, const std::vector<const std::byte*>& ins, DType dt, int64_t offset, int64_t n) {
  if (dt == DType::i32 || dt == DType::u8) {  // wrap-around integer sums (unsigned: no overflow UB)
    for (int64_t i = 0; i < n; ++i) {
      if (dt == DType::i32) {
        uint32_t acc = 0, v;
        for (const std::byte* p : ins) std::memcpy(&v, p + (offset + i) * 4, 4), acc += v;
        std::memcpy(out + i * 4, &acc, 4);
      } else {
        uint8_t acc = 0;
        for (const std::byte* p : ins) acc = uint8_t(acc + uint8_t(p[offset + i]));
        out[i] = std::byte(acc);
      }
    }
    return;
  }
  std::vector<float> acc(size_t(n), 0.0f);
  for (size_t r = 0; r < ins.size(); ++r)
    for (int64_t i = 0; i < n; ++i) {
      const float v = load(ins[r], dt, offset + i);
      acc[size_t(i)] = r == 0 ? v : acc[size_t(i)] + v;
    }
  convert_from_f32(out, dt, acc.data(), size_t(n));
}

// Computes this rank's output of `h` into `out` (out_numel elements) from every rank's input.
void compute(const Header& h, int rank, const std::vector<const std::byte*>& ins, std::byte* out) {
  const DType dt = DType(h.dtype);
  const size_t es = dtype_size(dt);
  const int64_t world = int64_t(ins.size());
  switch (Collective(h.op)) {
    case Collective::all_reduce:
      sum_ranks(out, ins, dt, 0, h.out_numel);
      break;
    case Collective::reduce_scatter:
      sum_ranks(out, ins, dt, rank * h.out_numel, h.out_numel);
      break;
    case Collective::all_gather:
      for (int64_t r = 0; r < world; ++r) std::memcpy(out + r * h.in_numel * es, ins[r], h.in_numel * es);
      break;
    case Collective::all_to_all: {
      const int64_t n = h.in_numel / world;
      for (int64_t r = 0; r < world; ++r) std::memcpy(out + r * n * es, ins[r] + rank * n * es, n * es);
      break;
    }
    case Collective::broadcast:
      std::memcpy(out, ins[h.root], h.out_numel * es);
      break;
    case Collective::reduce:  // the root's sum is all_reduce's; the other ranks keep their input
      if (rank == h.root)
        sum_ranks(out, ins, dt, 0, h.out_numel);
      else
        std::memcpy(out, ins[size_t(rank)], h.out_numel * es);
      break;
    case Collective::barrier:
      break;
  }
}

// The shared part: argument checks, the header, the exchange and the agreement check.
class CpuCommBase : public Communicator {
 public:
  std::string_view name() const override { return "cpu"; }
  bool supports(DType dt) const override { return dt != DType::i16; }
  CommTicket all_reduce(Tensor t) override { return run(Collective::all_reduce, t, t, 0); }
  CommTicket reduce_scatter(Tensor out, Tensor in) override { return run(Collective::reduce_scatter, out, in, 0); }
  CommTicket all_gather(Tensor out, Tensor in) override { return run(Collective::all_gather, out, in, 0); }
  CommTicket all_to_all(Tensor out, Tensor in) override { return run(Collective::all_to_all, out, in, 0); }
  CommTicket broadcast(Tensor t, int root) override { return run(Collective::broadcast, t, t, root); }
  CommTicket reduce(Tensor t, int root) override { return run(Collective::reduce, t, t, root); }
  // Synchronous: a collective is done on this rank when the call returns.
  bool done(CommTicket t) override { return t <= issued_; }
  void wait_host(CommTicket) override {}
  void wait_compute(CommTicket) override {}

 protected:
  // Posts this rank's header and input bytes; returns every rank's (header, input) in rank order.
  // The pointers stay valid until finish().
  virtual void exchange(const Header& h, const std::byte* in, size_t bytes, std::vector<Header>& hs,
                        std::vector<const std::byte*>& ins) = 0;
  // Every rank has finished reading the others' inputs (threads: a barrier).
  virtual void finish(Collective op) = 0;

  CommTicket run(Collective op, Tensor out, Tensor in, int root) {
    check_collective(*this, op, out, in, root);
    Header h;
    h.op = uint8_t(op);
    h.dtype = uint8_t(out.dtype);
    h.root = root;
    h.in_numel = in.numel();
    h.out_numel = out.numel();
    // A broadcast needs only the root's bytes.
    const size_t bytes = op == Collective::broadcast && rank() != root ? 0 : in.bytes();
    std::vector<Header> hs;
    std::vector<const std::byte*> ins;
    exchange(h, static_cast<const std::byte*>(in.data), bytes, hs, ins);
    for (int r = 0; r < world(); ++r)
      if (!(hs[r] == hs[0]))
        STRATA_THROW(Error, fmt::format("cpu communicator: the ranks called different collectives: rank 0 {}, rank "
                                        "{} {} (every rank must call the same collectives in the same order)",
                                        hs[0].str(), r, hs[r].str()));
    scratch_.resize(out.bytes());
    compute(h, rank(), ins, scratch_.data());
    finish(op);
    std::memcpy(out.data, scratch_.data(), out.bytes());  // after finish: in place is safe
    return ++issued_;
  }

  CommTicket issued_ = 0;
  std::vector<std::byte> scratch_;
};

}  // namespace

// --- threads mode.
struct CpuGroup::State {
  int world;
  std::chrono::duration<double> timeout;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t gen = 0;            // barrier generation
  int arrived = 0;             // ranks arrived in the current generation
  std::vector<uint64_t> seen;  // per rank: the last generation it arrived in (+1)
  std::vector<Header> headers;
  std::vector<const std::byte*> inputs;
  std::string aborted;  // non-empty: every call throws this

  // Blocks until every rank arrived at this generation's barrier; Error naming the missing ranks
  // after the timeout (and the group is aborted, waking the others with the same message).
  void arrive(int rank, const char* what) {
    std::unique_lock lk(mu);
    if (!aborted.empty()) throw Error(aborted);
    const uint64_t my = gen;
    seen[rank] = my + 1;
    if (++arrived == world) {
      arrived = 0;
      ++gen;
      cv.notify_all();
      return;
    }
    if (!cv.wait_for(lk, timeout, [&] { return gen != my || !aborted.empty(); })) {
      std::string missing;
      int n = 0;
      for (int r = 0; r < world; ++r)
        if (seen[r] != my + 1) missing += fmt::format("{}{}", n++ ? ", " : "", r);
      aborted = fmt::format("cpu communicator: {} on rank {}: rank{} {} of {} did not arrive within {} s", what, rank,
                            n > 1 ? "s" : "", missing, world, timeout.count());
      cv.notify_all();
    }
    // The barrier completed before an abort came: this rank goes on (it sees the same mismatch or
    // result as the others; an abort raised after completion is for the next call).
    if (gen != my) return;
    if (!aborted.empty()) throw Error(aborted);
  }
};

CpuGroup::CpuGroup(int world, double timeout_s) : s_(std::make_unique<State>()) {
  STRATA_CHECK(world >= 1, "CpuGroup: world >= 1");
  s_->world = world;
  s_->timeout = std::chrono::duration<double>(timeout_s);
  s_->seen.assign(size_t(world), 0);
  s_->headers.resize(size_t(world));
  s_->inputs.resize(size_t(world));
}
CpuGroup::~CpuGroup() = default;
int CpuGroup::world() const {
  return s_->world;
}
void CpuGroup::abort(const std::string& reason) {
  std::lock_guard lk(s_->mu);
  if (s_->aborted.empty()) s_->aborted = "cpu communicator: aborted: " + reason;
  s_->cv.notify_all();
}

namespace {

class ThreadComm final : public CpuCommBase {
 public:
  ThreadComm(CpuGroup& g, int rank) : g_(g.state()), rank_(rank) {
    if (rank < 0 || rank >= g_.world)
      STRATA_THROW(Error, fmt::format("cpu communicator: rank {} outside 0..{}", rank, g_.world - 1));
  }
  int rank() const override { return rank_; }
  int world() const override { return g_.world; }
  void barrier() override { g_.arrive(rank_, "barrier"); }

 private:
  void exchange(const Header& h, const std::byte* in, size_t, std::vector<Header>& hs,
                std::vector<const std::byte*>& ins) override {
    {
      std::lock_guard lk(g_.mu);
      g_.headers[rank_] = h;
      g_.inputs[rank_] = in;
    }
    g_.arrive(rank_, collective_name(Collective(h.op)));
    std::lock_guard lk(g_.mu);  // nobody posts again before the finish barrier
    hs = g_.headers;
    ins = g_.inputs;
  }
  void finish(Collective op) override { g_.arrive(rank_, collective_name(op)); }

  CpuGroup::State& g_;
  int rank_;
};

// --- processes mode: the inputs travel through the rendezvous (header first, then the bytes).
class ProcessComm final : public CpuCommBase {
 public:
  // group: the size of the groups of consecutive ranks this communicator spans (the world's: every rank).
  ProcessComm(Rendezvous& r, int group) : r_(r), group_(group) {
    if (group < 1 || r.world() % group != 0)
      STRATA_THROW(ConfigError,
                   fmt::format("cpu communicator: groups of {} ranks do not divide the {} ranks", group, r.world()),
                   "communicator", "group_size");
  }
  int rank() const override { return r_.rank() % group_; }
  int world() const override { return group_; }
  void barrier() override { r_.barrier(); }  // the world's: every group reaches it together

 private:
  void exchange(const Header& h, const std::byte* in, size_t bytes, std::vector<Header>& hs,
                std::vector<const std::byte*>& ins) override {
    std::vector<std::byte> msg(sizeof(Header) + bytes);
    std::memcpy(msg.data(), &h, sizeof(Header));
    if (bytes) std::memcpy(msg.data() + sizeof(Header), in, bytes);
    got_ = r_.all_gather(msg);
    if (group_ < r_.world()) {  // this rank's group's messages: every group exchanged through the world
      const auto first = got_.begin() + (r_.rank() / group_) * group_;
      got_ = std::vector<std::vector<std::byte>>(first, first + group_);
    }
    hs.resize(got_.size());
    ins.resize(got_.size());
    for (size_t r = 0; r < got_.size(); ++r) {
      if (got_[r].size() < sizeof(Header))
        STRATA_THROW(Error,
                     fmt::format("cpu communicator: rank {} sent a short message ({} bytes)", r, got_[r].size()));
      std::memcpy(&hs[r], got_[r].data(), sizeof(Header));
      ins[r] = got_[r].data() + sizeof(Header);
    }
    // The bytes a rank sent must cover its input (a broadcast's non-roots send none).
    const size_t es = dtype_size(DType(h.dtype));
    for (size_t r = 0; r < got_.size(); ++r) {
      const bool sends = Collective(h.op) != Collective::broadcast || int(r) == h.root;
      if (sends && hs[r] == hs[0] && got_[r].size() != sizeof(Header) + size_t(hs[r].in_numel) * es)
        STRATA_THROW(Error,
                     fmt::format("cpu communicator: rank {} sent {} bytes for {}", r, got_[r].size(), hs[r].str()));
    }
  }
  void finish(Collective) override {}

  Rendezvous& r_;
  int group_;
  std::vector<std::vector<std::byte>> got_;
};

}  // namespace

std::unique_ptr<Communicator> make_cpu_communicator(CpuGroup& group, int rank) {
  return std::make_unique<ThreadComm>(group, rank);
}

std::unique_ptr<Communicator> make_cpu_communicator(Rendezvous& rdv) {
  return std::make_unique<ProcessComm>(rdv, rdv.world());
}

std::unique_ptr<Communicator> make_cpu_communicator(Rendezvous& rdv, int group_size) {
  return std::make_unique<ProcessComm>(rdv, group_size);
}

}  // namespace strata
