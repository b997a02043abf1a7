// The environment's switches (engine/switches.h) are parsed in one place: flags are off only for
// "0", unset or empty keep their default, numbers that do not parse or lie outside [0, 1e6] keep theirs, TMPDIR sets
// the default temp directory.
#include "engine/switches.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

using namespace strata;

namespace {

Switches parse(const std::map<std::string, std::string>& env) {
  return Switches::from([&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST(Switches, DefaultsWhenNothingIsSet) {
  const Switches s = parse({});
  const Switches d;
  EXPECT_TRUE(s.gemm_tune);
  EXPECT_TRUE(s.attn_tune);
  EXPECT_TRUE(s.grad_alias);
  EXPECT_TRUE(s.host_register);
  EXPECT_FALSE(s.op_profile);
  EXPECT_FALSE(s.gemm_verbose);
  EXPECT_EQ(s.op_profile_skip, d.op_profile_skip);
  EXPECT_EQ(s.gemm_tune_ms, 0.0);
  EXPECT_EQ(s.temp_dir, "/tmp");
  EXPECT_EQ(s.visible_devices, "unset");
}

TEST(Switches, FlagsNumbersAndDirectories) {
  const Switches s = parse({{"STRATA_GEMM_TUNE", "0"},
                            {"STRATA_ATTN_TUNE", ""},
                            {"STRATA_GRAD_ALIAS", "0"},
                            {"STRATA_HOST_REGISTER", "0"},
                            {"STRATA_PROFILE", "1"},
                            {"STRATA_PROFILE_SKIP", "3"},
                            {"STRATA_GEMM_TUNE_MS", "12.5"},
                            {"STRATA_ATTN_VERBOSE", "yes"},
                            {"TMPDIR", "/scratch/x"},
                            {"CUDA_VISIBLE_DEVICES", "2,3"}});
  EXPECT_FALSE(s.gemm_tune);
  EXPECT_TRUE(s.attn_tune) << "empty keeps the default";
  EXPECT_FALSE(s.grad_alias);
  EXPECT_FALSE(s.host_register);
  EXPECT_TRUE(s.op_profile);
  EXPECT_EQ(s.op_profile_skip, 3);
  EXPECT_DOUBLE_EQ(s.gemm_tune_ms, 12.5);
  EXPECT_TRUE(s.attn_verbose) << "anything but 0 turns a flag on";
  EXPECT_EQ(s.temp_dir, "/scratch/x");
  EXPECT_EQ(s.visible_devices, "2,3");
  // strata-bench's kernel trace: on for exactly "1" (as it always read it), its libcupti as given.
  EXPECT_FALSE(s.kernel_trace);
  EXPECT_TRUE(s.cupti_lib.empty());
  const Switches trace = parse({{"STRATA_KERNEL_TRACE", "1"}, {"STRATA_CUPTI_LIB", "/opt/cupti/libcupti.so"}});
  EXPECT_TRUE(trace.kernel_trace);
  EXPECT_EQ(trace.cupti_lib, "/opt/cupti/libcupti.so");
  EXPECT_FALSE(parse({{"STRATA_KERNEL_TRACE", "yes"}}).kernel_trace);
  const Switches bad = parse({{"STRATA_PROFILE_SKIP", "two"}, {"STRATA_GEMM_TUNE_MS", "1ms"}, {"TMPDIR", ""}});
  EXPECT_EQ(bad.op_profile_skip, Switches{}.op_profile_skip) << "a number that does not parse keeps the default";
  EXPECT_EQ(bad.gemm_tune_ms, 0.0);
  EXPECT_EQ(bad.temp_dir, "/tmp");
  // Out of [0, 1e6] (an int would wrap, or it is meaningless): the default too, never converted.
  for (const char* v : {"1e30", "-1", "nan", "inf", "4294967297"}) {
    const Switches o = parse({{"STRATA_PROFILE_SKIP", v}, {"STRATA_GEMM_TUNE_MS", v}});
    EXPECT_EQ(o.op_profile_skip, Switches{}.op_profile_skip) << v;
    EXPECT_EQ(o.gemm_tune_ms, 0.0) << v;
  }
}
