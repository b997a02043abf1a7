// STRATA_CUDA(call): a CUDA runtime call whose failure throws strata::Error naming the statement,
// CUDA's message and code, the current device and file:line. Host C++ (the backend, the nccl
// communicator); kernels' .cu files use cuda_common.cuh's STRATA_CUDA_CHECK.
#pragma once
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "engine/error.h"

namespace strata::cuda {

inline void check_call(cudaError_t e, const char* stmt, const char* file, int line) {
  if (e == cudaSuccess) return;
  int dev = -1;
  cudaGetDevice(&dev);
  throw Error(fmt::format("{} failed: {} ({}) on cuda device {} [{}]", stmt, cudaGetErrorString(e), int(e), dev,
                          detail::where(file, line)));
}

}  // namespace strata::cuda

#define STRATA_CUDA(x) ::strata::cuda::check_call((x), #x, __FILE__, __LINE__)
