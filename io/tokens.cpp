#include "io/tokens.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/regular_file.h"

namespace strata::io {
namespace {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");
constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'O', 'K', '1'};
constexpr size_t kHeaderBytes = 16;

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

// Reads exactly `bytes` at `offset`, or throws IoError.
void read_exact(int fd, const std::string& path, void* dst, size_t bytes, size_t offset) {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes < (size_t(1) << 30) ? bytes : (size_t(1) << 30), off_t(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      STRATA_THROW(IoError, fmt::format("{}: read failed: {}", path, n < 0 ? std::strerror(errno) : "unexpected EOF"),
                   path);
    p += n;
    offset += size_t(n);
    bytes -= size_t(n);
  }
}

}  // namespace

std::vector<int32_t> read_tokens(const std::string& path, int vocab_size, long min_tokens) {
  STRATA_CHECK(vocab_size > 0, "read_tokens: vocab_size must be positive");
  size_t size = 0;
  Fd fd{open_regular_file(path, "token file", &size)};  // a FIFO is refused, not waited on
  if (size < kHeaderBytes)
    STRATA_THROW(FormatError, fmt::format("{}: truncated: {} bytes, shorter than the 16-byte header", path, size), path,
                 "header");
  unsigned char h[kHeaderBytes];
  read_exact(fd.fd, path, h, kHeaderBytes, 0);
  if (std::memcmp(h, kMagic, 8) != 0)
    STRATA_THROW(FormatError, fmt::format("{}: bad magic (expected \"STRATOK1\"): not a strata token file", path), path,
                 "magic");
  uint32_t width, reserved;
  std::memcpy(&width, h + 8, 4);
  std::memcpy(&reserved, h + 12, 4);
  if (width != 2 && width != 4)
    STRATA_THROW(FormatError, fmt::format("{}: bytes_per_token is {}, expected 2 or 4", path, width), path,
                 "bytes_per_token");
  if (reserved != 0)
    STRATA_THROW(FormatError, fmt::format("{}: reserved header field is {}, expected 0", path, reserved), path,
                 "reserved");
  size_t payload = size - kHeaderBytes;
  if (payload % width != 0)
    STRATA_THROW(FormatError,
                 fmt::format("{}: {} payload bytes is not a multiple of bytes_per_token {} (truncated file?)", path,
                             payload, width),
                 path, "size");
  size_t count = payload / width;
  if (min_tokens > 0 && count < size_t(min_tokens))
    STRATA_THROW(
        FormatError,
        fmt::format("{}: has {} tokens, needs at least {} tokens (one sequence of seq+1)", path, count, min_tokens),
        path, "size");

  std::vector<int32_t> out(count);
  auto check = [&](size_t i, uint32_t id) {
    if (id >= uint32_t(vocab_size))
      STRATA_THROW(
          FormatError,
          fmt::format("{}: token at index {} is {}, >= vocab_size {} from config.json", path, i, id, vocab_size), path,
          fmt::format("tokens[{}]", i));
  };
  if (width == 4) {
    read_exact(fd.fd, path, out.data(), payload, kHeaderBytes);
    for (size_t i = 0; i < count; ++i) check(i, uint32_t(out[i]));
  } else {
    std::vector<uint16_t> chunk(size_t(1) << 20);
    for (size_t done = 0; done < count;) {
      size_t n = std::min(chunk.size(), count - done);
      read_exact(fd.fd, path, chunk.data(), n * 2, kHeaderBytes + done * 2);
      for (size_t k = 0; k < n; ++k) {
        check(done + k, chunk[k]);
        out[done + k] = int32_t(chunk[k]);
      }
      done += n;
    }
  }
  return out;
}

void write_tokens(const std::string& path, const std::vector<int32_t>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0) STRATA_THROW(Error, fmt::format("{}: token at index {} is negative ({})", path, i, tokens[i]));
  unsigned char h[kHeaderBytes] = {};
  std::memcpy(h, kMagic, 8);
  uint32_t width = 4;
  std::memcpy(h + 8, &width, 4);
  AtomicFile f(path);
  f.write(h, kHeaderBytes);
  if (!tokens.empty()) f.write(tokens.data(), tokens.size() * 4);
  f.commit();
}

}  // namespace strata::io
