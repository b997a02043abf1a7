// The TCP rendezvous of a multi-process job: rank 0 listens on MASTER_ADDR:MASTER_PORT, every other
// rank connects to it (retrying until it answers), and the ranks then exchange small messages
// through rank 0 (a star). It carries the NCCL unique id from rank 0 to the others, serves the cpu
// communicator's processes mode (engine/comm.h) and host barriers.
//
// Who may join: only a peer that proves it holds the job's secret (RendezvousOptions::secret, the
// launcher's STRATA_JOB_SECRET) by an HMAC-SHA-256 over a fresh challenge from rank 0; rank 0 proves
// it holds it too in its welcome, so the secret never travels. Rank 0 listens only on the address
// MASTER_ADDR resolves to (127.0.0.1 for a --gpus job). While joining, every message is at most 4 KiB
// and a connection must finish its hello within `handshake_s`; connections are served side by side,
// so a stranger that stalls, sends garbage or a wrong proof is dropped without delaying the ranks.
// After the join, frames are bounded too and their bytes allocated only as they arrive.
//
// Every wait is bounded by `timeout_s`. Rank 0 names the ranks that never arrived ("ranks 2, 3 of 4
// did not connect to 127.0.0.1:29500 within 300 s") and tells every connected rank why it gives up
// (an abort message), so all ranks end with the same clear error instead of hanging. A rank whose
// connection closes (it died) is named too.
#pragma once
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata {

struct RendezvousOptions {
  RendezvousOptions() = default;
  RendezvousOptions(std::string addr, int port, int rank_, int world_, double timeout = 300,
                    std::string port_from = "MASTER_PORT", std::string secret_ = "", int local_world_ = 0)
      : master_addr(std::move(addr)),
        master_port(port),
        rank(rank_),
        world(world_),
        timeout_s(timeout),
        port_name(std::move(port_from)),
        secret(std::move(secret_)),
        local_world(local_world_) {}
  std::string master_addr = "127.0.0.1";  // a host name or IPv4 address where rank 0 runs
  int master_port = 29500;                // rank 0 listens on it, on master_addr only
  int rank = 0, world = 1;
  double timeout_s = 300;                 // every wait: connecting, every rank arriving, every message
  std::string port_name = "MASTER_PORT";  // where master_port came from, for errors
  std::string secret;                     // the job secret (STRATA_JOB_SECRET); the HMAC key of the join
  int local_world = 0;     // ranks on rank 0's node; < world: several nodes (a loopback MASTER_ADDR is refused)
  double handshake_s = 5;  // a new connection must send a valid hello within this (capped at timeout_s)
};

// The largest timeout_s accepted (7 days): the deadlines are steady_clock time points, which a
// larger value would overflow.
constexpr double kMaxCommTimeoutS = 7 * 24 * 3600.0;

// Errors: ConfigError (field MASTER_ADDR) when the address does not resolve, or resolves to loopback
// in a job of several nodes; IoError when rank 0 cannot listen (the port is in use, or MASTER_ADDR is
// not an address of rank 0's host) or a peer's connection fails; Error naming the missing ranks on a
// timeout (with the connections refused meanwhile, and why), the reason when rank 0 aborted, and
// "the job secret does not match" on a rank whose STRATA_JOB_SECRET differs from rank 0's.
class Rendezvous {
 public:
  // Rank 0: listens and waits for world - 1 ranks to connect; the others connect with retries. Returns
  // once every rank has joined (rank 0 checks the ranks are distinct and agree on the world size).
  static std::unique_ptr<Rendezvous> join(const RendezvousOptions& o);
  virtual ~Rendezvous() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual const RendezvousOptions& options() const = 0;
  // Rank 0's bytes, on every rank (others pass anything, it is ignored).
  virtual std::vector<std::byte> broadcast(std::span<const std::byte> from_root) = 0;
  // Every rank's bytes, in rank order, on every rank (sizes may differ between ranks).
  virtual std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;
  // Rank 0 tells every rank to stop with `reason`; another rank tells rank 0. Never throws.
  virtual void abort(const std::string& reason) = 0;
};

// A TCP port on `addr` that nobody listens on now (the kernel's choice), for a self-launched job.
int pick_free_port(const std::string& addr = "127.0.0.1");

}  // namespace strata
