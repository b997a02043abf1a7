// strata/strata.h: models, configs, forecasts and the budget planner.
#include <filesystem>

#include "api/convert.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/tokens.h"
#include "model/data/data.h"
#include "model/llama/rng.h"
#include "model/llama/shapes.h"

namespace strata {

// ---- Models

ModelShape model_shape(const std::string& spec) {
  return api::from_llama_config(resolve_model(spec));
}

std::vector<std::string> builtin_models() {
  std::vector<std::string> v;
  for (const NamedShape& s : builtin_shapes()) v.push_back(s.name);
  return v;
}

std::string write_tiny_checkpoint(const std::string& dir, const ModelShape& shape, uint64_t seed, long tokens) {
  const io::LlamaConfig c = api::to_llama_config(shape);
  if (tokens < 1) throw ConfigError("write_tiny_checkpoint: tokens must be >= 1", "write_tiny_checkpoint", "tokens");
  std::filesystem::create_directories(dir);
  // As strata-make-tiny: normal(0, 0.02) weights, norms at 1, in checkpoint order.
  Rng rng(seed);
  std::vector<std::vector<float>> host;
  std::vector<io::TensorToWrite> tensors;
  auto shapes = llama_weight_shapes(c);
  host.reserve(shapes.size());
  for (auto& [name, s] : shapes) {
    host.emplace_back(size_t(s.numel()));
    const bool norm = s.nd == 1;
    for (auto& x : host.back()) x = norm ? 1.0f : float(0.02 * rng.normal());
    tensors.push_back({name, DType::f32, std::vector<int64_t>(s.d.begin(), s.d.begin() + s.nd), host.back().data()});
  }
  io::save_safetensors(dir + "/model.safetensors", tensors);
  io::write_file_atomic(dir + "/config.json", io::llama_config_to_json(c));
  const std::string token_file = dir + "/tokens.bin";
  io::write_tokens(token_file, synthetic_tokens(tokens, c.vocab_size, seed));
  return token_file;
}

// ---- Plans and configs

MemoryPlan MemoryPlan::keep_everything() {
  return api::from_plan(Plan::keep_everything());
}
MemoryPlan MemoryPlan::gradient_checkpointing(int every) {
  return api::from_plan(Plan::gradient_checkpointing(every));
}
MemoryPlan MemoryPlan::selective_recompute() {
  return api::from_plan(Plan::selective_recompute());
}
MemoryPlan MemoryPlan::hidden_states() {
  return api::from_plan(Plan::hidden_states());
}

MemoryPlan MemoryPlan::activation_offloading(const std::string& tier) {
  if (tier == "host") return api::from_plan(Plan::activation_offloading(Decision::host));
  if (tier == "legacy") return api::from_plan(Plan::activation_offloading(Decision::host, true));
  if (tier == "disk") return api::from_plan(Plan::activation_offloading(Decision::disk));
  throw ConfigError("MemoryPlan::activation_offloading: tier must be host, disk or legacy, got '" + tier + "'",
                    "MemoryPlan", "activation_offloading");
}

MemoryPlan& MemoryPlan::set_state_offloading(const std::string& level) {
  Plan p = api::to_plan(*this, "MemoryPlan");
  p.set_state_offloading(level, "MemoryPlan::set_state_offloading");
  *this = api::from_plan(p);
  return *this;
}

MemoryPlan& MemoryPlan::set_state_offloading_layers(const std::string& level, int layers) {
  Plan p = api::to_plan(*this, "MemoryPlan");
  p.set_state_offloading_layers(level, layers, "MemoryPlan::set_state_offloading_layers");
  *this = api::from_plan(p);
  return *this;
}

void apply_yaml(SessionConfig& cfg, const std::string& path) {
  TrainConfig t = api::to_train_config(cfg);
  apply_yaml(t, path);
  cfg = api::from_train_config(t);
}

void apply_yaml_text(SessionConfig& cfg, const std::string& text, const std::string& path_for_errors) {
  TrainConfig t = api::to_train_config(cfg);
  apply_yaml_text(t, text, path_for_errors);
  cfg = api::from_train_config(t);
}

// ---- Forecasts and the planner

ForecastReport forecast(const ForecastSpec& spec) {
  return api::from_forecast(forecast(api::to_request(spec)));
}

PlanReport plan_for_budget(const ForecastSpec& spec, const Budgets& budgets) {
  const PlanResult pr = plan_for_budget(api::to_request(spec), TierBudgets{budgets.device, budgets.host, budgets.disk});
  PlanReport r;
  r.found = pr.found;
  r.plan = api::from_plan(pr.plan);
  r.layer_offloading = pr.plan.pages_layer_weights();  // mirrors r.plan.layer_weights
  r.label = pr.label;
  r.budgets = budgets;
  r.forecast = api::from_forecast(pr.forecast);
  r.minimum_bytes = pr.minimum_bytes;
  r.persistent_bytes = pr.persistent_bytes;
  r.short_tier = pr.short_tier;
  r.short_tier_needs = pr.short_tier_needs;
  r.sim_runs = pr.sim_runs;
  return r;
}

std::string plan_yaml(const ForecastSpec& spec, const PlanReport& report) {
  ForecastRequest r = api::to_request(spec);
  Plan plan = api::to_plan(report.plan, "PlanReport::plan");
  if (report.layer_offloading) plan.set_layer_weights(Decision::page, "PlanReport::layer_offloading");
  const Forecast f = api::to_forecast(report.forecast);
  return plan_yaml(r, plan, f, report.budgets.device);
}

}  // namespace strata
