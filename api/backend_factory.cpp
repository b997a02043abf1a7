#include "api/backend_factory.h"

#include <fmt/format.h>

#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>

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

Platform default_platform() {
  Platform p;
  p.resolve_backend = resolve_backend_name;
  p.make_backend = [](const std::string& name, size_t bytes, int local_rank) {
    if (name == "cuda" && local_rank >= 0) {
#ifdef STRATA_HAVE_CUDA
      if (cudaSetDevice(local_rank) != cudaSuccess)
        throw UnsupportedError(
            fmt::format("cannot use GPU {} (LOCAL_RANK): {}", local_rank, cudaGetErrorString(cudaGetLastError())));
#endif
    }
    return make_backend(name, bytes);
  };
  p.make_comm = [](Rendezvous&, Backend& be, const LaunchEnv&, int) -> std::unique_ptr<Communicator> {
    if (be.name() != "cuda") return nullptr;  // the cpu communicator
    throw UnsupportedError(
        "several ranks on the cuda backend need NCCL: strata-train has it where it was built with nccl.h; the "
        "library's Platform takes a make_comm that makes one (tools/platform.h shows how)");
  };
  return p;
}

bool cuda_backend_built() {
#ifdef STRATA_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace strata
