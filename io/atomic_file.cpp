#include "io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "engine/error.h"
#include "engine/switches.h"

namespace strata::io {
namespace {

std::string errno_str(int e) {
  return std::strerror(e);
}

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The pid in a temp name "<target>.tmp.<pid>.<n>", or 0 when `name` does not have that form.
pid_t temp_owner(std::string_view name) {
  auto digits_before = [&](size_t end) {  // start of the run of digits ending at `end`
    size_t b = end;
    while (b > 0 && name[b - 1] >= '0' && name[b - 1] <= '9') --b;
    return b;
  };
  size_t n_begin = digits_before(name.size());
  if (n_begin == name.size() || n_begin < 2 || name[n_begin - 1] != '.') return 0;
  size_t pid_end = n_begin - 1, pid_begin = digits_before(pid_end);
  if (pid_begin == pid_end || pid_end - pid_begin > 9 || pid_begin < 6) return 0;
  if (name.substr(pid_begin - 5, 5) != ".tmp.") return 0;
  long pid = std::strtol(std::string(name.substr(pid_begin, pid_end - pid_begin)).c_str(), nullptr, 10);
  return pid_t(pid);
}

// The temps of saves in progress, for the SIGINT/SIGTERM handler: a fixed table it reads without
// allocating or locking. A slot is free, being filled by an AtomicFile, live (the handler may
// unlink its path), or held by the handler while it unlinks that path.
enum : int { kFree = 0, kFilling = 1, kLive = 2, kUnlinking = 3 };
constexpr int kTempSlots = 32;
constexpr size_t kTempPathBytes = 4096;
struct TempSlot {
  std::atomic<int> state{kFree};
  char path[kTempPathBytes] = {};
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free slots");
constinit TempSlot g_temps[kTempSlots];

// Called before the temp is created, so no signal finds a temp that is not in the table.
int register_temp(const std::string& tmp) noexcept {
  if (tmp.size() >= kTempPathBytes) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = kFree;
    if (!g_temps[i].state.compare_exchange_strong(expected, kFilling, std::memory_order_acquire)) continue;
    std::memcpy(g_temps[i].path, tmp.c_str(), tmp.size() + 1);
    g_temps[i].state.store(kLive, std::memory_order_release);
    return i;
  }
  return -1;
}

// Called after the temp is unlinked or renamed. Waits out a handler unlinking this slot's path
// (on another thread; that handler then ends the process), so the path is never rewritten under it.
void unregister_temp(int slot) noexcept {
  if (slot < 0) return;
  for (int expected = kLive; !g_temps[slot].state.compare_exchange_weak(expected, kFree, std::memory_order_acq_rel);
       expected = kLive)
    ::sched_yield();
}

void remove_temps_and_reraise(int sig) {
  const int saved_errno = errno;
  unlink_live_temps();
  // SA_RESETHAND restored the default disposition on entry and the signal is blocked while the
  // handler runs: raised again, it ends the process as the handler returns (status: killed by it).
  ::raise(sig);
  errno = saved_errno;
}

}  // namespace

int unlink_live_temps() noexcept {
  int n = 0;
  for (TempSlot& s : g_temps) {
    int expected = kLive;
    if (!s.state.compare_exchange_strong(expected, kUnlinking, std::memory_order_acquire)) continue;
    if (::unlink(s.path) == 0) ++n;
    s.state.store(kLive, std::memory_order_release);  // its AtomicFile still unregisters it
  }
  return n;
}

void remove_temps_on_signals() {
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old = {};
    // An ignored signal stays ignored (nohup, `cmd &` in a script): the handler would make it fatal.
    if (::sigaction(sig, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;
    struct sigaction sa = {};
    sa.sa_handler = remove_temps_and_reraise;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);  // one handler at a time
    sigaddset(&sa.sa_mask, SIGTERM);
    sa.sa_flags = SA_RESETHAND;
    if (::sigaction(sig, &sa, nullptr) != 0)
      STRATA_THROW(IoError, fmt::format("sigaction({}) failed: {}", sig, errno_str(errno)), "");
  }
}

size_t remove_stale_temps(const std::string& dir) noexcept {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  size_t removed = 0;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = temp_owner(e->d_name);
    // Only a writer that no longer exists leaves a stale temp; a live pid (ours, or another
    // process's, or a reused one) is left alone.
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != ::geteuid())
      continue;
    if (::unlinkat(::dirfd(d), e->d_name, 0) == 0) {
      ++removed;
      fmt::print(stderr, "strata: removed {}/{}, a partial save left by process {} (no longer running)\n", dir,
                 e->d_name, pid);
    }
  }
  ::closedir(d);
  return removed;
}

long kill_point() noexcept {
  const long at = switches().test_kill_at;
  static std::atomic<long> calls{0};
  const long n = calls.fetch_add(1) + 1;
  if (n == at) ::raise(SIGKILL);
  return n;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  remove_stale_temps(parent_dir(path_));  // a killed save must not leave its temp behind for good
  kill_point();
  static std::atomic<unsigned> counter{0};
  // O_EXCL + a pid/counter suffix: concurrent writers never share a temp file. Mode 0666 & ~umask,
  // as a plain open() would give, unlike mkstemp's 0600.
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp_ = fmt::format("{}.tmp.{}.{}", path_, ::getpid(), counter.fetch_add(1));
    slot_ = register_temp(tmp_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    const int e = errno;
    unregister_temp(slot_);  // the name is someone else's (or nothing): not ours to unlink
    slot_ = -1;
    errno = e;
    if (e != EEXIST) break;
  }
  int e = errno;
  std::string tmp = tmp_;
  tmp_.clear();
  STRATA_THROW(IoError, fmt::format("{}: cannot create temp file {}: {}", path_, tmp, errno_str(e)), path_);
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_), slot_(o.slot_) {
  o.fd_ = -1;
  o.slot_ = -1;
  o.tmp_.clear();
}

AtomicFile::~AtomicFile() {
  abandon();
}

void AtomicFile::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  unregister_temp(slot_);  // after the unlink: a signal in between finds the name gone, harmless
  slot_ = -1;
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) STRATA_THROW(IoError, fmt::format("{}: write after commit or failure", path_), path_);
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    size_t chunk = bytes < (size_t(1) << 30) ? bytes : (size_t(1) << 30);
    kill_point();
    ssize_t n = ::write(fd_, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : ENOSPC;
      abandon();
      STRATA_THROW(IoError, fmt::format("{}: write failed: {}", path_, errno_str(e)), path_);
    }
    p += n;
    bytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) STRATA_THROW(IoError, fmt::format("{}: commit after commit or failure", path_), path_);
  kill_point();
  if (::fsync(fd_) != 0) {
    int e = errno;
    abandon();
    STRATA_THROW(IoError, fmt::format("{}: fsync failed: {}", path_, errno_str(e)), path_);
  }
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    int e = errno;
    abandon();
    STRATA_THROW(IoError, fmt::format("{}: close failed: {}", path_, errno_str(e)), path_);
  }
  kill_point();
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    std::string tmp = tmp_;  // abandon() clears tmp_
    abandon();
    STRATA_THROW(IoError, fmt::format("{}: rename from {} failed: {}", path_, tmp, errno_str(e)), path_);
  }
  tmp_.clear();
  unregister_temp(slot_);  // after the rename: a signal in between unlinks a name that is gone
  slot_ = -1;
  // Make the rename itself durable; failure here is not fatal to the data already in place.
  int dfd = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile f(path);
  f.write(contents.data(), contents.size());
  f.commit();
}

}  // namespace strata::io
