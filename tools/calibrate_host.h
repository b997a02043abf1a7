// strata-calibrate's measurements of the host side (tools/strata_calibrate.cpp calls them): AdamW over state on the
// host, two ways (--adamw), and pinned memory as the host fills (--host-fill, whose first-touch rate can go into a
// profile's pinned_first_touch_gbps).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "engine/arena.h"
#include "engine/backend.h"

namespace strata::calibrate {

using Clock = std::chrono::steady_clock;
constexpr int64_t kGiB = int64_t(1) << 30;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// AdamW over state on the host, fp32 recipe: streamed through the GPU against the host's cores; prints both.
void compare_adamw(Backend& be, Arena& ar, bool quick);
// Pinned reservations of 8 GiB, each held, until the host runs low; prints each one's rate and the first-touch rate
// (the reservations slower than half the fastest's). With `out` (a profile file) that rate goes into its
// pinned_first_touch_gbps. Returns the exit code.
int host_fill(const std::string& out);

}  // namespace strata::calibrate
