// What the launch tests share (launch_env, launch_rendezvous, launch_ranks, launch_zero_sp): substring
// checks, elapsed time, the rank program of the self-launcher and strata-train's --json losses.
#pragma once
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace strata::launch_util {

inline bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}
inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// A rank for run_local_ranks (tests/cpu/launch_child.cpp).
inline const std::string kChild = std::string(STRATA_BUILD_DIR) + "/tests/strata-launch-child";
// The "loss" values of strata-train's --json lines, in order.
inline std::vector<double> json_losses(const std::string& out) {
  std::vector<double> v;
  for (size_t at = out.find("\"loss\": "); at != std::string::npos; at = out.find("\"loss\": ", at + 1))
    v.push_back(std::strtod(out.c_str() + at + 8, nullptr));
  return v;
}

}  // namespace strata::launch_util
