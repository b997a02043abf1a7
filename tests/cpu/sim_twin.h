// The sim tests' twin runs: the tiny model's forecast request (mirroring the cpu backend), and the
// same step on the real cpu backend to compare the forecast with (sim_test, planner_test).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/plan/forecast.h"
#include "model/train/trainer.h"
#include "tiny_model.h"

namespace strata::sim_twin {

inline const size_t kBudget = size_t(64) << 20;

inline ForecastRequest tiny_request(Plan plan, TrainMode mode = TrainMode::full) {
  ForecastRequest r;
  r.model = test_util::tiny_config();
  r.seq = 19;
  r.batch = 2;
  r.mode = mode;
  r.lora_rank = 4;
  r.loss_chunk_tokens = 16;  // several chunks per step
  r.plan = std::move(plan);
  r.profile = find_profile("h100_80gb");
  r.mirror = SimMirror::cpu;
  r.budget = kBudget;
  r.tiers.offload_dir = ::testing::TempDir() + "sim_test_disk";  // the cpu twin's real disk-tier file
  return r;
}

// tiny_request mirroring the cuda backend (bf16 activations, its workspaces and split masters) with no device
// budget: forecasts to compare with each other, not with a cpu step.
inline ForecastRequest tiny_cuda_request(Plan plan, TrainMode mode = TrainMode::full) {
  ForecastRequest r = tiny_request(std::move(plan), mode);
  r.mirror = SimMirror::cuda;
  r.budget = 0;
  return r;
}

struct CpuStep {
  bool fits = true;
  size_t peak = 0, high_water = 0, disk_peak = 0;
  size_t host_peak = 0;  // slot store peak plus the pager's and the state's host blocks (Forecast::peak_host_bytes)
  size_t pinned =
      0;  // the host reservations: slot store pool (staging included), pager, state (Forecast::pinned_bytes)
  std::vector<ArenaEvent> events;
};

// The same construction and one step on the real cpu backend, with real weights and tokens.
inline CpuStep cpu_step(const ForecastRequest& r, size_t budget, const Plan& plan) {
  auto be = make_cpu_backend(budget);
  be->arena().set_logging(true);
  LlamaModel model(*be, r.model, forecast_model_options(r));
  model.init_random(5);
  TrainOptions to;
  to.plan = plan;
  to.tiers = r.tiers;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, r.model.vocab_size, 3), r.batch, r.seq);
  CpuStep out;
  try {
    // r.grad_accum micro-batches a step (as the forecast's), their gradients summed on the device.
    auto micro = [&] {
      std::vector<Batch> m;
      for (int i = 0; i < std::max(1, r.grad_accum); ++i) m.push_back(data.next());
      return m;
    };
    StepStats st = tr.step(micro(), to.adam.lr);
    size_t first_peak = 0;
    if (tr.optimizer().pending()) {  // as the forecast does: a second step applies the first's deferred update
      first_peak = st.peak_device_bytes;
      st = tr.step(micro(), to.adam.lr);
    }
    out.peak = std::max(st.peak_device_bytes, first_peak);
    out.disk_peak = st.peak_disk_bytes + st.state_disk_bytes;
    out.host_peak = st.peak_host_bytes + (model.pager() ? model.pager()->host_bytes() : 0) + st.state_host_bytes;
    out.pinned = tr.store().stats().host_reserved_bytes + (model.pager() ? model.pager()->host_bytes() : 0) +
                 st.state_host_bytes;
  } catch (const OutOfMemoryError&) {
    out.fits = false;
  }
  out.high_water = be->arena().high_water();
  out.events = be->arena().events();
  return out;
}

}  // namespace strata::sim_twin
