// The cuda arena a run reserves by default: what its plan's forecast says it needs, not the whole
// GPU, so several processes can share a card when their plans fit (strata-train, the library's
// Session). The sim mirrors every arena allocation of the cuda backend byte for byte, so the
// forecast's high-water offset is the arena the step needs; the headroom covers what one forecast
// step does not run (evaluation, a checkpoint's staging) and is stated where it is applied.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "model/plan/forecast.h"

namespace strata {

struct ArenaSizing {
  size_t bytes = 0;       // the reservation: high_water + headroom, rounded up to 2 MiB
  size_t high_water = 0;  // the forecast step's highest arena offset
  size_t headroom = 0;
};

// Headroom above the forecast high-water: kArenaHeadroomFraction of it, at least kArenaHeadroomMin.
inline constexpr double kArenaHeadroomFraction = 0.02;
inline constexpr size_t kArenaHeadroomMin = size_t(256) << 20;

// Runs the forecast of `r` (unbounded arena) and sizes the reservation from it.
ArenaSizing arena_for_plan(const ForecastRequest& r);
// Batches of several lengths (rows sized to the data): the forecast of `r` at each length of `seqs` (r.batch_tokens
// kept, as the run keeps its batch blocks), sized from the highest high-water among them. A best-fit arena's
// high-water is not monotonic in the sizes it is asked for, so each length is run, not only the longest.
ArenaSizing arena_for_lengths(const ForecastRequest& r, const std::vector<int>& seqs);

}  // namespace strata
