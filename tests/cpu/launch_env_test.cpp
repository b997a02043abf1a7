// Reading a launcher's environment: the torchrun and SLURM environments (and bad values, each naming the
// variable and the expected value) and --gpus parsing.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/rendezvous.h"
#include "engine/switches.h"
#include "model/run/launch.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/launch_helpers.h"

using namespace strata;
using namespace strata::launch_util;

namespace {

using Env = std::map<std::string, std::string>;
LaunchEnv parse(const Env& env) {
  return read_launch_env([&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}
// The ConfigError of parsing `env`: its field and message.
std::pair<std::string, std::string> bad(const Env& env) {
  auto e = test_util::catch_as<ConfigError>([&] { parse(env); });
  if (!e) return {"", ""};
  return {e->field, e->what()};
}

}  // namespace

TEST(LaunchEnv, NoLauncherIsOneRank) {
  LaunchEnv e = parse({});
  EXPECT_EQ(e.launcher, "none");
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.timeout_s, 300);
}

TEST(LaunchEnv, Torchrun) {
  LaunchEnv e = parse({{"RANK", "5"},
                       {"WORLD_SIZE", "8"},
                       {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "node0"},
                       {"MASTER_PORT", "29501"},
                       {"STRATA_COMM_TIMEOUT", "12.5"},
                       {"STRATA_JOB_SECRET", "0123456789abcdef0123"}});
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.secret, "0123456789abcdef0123");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world, 4);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 29501);
  EXPECT_EQ(e.timeout_s, 12.5);
  RendezvousOptions o = e.rendezvous();
  EXPECT_EQ(o.rank, 5);
  EXPECT_EQ(o.world, 8);
  EXPECT_EQ(o.master_port, 29501);
  EXPECT_EQ(o.secret, "0123456789abcdef0123");
  EXPECT_EQ(o.local_world, 4);
  // One rank needs no master.
  LaunchEnv one = parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(one.world, 1);
  EXPECT_EQ(one.local_rank, 0);
}

