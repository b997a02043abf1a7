// Launching several ranks: the torchrun and SLURM environments (and bad values), --gpus parsing, the
// TCP rendezvous (unique id delivered, a rank that never arrives or dies named within the timeout, a
// port in use, a bad MASTER_ADDR), and the self-launcher (a failing rank stops the others).
#include "model/run/launch.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <thread>

#include "engine/error.h"
#include "engine/rendezvous.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/tool_runner.h"

using namespace strata;

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
bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
const std::string kChild = std::string(STRATA_BUILD_DIR) + "/tests/strata-launch-child";

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

// --- the TCP rendezvous, ranks as threads.
namespace {
// Joins `world` ranks (those in `present`) and runs fn on each; returns each rank's error message.
std::vector<std::string> rendezvous_ranks(int world, const std::vector<int>& present, double timeout_s,
                                          const std::function<void(Rendezvous&)>& fn, int port = 0) {
  if (!port) port = pick_free_port();
  std::vector<std::string> err(static_cast<size_t>(world));
  std::vector<std::thread> ts;
  for (int r : present)
    ts.emplace_back([&, r] {
      try {
        auto rdv = Rendezvous::join(RendezvousOptions{"localhost", port, r, world, timeout_s});
        fn(*rdv);
      } catch (const std::exception& e) {
        err[size_t(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  return err;
}
}  // namespace

TEST(Rendezvous, DeliversTheUniqueIdAndGathers) {
  std::vector<std::vector<std::byte>> ids(4);
  std::vector<std::vector<std::vector<std::byte>>> gathered(4);
  auto err = rendezvous_ranks(4, {3, 1, 0, 2}, 20, [&](Rendezvous& r) {
    std::vector<std::byte> id(128);
    if (r.rank() == 0)
      for (size_t i = 0; i < id.size(); ++i) id[i] = std::byte(i * 7 + 3);
    ids[size_t(r.rank())] = r.broadcast(id);
    std::vector<std::byte> mine(size_t(r.rank()) * 3, std::byte(r.rank()));  // sizes differ by rank
    gathered[size_t(r.rank())] = r.all_gather(mine);
    r.barrier();
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(err[size_t(r)], "") << r;
    ASSERT_EQ(ids[size_t(r)].size(), 128u);
    EXPECT_EQ(ids[size_t(r)], ids[0]);
    EXPECT_EQ(ids[size_t(r)][5], std::byte(38));
    ASSERT_EQ(gathered[size_t(r)].size(), 4u);
    for (int q = 0; q < 4; ++q)
      EXPECT_EQ(gathered[size_t(r)][size_t(q)], std::vector<std::byte>(size_t(q) * 3, std::byte(q)));
  }
}

TEST(Rendezvous, ARankThatNeverArrivesIsNamedWithinTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  auto err = rendezvous_ranks(4, {0, 1, 3}, 0.5, [](Rendezvous&) {});
  EXPECT_LT(since(t0), 5.0);
  EXPECT_TRUE(has(err[0], "rank 2 of 4 did not connect to rank 0 at localhost:")) << err[0];
  EXPECT_TRUE(has(err[0], "within 0.5 s")) << err[0];
  // The others hear it from rank 0.
  for (int r : {1, 3}) EXPECT_TRUE(has(err[size_t(r)], "rank 2 of 4 did not connect")) << err[size_t(r)];
}

TEST(Rendezvous, RankZeroThatNeverComesIsNamed) {
  const auto t0 = std::chrono::steady_clock::now();
  auto err = rendezvous_ranks(2, {1}, 0.4, [](Rendezvous&) {});
  EXPECT_LT(since(t0), 5.0);
  EXPECT_TRUE(has(err[1], "rank 1 could not reach rank 0 at localhost:")) << err[1];
  EXPECT_TRUE(has(err[1], "Connection refused")) << err[1];
}

TEST(Rendezvous, ARankThatDiesOrStallsLaterIsNamed) {
  // Rank 2 leaves after joining (its process died): rank 0's next all_gather names it.
  auto err = rendezvous_ranks(3, {0, 1, 2}, 5, [](Rendezvous& r) {
    if (r.rank() == 2) return;
    r.barrier();
  });
  EXPECT_TRUE(has(err[0], "rank 2 closed its connection")) << err[0];
  EXPECT_TRUE(has(err[1], "rank 2 closed its connection")) << err[1];
  EXPECT_EQ(err[2], "");
  // Rank 1 stays connected but never calls the barrier: a timeout naming rank 1.
  std::atomic<bool> release{false};
  const auto t0 = std::chrono::steady_clock::now();
  err = rendezvous_ranks(3, {0, 1, 2}, 0.5, [&](Rendezvous& r) {
    if (r.rank() == 1) {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    try {
      r.barrier();
    } catch (...) {
      release = true;
      throw;
    }
  });
  EXPECT_LT(since(t0), 5.0);
  EXPECT_TRUE(has(err[0], "barrier on rank 0: rank 1 of 3 did not arrive within 0.5 s")) << err[0];
  EXPECT_TRUE(has(err[2], "rank 1 of 3 did not arrive")) << err[2];
}

TEST(Rendezvous, PortInUseAndBadAddressAreClearErrors) {
  // Somebody else listens on the port.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(s, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  auto e = test_util::catch_as<IoError>([&] { Rendezvous::join(RendezvousOptions{"127.0.0.1", port, 0, 2, 1}); });
  ::close(s);
  ASSERT_TRUE(e);
  EXPECT_TRUE(has(e->what(), fmt::format("cannot listen on 127.0.0.1 port {} (MASTER_PORT)", port))) << e->what();
  EXPECT_TRUE(has(e->what(), "Address already in use")) << e->what();
  auto b = test_util::catch_as<ConfigError>([&] {
    Rendezvous::join(RendezvousOptions{"no-such-host.invalid", 29500, 1, 2, 1});
  });
  ASSERT_TRUE(b);
  EXPECT_EQ(b->field, "MASTER_ADDR");
  EXPECT_TRUE(has(b->what(), "cannot resolve MASTER_ADDR 'no-such-host.invalid'")) << b->what();
  // Ranks that disagree on the world size.
  auto err = rendezvous_ranks(2, {0, 1}, 3, [](Rendezvous&) {});
  EXPECT_EQ(err[0], "");
  const int p2 = pick_free_port();
  std::string e0, e1;
  std::thread t0([&] {
    try {
      Rendezvous::join(RendezvousOptions{"127.0.0.1", p2, 0, 2, 3});
    } catch (const std::exception& x) {
      e0 = x.what();
    }
  });
  std::thread t1([&] {
    try {
      Rendezvous::join(RendezvousOptions{"127.0.0.1", p2, 1, 3, 3});
    } catch (const std::exception& x) {
      e1 = x.what();
    }
  });
  t0.join(), t1.join();
  EXPECT_TRUE(has(e0, "rank 1 says the world size is 3, rank 0 says 2")) << e0;
  EXPECT_TRUE(has(e1, "world size is 3, rank 0 says 2")) << e1;
}

// --- the self-launcher, ranks as processes (tests/cpu/launch_child.cpp).
TEST(Launcher, ProcessesRendezvousAndReduce) {
  LocalLaunch l;
  l.nprocs = 3;
  l.exe = kChild;
  l.args = {"allreduce"};
  l.tool = "launch_test";
  EXPECT_EQ(run_local_ranks(l), 0);
}

// strata-train --gpus N started inside a torchrun job's environment: its own ranks have no agent store, so the
// flag must not reach them (else rank 0 would listen on MASTER_PORT + 1, here held by another socket).
TEST(Launcher, OwnRanksIgnoreAnInheritedTorchrunAgentStoreFlag) {
  int port = 0, held = -1;
  for (int attempt = 0; attempt < 20 && held < 0; ++attempt) {
    port = pick_free_port();
    if (port >= 65535) continue;
    held = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port + 1));
    if (::bind(held, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(held, 1) != 0) {
      ::close(held);
      held = -1;
    }
  }
  ASSERT_GE(held, 0) << "no free port pair";
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  LocalLaunch l;
  l.nprocs = 2;
  l.exe = kChild;
  l.args = {"allreduce"};
  l.tool = "launch_test";
  l.master_port = port;
  const int rc = run_local_ranks(l);
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  ::close(held);
  EXPECT_EQ(rc, 0);
}

TEST(Launcher, AFailingRankStopsTheOthersAndIsNamed) {
  LocalLaunch l;
  l.nprocs = 4;
  l.exe = kChild;
  l.args = {"fail", "2", "3"};
  l.tool = "launch_test";
  char* buf = nullptr;
  size_t n = 0;
  std::FILE* log = ::open_memstream(&buf, &n);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run_local_ranks(l, log);
  std::fclose(log);
  const std::string text(buf, n);
  std::free(buf);
  EXPECT_EQ(rc, 3);
  EXPECT_LT(since(t0), 20.0);  // the others sleep 60 s unless stopped
  EXPECT_TRUE(has(text, "rank 2 (pid ")) << text;
  EXPECT_TRUE(has(text, "exited with status 3; stopping the other 3 ranks")) << text;
  EXPECT_TRUE(has(text, "the job failed: rank 2 exited with status 3 first")) << text;
}

// strata-train --gpus 2 on the cpu backend (ranks as processes, the cpu communicator over the TCP
// rendezvous) against one rank with the two ranks' rows in one batch: the same losses to float
// rounding; rank 0 alone prints the steps and writes the model.
namespace {
// The "loss" values of strata-train's --json lines, in order.
std::vector<double> json_losses(const std::string& out) {
  std::vector<double> v;
  for (size_t at = out.find("\"loss\": "); at != std::string::npos; at = out.find("\"loss\": ", at + 1))
    v.push_back(std::strtod(out.c_str() + at + 8, nullptr));
  return v;
}
}  // namespace

TEST(Launcher, StrataTrainOnTwoRanksMatchesOneRankOnTheSameGlobalBatch) {
  using namespace tool_test;
  ASSERT_TRUE(tools_built());
  Scratch dir;
  dir.create("strata_dp_train");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir.run(kMakeTiny + " " + quote(dir.path("tiny"))).code, 0);
  const std::string common = " --model " + quote(dir.path("tiny")) + " --data " + quote(dir.path("tiny/tokens.bin")) +
                             " --seq 32 --steps 4 --lr 3e-3 --backend cpu --json";
  const Proc one = dir.run(kTrain + " --batch 4" + common);
  ASSERT_EQ(one.code, 0) << one.err;
  // MASTER_PORT from the environment is the port --gpus' rank 0 listens on (on 127.0.0.1); the banner
  // names the launcher --gpus.
  const int port = pick_free_port();
  const Proc two = dir.run(fmt::format("env MASTER_PORT={} ", port) + kTrain + " --gpus 2 --batch 2 --save " +
                           quote(dir.path("out")) + common);
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_TRUE(
      has(two.err, fmt::format("data parallel: 2 ranks (--gpus), 2 on this node; rank 0 of 127.0.0.1:{}", port)))
      << two.err;
  const std::vector<double> a = json_losses(one.out), b = json_losses(two.out);
  ASSERT_EQ(a.size(), 4u) << one.out;
  ASSERT_EQ(b.size(), 4u) << "rank 0 alone prints its steps:\n" << two.out;
  EXPECT_EQ(lines(two.out).size(), 4u) << "nothing but rank 0's four JSON lines on stdout:\n" << two.out;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * a[i]) << "step " << i + 1;
  EXPECT_EQ(::access(dir.path("out/model.safetensors").c_str(), R_OK), 0) << "rank 0 saves the model";
  dir.remove();
}

// The probe against strata-train itself: rank 0 of a job started by hand, a stranger sends one header
// claiming 2^40 bytes (it was std::bad_alloc on rank 0), then a stranger stalls; the real rank 1 still joins
// and both train to the end. A rank 1 with another secret fails naming STRATA_JOB_SECRET.
TEST(Launcher, StrataTrainRankZeroSurvivesStrangersOnItsPort) {
  using namespace tool_test;
  ASSERT_TRUE(tools_built());
  Scratch a, b;
  a.create("strata_rdv_attack_a");
  b.create("strata_rdv_attack_b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a.run(kMakeTiny + " " + quote(a.path("tiny"))).code, 0);
  const int port = pick_free_port();
  auto rank = [&](int r, const std::string& secret) {
    return fmt::format(
        "env RANK={} WORLD_SIZE=2 LOCAL_RANK={} MASTER_ADDR=127.0.0.1 MASTER_PORT={} "
        "STRATA_JOB_SECRET={} STRATA_COMM_TIMEOUT=30 {} --model {} --data {} --seq 32 --steps 2 "
        "--backend cpu --json",
        r, r, port, secret, kTrain, quote(a.path("tiny")), quote(a.path("tiny/tokens.bin")));
  };
  auto r0 = std::async(std::launch::async, [&] { return a.run(rank(0, "the-job-secret-0123456789")); });
  auto connect = [&] {
    for (int i = 0; i < 500; ++i) {
      int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(uint16_t(port));
      if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return s;
      ::close(s);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  };
  const int bomb = connect();
  ASSERT_GE(bomb, 0) << "rank 0 never listened";
  const uint32_t h[4] = {0x53545241, 1, 0, 1u << 8};  // magic, hello, length 2^40 (little-endian 64 bits)
  ASSERT_EQ(::send(bomb, h, sizeof(h), MSG_NOSIGNAL), ssize_t(sizeof(h)));
  char buf[64];
  while (::recv(bomb, buf, sizeof(buf), 0) > 0) {
  }  // rank 0 drops it: EOF
  ::close(bomb);
  const int staller = connect();  // connects, sends nothing, stays open
  const Proc wrong = b.run(rank(1, "another-secret-0123456789"));
  EXPECT_EQ(wrong.code, 1) << wrong.err;
  EXPECT_TRUE(has(wrong.err, "STRATA_JOB_SECRET must be the same on every rank")) << wrong.err;
  const Proc r1 = b.run(rank(1, "the-job-secret-0123456789"));
  const Proc p0 = r0.get();
  ::close(staller);
  EXPECT_EQ(r1.code, 0) << r1.err;
  EXPECT_EQ(p0.code, 0) << p0.err;
  EXPECT_EQ(json_losses(p0.out).size(), 2u) << p0.out;
  a.remove();
  b.remove();
}

// The library's Session under a launcher's environment is one rank of the job: two processes of
// Sessions from one YAML train exactly what strata-train --gpus 2 trains from it (model/run/job.h).
TEST(Launcher, SessionsOnTwoRanksAreStrataTrainOnTwoRanks) {
  using namespace tool_test;
  ASSERT_TRUE(tools_built());
  Scratch dir;
  dir.create("strata_dp_session");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir.run(kMakeTiny + " " + quote(dir.path("tiny"))).code, 0);
  auto yaml = [&](const std::string& name, const std::string& out) {
    const std::string path = dir.path(name);
    std::ofstream(path) << "base_model: " << dir.path("tiny") << "\ndata: " << dir.path("tiny/tokens.bin")
                        << "\nsequence_len: 32\nmicro_batch_size: 2\nmax_steps: 4\nlearning_rate: 3.0e-3\n"
                        << "backend: cpu\noutput_dir: " << out << "\n";
    return path;
  };
  const Proc tool = dir.run(kTrain + " --gpus 2 --config " + quote(yaml("a.yaml", dir.path("by_tool"))));
  ASSERT_EQ(tool.code, 0) << tool.err;
  LocalLaunch l;
  l.nprocs = 2;
  l.exe = kChild;
  l.args = {"session", yaml("b.yaml", dir.path("by_session"))};
  l.tool = "launch_test";
  ASSERT_EQ(run_local_ranks(l), 0);
  const std::string a = slurp(dir.path("by_tool/model.safetensors")),
                    b = slurp(dir.path("by_session/model.safetensors"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the two-rank Sessions saved other weights than strata-train --gpus 2";
  dir.remove();
}

// A rank whose peers never arrive ends with an error naming them, within the timeout.
TEST(Launcher, StrataTrainRankWithoutPeersStopsWithinTheTimeout) {
  using namespace tool_test;
  ASSERT_TRUE(tools_built());
  Scratch dir;
  dir.create("strata_dp_alone");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir.run(kMakeTiny + " " + quote(dir.path("tiny"))).code, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const Proc p =
      dir.run(fmt::format("env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT={} "
                          "STRATA_JOB_SECRET=0123456789abcdef STRATA_COMM_TIMEOUT=2 {} --model {} --data {} --seq 32 "
                          "--steps 2 --backend cpu",
                          pick_free_port(), kTrain, quote(dir.path("tiny")), quote(dir.path("tiny/tokens.bin"))));
  EXPECT_NE(p.code, 0) << p.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
  EXPECT_TRUE(has(p.err, "rank 1 of 2 did not connect")) << p.err;
  dir.remove();
}

// strata-train --gpus 2 --zero-stage 1: each rank keeps its share of the optimizer state and
// broadcasts its weights; on cpu the run is the --zero-stage 0 run bit for bit (the same losses, the
// same saved model byte for byte), and so is a run resumed from its sharded checkpoint (on 4 ranks, with the
// same global batch, to float rounding); so is --zero-stage 2 (and resumed from the stage-1 checkpoint);
// strata-plan forecasts it lower per rank.
TEST(Launcher, StrataTrainZeroStagesOneToThreeMatchStageZeroBitForBit) {
  using namespace tool_test;
  ASSERT_TRUE(tools_built());
  Scratch dir;
  dir.create("strata_dp_zero");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir.run(kMakeTiny + " " + quote(dir.path("tiny"))).code, 0);
  const std::string common = " --gpus 2 --batch 2 --model " + quote(dir.path("tiny")) + " --data " +
                             quote(dir.path("tiny/tokens.bin")) + " --seq 32 --steps 3 --lr 3e-3 --backend cpu --json";
  const Proc z0 = dir.run(kTrain + " --save " + quote(dir.path("model_z0")) + common);
  ASSERT_EQ(z0.code, 0) << z0.err;
  const Proc z1 = dir.run(kTrain + " --zero-stage 1 --save " + quote(dir.path("model_z1")) + common);
  ASSERT_EQ(z1.code, 0) << z1.err;
  const std::vector<double> a = json_losses(z0.out), b = json_losses(z1.out);
  ASSERT_EQ(a.size(), 3u) << z0.out;
  EXPECT_EQ(a, b) << z1.out;
  auto bytes = [](const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    std::string s;
    if (!f) return s;
    char buf[1 << 16];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    std::fclose(f);
    return s;
  };
  const std::string m0 = bytes(dir.path("model_z0/model.safetensors")),
                    m1 = bytes(dir.path("model_z1/model.safetensors"));
  ASSERT_GT(m0.size(), 1000u);
  EXPECT_TRUE(m0 == m1) << "the saved models differ";
  // Sharded checkpoints: a run resumed from step 2's continues to the uninterrupted run's step 3 bit for bit,
  // and another rank count is refused naming zero_shards.
  const Proc ckpt = dir.run(kTrain + " --zero-stage 1 --save-steps 2 --save " + quote(dir.path("model_ckpt")) + common);
  ASSERT_EQ(ckpt.code, 0) << ckpt.err;
  EXPECT_EQ(json_losses(ckpt.out), a);
  EXPECT_FALSE(bytes(dir.path("model_ckpt/checkpoint-2/optimizer.rank-1-of-2.safetensors")).empty());
  const Proc resumed = dir.run(kTrain + " --zero-stage 1 --save " + quote(dir.path("model_resumed")) + " --resume " +
                               quote(dir.path("model_ckpt/checkpoint-2")) + common);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const std::vector<double> c = json_losses(resumed.out);
  ASSERT_EQ(c.size(), 1u) << resumed.out;
  EXPECT_EQ(c[0], a[2]);
  EXPECT_TRUE(bytes(dir.path("model_resumed/model.safetensors")) == m0) << "the resumed run's saved model differs";
  // On 4 ranks with the same global batch (--batch 1) the checkpoint reshards: step 3 is the uninterrupted run's
  // to float rounding (the gradients summed over 4 ranks, not 2). Another global batch is refused naming
  // micro_batch_size and the rows a micro-step (4 ranks of 3 rows).
  auto on = [&](const char* ranks_batch) {
    return std::string(common).replace(common.find("--gpus 2 --batch 2"), 18, ranks_batch);
  };
  const Proc four = dir.run(kTrain + " --zero-stage 1 --resume " + quote(dir.path("model_ckpt/checkpoint-2")) +
                            on("--gpus 4 --batch 1"));
  ASSERT_EQ(four.code, 0) << four.err;
  const std::vector<double> f = json_losses(four.out);
  ASSERT_EQ(f.size(), 1u) << four.out;
  EXPECT_NEAR(f[0], a[2], 1e-5 * a[2]);
  const Proc wider = dir.run(kTrain + " --zero-stage 1 --resume " + quote(dir.path("model_ckpt/checkpoint-2")) +
                             on("--gpus 4 --batch 3"));
  EXPECT_NE(wider.code, 0);
  EXPECT_TRUE(has(wider.err, "field micro_batch_size is 2 in the checkpoint but 3")) << wider.err;
  EXPECT_TRUE(has(wider.err, "at its 4 rows (12 here)")) << wider.err;
  // ZeRO-2 (gradients reduced to their owners, the norm from per-parameter parts): the same losses and saved
  // model bit for bit; it resumes ZeRO-1's checkpoint (the same shards) to the same step 3.
  const Proc z2 = dir.run(kTrain + " --zero-stage 2 --save " + quote(dir.path("model_z2")) + common);
  ASSERT_EQ(z2.code, 0) << z2.err;
  EXPECT_EQ(json_losses(z2.out), a) << z2.out;
  EXPECT_TRUE(bytes(dir.path("model_z2/model.safetensors")) == m0) << "zero 2's saved model differs";
  const Proc z2_resumed =
      dir.run(kTrain + " --zero-stage 2 --resume " + quote(dir.path("model_ckpt/checkpoint-2")) + common);
  ASSERT_EQ(z2_resumed.code, 0) << z2_resumed.err;
  const std::vector<double> d = json_losses(z2_resumed.out);
  ASSERT_EQ(d.size(), 1u) << z2_resumed.out;
  EXPECT_EQ(d[0], a[2]);
  // ZeRO-3 (the layers' matrices on their owners, gathered per layer): stage 2's arithmetic, so the same losses and
  // saved model (every rank gathers, rank 0 writes) bit for bit; it resumes ZeRO-1's checkpoint to the same step 3.
  const Proc z3 = dir.run(kTrain + " --zero-stage 3 --save " + quote(dir.path("model_z3")) + common);
  ASSERT_EQ(z3.code, 0) << z3.err;
  EXPECT_EQ(json_losses(z3.out), a) << z3.out;
  EXPECT_TRUE(bytes(dir.path("model_z3/model.safetensors")) == m0) << "zero 3's saved model differs";
  const Proc z3_resumed =
      dir.run(kTrain + " --zero-stage 3 --resume " + quote(dir.path("model_ckpt/checkpoint-2")) + common);
  ASSERT_EQ(z3_resumed.code, 0) << z3_resumed.err;
  const std::vector<double> e = json_losses(z3_resumed.out);
  ASSERT_EQ(e.size(), 1u) << z3_resumed.out;
  EXPECT_EQ(e[0], a[2]);
  // strata-plan --gpus 2: ZeRO-2's rank peaks below ZeRO-1's, rank by rank (--rank).
  auto plan_peak = [&](int stage, int rank) {
    const Proc p = dir.run(kPlan + " --model " + quote(dir.path("tiny")) + " --seq 32 --batch 2 --gpus 2 --json" +
                           fmt::format(" --zero-stage {} --rank {}", stage, rank));
    EXPECT_EQ(p.code, 0) << p.err;
    const size_t at = p.out.find("\"peak_bytes\": ");
    return at == std::string::npos ? 0.0 : std::atof(p.out.c_str() + at + 14);
  };
  for (int rank : {0, 1}) {
    const double p1 = plan_peak(1, rank), p2 = plan_peak(2, rank), p3 = plan_peak(3, rank);
    EXPECT_GT(p2, 0.0);
    EXPECT_LT(p2, p1) << "rank " << rank;
    EXPECT_GT(p3, 0.0);
    EXPECT_NE(p3, p2) << "rank " << rank;
  }
  dir.remove();
}

// strata-train --sequence-parallel (ranks as processes): --gpus N --sequence-parallel N gives one rank's losses on
// the same rows to float rounding; --gpus 4 --sequence-parallel 2 (two data-parallel groups, each group's
// all-to-alls on a processes-mode communicator of its own) gives --gpus 2's. A length that does not split over the
// group and ranks the groups do not divide are refused, naming them.
TEST(Launcher, StrataTrainSequenceParallelMatchesOneRank) {
  using namespace tool_test;
  ASSERT_TRUE(tools_built());
  Scratch dir;
  dir.create("strata_sp_train");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir.run(kMakeTiny + " " + quote(dir.path("tiny"))).code, 0);
  const std::string common = " --model " + quote(dir.path("tiny")) + " --data " + quote(dir.path("tiny/tokens.bin")) +
                             " --steps 3 --lr 3e-3 --backend cpu --json";
  auto losses = [&](const std::string& flags) {
    const Proc p = dir.run(kTrain + flags + common);
    EXPECT_EQ(p.code, 0) << flags << ": " << p.err;
    return json_losses(p.out);
  };
  const std::vector<double> one = losses(" --seq 32 --batch 2");
  ASSERT_EQ(one.size(), 3u);
  for (const char* flags :
       {" --seq 32 --batch 2 --gpus 2 --sequence-parallel 2", " --seq 32 --batch 2 --gpus 4 --sequence-parallel 4"}) {
    const std::vector<double> sp = losses(flags);
    ASSERT_EQ(sp.size(), one.size()) << flags;
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(sp[i], one[i], 1e-5 * one[i]) << flags << ", step " << i + 1;
  }
  const std::vector<double> dp = losses(" --seq 32 --batch 1 --gpus 2");
  const std::vector<double> dpsp = losses(" --seq 32 --batch 1 --gpus 4 --sequence-parallel 2");
  ASSERT_EQ(dp.size(), 3u);
  ASSERT_EQ(dpsp.size(), dp.size());
  for (size_t i = 0; i < dp.size(); ++i) EXPECT_NEAR(dpsp[i], dp[i], 1e-5 * dp[i]) << "step " << i + 1;
  const Proc odd = dir.run(kTrain + " --seq 33 --gpus 2 --sequence-parallel 2" + common);
  EXPECT_NE(odd.code, 0);
  EXPECT_TRUE(has(odd.err, "sequence length 33 is not a multiple of 2")) << odd.err;
  const Proc three = dir.run(kTrain + " --seq 32 --gpus 3 --sequence-parallel 2" + common);
  EXPECT_NE(three.code, 0);
  EXPECT_TRUE(has(three.err, "sequence_parallel 2 does not divide the 3 ranks")) << three.err;
  dir.remove();
}

// ZeRO-3 under sequence parallelism (4 ranks in one group, each holding a quarter of every row), with
// every layer recomputed in backward (the gathered slots refilled for the replays): the same losses
// and saved model as ZeRO-2 on the same ranks, bit for bit (the same owners, reduces and norm parts).
TEST(Launcher, StrataTrainZeroThreeUnderSequenceParallelWithRecomputeMatchesStageTwo) {
  using namespace tool_test;
  ASSERT_TRUE(tools_built());
  Scratch dir;
  dir.create("strata_sp_zero3");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(dir.run(kMakeTiny + " " + quote(dir.path("tiny")) + " --layers 3").code, 0);
  {
    std::FILE* f = std::fopen(dir.path("gc.yaml").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("plan:\n  \"L*.input\": keep\n  \"L*\": recompute\n", f);
    std::fclose(f);
  }
  const std::string common = " --gpus 4 --sequence-parallel 4 --model " + quote(dir.path("tiny")) + " --data " +
                             quote(dir.path("tiny/tokens.bin")) + " --seq 64 --steps 3 --lr 3e-3 --backend cpu --json" +
                             " --config " + quote(dir.path("gc.yaml"));
  const Proc z2 = dir.run(kTrain + " --zero-stage 2 --save " + quote(dir.path("model_z2")) + common);
  ASSERT_EQ(z2.code, 0) << z2.err;
  const Proc z3 = dir.run(kTrain + " --zero-stage 3 --save " + quote(dir.path("model_z3")) + common);
  ASSERT_EQ(z3.code, 0) << z3.err;
  const std::vector<double> a = json_losses(z2.out), b = json_losses(z3.out);
  ASSERT_EQ(a.size(), 3u) << z2.out;
  EXPECT_EQ(a, b) << z3.out;
  EXPECT_NE(z3.err.find("recompute"), std::string::npos) << "the plan must recompute: " << z3.err;
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string m2 = bytes(dir.path("model_z2/model.safetensors")),
                    m3 = bytes(dir.path("model_z3/model.safetensors"));
  ASSERT_GT(m2.size(), 1000u);
  EXPECT_TRUE(m2 == m3) << "the saved models differ";
}
