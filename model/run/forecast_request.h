// A run's settings as the forecast and the budget planner read them.
#pragma once
#include "model/plan/forecast.h"
#include "model/run/train_config.h"

namespace strata {

// The forecast request of a strata-train run of `cfg` on `mc`: the model, mode, LoRA, recipe,
// plan (state table included), layer paging and tier bounds it trains with.
ForecastRequest train_forecast_request(const TrainConfig& cfg, const io::LlamaConfig& mc, SimMirror mirror,
                                       const DeviceProfile& profile);

// Whether `plan`'s state placement sends some trainable gradient to the host tier (state_offloading: all, a state_plan
// moving '*.grad' there), for a model of `num_layers` layers.
bool grads_leave_device(const Plan& plan, int num_layers);

}  // namespace strata