// torchrun's elastic agent serves its own store on MASTER_PORT (and tells its workers so with
// TORCHELASTIC_USE_AGENT_STORE=True): rank 0 listens on the next port, which every rank computes alike.
// STRATA_RENDEZVOUS_PORT overrides the port under any launcher.
TEST(LaunchEnv, TorchrunAgentStoreKeepsMasterPortAndRendezvousTakesTheNext) {
  Env env{{"RANK", "1"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_RANK", "1"},
          {"MASTER_ADDR", "h"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"STRATA_JOB_SECRET", "0123456789abcdef0123"}};
  LaunchEnv e = parse(env);
  EXPECT_EQ(e.master_port, 29501);
  EXPECT_EQ(e.rendezvous().master_port, 29501);
  EXPECT_NE(e.rendezvous().port_name.find("torchrun's agent store"), std::string::npos);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_EQ(parse(env).master_port, 29500);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["STRATA_RENDEZVOUS_PORT"] = "31000";
  e = parse(env);
  EXPECT_EQ(e.master_port, 31000);
  EXPECT_EQ(e.port_name, "STRATA_RENDEZVOUS_PORT");
  env["STRATA_RENDEZVOUS_PORT"] = "70000";
  EXPECT_THROW(parse(env), ConfigError);
  env.erase("STRATA_RENDEZVOUS_PORT");
  env["MASTER_PORT"] = "65535";
  try {
    parse(env);
    ADD_FAILURE() << "MASTER_PORT 65535 under the agent store was accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("STRATA_RENDEZVOUS_PORT"), std::string::npos) << err.what();
  }
  // Under srun there is no agent store: MASTER_PORT as it is, and the override too.
  Env slurm{{"SLURM_PROCID", "0"},
            {"SLURM_NTASKS", "2"},
            {"SLURM_LOCALID", "0"},
            {"MASTER_ADDR", "h"},
            {"MASTER_PORT", "29600"},
            {"STRATA_RENDEZVOUS_PORT", "29700"},
            {"STRATA_JOB_SECRET", "0123456789abcdef0123"}};
  EXPECT_EQ(parse(slurm).master_port, 29700);
}

TEST(LaunchEnv, Slurm) {
  Env env{{"SLURM_PROCID", "3"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NTASKS_PER_NODE", "2"},
          {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7"},
          {"STRATA_JOB_SECRET", "0123456789abcdef0123"}};
  LaunchEnv e = parse(env);
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.7");
  EXPECT_EQ(e.master_port, 29500);
  env["MASTER_ADDR"] = "head";
  env["MASTER_PORT"] = "4000";
  env["SLURM_NTASKS_PER_NODE"] = "2(x2)";  // not one number: every task may be local
  e = parse(env);
  EXPECT_EQ(e.master_addr, "head");
  EXPECT_EQ(e.master_port, 4000);
  EXPECT_EQ(e.local_world, 4);
  // torchrun's variables win over SLURM's (torchrun inside an allocation).
  env["RANK"] = "0", env["WORLD_SIZE"] = "1";
  EXPECT_EQ(parse(env).launcher, "torchrun");
}

TEST(LaunchEnv, BadValuesNameTheVariableAndTheExpectedValue) {
  const Env ok{{"RANK", "1"},        {"WORLD_SIZE", "4"},     {"LOCAL_RANK", "1"},
               {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}, {"STRATA_JOB_SECRET", "0123456789abcdef0123"}};
  auto with = [&](const std::string& k, const char* v) {
    Env e = ok;
    if (v)
      e[k] = v;
    else
      e.erase(k);
    return bad(e);
  };
  auto [f1, m1] = with("RANK", "abc");
  EXPECT_EQ(f1, "RANK");
  EXPECT_TRUE(has(m1, "RANK='abc': expected 0 <= RANK < WORLD_SIZE (4)")) << m1;
  auto [f2, m2] = with("RANK", "4");
  EXPECT_EQ(f2, "RANK");
  EXPECT_TRUE(has(m2, "RANK='4'")) << m2;
  auto [f3, m3] = with("WORLD_SIZE", "0");
  EXPECT_EQ(f3, "WORLD_SIZE");
  EXPECT_TRUE(has(m3, "integer >= 1")) << m3;
  auto [f4, m4] = with("MASTER_PORT", "70000");
  EXPECT_EQ(f4, "MASTER_PORT");
  EXPECT_TRUE(has(m4, "1-65535")) << m4;
  auto [f5, m5] = with("LOCAL_RANK", nullptr);
  EXPECT_EQ(f5, "LOCAL_RANK");
  EXPECT_TRUE(has(m5, "LOCAL_RANK is not set")) << m5;
  auto [f6, m6] = with("MASTER_ADDR", nullptr);
  EXPECT_EQ(f6, "MASTER_ADDR");
  auto [f7, m7] = with("WORLD_SIZE", nullptr);
  EXPECT_EQ(f7, "WORLD_SIZE");
  auto [f8, m8] = with("LOCAL_RANK", "-1");
  EXPECT_EQ(f8, "LOCAL_RANK");
  auto [f9, m9] = with("STRATA_COMM_TIMEOUT", "0");
  EXPECT_EQ(f9, "STRATA_COMM_TIMEOUT");
  // A deadline past the clock's range would wrap (every wait failing at once): capped at 7 days.
  for (const char* t : {"1e10", "inf", "nan", "604801"}) {
    auto [f, m] = with("STRATA_COMM_TIMEOUT", t);
    EXPECT_EQ(f, "STRATA_COMM_TIMEOUT") << t;
    EXPECT_TRUE(has(m, fmt::format("STRATA_COMM_TIMEOUT='{}': expected seconds > 0 and <= 604800", t))) << m;
  }
  EXPECT_EQ(parse([&] {
              Env e = ok;
              e["STRATA_COMM_TIMEOUT"] = "604800";
              return e;
            }())
                .timeout_s,
            604800);
  // Several ranks need the job secret: unset or short is refused, saying how to set it.
  auto [fs1, ms1] = with("STRATA_JOB_SECRET", nullptr);
  EXPECT_EQ(fs1, "STRATA_JOB_SECRET");
  EXPECT_TRUE(has(ms1, "STRATA_JOB_SECRET is not set for a job of 4 ranks")) << ms1;
  EXPECT_TRUE(has(ms1, "openssl rand -hex 32")) << ms1;
  auto [fs2, ms2] = with("STRATA_JOB_SECRET", "short");
  EXPECT_EQ(fs2, "STRATA_JOB_SECRET");
  EXPECT_TRUE(has(ms2, "has 5 characters: expected 16 to 1024")) << ms2;
  auto [fs3, ms3] = bad({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}, {"MASTER_ADDR", "h"}});
  EXPECT_EQ(fs3, "STRATA_JOB_SECRET");
  // One rank needs none.
  EXPECT_EQ(parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).secret, "");
  auto [fa, ma] = bad({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(fa, "MASTER_ADDR");
  EXPECT_TRUE(has(ma, "SLURM_LAUNCH_NODE_IPADDR")) << ma;
  auto [fb, mb] = bad({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(fb, "SLURM_PROCID");
  EXPECT_TRUE(has(mb, "0 <= SLURM_PROCID < SLURM_NTASKS (2)")) << mb;
}

TEST(LaunchEnv, GpusFlag) {
  auto take = [](std::vector<std::string> args, std::vector<std::string>& rest) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = int(args.size());
    auto n = take_gpus_flag(argc, argv.data());
    rest.assign(argv.begin(), argv.begin() + argc);
    return n;
  };
  std::vector<std::string> rest;
  EXPECT_EQ(take({"t", "--model", "m", "--gpus", "4", "--json"}, rest), 4);
  EXPECT_EQ(rest, (std::vector<std::string>{"t", "--model", "m", "--json"}));
  EXPECT_EQ(take({"t", "--gpus=2"}, rest), 2);
  EXPECT_EQ(rest, std::vector<std::string>{"t"});
  EXPECT_EQ(take({"t", "--steps", "3"}, rest), std::nullopt);
  EXPECT_EQ(rest.size(), 3u);
  EXPECT_THROW(take({"t", "--gpus", "0"}, rest), ConfigError);
  EXPECT_THROW(take({"t", "--gpus", "two"}, rest), ConfigError);
  EXPECT_THROW(take({"t", "--gpus"}, rest), ConfigError);
  // At most kMaxLocalGpus on one node; nothing wraps.
  EXPECT_EQ(take({"t", "--gpus", std::to_string(kMaxLocalGpus)}, rest), kMaxLocalGpus);
  for (const char* n : {"65", "2147483647", "4294967298", "99999999999999999999"}) {
    auto e = test_util::catch_as<ConfigError>([&] { take({"t", "--gpus", n}, rest); });
    ASSERT_TRUE(e) << n;
    EXPECT_TRUE(has(e->what(), fmt::format("got '{}'", n))) << e->what();
  }
}

// Without a lookup the launcher's variables come from the process's environment (process_env, read on each
// call); under --gpus a bad MASTER_PORT is refused naming the variable, its value and the expected port.
TEST(LaunchEnv, TheProcessEnvironmentAndABadMasterPortUnderGpus) {
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* k : {"MASTER_PORT", "STRATA_COMM_TIMEOUT", "RANK", "WORLD_SIZE", "SLURM_PROCID"})
    saved[k] = process_env(k) ? std::optional<std::string>(process_env(k)) : std::nullopt;
  for (const char* k : {"RANK", "WORLD_SIZE", "SLURM_PROCID"}) ::unsetenv(k);
  ::setenv("STRATA_COMM_TIMEOUT", "7", 1);
  EXPECT_EQ(read_launch_env().timeout_s, 7);
  ::setenv("STRATA_COMM_TIMEOUT", "0", 1);
  auto t = test_util::catch_as<ConfigError>([] { read_launch_env(); });
  ::unsetenv("STRATA_COMM_TIMEOUT");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->field, "STRATA_COMM_TIMEOUT");
  for (const char* port : {"http", "", "65536"}) {
    ::setenv("MASTER_PORT", port, 1);
    std::vector<std::string> args{"strata-x", "--gpus", "2"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = int(args.size());
    testing::internal::CaptureStderr();
    const std::optional<int> rc = launch_hook(argc, argv.data(), "strata-x", true);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, std::optional<int>(2)) << port;
    EXPECT_TRUE(has(err, fmt::format("strata-x: environment variable MASTER_PORT='{}': expected a TCP port 1-65535 "
                                     "for --gpus' rank 0 to listen on",
                                     port)))
        << err;
  }
  for (const auto& [k, v] : saved)
    if (v)
      ::setenv(k.c_str(), v->c_str(), 1);
    else
      ::unsetenv(k.c_str());
}
