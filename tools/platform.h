// The tools' Platform: the library's (api/backend_factory.h) with NCCL between cuda ranks where this
// build has it (strata_comm_nccl, linked by the tools that train on several GPUs).
#pragma once
#include <memory>

#include "api/backend_factory.h"
#ifdef STRATA_HAVE_NCCL
#include "kernels/comm_nccl.h"
#endif

namespace strata::tools {

inline Platform platform() {
  Platform p = default_platform();
#ifdef STRATA_HAVE_NCCL
  p.make_comm = [](Rendezvous& rdv, Backend& be, const LaunchEnv& env, int group) -> std::unique_ptr<Communicator> {
    if (be.name() != "cuda") return nullptr;  // the cpu communicator
    NcclOptions o{env.local_rank, be.native_stream(), env.timeout_s};
    if (group > 1) o.group_size = group;
    return make_nccl_communicator(rdv, o);
  };
#endif
  return p;
}

}  // namespace strata::tools
