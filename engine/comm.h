// The communicator: collectives between the ranks of a job (one process per GPU; threads or
// processes on cpu), the one interface every parallel mode (data parallel, ZeRO, sequence parallel)
// is written against. Three implementations:
//   cpu  (engine/comm_cpu.cpp)    ranks as threads of one process (a shared CpuGroup) or as processes
//                                  over the TCP rendezvous; exact, deterministic reductions; synchronous.
//   nccl (kernels/comm_nccl.cpp)  the product path: NCCL on its own stream, events to and from compute.
//   sim  (kernels/comm_sim.cpp)   no data: ring-formula time on the sim backend's clock.
//
// Ordering and asynchrony (the same contract as the backend's copy lanes, engine/backend.h):
//  - A collective reads its inputs after every op queued on the compute stream when it is called
//    (nccl: an event recorded on the compute stream, which the communication stream waits on).
//  - Collectives of one communicator run in call order on one communication stream, never on the
//    compute stream, so they overlap the compute issued after them (the rest of backward).
//  - Each returns a CommTicket. Before compute reads an output, or writes or frees (returns to the
//    arena) any buffer the collective touches: wait_compute(ticket) (the compute stream waits; the
//    host does not). Before the host reads it: wait_host(ticket). A done ticket implies every
//    earlier ticket of the same communicator is done.
//  - cpu runs each collective at once (the host returns when it is done on this rank): every
//    ticket is done at once, and the waits are no-ops.
//  - Every rank calls the same collectives in the same order with the same sizes and dtypes (the
//    cpu communicator checks this and names the rank that differs; NCCL cannot and hangs, which the
//    nccl communicator's watchdog turns into an error after its timeout).
//
// Determinism (cpu): a sum is formed, element by element, as ((x_0 + x_1) + x_2) + ... + x_{N-1} over
// ranks 0..N-1 in fp32 (bf16 and f16 inputs are widened, summed in fp32 and rounded once to nearest
// even), by every rank alike: results are bit-exact, reproducible and identical on every rank. NCCL's
// ring sums in another order (and rounds bf16 at every hop), so cpu and nccl agree to rounding only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensor.h"

namespace strata {

using CommTicket = uint64_t;

enum class Collective : uint8_t { all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, barrier, reduce };
const char* collective_name(Collective c);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string_view name() const = 0;  // "cpu", "nccl", "sim"
  virtual int rank() const = 0;               // 0 .. world() - 1
  virtual int world() const = 0;

  // Tensors are contiguous and of one dtype per call (f32, bf16 on every implementation; also f16,
  // i32 and u8 where a sum of them makes sense to the implementation: see supports()). Chunked
  // collectives cut the flat tensor into world() equal chunks in rank order.
  //
  // t (+)= every rank's t: the element-wise sum, in place, the same on every rank.
  virtual CommTicket all_reduce(Tensor t) = 0;
  // all_reduce of each tensor (they may differ in size and dtype) as one collective where the
  // implementation can fuse them (nccl: one group, one launch); the ticket of the last. Results
  // are those of all_reduce on each in turn.
  virtual CommTicket all_reduce_many(const std::vector<Tensor>& ts);
  // in [world * n] -> out [n]: out = the sum over ranks of their in's chunk `rank()`.
  virtual CommTicket reduce_scatter(Tensor out, Tensor in) = 0;
  // in [n] -> out [world * n]: chunk r of out is rank r's in.
  virtual CommTicket all_gather(Tensor out, Tensor in) = 0;
  // in [world * n] -> out [world * n]: chunk j of in goes to rank j; chunk r of out came from rank r
  // (sequence parallel: sequence-sharded to head-sharded around attention and back). out != in.
  virtual CommTicket all_to_all(Tensor out, Tensor in) = 0;
  // t = root's t on every rank, in place.
  virtual CommTicket broadcast(Tensor t, int root) = 0;
  // broadcast of each ts[i] from roots[i] (ZeRO-1: each parameter's weights from its owner), as one
  // collective where the implementation can fuse them; the ticket of the last. Results are those of
  // broadcast on each in turn.
  virtual CommTicket broadcast_many(const std::vector<Tensor>& ts, const std::vector<int>& roots);
  // root's t = the sum over ranks of t (all_reduce's sum, in place); every other rank's t is left as it
  // was (read only: once the ticket is done its buffer may be reused).
  virtual CommTicket reduce(Tensor t, int root) = 0;
  // reduce of each ts[i] to roots[i] (ZeRO-2: each gradient to its owner), as one collective where the
  // implementation can fuse them; the ticket of the last. Results are those of reduce on each in turn.
  virtual CommTicket reduce_many(const std::vector<Tensor>& ts, const std::vector<int>& roots);
  // The host blocks until every rank has reached the barrier and this rank's collectives are done.
  virtual void barrier() = 0;

  virtual bool done(CommTicket t) = 0;          // polls, never blocks
  virtual void wait_host(CommTicket t) = 0;     // the host blocks until the collective is done
  virtual void wait_compute(CommTicket t) = 0;  // the compute stream waits; the host does not
  virtual bool supports(DType dt) const { return dt == DType::f32 || dt == DType::bf16; }
};

// The argument checks every implementation makes (UnsupportedError / Error naming the collective,
// the tensor sizes and the world size): contiguous, same dtype, supported dtype, and for the chunked
// collectives element counts that divide into world() equal chunks (pad the buffer where they do not).
void check_collective(const Communicator& c, Collective op, const Tensor& out, const Tensor& in, int root = 0);

// --- the cpu communicator, threads mode: one CpuGroup shared by `world` threads, each holding its
// own communicator. A rank that does not arrive at a collective within timeout_s makes every waiting
// rank throw an Error naming the ranks that never arrived. abort() (for a rank that failed) wakes
// every waiting rank with an Error carrying the reason.
class CpuGroup {
 public:
  explicit CpuGroup(int world, double timeout_s = 300);
  ~CpuGroup();
  CpuGroup(const CpuGroup&) = delete;
  CpuGroup& operator=(const CpuGroup&) = delete;
  int world() const;
  void abort(const std::string& reason);
  struct State;
  State& state() { return *s_; }

 private:
  std::unique_ptr<State> s_;
};
std::unique_ptr<Communicator> make_cpu_communicator(CpuGroup& group, int rank);

// --- the cpu communicator, processes mode: each collective exchanges every rank's input through the
// TCP rendezvous (engine/rendezvous.h; all-gather through rank 0), then each rank computes its output
// with the same deterministic kernels as threads mode. For CI and tools without a GPU, not for speed.
class Rendezvous;
std::unique_ptr<Communicator> make_cpu_communicator(Rendezvous& rdv);
// Processes mode over groups of `group_size` consecutive ranks of the rendezvous (sequence parallelism's groups,
// beside the world's communicator): rank rdv.rank() % group_size of its group. Every rank of the rendezvous calls
// each collective at the same point (every group runs the same schedule): the bytes travel through the world's
// all-gather and each rank keeps its group's; barrier() is the world's. ConfigError unless group_size divides the
// world.
std::unique_ptr<Communicator> make_cpu_communicator(Rendezvous& rdv, int group_size);

}  // namespace strata
