// The cuda backend's factory (kernels/backend_cuda.cpp, built where nvcc is found).
#pragma once
#include <memory>

#include "engine/backend.h"

namespace strata {
// budget_bytes 0 = the GPU's free memory less 2 GiB of headroom. Throws UnsupportedError
// without a Hopper-or-newer GPU, ConfigError when the budget exceeds the free memory.
std::unique_ptr<Backend> make_cuda_backend(size_t budget_bytes);
bool cuda_device_present();
}  // namespace strata
