// Declared for the engine and the layers above; defined in kernels/backend_sim.cpp.
// The sim backend: no data at all. Its arena has a null base and its tensors null data pointers;
// every op only advances a model clock by what the cost model says it takes, and makes exactly
// the arena allocations the mirrored backend (cpu or cuda) makes inside that op — same sizes,
// same order, same tags — so the engine above it (tape, plan, allocator) runs unchanged and the
// forecast peak is the engine's own.
//
// One compute timeline: every op runs after the previous one. Host/device copies of the host tier
// and the weight pager (reserve_host and the copy API) run on one copy-stream timeline beside it
// (mirror = cuda): a copy starts at max(copy stream free, compute clock at issue) and lasts
// bytes / (d2h|h2d GB/s); it is done once the compute clock has passed its end; a host wait moves
// the clock to its end, a compute wait holds the next compute op until then. mirror = cpu copies
// synchronously (cpu semantics: done at once), so the allocation schedule is the cpu backend's.
// Host reservations have a null base: no byte is ever read or written.
//
// The disk tier (open_disk_file): no file is created and no byte moves. Each write or read takes
// bytes / disk_write_gbps or disk_read_gbps on one serial disk queue, starting no earlier than the
// host issues it and than the previous request ends; it is done once the clock has passed its end,
// and a wait moves the clock there (as copy_wait_host does; the stall is counted as disk wait). A
// profile without disk bandwidth makes open_disk_file a ConfigError naming the field.
#pragma once
#include <array>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/cost_model.h"
#include "engine/names.h"

namespace strata {

enum class SimMirror { cpu, cuda };
inline constexpr EnumName<SimMirror> kSimMirrors[] = {{SimMirror::cuda, "cuda"}, {SimMirror::cpu, "cpu"}};
inline const char* sim_mirror_name(SimMirror m) {
  return name_of(kSimMirrors, m);
}

struct SimOptions {
  size_t budget = 0;  // arena budget; 0 = unbounded (1 PiB of offsets: nothing is backed)
  DeviceProfile profile;
  // Whose allocation behaviour and dtypes to reproduce. cpu: f32, no allocations inside ops.
  // cuda: bf16 compute, the cuBLASLt workspace at construction, attention workspaces and
  // unused-gradient scratch, the loss chunk buffers.
  SimMirror mirror = SimMirror::cuda;
  bool log_events = false;  // arena event log on from construction (before the cuda workspace)
};

// Where the model time went. Phases follow the tape's calls: backward starts at the seed of the
// loss gradient (fill with 1), the optimizer at the first grad_norm_sq; a forward kernel run
// during backward is a recompute.
struct SimTimes {
  std::array<double, size_t(OpKind::count_)> op_s{};  // per op kind, recompute included
  double memset_s = 0, copy_s = 0;                    // zero/fill, host copies
  double copy_wait_s = 0;               // compute clock stalled on tier/pager copies (host or compute waits)
  double copy_busy_s = 0;               // copy stream busy (tier/pager copies, overlapped with compute on cuda)
  size_t d2h_bytes = 0, h2d_bytes = 0;  // tier/pager copies
  double disk_wait_s = 0;               // the clock stalled on disk-tier requests (the slot store waiting)
  double disk_busy_s = 0;               // the disk queue busy
  size_t disk_write_bytes = 0, disk_read_bytes = 0;
  double recompute_s = 0;
  // Gradient accumulation: the later micro-batches' forwards, from a backward's end to the next backward's seed
  // (model time after backward_start_s that is forward, not recompute).
  double between_backwards_s = 0;
  double comm_wait_s = 0;        // the clock stalled on collectives: the host waiting, or compute (engine/comm_sim.h)
  double comm_contention_s = 0;  // compute time lost to collectives running beside it
  long kernels = 0;
  long repeats = 0;  // blocks applied again from one run's record (Backend::end_repeat), not run
  double backward_start_s = -1, optimizer_start_s = -1;  // model time, -1 = not reached
};

class SimBackend : public Backend {
 public:
  virtual double now_s() const = 0;
  virtual const SimTimes& times() const = 0;
  // The kernels' first-call tuning of every GEMM and attention problem run so far, once each (mirror cuda; 0 on
  // cpu): Forecast::setup_tuning_s beside the profile's first_step_tuning_s. Not in the clock.
  virtual double tuning_s() const = 0;
  virtual void reset_times() = 0;  // zeroes the per-op sums and phase marks (not the clock)
  virtual SimMirror mirror() const = 0;
  virtual const CostModel& cost() const = 0;
  // A collective's timeline (engine/comm_sim.h) meets this one: host false, the next compute op
  // starts no earlier than t_s (as copy_wait_compute); host true, the clock waits until t_s.
  virtual void wait_for_event(double t_s, bool host) = 0;
  // Compute beside a collective runs slower (DeviceProfile::nccl_compute_overlap): the compute
  // clock loses s (counted in SimTimes::comm_contention_s).
  virtual void slow_compute(double s) = 0;
};

std::unique_ptr<SimBackend> make_sim_backend(const SimOptions& opt);

}  // namespace strata
