// The TCP rendezvous with ranks as threads: the unique id delivered and gathered; a rank that never arrives,
// dies or stalls named within the timeout; a port in use, a bad MASTER_ADDR and ranks that disagree on
// the world size as clear errors.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "engine/error.h"
#include "engine/rendezvous.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/launch_helpers.h"

using namespace strata;
using namespace strata::launch_util;

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
