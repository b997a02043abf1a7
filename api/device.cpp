// strata/strata.h: backends by name.
#include "api/device.h"

#include <fmt/format.h>

#include "api/backend_factory.h"
#include "engine/arena.h"
#include "engine/backend_sim.h"
#include "engine/cost_model.h"
#include "model/run/launch.h"

namespace strata {

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;

const std::string& Device::backend() const {
  return impl_->backend;
}
std::string Device::description() const {
  return impl_->be->device_name();
}
size_t Device::arena_budget_bytes() const {
  return impl_->be->arena().budget();
}
size_t Device::arena_peak_bytes() const {
  return impl_->be->arena().peak();
}

std::shared_ptr<Device> make_backend(const std::string& name, const DeviceOptions& opt) {
  auto impl = std::make_unique<Device::Impl>();
  if (name == "sim") {
    const std::optional<SimMirror> mirror = parse_name(kSimMirrors, opt.sim_mirror);
    if (!mirror)
      throw ConfigError(
          fmt::format("DeviceOptions::sim_mirror must be {}, got '{}'", name_choices(kSimMirrors), opt.sim_mirror),
          "DeviceOptions", "sim_mirror");
    SimOptions so;
    so.budget = opt.memory_bytes;
    so.profile = find_profile(opt.sim_profile);
    so.mirror = *mirror;
    impl->backend = "sim";
    impl->be = make_sim_backend(so);
  } else {
    impl->backend = resolve_backend_name(name);
    // One rank of a launched job (torchrun, srun): its own GPU, LOCAL_RANK, as strata-train's ranks.
    const LaunchEnv env = read_launch_env();
    impl->be = default_platform().make_backend(impl->backend, opt.memory_bytes, env.world > 1 ? env.local_rank : -1);
  }
  return std::make_shared<Device>(std::move(impl));
}

std::vector<std::string> available_backends() {
  std::vector<std::string> v = {"cpu", "sim"};
  if (cuda_backend_built()) v.push_back("cuda");
  return v;
}

}  // namespace strata
