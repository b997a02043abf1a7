// The nccl communicator (engine/comm.h), built with CUDA and NCCL only (STRATA_HAVE_NCCL).
//
// Streams: collectives run on the communicator's own stream (non-blocking, on `device`). Each call
// records an event on the compute stream and makes the communication stream wait on it, so it reads
// what compute wrote; it records a completion event that wait_compute makes the compute stream wait on
// (the host does not block). This is how a gradient all-reduce overlaps the rest of backward.
//
// Failure: the communicator is created in NCCL's non-blocking mode (ncclConfig_t::blocking = 0), and
// init and every call are polled against `timeout_s`. A watchdog thread checks the oldest collective
// in flight every 100 ms: one that has not finished `timeout_s` after it was issued (a peer died or
// stopped calling collectives) or an asynchronous NCCL error makes it call ncclCommAbort, which also
// frees a compute stream stuck behind the collective; every later call then throws an Error naming the
// collective, this rank and the reason. ncclResult_t errors become strata::Error with NCCL's message.
#pragma once
#include <memory>

#include "engine/comm.h"
#include "engine/rendezvous.h"

namespace strata {

struct NcclOptions {
  int device = 0;  // this rank's GPU (LOCAL_RANK); the communicator calls cudaSetDevice(device)
  // The cudaStream_t that collectives order after and that wait_compute makes wait: the cuda
  // backend's compute stream (the trainer integration passes it). Null: the legacy default stream.
  void* compute_stream = nullptr;
  double timeout_s = 300;  // init, each collective, and the barrier
  // > 0: a communicator of this rank's group of `group_size` consecutive ranks (sequence parallelism's groups, beside
  // the world's communicator), rank rdv.rank() % group_size of it; each group's first rank makes its NCCL id and the
  // ids travel through the rendezvous. Every rank of the rendezvous creates its group's at the same point. barrier()
  // is the world's. 0: every rank of the rendezvous.
  int group_size = 0;
};

// Rank 0 makes NCCL's unique id and sends it over `rdv` (kept for barrier(): it must outlive the
// communicator); every rank then joins with ncclCommInitRankConfig. Errors: UnsupportedError when
// `device` is not a visible GPU; Error on an NCCL failure or timeout.
std::unique_ptr<Communicator> make_nccl_communicator(Rendezvous& rdv, const NcclOptions& o);

// The NCCL library's version ("2.28.9"), for messages and the bench.
std::string nccl_version();

}  // namespace strata
