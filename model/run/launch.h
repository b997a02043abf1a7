// Launching a job of several ranks (one process per GPU):
//  - read_launch_env: who am I, from the launcher's environment: torchrun (RANK, WORLD_SIZE,
//    LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or SLURM srun (SLURM_PROCID,
//    SLURM_NTASKS, SLURM_LOCALID, and MASTER_ADDR or else SLURM_LAUNCH_NODE_IPADDR); neither: one rank.
//  - run_local_ranks: the self-launcher behind `--gpus N`: N copies of this binary with the torchrun
//    variables set; signals forwarded; one failing rank stops the others and names itself.
//  - launch_hook: the few lines a tool's main() calls first.
//
// Devices: every rank sees every GPU of its node (CUDA_VISIBLE_DEVICES is left alone, so NCCL can find
// the peer-to-peer paths between them) and uses GPU LOCAL_RANK (cudaSetDevice; the nccl communicator's
// `device`). A CUDA_VISIBLE_DEVICES the user sets still applies: LOCAL_RANK indexes the visible GPUs.
#pragma once
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/rendezvous.h"

namespace strata {

struct LaunchEnv {
  std::string launcher = "none";  // "torchrun" (RANK/WORLD_SIZE; also --gpus children), "slurm", "none"
  int rank = 0, world = 1;
  int local_rank = 0, local_world = 1;  // on this node; local_rank is the GPU index
  std::string master_addr = "127.0.0.1";
  int master_port =
      29500;  // where rank 0 listens: MASTER_PORT, or (below) the port after it under torchrun's agent store
  std::string port_name = "MASTER_PORT";
  double timeout_s = 300;  // STRATA_COMM_TIMEOUT (seconds): every rendezvous and collective wait
  std::string secret;      // STRATA_JOB_SECRET: required when world > 1 (the rendezvous' HMAC key)
  RendezvousOptions rendezvous() const {
    return {master_addr, master_port, rank, world, timeout_s, port_name, secret, local_world};
  }
};

// The environment as process_env (engine/switches.h) sees it; `lookup` replaces it (tests). Bad values are ConfigErrors
// (file "environment", field the variable) naming the variable, its value and what is expected.
// RANK or WORLD_SIZE set: torchrun's variables (RANK, WORLD_SIZE required; with WORLD_SIZE > 1 also
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT; LOCAL_WORLD_SIZE optional). Else SLURM_PROCID set: SLURM's
// (SLURM_NTASKS or SLURM_NPROCS, SLURM_LOCALID; SLURM_NTASKS_PER_NODE where it is one number; the
// master from MASTER_ADDR, else SLURM_LAUNCH_NODE_IPADDR; MASTER_PORT, else 29500). Under either,
// a job of several ranks needs STRATA_JOB_SECRET (16 to 1024 characters, the same on every rank):
// unset or too short is a ConfigError saying how to set it. STRATA_LAUNCHER=--gpus (set by
// run_local_ranks) names the launcher "--gpus" instead of "torchrun".
using EnvLookup = std::function<const char*(const char*)>;
LaunchEnv read_launch_env(const EnvLookup& lookup = {});

struct LocalLaunch {
  int nprocs = 1;
  std::string exe;                // the program; empty = this binary (/proc/self/exe)
  std::vector<std::string> args;  // argv[1..] for every rank
  std::string master_addr = "127.0.0.1";
  int master_port = 0;          // 0 = a free port (pick_free_port)
  std::string secret;           // STRATA_JOB_SECRET for the ranks; empty = 32 random bytes, hex
  double grace_s = 10;          // after a rank failed: SIGTERM the others, SIGKILL them after this
  std::string tool = "strata";  // the prefix of its messages
};
// Starts nprocs ranks (RANK = LOCAL_RANK = 0..N-1, WORLD_SIZE = LOCAL_WORLD_SIZE = N, MASTER_ADDR,
// MASTER_PORT, a fresh STRATA_JOB_SECRET; each in its own process group, killed if the launcher dies) and waits for
// them. SIGINT/SIGTERM to the launcher are forwarded to every rank. When a rank exits non-zero or is killed, the others
// get SIGTERM (SIGKILL after grace_s) and the launcher reports "rank R (pid P) exited with status S" on `log`. Returns
// 0 when every rank exited 0; else the first failed rank's exit status (128 + signal for a signal).
int run_local_ranks(const LocalLaunch& l, std::FILE* log = stderr);

// Removes `--gpus N` / `--gpus=N` from argv (argc updated). nullopt when absent; ConfigError when N is
// not an integer in 1..kMaxLocalGpus.
constexpr int kMaxLocalGpus = 64;
std::optional<int> take_gpus_flag(int& argc, char** argv);

// A tool's first lines: handles --gpus N (N > 1: re-executes this binary as N ranks and returns the
// exit code to end with) and the launcher environment. `ranks_supported` false: a job of several ranks
// (--gpus N > 1, or WORLD_SIZE/SLURM_NTASKS > 1) is refused with a message naming what is missing
// (returns 2). nullopt: go on as this rank.
std::optional<int> launch_hook(int& argc, char** argv, const char* tool, bool ranks_supported);

}  // namespace strata
