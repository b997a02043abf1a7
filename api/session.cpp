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
#include "io/tokens.h"
#include "model/plan/arena_sizing.h"
#include "model/run/forecast_request.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/plan/planner.h"
#include "model/run/train_loop.h"
#include "model/train/trainer.h"

namespace strata {

namespace {

// The built-in profile whose `match` is in the device name (cuda), else strata-plan's default.
DeviceProfile profile_for_device(const std::string& device) {
  auto lower = [](std::string x) {
    for (auto& c : x) c = char(std::tolower(static_cast<unsigned char>(c)));
    return x;
  };
  for (auto& [name, p] : builtin_profiles())
    if (!p.match.empty() && lower(device).find(lower(p.match)) != std::string::npos) return p;
  return find_profile("h100_80gb");
}

// memory_budget_bytes: the budget planner on the sim backend mirroring this session's backend sets
// the plan (as strata-train --budget does). ConfigError naming the minimum when nothing fits.
void plan_to_budget(TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& backend, Backend& be) {
  ForecastRequest req = train_forecast_request(cfg, mc, backend == "cuda" ? SimMirror::cuda : SimMirror::cpu,
                                               profile_for_device(be.device_name()));
  // The planner chooses the plan, the paging (plan.layer_weights) included; a state placement the config
  // gives (state_offloading, state_offloading_layers, state_plan) stays, and the planner plans around it.
  req.plan = Plan::keep_everything();
  req.plan.take_state(cfg.plan);
  req.plan.set_layer_weights(Decision::keep, "budget planner");
  const size_t budget = cfg.memory_budget_bytes;
  PlanResult pr = plan_for_budget(req, TierBudgets{budget, cfg.host_budget_bytes, cfg.disk_budget_bytes});
  if (!pr.found)
    throw ConfigError(fmt::format("nothing fits a device budget of {} (host budget {}, disk budget {}): the minimum "
                                  "is {} with the lowest-memory plan ({})",
                                  format_bytes(budget), format_bytes(cfg.host_budget_bytes),
                                  format_bytes(cfg.disk_budget_bytes), format_bytes(pr.minimum_bytes), pr.label),
                      "SessionConfig", "memory_budget_bytes");
  cfg.plan = pr.plan;
}

}  // namespace

struct Session::Impl {
  std::shared_ptr<Device> device;  // first: destroyed last, after the model and trainer on it
  TrainConfig cfg;
  SessionConfig pub;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Trainer> trainer;
  std::optional<TokenBatcher> batches;
  std::function<void(const StepMetrics&)> callback;

  StepMetrics finish(const StepStats& st) {
    StepMetrics m = api::from_step_stats(st);
    if (callback) callback(m);
    return m;
  }
};

namespace {
// The device memory a Session's own device reserves: the config's, else on cuda what the plan's
// forecast needs (model/plan/arena_sizing.h), so an embedded engine leaves the rest of the GPU free.
size_t session_device_bytes(const SessionConfig& config) {
  if (config.device_budget_bytes) return config.device_budget_bytes;
  if (config.memory_budget_bytes) return config.memory_budget_bytes;
  if (config.model_dir.empty() || resolve_backend_name(config.backend) != "cuda") return 0;
  const TrainConfig cfg = api::to_train_config(config);
  return arena_for_plan(train_forecast_request(cfg, io::read_llama_config(cfg.model_dir), SimMirror::cuda,
                                               find_profile("h100_80gb")))
      .bytes;
}
}  // namespace

Session::Session(const SessionConfig& config)
    : Session(make_backend(config.backend, DeviceOptions{session_device_bytes(config)}), config) {}

Session::Session(std::shared_ptr<Device> device, const SessionConfig& config) : impl_(std::make_unique<Impl>()) {
  if (!device) throw ConfigError("Session: no device", "Session", "device");
  Impl& s = *impl_;
  s.device = std::move(device);
  s.cfg = api::to_train_config(config);
  TrainConfig& cfg = s.cfg;
  Backend& be = *s.device->impl().be;
  if (cfg.model_dir.empty())
    throw ConfigError("SessionConfig::model_dir (base_model) is required", "SessionConfig", "model_dir");
  if ((cfg.host_budget_bytes || cfg.disk_budget_bytes) && !cfg.memory_budget_bytes)
    throw ConfigError("host_budget_bytes / disk_budget_bytes are the planner's tier budgets: give memory_budget_bytes",
                      "SessionConfig", "memory_budget_bytes");
  io::LlamaConfig mc = io::read_llama_config(cfg.model_dir);
  std::vector<int32_t> tokens;
  if (!cfg.data_path.empty()) tokens = io::read_tokens(cfg.data_path, mc.vocab_size, long(cfg.seq) + 1);
  if (cfg.memory_budget_bytes) plan_to_budget(cfg, mc, s.device->backend(), be);

  s.model = std::make_unique<LlamaModel>(be, mc, model_options(cfg));
  s.model->load(cfg.model_dir);

  TrainOptions to = train_options(cfg);
  to.warmup_steps = cfg.warmup_steps;  // Session::step: the Trainer's own linear warmup (no schedule loop)
  s.trainer = std::make_unique<Trainer>(be, *s.model, to);
  if (!tokens.empty()) s.batches.emplace(std::move(tokens), cfg.batch, cfg.seq);
  s.pub = api::from_train_config(cfg);
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

StepMetrics Session::step() {
  if (!impl_->batches)
    throw ConfigError("Session::step(): no token file (SessionConfig::data_path); pass a TokenBatch", "SessionConfig",
                      "data_path");
  return impl_->finish(impl_->trainer->step(impl_->batches->next()));
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
  return impl_->finish(impl_->trainer->step(to_batch(batch)));
}

float Session::evaluate(const TokenBatch& batch) {
  return impl_->trainer->evaluate(to_batch(batch));
}

StepMetrics Session::run(int steps) {
  const int n = steps < 0 ? impl_->cfg.steps : steps;
  StepMetrics last;
  for (int i = 0; i < n; ++i) {
    last = step();
    if (last.diverged()) break;
  }
  return last;
}

void Session::on_step(std::function<void(const StepMetrics&)> callback) {
  impl_->callback = std::move(callback);
}

void Session::save(const std::string& dir) {
  const std::string out = dir.empty() ? impl_->cfg.output_dir : dir;
  if (out.empty()) throw ConfigError("Session::save: no directory (and no output_dir)", "SessionConfig", "output_dir");
  if (impl_->cfg.lora.enabled())
    impl_->model->save_lora(out, impl_->cfg.model_dir);
  else
    impl_->model->save(out);
}

int Session::steps_done() const {
  return impl_->trainer->steps_done();
}
const SessionConfig& Session::config() const {
  return impl_->pub;
}
ModelShape Session::model() const {
  return api::from_llama_config(impl_->model->config());
}
size_t Session::parameters() const {
  return impl_->model->param_count();
}
size_t Session::trainable_parameters() const {
  return impl_->model->trainable_count();
}
Device& Session::device() {
  return *impl_->device;
}

bool StepMetrics::diverged() const {
  return !std::isfinite(loss) || !std::isfinite(grad_norm);
}

}  // namespace strata
