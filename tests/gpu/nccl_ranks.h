// The multi-GPU tests' launcher: one child process per rank running this test binary's child cases
// (comm_gpu_test, seq_parallel_gpu_test, zero_gpu_test). Builds without NCCL see no GPUs, so the
// parent cases skip with a visible message.
#pragma once
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "model/run/launch.h"
#ifdef STRATA_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace gpu_test {

// The GPUs a multi-rank test may use: 0 in a build without NCCL.
inline int nccl_gpu_count() {
#ifdef STRATA_HAVE_NCCL
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
#else
  return 0;
#endif
}

// This process is a child rank: `env` is set (run_child_ranks sets it).
inline bool is_rank_child(const char* env) {
  return std::getenv(env) != nullptr;
}

// Runs `tool` (this test binary) as `ranks` local ranks with --gtest_filter=`filter` and `env` set;
// the launcher's exit status (0: every rank passed).
inline int run_child_ranks(const char* tool, int ranks, const std::string& filter, const char* env) {
  strata::LocalLaunch l;
  l.nprocs = ranks;
  l.args = {fmt::format("--gtest_filter={}", filter)};
  l.tool = tool;
  ::setenv(env, "1", 1);
  const int rc = strata::run_local_ranks(l);
  ::unsetenv(env);
  return rc;
}

}  // namespace gpu_test
