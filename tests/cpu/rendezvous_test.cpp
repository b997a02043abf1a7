// The rendezvous against a hostile peer (engine/rendezvous.h): a stranger that connects and stalls, sends a
// length of 2^40, claims a rank or another world size, or answers the challenge without the job secret is
// dropped (its side sees the connection close or a refusal), and the real ranks join and run a collective
// meanwhile; a rank with another secret, or a fake rank 0, fails with a message naming the cause. Also
// SHA-256/HMAC against the RFC vectors, and the address rank 0 listens on.
#include "engine/rendezvous.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "engine/hmac.h"
#include "tests/cpu/expect_error.h"

using namespace strata;

namespace {

constexpr uint32_t kMagic = 0x53545241;
constexpr uint32_t kHello = 1, kWelcome = 2, kChallenge = 5, kRefused = 6;
const std::string kSecret = "a-test-job-secret-0123456789";

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

RendezvousOptions opts(int port, int rank, double timeout_s, const std::string& secret = kSecret) {
  RendezvousOptions o{"127.0.0.1", port, rank, 2, timeout_s, "MASTER_PORT", secret};
  o.handshake_s = 1;
  return o;
}

// A raw TCP client: the attacker.
struct Client {
  int fd = -1;
  ~Client() {
    if (fd >= 0) ::close(fd);
  }
  // Connects to 127.0.0.1:port, retrying until rank 0 listens (10 s).
  bool connect_to(int port) {
    const auto t0 = std::chrono::steady_clock::now();
    while (since(t0) < 10) {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(uint16_t(port));
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return true;
      ::close(fd);
      fd = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void send_bytes(const void* p, size_t n) const { ASSERT_EQ(::send(fd, p, n, MSG_NOSIGNAL), ssize_t(n)); }
  void send_frame(uint32_t tag, const std::vector<uint8_t>& data, uint64_t claimed_len) const {
    uint8_t h[16];
    std::memcpy(h, &kMagic, 4);
    std::memcpy(h + 4, &tag, 4);
    std::memcpy(h + 8, &claimed_len, 8);
    send_bytes(h, 16);
    if (!data.empty()) send_bytes(data.data(), data.size());
  }
  // Reads exactly n bytes within `timeout_s`; false on EOF, error or timeout (`eof` says which).
  bool read_exact(void* p, size_t n, double timeout_s, bool* eof = nullptr) const {
    const auto t0 = std::chrono::steady_clock::now();
    size_t got = 0;
    while (got < n) {
      pollfd pf{fd, POLLIN, 0};
      const double left = timeout_s - since(t0);
      if (left <= 0 || ::poll(&pf, 1, int(left * 1000) + 1) <= 0) return false;
      const ssize_t k = ::recv(fd, static_cast<char*>(p) + got, n - got, 0);
      if (k <= 0) {
        if (eof) *eof = true;
        return false;
      }
      got += size_t(k);
    }
    return true;
  }
  // The next frame: {tag, payload}; tag 0 when the connection closed or nothing came in time.
  std::pair<uint32_t, std::vector<uint8_t>> read_frame(double timeout_s) const {
    uint8_t h[16];
    if (!read_exact(h, 16, timeout_s)) return {0, {}};
    uint32_t magic, tag;
    uint64_t len;
    std::memcpy(&magic, h, 4);
    std::memcpy(&tag, h + 4, 4);
    std::memcpy(&len, h + 8, 8);
    if (magic != kMagic || len > 65536) return {0, {}};
    std::vector<uint8_t> d(len);
    if (len && !read_exact(d.data(), len, timeout_s)) return {0, {}};
    return {tag, d};
  }
  // Waits for the peer to close the connection (anything it sends first is skipped).
  bool closed_within(double timeout_s) const {
    const auto t0 = std::chrono::steady_clock::now();
    char buf[256];
    while (since(t0) < timeout_s) {
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, 50) <= 0) continue;
      const ssize_t k = ::recv(fd, buf, sizeof(buf), 0);
      if (k <= 0) return true;
    }
    return false;
  }
};

// A hello for the challenge `nonce0`, claiming `rank` of `world`, keyed with `secret`.
std::vector<uint8_t> hello(const std::vector<uint8_t>& nonce0, int32_t rank, int32_t world, const std::string& secret) {
  std::vector<uint8_t> nonce1(32, 7), m;
  const char* label = "strata-rendezvous hello";
  m.insert(m.end(), label, label + std::strlen(label));
  m.insert(m.end(), nonce0.begin(), nonce0.end());
  m.insert(m.end(), nonce1.begin(), nonce1.end());
  for (int32_t v : {rank, world})
    for (int b = 0; b < 4; ++b) m.push_back(uint8_t(uint32_t(v) >> (8 * b)));
  const Digest mac = hmac_sha256({reinterpret_cast<const uint8_t*>(secret.data()), secret.size()}, m);
  std::vector<uint8_t> out(72);
  std::memcpy(out.data(), &rank, 4);
  std::memcpy(out.data() + 4, &world, 4);
  std::memcpy(out.data() + 8, nonce1.data(), 32);
  std::memcpy(out.data() + 40, mac.data(), 32);
  return out;
}

// Rank `rank` joins and all-gathers its rank; returns "" or the error.
std::string join_and_gather(const RendezvousOptions& o) {
  try {
    auto r = Rendezvous::join(o);
    const int32_t mine = o.rank;
    auto all = r->all_gather(std::as_bytes(std::span(&mine, 1)));
    for (int i = 0; i < o.world; ++i) {
      int32_t v;
      std::memcpy(&v, all[size_t(i)].data(), 4);
      if (v != i) return fmt::format("all_gather: slot {} holds {}", i, v);
    }
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Runs rank 0, lets `attack` work against its port, then runs rank 1; both must join and gather.
template <class Attack>
void ranks_join_despite(Attack attack, double timeout_s = 20) {
  const int port = pick_free_port();
  auto root = std::async(std::launch::async, [&] { return join_and_gather(opts(port, 0, timeout_s)); });
  attack(port);
  const auto t0 = std::chrono::steady_clock::now();
  auto one = std::async(std::launch::async, [&] { return join_and_gather(opts(port, 1, timeout_s)); });
  EXPECT_EQ(one.get(), "");
  EXPECT_EQ(root.get(), "");
  EXPECT_LT(since(t0), 5.0) << "the real rank waited on the stranger";
}

}  // namespace

TEST(Hmac, Sha256AndHmacMatchTheRfcVectors) {
  auto hex = [](const Digest& d) { return to_hex(d); };
  auto bytes = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  EXPECT_EQ(hex(sha256(bytes("abc"))), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256(bytes(""))), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256(bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // RFC 4231 test cases 1, 2 and 6 (a key longer than the block).
  EXPECT_EQ(hex(hmac_sha256(bytes(std::string(20, '\x0b')), bytes("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac_sha256(bytes("Jefe"), bytes("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmac_sha256(bytes(std::string(131, '\xaa')),
                            bytes("Test Using Larger Than Block-Size Key - Hash Key First"))),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  const Digest a = sha256(bytes("x")), b = sha256(bytes("y"));
  EXPECT_TRUE(constant_time_equal(a, a));
  EXPECT_FALSE(constant_time_equal(a, b));
  EXPECT_FALSE(constant_time_equal(a, std::span<const uint8_t>(a.data(), 31)));
  EXPECT_NE(random_bytes(32), random_bytes(32));
}

// Connect, send nothing: rank 0 serves the real rank at once and drops the stranger after handshake_s.
TEST(RendezvousAttack, AStrangerThatSendsNothingDoesNotStallTheJoin) {
  Client c;
  ranks_join_despite([&](int port) { ASSERT_TRUE(c.connect_to(port)); });
  EXPECT_TRUE(c.closed_within(5)) << "the silent stranger was not dropped";
  // Alone with rank 0, it is dropped after handshake_s (1 s here), while rank 0 goes on waiting.
  Client d, e;
  ranks_join_despite([&](int port) {
    ASSERT_TRUE(d.connect_to(port));
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(d.closed_within(5));
    EXPECT_GT(since(t0), 0.8);
    EXPECT_LT(since(t0), 3.0);
    ASSERT_TRUE(e.connect_to(port));  // rank 0 still accepts
  });
}

// Many silent strangers (more than rank 0 serves at once): the oldest are dropped, the rank still joins.
TEST(RendezvousAttack, ManySilentStrangersDoNotStarveTheRanks) {
  std::vector<Client> cs(100);
  ranks_join_despite([&](int port) {
    for (Client& c : cs) ASSERT_TRUE(c.connect_to(port));
  });
  for (Client& c : cs) EXPECT_TRUE(c.closed_within(5));
}

// One 16-byte header claiming 2^40 bytes (it was std::bad_alloc on rank 0), or 1 MiB (allocated before): the
// length is checked before anything is allocated and the stranger is dropped at once.
TEST(RendezvousAttack, AHugeClaimedLengthIsDroppedBeforeAnyAllocation) {
  for (uint64_t len : {uint64_t(1) << 40, uint64_t(1) << 20, uint64_t(5000)}) {
    Client c;
    double dropped_after = -1;
    ranks_join_despite([&](int port) {
      ASSERT_TRUE(c.connect_to(port));
      c.send_frame(kHello, {}, len);
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_TRUE(c.closed_within(5)) << len;
      dropped_after = since(t0);
    });
    EXPECT_LT(dropped_after, 0.9) << "dropped by the handshake deadline, not by the length check: " << len;
  }
  // The same before the challenge is read, and garbage that is not the protocol at all.
  Client g;
  ranks_join_despite([&](int port) {
    ASSERT_TRUE(g.connect_to(port));
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    g.send_bytes(junk, sizeof(junk) - 1);
    EXPECT_TRUE(g.closed_within(5));
  });
}

// Claiming rank 1 first, or another world size, without the secret: refused (the stranger is told why),
// and the real rank 1 joins after it.
TEST(RendezvousAttack, ClaimsWithoutTheSecretAreRefusedAndTheJobGoesOn) {
  for (int32_t world : {2, 3}) {
    for (const std::string& key : {std::string(), std::string("a-guessed-secret-000000000000")}) {
      Client c;
      std::pair<uint32_t, std::vector<uint8_t>> answer;
      ranks_join_despite([&](int port) {
        ASSERT_TRUE(c.connect_to(port));
        auto [tag, nonce] = c.read_frame(5);
        ASSERT_EQ(tag, kChallenge);
        ASSERT_EQ(nonce.size(), 32u);
        c.send_frame(kHello, hello(nonce, 1, world, key), 72);
        answer = c.read_frame(5);
      });
      EXPECT_EQ(answer.first, kRefused) << "world " << world;
      const std::string why(answer.second.begin(), answer.second.end());
      EXPECT_TRUE(has(why, "proof of the job secret does not match")) << why;
      EXPECT_TRUE(c.closed_within(5));
    }
  }
  // A MAC replayed from another challenge is refused too (the challenge is fresh each time).
  Client c;
  std::pair<uint32_t, std::vector<uint8_t>> answer;
  ranks_join_despite([&](int port) {
    ASSERT_TRUE(c.connect_to(port));
    auto [tag, nonce] = c.read_frame(5);
    ASSERT_EQ(tag, kChallenge);
    std::vector<uint8_t> stale(32, 0);
    c.send_frame(kHello, hello(stale, 1, 2, kSecret), 72);
    answer = c.read_frame(5);
  });
  EXPECT_EQ(answer.first, kRefused);
}

// A rank started with another secret cannot join and says why; rank 0 times out naming the rank and the
// refused proof.
TEST(RendezvousAttack, ARankWithAnotherSecretFailsNamingTheSecret) {
  const int port = pick_free_port();
  auto root = std::async(std::launch::async, [&] { return join_and_gather(opts(port, 0, 2)); });
  auto one = std::async(std::launch::async,
                        [&] { return join_and_gather(opts(port, 1, 2, "another-secret-0123456789abcdef")); });
  const std::string e1 = one.get(), e0 = root.get();
  EXPECT_TRUE(has(e1, "rank 1 cannot join the job at 127.0.0.1:")) << e1;
  EXPECT_TRUE(has(e1, "STRATA_JOB_SECRET must be the same on every rank")) << e1;
  EXPECT_TRUE(has(e0, "rank 1 of 2 did not connect to rank 0")) << e0;
  EXPECT_TRUE(has(e0, "1 connection whose proof of the job secret did not match")) << e0;
}

// A program on the port that is not this job's rank 0 (it does not know the secret) is not trusted.
TEST(RendezvousAttack, AFakeRankZeroIsNotTrusted) {
  int ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(ls, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  std::thread fake([&] {
    Client c;
    c.fd = ::accept(ls, nullptr, nullptr);
    c.send_frame(kChallenge, std::vector<uint8_t>(32, 1), 32);
    c.read_frame(5);
    c.send_frame(kWelcome, std::vector<uint8_t>(32, 0), 32);
    c.closed_within(5);
  });
  const std::string e = join_and_gather(opts(port, 1, 5));
  fake.join();
  ::close(ls);
  EXPECT_TRUE(has(e, "does not prove the job secret")) << e;
}

// Rank 0 listens on MASTER_ADDR's address only: 127.0.0.1 is not reachable through this host's other
// addresses. A job of several nodes cannot use a loopback MASTER_ADDR.
TEST(RendezvousAttack, RankZeroListensOnlyOnMasterAddr) {
  auto e = test_util::catch_as<ConfigError>([] {
    RendezvousOptions o{"127.0.0.1", pick_free_port(), 0, 4, 1, "MASTER_PORT", kSecret, 2};
    Rendezvous::join(o);
  });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "MASTER_ADDR");
  EXPECT_TRUE(has(e->what(), "a loopback address, but the job spans several nodes")) << e->what();

  std::string other;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i && other.empty(); i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
        const auto* sa = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
        if ((ntohl(sa->sin_addr.s_addr) >> 24) == 127) continue;
        char buf[INET_ADDRSTRLEN];
        ::inet_ntop(AF_INET, &sa->sin_addr, buf, sizeof(buf));
        other = buf;
      }
    ::freeifaddrs(ifs);
  }
  if (other.empty()) GTEST_SKIP() << "this host has no IPv4 address besides loopback";
  const int port = pick_free_port();
  auto root = std::async(std::launch::async, [&] { return join_and_gather(opts(port, 0, 3)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, other.c_str(), &a.sin_addr);
  a.sin_port = htons(uint16_t(port));
  EXPECT_NE(::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << "rank 0 is reachable on " << other;
  ::close(s);
  auto one = std::async(std::launch::async, [&] { return join_and_gather(opts(port, 1, 3)); });
  EXPECT_EQ(one.get(), "");
  EXPECT_EQ(root.get(), "");
}

// A timeout past the clock's range is refused instead of wrapping to a deadline in the past.
TEST(RendezvousAttack, AnOverflowingTimeoutIsRefused) {
  for (double t : {1e10, 1e300, -1.0}) {
    auto e = test_util::catch_as<ConfigError>([&] { Rendezvous::join(opts(pick_free_port(), 0, t)); });
    ASSERT_TRUE(e) << t;
    EXPECT_EQ(e->field, "STRATA_COMM_TIMEOUT");
  }
}
