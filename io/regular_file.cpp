#include "io/regular_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace strata::io {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a named pipe (FIFO)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

// "16 MiB" for a whole number of MiB, else the bytes.
std::string limit_text(size_t bytes) {
  return bytes % (size_t(1) << 20) == 0 ? fmt::format("{} MiB", bytes >> 20) : fmt::format("{} bytes", bytes);
}

}  // namespace

int open_regular_file(const std::string& path, const char* what, size_t* size_bytes) {
  // O_NONBLOCK: a FIFO's open() would otherwise wait for a writer forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) STRATA_THROW(IoError, fmt::format("{}: cannot open {}: {}", path, what, std::strerror(errno)), path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    STRATA_THROW(IoError, fmt::format("{}: cannot stat {}: {}", path, what, std::strerror(e)), path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    STRATA_THROW(IoError, fmt::format("{}: {} is {}, expected a regular file", path, what, kind_of(st.st_mode)), path);
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int e = errno;
    ::close(fd);
    STRATA_THROW(IoError, fmt::format("{}: fcntl on {} failed: {}", path, what, std::strerror(e)), path);
  }
  if (size_bytes) *size_bytes = size_t(st.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path, const char* what, size_t max_bytes) {
  size_t size = 0;
  int fd = open_regular_file(path, what, &size);
  if (size > max_bytes) {
    ::close(fd);
    STRATA_THROW(IoError, fmt::format("{}: {} is {} bytes, larger than {}", path, what, size, limit_text(max_bytes)),
                 path);
  }
  std::string text;
  text.reserve(size);
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      STRATA_THROW(IoError, fmt::format("{}: reading {} failed: {}", path, what, std::strerror(e)), path);
    }
    if (text.size() + size_t(n) > max_bytes) {  // grew since fstat
      ::close(fd);
      STRATA_THROW(IoError, fmt::format("{}: {} is larger than {}", path, what, limit_text(max_bytes)), path);
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

}  // namespace strata::io
