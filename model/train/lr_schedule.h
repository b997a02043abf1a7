// The learning rate of each optimizer step: a linear warmup, then constant, linear or cosine decay.
// Steps are counted from 1. Warmup step t <= W takes lr * t / W (the first step already moves);
// after it, with progress p = (t - 1 - W) / (T - W) in [0, 1), `linear` takes lr * (1 - p) and
// `cosine` lr * (1 + cos(pi * p)) / 2: Hugging Face's schedules (get_linear_schedule_with_warmup,
// get_cosine_schedule_with_warmup) at step t - 1, so the last step's rate is small, never 0.
#pragma once
#include <cmath>
#include <string>

#include "engine/names.h"

namespace strata {

enum class LrScheduler { constant, linear, cosine };

inline constexpr EnumName<LrScheduler> kLrSchedulers[] = {
    {LrScheduler::constant, "constant"}, {LrScheduler::linear, "linear"}, {LrScheduler::cosine, "cosine"}};

inline const char* lr_scheduler_name(LrScheduler s) {
  return name_of(kLrSchedulers, s);
}

// Step t (1-based) of `total` steps, `warmup` of them warming up.
inline float scheduled_lr(LrScheduler s, float lr, int t, int total, int warmup) {
  if (warmup > 0 && t <= warmup) return lr * float(t) / float(warmup);
  if (s == LrScheduler::constant || total <= warmup) return lr;
  const double p = std::fmax(0.0, double(t - 1 - warmup) / double(total - warmup));
  if (s == LrScheduler::linear) return float(double(lr) * std::fmax(0.0, 1.0 - p));
  return float(double(lr) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p)));
}

// warmup_steps when given (>= 0), else ceil(warmup_ratio * total) as Hugging Face rounds it.
inline int resolve_warmup(int warmup_steps, double warmup_ratio, int total) {
  if (warmup_steps > 0 || warmup_ratio <= 0) return warmup_steps;
  return int(std::ceil(warmup_ratio * double(total)));
}

}  // namespace strata
