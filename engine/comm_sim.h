// Declared for the engine and the layers above; defined in kernels/comm_sim.cpp.
// The sim communicator (engine/comm.h): no data; each collective takes the time of NCCL's ring on
// the profile's bus bandwidth (DeviceProfile::nccl_busbw_gbps, nccl_latency_us) on a communication
// timeline beside the sim backend's compute clock, and allocates nothing (the nccl communicator
// allocates nothing in the arena either: NCCL's own buffers live outside it, like the CUDA context).
//
// Time, for N ranks and S bytes (nccl-tests' bus bandwidth convention):
//   all_reduce      latency + S · 2(N-1)/N / busbw       S = the tensor
//   reduce_scatter  latency + S · (N-1)/N / busbw        S = the input  (N chunks)
//   all_gather      latency + S · (N-1)/N / busbw        S = the output (N chunks)
//   all_to_all      latency + S · (N-1)/N / busbw        S = the input
//   broadcast       latency + S / busbw
//   reduce          latency + S / busbw                  S = the tensor (nccl-tests: a reduce's busbw is its
//                                                         algbw, as a broadcast's: the ring's pipelined chain
//                                                         sends every byte over each link once; a
//                                                         reduce-scatter's (N-1)/N of S, which it nears as N grows)
//   barrier         latency
// One rank: in-place collectives cost nothing; out-of-place ones a device copy (2 S over HBM).
//
// Mirror cuda: a collective starts at max(the previous collective's end, the compute clock at the
// call) and overlaps compute; wait_compute holds the next compute op until it ends, wait_host moves
// the clock there (SimTimes::comm_wait_s). Mirror cpu: synchronous (the clock waits at the call).
#pragma once
#include <memory>

#include "engine/backend_sim.h"
#include "engine/comm.h"
#include "engine/cost_model.h"

namespace strata {

double collective_seconds(const DeviceProfile& p, Collective op, double bytes, int world);

// What the communicator has done so far.
struct SimCommTimes {
  double busy_s = 0;        // the communication timeline busy
  double all_to_all_s = 0;  // of which all-to-alls (sequence parallelism's, around attention)
  double bytes = 0;         // S summed over collectives
  long collectives = 0;
};

class SimCommunicator : public Communicator {
 public:
  virtual const SimCommTimes& times() const = 0;
};

// rank/world: the rank this sim run forecasts (every rank runs the same schedule).
std::unique_ptr<SimCommunicator> make_sim_communicator(SimBackend& be, int rank, int world);

}  // namespace strata
