// A run's settings as the forecast and the budget planner read them.
#pragma once
#include "model/plan/forecast.h"
#include "model/run/train_config.h"

namespace strata {

// The forecast request of a strata-train run of `cfg` on `mc`: the model, mode, LoRA, recipe,
// plan (state table included), layer paging and tier bounds it trains with.
ForecastRequest train_forecast_request(const TrainConfig& cfg, const io::LlamaConfig& mc, SimMirror mirror,
                                       const DeviceProfile& profile);

}  // namespace strata
