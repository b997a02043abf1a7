// Forecasts one training step of a built-in shape, then asks the budget planner for the fastest
// plan that fits a device budget: the sim backend runs the real engine, no GPU needed. No arguments.
#include <strata/strata.h>

#include <cstdio>

int main() {
  try {
    strata::ForecastSpec spec;
    spec.model = "Llama-3.2-1B";
    spec.seq = 4096;
    spec.batch = 1;
    spec.profile = "h100_80gb";

    const strata::ForecastReport f = strata::forecast(spec);
    std::printf("%s, seq %d: keep everything peaks at %s (%s), step %.3f s, %.0f tokens/s\n", spec.model.c_str(),
                spec.seq, strata::format_bytes(f.peak_bytes).c_str(), f.peak_phase.c_str(), f.step_s, f.tokens_per_s);
    for (const strata::ForecastItem& it : f.breakdown)
      std::printf("  %-40s %12s\n", it.name.c_str(), strata::format_bytes(it.bytes).c_str());

    // Weights, gradients and optimizer state stay; room for half the activations keeping everything saves.
    const size_t budget = f.persistent_bytes + (f.peak_bytes - f.persistent_bytes) / 2;
    const strata::PlanReport p = strata::plan_for_budget(spec, strata::Budgets{budget});
    if (!p.found) {
      std::printf("nothing fits %s; the minimum is %s\n", strata::format_bytes(budget).c_str(),
                  strata::format_bytes(p.minimum_bytes).c_str());
      return 1;
    }
    std::printf("budget %s: '%s' peaks at %s, step %.3f s (%d sim runs)\n", strata::format_bytes(budget).c_str(),
                p.label.c_str(), strata::format_bytes(p.forecast.peak_bytes).c_str(), p.forecast.step_s, p.sim_runs);
    std::printf("--- strata-train --config for it:\n%s", strata::plan_yaml(spec, p).c_str());
    return p.forecast.peak_bytes <= budget ? 0 : 1;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "plan: %s\n", e.what());
    return 1;
  }
}
