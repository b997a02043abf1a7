// The TCP rendezvous (engine/rendezvous.h). Messages are framed as {magic, tag, length} + bytes.
// The join: rank 0 sends each new connection a challenge (32 random bytes); the peer answers with a
// hello {rank, world, its own nonce, HMAC(secret, both nonces, rank, world)}; rank 0 checks the MAC
// (constant time) and, once every rank is in, welcomes each with HMAC(secret, the nonces swapped).
// Rank 0 holds one connection per rank; a collective is: every rank sends to rank 0, rank 0 answers
// every rank. Sockets are blocking with SO_SNDTIMEO (a send cannot block forever); receives go
// through poll() against one deadline per wait, over all peers at once, so a timeout names exactly
// the ranks whose message never came.
#include "engine/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "engine/error.h"
#include "engine/hmac.h"

namespace strata {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x53545241;  // "STRA"
enum Tag : uint32_t { kHello = 1, kWelcome = 2, kData = 3, kAbort = 4, kChallenge = 5, kRefused = 6 };
constexpr uint64_t kMaxJoinMessage = 4096;           // bytes: any message before the join completes
constexpr uint64_t kMaxMessage = uint64_t(1) << 36;  // bytes: a collective's message between joined ranks
constexpr size_t kNonce = 32;
constexpr size_t kHelloBytes = 8 + kNonce + 32;  // rank, world, the peer's nonce, the MAC
constexpr size_t kMaxPending = 64;               // connections in their handshake at once; the oldest goes

struct FrameHeader {
  uint32_t magic, tag;
  uint64_t len;
};

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

std::string errstr(int e) {
  return std::strerror(e);
}

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", s);
}

