#include "api/backend_factory.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/backend_cuda.h"
#endif

namespace strata {

std::string resolve_backend_name(const std::string& name) {
  if (name != "auto") return name;
#ifdef STRATA_HAVE_CUDA
  if (cuda_device_present()) return "cuda";
#endif
  return "cpu";
}

std::unique_ptr<Backend> make_backend(const std::string& name, size_t budget) {
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

bool cuda_backend_built() {
#ifdef STRATA_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace strata
