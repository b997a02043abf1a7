// Ranks as processes: the self-launcher (a failing rank stops the others and is named), strata-train on two
// ranks against one rank, a rank 0 that survives strangers on its port, Sessions as ranks, and a rank whose
// peers never arrive stopping within the timeout.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <thread>

#include "engine/rendezvous.h"
#include "model/run/launch.h"
#include "tests/cpu/launch_helpers.h"
#include "tests/cpu/tool_runner.h"

using namespace strata;
using namespace strata::launch_util;

// --- the self-launcher, ranks as processes (tests/cpu/launch_child.cpp).
TEST(Launcher, ProcessesRendezvousAndReduce) {
  LocalLaunch l = child_ranks(3, {"allreduce"});
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
  LocalLaunch l = child_ranks(2, {"allreduce"});
  l.master_port = port;
  const int rc = run_local_ranks(l);
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  ::close(held);
  EXPECT_EQ(rc, 0);
}

TEST(Launcher, AFailingRankStopsTheOthersAndIsNamed) {
  LocalLaunch l = child_ranks(4, {"fail", "2", "3"});
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
TEST(Launcher, StrataTrainOnTwoRanksMatchesOneRankOnTheSameGlobalBatch) {
  using namespace tool_test;
  Scratch dir;
  ASSERT_TRUE(scratch_with_tiny(dir, "strata_dp_train"));
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
  Scratch a, b;
  ASSERT_TRUE(scratch_with_tiny(a, "strata_rdv_attack_a"));
  b.create("strata_rdv_attack_b");
  ASSERT_TRUE(b.ok());
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
  Scratch dir;
  ASSERT_TRUE(scratch_with_tiny(dir, "strata_dp_session"));
  auto yaml = [&](const std::string& name, const std::string& out) {
    const std::string path = dir.path(name);
    std::ofstream(path) << "base_model: " << dir.path("tiny") << "\ndata: " << dir.path("tiny/tokens.bin")
                        << "\nsequence_len: 32\nmicro_batch_size: 2\nmax_steps: 4\nlearning_rate: 3.0e-3\n"
                        << "backend: cpu\noutput_dir: " << out << "\n";
    return path;
  };
  const Proc tool = dir.run(kTrain + " --gpus 2 --config " + quote(yaml("a.yaml", dir.path("by_tool"))));
  ASSERT_EQ(tool.code, 0) << tool.err;
  LocalLaunch l = child_ranks(2, {"session", yaml("b.yaml", dir.path("by_session"))});
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
  Scratch dir;
  ASSERT_TRUE(scratch_with_tiny(dir, "strata_dp_alone"));
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
