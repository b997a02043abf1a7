// Backend choice for the tools: "cpu", "cuda", or "auto" (cuda where built and a GPU is present).
#pragma once
#include <memory>
#include <string>

#include "engine/backend.h"
#ifdef STRATA_HAVE_CUDA
#include "kernels/backend_cuda.h"
#endif

namespace strata {

inline std::string resolve_backend_name(const std::string& name) {
  if (name != "auto") return name;
#ifdef STRATA_HAVE_CUDA
  if (cuda_device_present()) return "cuda";
#endif
  return "cpu";
}

// budget 0 = auto: the cuda backend takes the GPU's free memory less headroom; the cpu backend
// reserves 16 GiB of address space (pages are only touched as the arena uses them).
inline std::unique_ptr<Backend> make_backend(const std::string& name, size_t budget) {
  if (name == "cpu") return make_cpu_backend(budget ? budget : size_t(16) << 30);
  if (name == "cuda") {
#ifdef STRATA_HAVE_CUDA
    return make_cuda_backend(budget);
#else
    throw ConfigError("--backend cuda: this build has no cuda backend (nvcc was not found at configure time)",
                      "command line", "backend");
#endif
  }
  throw ConfigError("--backend '" + name + "' is unknown (expected cpu, cuda or auto)", "command line", "backend");
}

}  // namespace strata
