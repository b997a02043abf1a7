// The public structs of strata/strata.h to and from the engine's own. The configs' typed fields map
// onto TrainConfig, every other setting through the settings table (their `more`), so a config read
// through the public apply_yaml trains exactly as strata-train's would.
#pragma once
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "strata/strata.h"

namespace strata::api {

Plan to_plan(const MemoryPlan& p, const std::string& where);
MemoryPlan from_plan(const Plan& p);

TrainConfig to_train_config(const SessionConfig& c);
SessionConfig from_train_config(const TrainConfig& c);

StepMetrics from_step_stats(const StepStats& s);
ModelShape from_llama_config(const io::LlamaConfig& c);
io::LlamaConfig to_llama_config(const ModelShape& s);

// A forecast's settings: the typed fields (mode as LoRA or a frozen base), then `more`.
TrainConfig to_train_config(const ForecastSpec& s);
// The typed fields and `more` of `s` from `t`; a LoRA rank stays when `t` trains no adapters.
void set_forecast_spec(ForecastSpec& s, const TrainConfig& t);
// The run builder's forecast request of those settings (model/run/forecast_request.h), with the
// spec's model, profile, mirror, budget and ranks.
ForecastRequest to_request(const ForecastSpec& s);
ForecastReport from_forecast(const Forecast& f);
// The report's figures back into a Forecast (its breakdown, activations and plan rows left empty).
Forecast to_forecast(const ForecastReport& r);

}  // namespace strata::api