void set_send_timeout(int fd, double timeout_s) {
  timeval tv{};
  tv.tv_sec = time_t(timeout_s);
  tv.tv_usec = suseconds_t((timeout_s - double(tv.tv_sec)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Sends one frame; false (errno set) when the connection failed or the send timed out.
bool send_frame(int fd, uint32_t tag, std::span<const std::byte> data) {
  FrameHeader h{kMagic, tag, data.size()};
  auto send_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n) {
      ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      c += k, n -= size_t(k);
    }
    return true;
  };
  return send_all(&h, sizeof(h)) && send_all(data.data(), data.size());
}

// One frame being received without blocking (fed whenever poll says the socket is readable). The
// length is checked against `max_len` before anything is allocated, and the payload buffer grows with
// the bytes that actually arrive (a header claiming 2^36 bytes costs nothing until they come).
struct Reader {
  Reader() = default;
  explicit Reader(uint64_t max) : max_len(max) {}
  uint64_t max_len = kMaxMessage;
  FrameHeader h{};
  size_t header_got = 0, payload_got = 0;
  std::vector<std::byte> data;
  bool done = false;
  // Reads what is available. Returns false on EOF or error (`err` says which), or a bad frame.
  bool feed(int fd, std::string& err) {
    while (!done) {
      std::byte* dst;
      size_t want;
      if (header_got < sizeof(h)) {
        dst = reinterpret_cast<std::byte*>(&h) + header_got;
        want = sizeof(h) - header_got;
      } else {
        if (payload_got == data.size())
          data.resize(size_t(std::min<uint64_t>(h.len, std::max<uint64_t>(2 * data.size(), 1 << 20))));
        dst = data.data() + payload_got;
        want = data.size() - payload_got;
      }
      ssize_t k = ::recv(fd, dst, want, MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        err = k == 0 ? "closed its connection (did it exit?)" : "connection failed: " + errstr(errno);
        return false;
      }
      if (header_got < sizeof(h)) {
        header_got += size_t(k);
        if (header_got < sizeof(h)) continue;
        if (h.magic != kMagic) {
          err = "sent a message that is not strata's rendezvous protocol (another program on this port?)";
          return false;
        }
        if (h.len > max_len) {
          err = fmt::format("sent a message of {} bytes, over the {} allowed here", h.len, max_len);
          return false;
        }
        data.reserve(size_t(std::min<uint64_t>(h.len, 1 << 20)));
      } else {
        payload_got += size_t(k);
      }
      if (header_got == sizeof(h) && payload_got == h.len) done = true;
    }
    return true;
  }
};

struct Peer {
  int rank;
  int fd;
};

// Receives one frame from each peer before the deadline. On a timeout `missing` lists the peers whose
// frame did not arrive; on a failure `failed` names the first peer that failed and `err` why.
bool recv_frames(const std::vector<Peer>& peers, Clock::time_point deadline, std::vector<Reader>& out,
                 std::vector<int>& missing, int& failed, std::string& err, uint64_t max_len = kMaxMessage) {
  out.assign(peers.size(), Reader{max_len});
  failed = -1;
  for (;;) {
    std::vector<pollfd> pfd;
    std::vector<size_t> idx;
    for (size_t i = 0; i < peers.size(); ++i)
      if (!out[i].done) pfd.push_back({peers[i].fd, POLLIN, 0}), idx.push_back(i);
    if (pfd.empty()) return true;
    const double left = seconds_left(deadline);
    if (left <= 0) {
      missing.clear();
      for (size_t i : idx) missing.push_back(peers[i].rank);
      return false;
    }
    int n = ::poll(pfd.data(), pfd.size(), int(std::min(left * 1000 + 1, 1e9)));
    if (n < 0 && errno != EINTR) {
      failed = peers[idx[0]].rank, err = "poll failed: " + errstr(errno);
      return false;
    }
    for (size_t j = 0; n > 0 && j < pfd.size(); ++j)
      if (pfd[j].revents && !out[idx[j]].feed(pfd[j].fd, err)) {
        failed = peers[idx[j]].rank;
        return false;
      }
  }
}

std::string endpoint(const RendezvousOptions& o) {
  return fmt::format("{}:{} (MASTER_ADDR:{})", o.master_addr, o.master_port, o.port_name);
}

sockaddr_in resolve(const RendezvousOptions& o) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(o.master_addr.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    STRATA_THROW(ConfigError,
                 fmt::format("rendezvous: cannot resolve MASTER_ADDR '{}': {} (expected a host name or IPv4 address "
                             "of the node where rank 0 runs)",
                             o.master_addr, rc ? ::gai_strerror(rc) : "no address"),
                 "environment", "MASTER_ADDR");
  sockaddr_in a{};
  std::memcpy(&a, res->ai_addr, sizeof(a));
  ::freeaddrinfo(res);
  a.sin_port = htons(uint16_t(o.master_port));
  return a;
}

// The proof of the secret: HMAC over a label (hello or welcome: one cannot stand for the other), the
// two nonces in the label's order, and the claimed rank and world (so they cannot be swapped).
Digest join_mac(const std::string& secret, const char* label, std::span<const uint8_t> first,
                std::span<const uint8_t> second, int32_t rank, int32_t world) {
  std::vector<uint8_t> m(label, label + std::strlen(label));
  m.insert(m.end(), first.begin(), first.end());
  m.insert(m.end(), second.begin(), second.end());
  for (int32_t v : {rank, world})
    for (int b = 0; b < 4; ++b) m.push_back(uint8_t(uint32_t(v) >> (8 * b)));
  return hmac_sha256({reinterpret_cast<const uint8_t*>(secret.data()), secret.size()}, m);
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

class TcpRendezvous final : public Rendezvous {
 public:
  explicit TcpRendezvous(const RendezvousOptions& o) : o_(o) {
    if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
      STRATA_THROW(ConfigError,
                   fmt::format("rendezvous: rank {} of world size {}: expected 0 <= rank < world", o.rank, o.world),
                   "environment", "RANK");
    if (o.master_port < 1 || o.master_port > 65535)
      STRATA_THROW(ConfigError, fmt::format("rendezvous: MASTER_PORT {} is outside 1-65535", o.master_port),
                   "environment", "MASTER_PORT");
    if (!(o.timeout_s > 0) || o.timeout_s > kMaxCommTimeoutS)
      STRATA_THROW(ConfigError,
                   fmt::format("rendezvous: timeout {} s (STRATA_COMM_TIMEOUT) is outside (0, {}] s", o.timeout_s,
                               kMaxCommTimeoutS),
                   "environment", "STRATA_COMM_TIMEOUT");
    if (o.world == 1) return;
    const sockaddr_in addr = resolve(o);
    const auto deadline = after(o.timeout_s);
    if (o.rank == 0)
      listen_and_accept(addr, deadline);
    else
      connect_to_root(addr, deadline);
  }
  ~TcpRendezvous() override = default;

  int rank() const override { return o_.rank; }
  int world() const override { return o_.world; }
  const RendezvousOptions& options() const override { return o_; }

  std::vector<std::byte> broadcast(std::span<const std::byte> from_root) override {
    if (o_.world == 1) return {from_root.begin(), from_root.end()};
    if (o_.rank == 0) {
      for (const Peer& p : peers_) send_or_fail(p, kData, from_root, "broadcast");
      return {from_root.begin(), from_root.end()};
    }
    return recv_from_root("broadcast");
  }

  std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override {
    return gather(mine, "all_gather");
  }

  // Every rank's bytes through rank 0; `what` names the call in errors.
  std::vector<std::vector<std::byte>> gather(std::span<const std::byte> mine, const char* what) {
    std::vector<std::vector<std::byte>> all(size_t(o_.world));
    all[0].assign(mine.begin(), mine.end());
    if (o_.world == 1) return all;
    if (o_.rank != 0) {
      send_or_fail(Peer{0, root_.get()}, kData, mine, what);
      return unpack(recv_from_root(what));
    }
    std::vector<Reader> got = recv_all(what);
    for (size_t i = 0; i < peers_.size(); ++i) all[size_t(peers_[i].rank)] = std::move(got[i].data);
    // The reply: count, each size, then the bytes, rank order.
    std::vector<std::byte> packed(8 * (all.size() + 1));
    uint64_t count = all.size();
    std::memcpy(packed.data(), &count, 8);
    for (size_t r = 0; r < all.size(); ++r) {
      uint64_t n = all[r].size();
      std::memcpy(packed.data() + 8 * (r + 1), &n, 8);
    }
    for (auto& a : all) packed.insert(packed.end(), a.begin(), a.end());
    for (const Peer& p : peers_) send_or_fail(p, kData, packed, what);
    return all;
  }

  void barrier() override { gather({}, "barrier"); }

  void abort(const std::string& reason) override {
    // Within what a joining rank accepts (kMaxJoinMessage).
    std::span<const std::byte> msg(reinterpret_cast<const std::byte*>(reason.data()),
                                   std::min<size_t>(reason.size(), 2048));
    if (o_.rank == 0)
      for (const Peer& p : peers_) send_frame(p.fd, kAbort, msg);
    else if (root_.get() >= 0)
      send_frame(root_.get(), kAbort, msg);
  }

 private:
  // Rank 0: listens on the address MASTER_ADDR resolves to and serves every connection's handshake side
  // by side, until world - 1 ranks have proved they hold the secret. A connection that stalls, breaks
  // the protocol or fails the proof is dropped and counted; only an authenticated rank's bad claim
  // (another world size, a rank taken) stops the job.
  void listen_and_accept(const sockaddr_in& addr, Clock::time_point deadline) {
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
    const bool loopback = (ntohl(addr.sin_addr.s_addr) >> 24) == 127;
    if (loopback && o_.local_world > 0 && o_.local_world < o_.world)
      STRATA_THROW(ConfigError,
                   fmt::format("rendezvous: MASTER_ADDR '{}' resolves to {} on rank 0's node, a loopback address, "
                               "but the job spans several nodes ({} of its {} ranks on this one): the others cannot "
                               "reach it; set MASTER_ADDR to this node's network address",
                               o_.master_addr, ip, o_.local_world, o_.world),
                   "environment", "MASTER_ADDR");
    Fd ls(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (ls.get() < 0) STRATA_THROW(IoError, "rendezvous: socket() failed: " + errstr(errno), endpoint(o_));
    int one = 1;
    ::setsockopt(ls.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // not past a live listener
    if (::bind(ls.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(ls.get(), 128) != 0) {
      const int e = errno;
      STRATA_THROW(
          IoError,
          fmt::format("rendezvous: rank 0 cannot listen on {} port {} ({}): {}{}", ip, o_.master_port, o_.port_name,
                      errstr(e),
                      e == EADDRINUSE ? "; another job (or an earlier run still exiting) holds the port: choose "
                                        "another MASTER_PORT, or set STRATA_RENDEZVOUS_PORT"
                      : e == EADDRNOTAVAIL
                          ? fmt::format("; MASTER_ADDR '{}' is not an address of rank 0's host (rank 0 listens "
                                        "only on the address the other ranks connect to)",
                                        o_.master_addr)
                          : ""),
          endpoint(o_));
    }
    struct Pending {
      Fd fd;
      Reader hello;
      Clock::time_point until;
      std::string nonce;
    };
    std::vector<Pending> pending;
    std::vector<bool> joined(size_t(o_.world), false);
    joined[0] = true;
    welcome_.assign(size_t(o_.world), Digest{});
    const double handshake_s = std::min(o_.handshake_s, o_.timeout_s);
    while (int(peers_.size()) < o_.world - 1) {
      const auto now = Clock::now();
      for (size_t i = pending.size(); i-- > 0;)
        if (now >= pending[i].until) ++stalled_, pending.erase(pending.begin() + ptrdiff_t(i));
      const double left = seconds_left(deadline);
      if (left <= 0) {
        std::vector<int> missing;
        for (int r = 1; r < o_.world; ++r)
          if (!joined[size_t(r)]) missing.push_back(r);
        fail(fmt::format("rendezvous: {} of {} did not connect to rank 0 at {} within {} s{}", rank_list(missing),
                         o_.world, endpoint(o_), o_.timeout_s, refusals()));
      }
      double wait = left;
      for (const Pending& p : pending) wait = std::min(wait, seconds_left(p.until));
      std::vector<pollfd> pfd{{ls.get(), POLLIN, 0}};
      for (const Pending& p : pending) pfd.push_back({p.fd.get(), POLLIN, 0});
      const int n = ::poll(pfd.data(), pfd.size(), int(std::clamp(wait * 1000 + 1, 0.0, 1e9)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("rendezvous: rank 0: poll failed: " + errstr(errno));
      std::vector<size_t> drop;
      for (size_t j = 1; j < pfd.size(); ++j) {
        if (!pfd[j].revents) continue;
        Pending& p = pending[j - 1];
        std::string err;
        if (!p.hello.feed(p.fd.get(), err)) {
          if (err.rfind("closed", 0) != 0) ++garbled_;
          drop.push_back(j - 1);
        } else if (p.hello.done) {
          admit(p.fd, p.hello, p.nonce, joined);  // moves the fd out when it joins
          drop.push_back(j - 1);
        }
      }
      for (size_t k = drop.size(); k-- > 0;) pending.erase(pending.begin() + ptrdiff_t(drop[k]));
      if (pfd[0].revents & POLLIN) {
        Fd c(::accept4(ls.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (c.get() < 0) continue;
        set_send_timeout(c.get(), handshake_s);
        if (pending.size() >= kMaxPending) ++stalled_, pending.erase(pending.begin());
        std::string nonce = random_bytes(kNonce);
        if (!send_frame(c.get(), kChallenge, std::as_bytes(std::span(nonce.data(), nonce.size())))) continue;
        pending.push_back(Pending{std::move(c), Reader{kMaxJoinMessage}, after(handshake_s), std::move(nonce)});
      }
    }
    std::sort(peers_.begin(), peers_.end(), [](const Peer& a, const Peer& b) { return a.rank < b.rank; });
    for (const Peer& p : peers_)
      send_or_fail(p, kWelcome, std::as_bytes(std::span(welcome_[size_t(p.rank)])), "rendezvous");
  }

  // Rank 0: a complete hello on `fd`. Joins its rank when the proof holds; refuses it (and says why)
  // when it does not; stops the job when a rank that proved the secret claims what cannot be.
  void admit(Fd& fd, const Reader& r, const std::string& nonce0, std::vector<bool>& joined) {
    if (r.h.tag != kHello || r.data.size() != kHelloBytes) {
      ++garbled_;
      return;
    }
    int32_t hello[2];
    std::memcpy(hello, r.data.data(), 8);
    const auto* nonce1 = reinterpret_cast<const uint8_t*>(r.data.data()) + 8;
    const auto* mac = nonce1 + kNonce;
    const Digest want =
        join_mac(o_.secret, "strata-rendezvous hello", bytes_of(nonce0), {nonce1, kNonce}, hello[0], hello[1]);
    if (!constant_time_equal(want, {mac, 32})) {
      ++refused_;
      const std::string why =
          "rank 0 refused this connection: its proof of the job secret does not match (STRATA_JOB_SECRET must be "
          "the same on every rank of the job)";
      send_frame(fd.get(), kRefused, std::as_bytes(std::span(why.data(), why.size())));
      return;
    }
    if (hello[1] != o_.world)
      fail(fmt::format("rendezvous: rank {} says the world size is {}, rank 0 says {} (WORLD_SIZE differs between "
                       "ranks)",
                       hello[0], hello[1], o_.world),
           &fd);
    if (hello[0] < 1 || hello[0] >= o_.world || joined[size_t(hello[0])])
      fail(fmt::format("rendezvous: two ranks claim rank {} (or it is outside 1..{}): RANK must be distinct "
                       "on every process",
                       hello[0], o_.world - 1),
           &fd);
    joined[size_t(hello[0])] = true;
    welcome_[size_t(hello[0])] =
        join_mac(o_.secret, "strata-rendezvous welcome", {nonce1, kNonce}, bytes_of(nonce0), hello[0], hello[1]);
    set_send_timeout(fd.get(), o_.timeout_s);
    peers_.push_back(Peer{hello[0], fd.get()});
    fds_.push_back(std::move(fd));
  }

  // What rank 0 turned away while it waited, for the timeout's message.
  std::string refusals() const {
    if (!refused_ && !stalled_ && !garbled_) return "";
    std::string s = "; meanwhile rank 0 dropped";
    const char* sep = " ";
    if (refused_) {
      s += fmt::format(
          "{}{} connection{} whose proof of the job secret did not match (is STRATA_JOB_SECRET the "
          "same on every rank?)",
          sep, refused_, refused_ > 1 ? "s" : "");
      sep = ", ";
    }
    if (stalled_)
      s += fmt::format("{}{} that sent no hello within {} s", sep, stalled_, std::min(o_.handshake_s, o_.timeout_s)),
          sep = ", ";
    if (garbled_) s += fmt::format("{}{} that did not speak strata's rendezvous protocol", sep, garbled_);
    return s;
  }

  void connect_to_root(const sockaddr_in& addr, Clock::time_point deadline) {
    std::string last = "no attempt";
    while (!try_join(addr, deadline, last)) {
      if (seconds_left(deadline) <= 0)
        STRATA_THROW(Error, fmt::format("rendezvous: rank {} could not reach rank 0 at {} within {} s (last error: "
                                        "{}); is rank 0 running, and are MASTER_ADDR and {} the same on "
                                        "every rank?",
                                        o_.rank, endpoint(o_), o_.timeout_s, last, o_.port_name));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // One attempt at joining. False (`last` says why) when no connection was made, or rank 0 dropped it
  // before answering the hello: try again. Throws when rank 0 refused or aborted, or is not rank 0.
  bool try_join(const sockaddr_in& addr, Clock::time_point deadline, std::string& last) {
    Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.get() < 0) STRATA_THROW(IoError, "rendezvous: socket() failed: " + errstr(errno), endpoint(o_));
    int rc = ::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.get(), POLLOUT, 0};
      const double left = std::max(0.0, std::min(seconds_left(deadline), 5.0));
      if (::poll(&p, 1, int(left * 1000)) == 1) {
        int e = 0;
        socklen_t len = sizeof(e);
        ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &e, &len);
        rc = e ? -1 : 0;
        errno = e ? e : ETIMEDOUT;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc != 0) {
      last = errstr(errno);
      return false;
    }
    ::fcntl(s.get(), F_SETFL, ::fcntl(s.get(), F_GETFL) & ~O_NONBLOCK);
    set_send_timeout(s.get(), o_.timeout_s);
    auto next = [&](Clock::time_point until, Reader& out) {
      std::vector<Reader> got;
      std::vector<int> missing;
      int failed;
      std::string err;
      if (!recv_frames({Peer{0, s.get()}}, until, got, missing, failed, err, kMaxJoinMessage)) {
        last = failed >= 0 ? "rank 0 " + err : "no answer from rank 0";
        return false;
      }
      out = std::move(got[0]);
      const std::string text(reinterpret_cast<const char*>(out.data.data()), out.data.size());
      if (out.h.tag == kAbort)
        STRATA_THROW(Error, fmt::format("rendezvous: rank {}: rank 0 stopped the job: {}", o_.rank, text));
      if (out.h.tag == kRefused)
        STRATA_THROW(Error,
                     fmt::format("rendezvous: rank {} cannot join the job at {}: {}", o_.rank, endpoint(o_), text));
      return true;
    };
    Reader challenge;
    if (!next(deadline, challenge)) return false;
    if (challenge.h.tag != kChallenge || challenge.data.size() != kNonce)
      STRATA_THROW(Error, fmt::format("rendezvous: rank {}: the program at {} did not send strata's join challenge "
                                      "(another program on the port, or an older strata as rank 0?)",
                                      o_.rank, endpoint(o_)));
    const std::string nonce1 = random_bytes(kNonce);
    const auto nonce0 = std::span(reinterpret_cast<const uint8_t*>(challenge.data.data()), kNonce);
    const Digest mac = join_mac(o_.secret, "strata-rendezvous hello", nonce0, bytes_of(nonce1), o_.rank, o_.world);
    std::vector<std::byte> hello(kHelloBytes);
    const int32_t rw[2] = {o_.rank, o_.world};
    std::memcpy(hello.data(), rw, 8);
    std::memcpy(hello.data() + 8, nonce1.data(), kNonce);
    std::memcpy(hello.data() + 8 + kNonce, mac.data(), 32);
    if (!send_frame(s.get(), kHello, hello)) {
      last = "sending the hello failed: " + errstr(errno);
      return false;
    }
    deadline_ = deadline + grace();
    Reader welcome;
    if (!next(deadline_, welcome)) {
      if (seconds_left(deadline_) <= 0)
        STRATA_THROW(Error, fmt::format("rendezvous: rendezvous on rank {}: no answer from rank 0 within {} s "
                                        "(another rank has not arrived, or rank 0 is stuck)",
                                        o_.rank, o_.timeout_s));
      return false;
    }
    const Digest want = join_mac(o_.secret, "strata-rendezvous welcome", bytes_of(nonce1), nonce0, o_.rank, o_.world);
    if (welcome.h.tag != kWelcome ||
        !constant_time_equal(want, {reinterpret_cast<const uint8_t*>(welcome.data.data()), welcome.data.size()}))
      STRATA_THROW(Error, fmt::format("rendezvous: rank {}: the welcome from {} does not prove the job secret: it is "
                                      "not this job's rank 0 (another job's, or STRATA_JOB_SECRET differs)",
                                      o_.rank, endpoint(o_)));
    root_ = std::move(s);
    return true;
  }

  // Rank 0 gives up: tells every connected rank why, then throws.
  [[noreturn]] void fail(const std::string& why, const Fd* also = nullptr) {
    abort(why);
    if (also) send_frame(also->get(), kAbort, std::span(reinterpret_cast<const std::byte*>(why.data()), why.size()));
    STRATA_THROW(Error, why);
  }

  void send_or_fail(const Peer& p, uint32_t tag, std::span<const std::byte> data, const char* what) {
    if (send_frame(p.fd, tag, data)) return;
    const std::string why =
        fmt::format("rendezvous: {} on rank {}: sending to rank {} failed: {}", what, o_.rank, p.rank,
                    errno == EAGAIN || errno == EWOULDBLOCK ? fmt::format("it did not read for {} s", o_.timeout_s)
                                                            : errstr(errno));
    if (o_.rank == 0) fail(why);
    STRATA_THROW(Error, why);
  }

  // Rank 0: one frame from every rank (kData), or fail naming who did not send, died, or aborted.
  std::vector<Reader> recv_all(const char* what) {
    const auto deadline = after(o_.timeout_s);
    std::vector<Reader> got;
    std::vector<int> missing;
    int failed;
    std::string err;
    if (!recv_frames(peers_, deadline, got, missing, failed, err)) {
      if (failed >= 0) fail(fmt::format("rendezvous: {} on rank 0: rank {} {}", what, failed, err));
      fail(fmt::format("rendezvous: {} on rank 0: {} of {} did not arrive within {} s", what, rank_list(missing),
                       o_.world, o_.timeout_s));
    }
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].h.tag == kAbort)
        fail(fmt::format("rank {} aborted: {}", peers_[i].rank,
                         std::string(reinterpret_cast<const char*>(got[i].data.data()), got[i].data.size())));
    return got;
  }

  // Non-root ranks wait this much longer than rank 0, so that rank 0's verdict (which ranks are
  // missing) reaches them before their own timeout.
  Clock::duration grace() const {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::max(1.0, 0.1 * o_.timeout_s)));
  }

  // A non-root rank: the next frame from rank 0.
  Reader recv_one(const char* what, bool use_join_deadline = false) {
    const auto deadline = use_join_deadline ? deadline_ : after(o_.timeout_s) + grace();
    std::vector<Reader> got;
    std::vector<int> missing;
    int failed;
    std::string err;
    if (!recv_frames({Peer{0, root_.get()}}, deadline, got, missing, failed, err)) {
      if (failed >= 0) STRATA_THROW(Error, fmt::format("rendezvous: {} on rank {}: rank 0 {}", what, o_.rank, err));
      STRATA_THROW(Error, fmt::format("rendezvous: {} on rank {}: no answer from rank 0 within {} s (another rank "
                                      "has not arrived, or rank 0 is stuck)",
                                      what, o_.rank, o_.timeout_s));
    }
    if (got[0].h.tag == kAbort)
      STRATA_THROW(Error,
                   fmt::format("rendezvous: {} on rank {}: rank 0 stopped the job: {}", what, o_.rank,
                               std::string(reinterpret_cast<const char*>(got[0].data.data()), got[0].data.size())));
    return std::move(got[0]);
  }
  std::vector<std::byte> recv_from_root(const char* what) { return std::move(recv_one(what).data); }

  std::vector<std::vector<std::byte>> unpack(const std::vector<std::byte>& p) const {
    auto bad = [&] { STRATA_THROW(Error, "rendezvous: a malformed all_gather reply from rank 0"); };
    if (p.size() < 8) bad();
    uint64_t count;
    std::memcpy(&count, p.data(), 8);
    if (count != uint64_t(o_.world) || p.size() < 8 * (count + 1)) bad();
    std::vector<std::vector<std::byte>> all(count);
    size_t at = 8 * (count + 1);
    for (size_t r = 0; r < count; ++r) {
      uint64_t n;
      std::memcpy(&n, p.data() + 8 * (r + 1), 8);
      if (at + n > p.size()) bad();
      all[r].assign(p.begin() + ptrdiff_t(at), p.begin() + ptrdiff_t(at + n));
      at += n;
    }
    return all;
  }

  RendezvousOptions o_;
  std::vector<Fd> fds_;      // rank 0: one connection per rank
  std::vector<Peer> peers_;  // rank 0: (rank, fd), rank order
  Fd root_;                  // other ranks: the connection to rank 0
  Clock::time_point deadline_;
  std::vector<Digest> welcome_;                  // rank 0: each rank's welcome MAC, sent once all joined
  int refused_ = 0, stalled_ = 0, garbled_ = 0;  // rank 0: connections dropped during the join, by cause
};

}  // namespace

std::unique_ptr<Rendezvous> Rendezvous::join(const RendezvousOptions& o) {
  return std::make_unique<TcpRendezvous>(o);
}

int pick_free_port(const std::string& addr) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (::inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (s.get() < 0 || ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    STRATA_THROW(IoError, "pick_free_port: cannot bind a socket: " + errstr(errno), addr);
  return ntohs(a.sin_port);
}

}  // namespace strata
