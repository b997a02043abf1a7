// What the launch tests share (launch_env, launch_rendezvous, launch_ranks, launch_zero_sp): substring
// checks, elapsed time, the rank program of the self-launcher, a scratch folder holding a tiny model and
// strata-train's --json losses.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/run/launch.h"
#include "tests/cpu/tool_runner.h"

namespace strata::launch_util {

inline bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}
inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// A rank for run_local_ranks (tests/cpu/launch_child.cpp).
inline const std::string kChild = std::string(STRATA_BUILD_DIR) + "/tests/strata-launch-child";
// `nprocs` ranks of the child program, each started with `args`.
inline LocalLaunch child_ranks(int nprocs, std::vector<std::string> args) {
  LocalLaunch l;
  l.nprocs = nprocs;
  l.exe = kChild;
  l.args = std::move(args);
  l.tool = "launch_test";
  return l;
}
// Creates `dir` (mkdtemp under `prefix`) and writes a tiny model into dir/tiny (strata-make-tiny with
// `tiny_flags`); a failure names the step. Use as ASSERT_TRUE(scratch_with_tiny(dir, "name")).
inline ::testing::AssertionResult scratch_with_tiny(tool_test::Scratch& dir, const std::string& prefix,
                                                    const std::string& tiny_flags = "") {
  if (auto built = tool_test::tools_built(); !built) return built;
  dir.create(prefix);
  if (!dir.ok()) return ::testing::AssertionFailure() << "mkdtemp failed for " << prefix;
  const tool_test::Proc p = dir.run(tool_test::kMakeTiny + " " + tool_test::quote(dir.path("tiny")) + tiny_flags);
  if (p.code != 0) return ::testing::AssertionFailure() << "strata-make-tiny exited " << p.code << ": " << p.err;
  return ::testing::AssertionSuccess();
}
// The "loss" values of strata-train's --json lines, in order.
inline std::vector<double> json_losses(const std::string& out) {
  std::vector<double> v;
  for (size_t at = out.find("\"loss\": "); at != std::string::npos; at = out.find("\"loss\": ", at + 1))
    v.push_back(std::strtod(out.c_str() + at + 8, nullptr));
  return v;
}

}  // namespace strata::launch_util
