// Backend choice for the tools: "cpu", "cuda", or "auto" (cuda where built and a GPU is present).
#pragma once
#include <memory>
#include <string>

#include "engine/backend.h"

namespace strata {

#ifdef STRATA_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(size_t arena_budget_bytes);
bool cuda_device_present();
#endif

inline std::string resolve_backend_name(const std::string& name) {
  if (name != "auto") return name;
#ifdef STRATA_HAVE_CUDA
  if (cuda_device_present()) return "cuda";
#endif
  return "cpu";
}

inline std::unique_ptr<Backend> make_backend(const std::string& name, size_t budget) {
  if (name == "cpu") return make_cpu_backend(budget);
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
