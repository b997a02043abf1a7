#include "io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
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

}  // namespace

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

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  remove_stale_temps(parent_dir(path_));  // a killed save must not leave its temp behind for good
  static std::atomic<unsigned> counter{0};
  // O_EXCL + a pid/counter suffix: concurrent writers never share a temp file. Mode 0666 & ~umask,
  // as a plain open() would give, unlike mkstemp's 0600.
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp_ = fmt::format("{}.tmp.{}.{}", path_, ::getpid(), counter.fetch_add(1));
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  int e = errno;
  std::string tmp = tmp_;
  tmp_.clear();
  STRATA_THROW(IoError, fmt::format("{}: cannot create temp file {}: {}", path_, tmp, errno_str(e)), path_);
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_) {
  o.fd_ = -1;
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
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (fd_ < 0) STRATA_THROW(IoError, fmt::format("{}: write after commit or failure", path_), path_);
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    size_t chunk = bytes < (size_t(1) << 30) ? bytes : (size_t(1) << 30);
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
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    std::string tmp = tmp_;  // abandon() clears tmp_
    abandon();
    STRATA_THROW(IoError, fmt::format("{}: rename from {} failed: {}", path_, tmp, errno_str(e)), path_);
  }
  tmp_.clear();
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
