// strata/strata.h: a training session, as strata-train runs one (tools/strata_train.cpp).
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <optional>

#include "api/backend_factory.h"
#include "api/convert.h"
#include "api/device.h"
#include "engine/arena.h"
#include "io/hf_config.h"
#include "model/run/job.h"
#include "model/run/launch.h"

namespace strata {

struct Session::Impl {
  std::shared_ptr<Device> device;  // first: destroyed last, after the job on it
  SessionConfig pub;
  std::unique_ptr<Job> job;
  std::function<void(const StepMetrics&)> callback;

  StepMetrics finish(const StepStats& st) {
    StepMetrics m = api::from_step_stats(st);
    if (callback) callback(m);
    return m;
  }
};

namespace {
// The device memory a Session's own device reserves: what a strata-train run of the same settings
// reserves (model/run/job.h), so an embedded engine leaves the rest of the GPU free.
size_t session_device_bytes(const SessionConfig& config) {
  const TrainConfig cfg = api::to_train_config(config);
  if (cfg.device_budget_bytes || cfg.memory_budget_bytes || cfg.model_dir.empty())
    return cfg.device_budget_bytes ? cfg.device_budget_bytes : cfg.memory_budget_bytes;
  return default_arena_bytes(cfg, io::read_llama_config(cfg.model_dir), resolve_backend_name(cfg.backend),
                             read_launch_env());
}
}  // namespace

Session::Session(const SessionConfig& config)
    : Session(make_backend(config.backend, DeviceOptions{session_device_bytes(config)}), config) {}

Session::Session(std::shared_ptr<Device> device, const SessionConfig& config) : impl_(std::make_unique<Impl>()) {
  if (!device) throw ConfigError("Session: no device", "Session", "device");
  Impl& s = *impl_;
  s.device = std::move(device);
  JobOptions jo;  // quiet: a library prints nothing; on_step() sees every step
  jo.backend = s.device->impl().be.get();
  jo.backend_name = s.device->backend();
  jo.needs_data = false;  // without data the caller passes its own batches to step(batch)
  Impl* self = &s;
  jo.on_step = [self](const StepStats& st) { self->finish(st); };
  s.job = std::make_unique<Job>(api::to_train_config(config), default_platform(), jo);
  s.pub = api::from_train_config(s.job->config());
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

StepMetrics Session::step() {
  Job& job = *impl_->job;
  if (!job.has_loop())
    throw ConfigError("Session::step(): no training data (data_path, datasets); pass a TokenBatch", "SessionConfig",
                      "data_path");
  TrainLoop& loop = job.loop();
  loop.begin();
  if (loop.result().steps_done >= loop.total_steps() || loop.result().diverged || loop.result().stopped_by)
    throw ConfigError(fmt::format("Session::step(): the run is over after step {} of {} (max_steps, num_epochs)",
                                  loop.result().steps_done, loop.total_steps()),
                      "SessionConfig", "steps");
  loop.step();
  return api::from_step_stats(loop.last_step());
}

namespace {
Batch to_batch(const TokenBatch& tb) {
  const size_t n = size_t(tb.batch) * size_t(tb.seq);
  if (tb.batch <= 0 || tb.seq <= 0 || tb.inputs.size() != n || tb.targets.size() != n)
    throw ConfigError(fmt::format("TokenBatch: {} x {} needs {} inputs and targets, got {} and {}", tb.batch, tb.seq, n,
                                  tb.inputs.size(), tb.targets.size()),
                      "TokenBatch", "inputs");
  Batch b;
  b.B = tb.batch;
  b.T = tb.seq;
  b.inputs = tb.inputs;
  b.targets = tb.targets;
  return b;
}
}  // namespace

StepMetrics Session::step(const TokenBatch& batch) {
  return impl_->finish(impl_->job->trainer().step(to_batch(batch)));
}

float Session::evaluate(const TokenBatch& batch) {
  return impl_->job->trainer().evaluate(to_batch(batch));
}

StepMetrics Session::run(int steps) {
  Job& job = *impl_->job;
  TrainLoop& loop = job.loop();
  loop.begin();
  StepMetrics last;
  for (int i = 0; steps < 0 || i < steps; ++i) {
    const bool more = loop.step();
    if (loop.result().steps_done > 0) last = api::from_step_stats(loop.last_step());
    if (!more) break;
  }
  return last;
}

float Session::evaluate() {
  return impl_->job->loop().evaluate();
}

std::string Session::plan_table() const {
  return impl_->job->plan_table();
}

void Session::on_step(std::function<void(const StepMetrics&)> callback) {
  impl_->callback = std::move(callback);
}

void Session::save(const std::string& dir) {
  const std::string out = dir.empty() ? impl_->job->config().output_dir : dir;
  if (out.empty()) throw ConfigError("Session::save: no directory (and no output_dir)", "SessionConfig", "output_dir");
  impl_->job->save(out);
}

int Session::steps_done() const {
  return impl_->job->trainer().steps_done();
}
const SessionConfig& Session::config() const {
  return impl_->pub;
}
ModelShape Session::model() const {
  return api::from_llama_config(impl_->job->model().config());
}
size_t Session::parameters() const {
  return impl_->job->model().param_count();
}
size_t Session::trainable_parameters() const {
  return impl_->job->model().trainable_count();
}
Device& Session::device() {
  return *impl_->device;
}

bool StepMetrics::diverged() const {
  return !std::isfinite(loss) || !std::isfinite(grad_norm);
}

}  // namespace strata
