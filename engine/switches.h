// Process-wide switches that come from the environment (tuning, profiling, diagnostics and the
// default temp directory), read once into one struct: kernels, the tape and the tiers read its
// fields, never getenv. docs/USER_GUIDE.md ("Environment") lists them.
#pragma once
#include <functional>
#include <string>

namespace strata {

struct Switches {
  bool gemm_tune = true;                  // STRATA_GEMM_TUNE=0: cuBLASLt's heuristic first choice, untimed
  bool gemm_verbose = false;              // STRATA_GEMM_VERBOSE=1: print each GEMM tuning
  double gemm_tune_ms = 0;                // STRATA_GEMM_TUNE_MS=X: time candidates round-robin for about X ms
  bool attn_tune = true;                  // STRATA_ATTN_TUNE=0: cuDNN's first attention plan, untimed
  bool attn_verbose = false;              // STRATA_ATTN_VERBOSE=1: print each attention tuning
  bool grad_alias = true;                 // STRATA_GRAD_ALIAS=0: the residual add's backward runs its kernel
  bool host_register = true;              // STRATA_HOST_REGISTER=0: pinned host memory by cudaHostAlloc alone
  bool op_profile = false;                // STRATA_PROFILE=1: GPU time per op
  int op_profile_skip = 1;                // STRATA_PROFILE_SKIP=N: steps the per-op profile leaves out first
  bool kernel_trace = false;              // STRATA_KERNEL_TRACE=1 (strata-bench): GPU time per kernel (CUPTI)
  std::string cupti_lib;                  // STRATA_CUPTI_LIB: the libcupti the kernel trace loads first
  std::string temp_dir = "/tmp";          // TMPDIR: the default directory of the disk tier's and the state's file
  std::string visible_devices = "unset";  // CUDA_VISIBLE_DEVICES, for error messages only
  long test_kill_at = 0;                  // STRATA_TEST_KILL_AT=N (tests): SIGKILL at a save's Nth write or rename
  bool test_rename_fallback = false;      // STRATA_TEST_RENAME_FALLBACK set (tests): no atomic exchange of copies

  // From a lookup (name -> value or null): flags are off only for "0" and keep their default when
  // unset or empty; numbers keep their default when they do not parse.
  static Switches from(const std::function<const char*(const char*)>& get);
};

// This process's switches, read from its environment the first time they are asked for.
const Switches& switches();

// The process's environment variable `name`, or null when unset: strata's one getenv. switches() reads it
// once; the launcher's variables (model/run/launch.h) are read through it on each call.
const char* process_env(const char* name);

}  // namespace strata
