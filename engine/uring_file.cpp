#include "engine/uring_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/error.h"

namespace strata {
namespace {

constexpr unsigned kMaxQueueDepth = 4096;
constexpr int kMaxRetries = 64;  // EAGAIN/EINTR resubmissions of one request before it counts as failed

std::string errno_str(int e) {
  return std::strerror(e);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<char, FreeDeleter>;

AlignedBuf aligned_buf(size_t bytes) {
  return AlignedBuf(static_cast<char*>(std::aligned_alloc(UringFile::kAlign, bytes)));
}

std::string strip_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir.empty() ? "." : dir;
}

}  // namespace

UringFile::UringFile(const std::string& dir_in, size_t capacity_bytes, unsigned queue_depth)
    : capacity_(capacity_bytes) {
  const std::string dir = strip_trailing_slashes(dir_in);
  if (queue_depth == 0 || queue_depth > kMaxQueueDepth)
    STRATA_THROW(IoError, fmt::format("{}: queue_depth {} is outside [1, {}]", dir, queue_depth, kMaxQueueDepth), dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) STRATA_THROW(IoError, fmt::format("{}: cannot create offload directory: {}", dir, ec.message()), dir);

  // The file never has a name a kill could leave behind: O_TMPFILE creates it unnamed; where the
  // filesystem lacks that, it is created under a unique name (O_EXCL + pid/counter) and unlinked at
  // once. path_ is a label for messages only.
  static std::atomic<unsigned> counter{0};
  std::string candidate = fmt::format("{}/strata-offload-{}-{}.bin", dir, ::getpid(), counter.fetch_add(1));
  fd_ = ::open(dir.c_str(), O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
  for (int attempt = 0; attempt < 1000 && fd_ < 0; ++attempt) {
    if (attempt > 0) candidate = fmt::format("{}/strata-offload-{}-{}.bin", dir, ::getpid(), counter.fetch_add(1));
    fd_ = ::open(candidate.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ >= 0 && ::unlink(candidate.c_str()) != 0) {
      int e = errno;
      ::close(fd_);
      fd_ = -1;
      errno = e;
      break;
    }
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    int e = errno;
    STRATA_THROW(IoError, fmt::format("{}: cannot create offload file: {}", candidate, errno_str(e)), candidate);
  }
  path_ = candidate + " (unlinked)";

  try {
    // Reserve the blocks up front so a full disk fails here, not halfway through a step.
    if (capacity_ > 0 && ::fallocate(fd_, 0, 0, off_t(capacity_)) != 0) {
      int e = errno;
      if (e != EOPNOTSUPP && e != ENOSYS)
        STRATA_THROW(IoError, fmt::format("{}: cannot reserve {} bytes: {}", path_, capacity_, errno_str(e)), path_);
      if (::ftruncate(fd_, off_t(capacity_)) != 0) {
        e = errno;
        STRATA_THROW(IoError, fmt::format("{}: cannot size to {} bytes: {}", path_, capacity_, errno_str(e)), path_);
      }
    }

    // O_DIRECT set on the open descriptor (the file has no name to reopen); F_SETFL refuses it with EINVAL where
    // the filesystem cannot do direct I/O. Some accept the flag but fail the I/O, so one aligned read proves it.
    int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags | O_DIRECT) != 0) {
      note_ = fmt::format("{}: O_DIRECT refused by the filesystem ({}); using buffered I/O", dir, errno_str(errno));
    } else {
      direct_ = true;
      if (capacity_ >= kAlign) {
        AlignedBuf probe = aligned_buf(kAlign);
        if (::pread(fd_, probe.get(), kAlign, 0) < 0) {
          note_ = fmt::format("{}: O_DIRECT read failed ({}); using buffered I/O", dir, errno_str(errno));
          direct_ = false;
          if (::fcntl(fd_, F_SETFL, flags) != 0) {
            int e = errno;
            STRATA_THROW(IoError, fmt::format("{}: cannot clear O_DIRECT: {}", path_, errno_str(e)), path_);
          }
        }
      }
    }

    ring_ = new io_uring;
    int r = io_uring_queue_init(queue_depth, ring_, 0);
    if (r < 0) {
      delete ring_;
      ring_ = nullptr;
      STRATA_THROW(IoError, fmt::format("{}: io_uring_queue_init({}) failed: {}", path_, queue_depth, errno_str(-r)),
                   path_);
    }
    slots_.resize(queue_depth);
    for (unsigned i = queue_depth; i-- > 0;) free_.push_back(i);
  } catch (...) {
    release();
    throw;
  }
}

UringFile::~UringFile() {
  release();
}

void UringFile::release() noexcept {
  if (ring_) {
    // Wait for everything the kernel still owns: callers free their buffers right after us.
    try {
      while (free_.size() < slots_.size()) {
        flush();
        io_uring_cqe* cqe = nullptr;
        __kernel_timespec ts{30, 0};
        int r = io_uring_wait_cqe_timeout(ring_, &cqe, &ts);
        if (r == -EINTR) continue;
        if (r < 0) {
          fmt::print(stderr, "strata: {}: gave up waiting for {} in-flight requests: {}\n", path_,
                     slots_.size() - free_.size(), errno_str(-r));
          break;
        }
        reap(false);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "strata: {}: while draining: {}\n", path_, e.what());
    }
    io_uring_queue_exit(ring_);
    delete ring_;
    ring_ = nullptr;
  }
  if (fd_ >= 0) ::close(fd_);  // the file has no name: closing its last descriptor frees it
  fd_ = -1;
}

void UringFile::check_request(const char* op, size_t offset, const void* buf, size_t bytes) const {
  DiskFile::check_request(path_, capacity_, op, offset, bytes, buf, true);
}

UringFile::Ticket UringFile::write_async(size_t offset, const void* buf, size_t bytes) {
  check_request("write", offset, buf, bytes);
  // io_uring only reads from a write's buffer; the cast lets one Piece type carry both directions.
  return submit(true, offset, static_cast<char*>(const_cast<void*>(buf)), bytes);
}

UringFile::Ticket UringFile::read_async(size_t offset, void* buf, size_t bytes) {
  check_request("read", offset, buf, bytes);
  return submit(false, offset, static_cast<char*>(buf), bytes);
}

UringFile::Ticket UringFile::submit(bool write, size_t offset, char* buf, size_t bytes) {
  Ticket t = next_ticket_++;
  if (bytes == 0) return t;  // nothing to do: done at once
  // Count every piece before queueing any, so early completions cannot retire the ticket halfway.
  TicketState& st = open_[t];
  st.write = write;
  st.pieces = unsigned((bytes + max_request_bytes_ - 1) / max_request_bytes_);
  for (size_t done_bytes = 0; done_bytes < bytes; done_bytes += max_request_bytes_) {
    Piece p;
    p.ticket = t;
    p.offset = offset + done_bytes;
    p.buf = buf + done_bytes;
    p.bytes = std::min(max_request_bytes_, bytes - done_bytes);
    p.write = write;
    queue_piece(p);
  }
  flush();
  return t;
}

void UringFile::queue_piece(const Piece& p) {
  while (free_.empty()) reap(true);
  unsigned slot = free_.back();
  free_.pop_back();
  slots_[slot] = p;
  if (p.write && inject_countdown_ > 0 && --inject_countdown_ == 0) slots_[slot].inject_err = inject_err_;
  if (!p.write && inject_read_countdown_ > 0 && --inject_read_countdown_ == 0)
    slots_[slot].inject_err = inject_read_err_;
  push_sqe(slot);
}

void UringFile::push_sqe(unsigned slot) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_);
  if (!sqe) {  // the SQ holds >= queue_depth entries, so one flush always frees room
    flush();
    sqe = io_uring_get_sqe(ring_);
  }
  STRATA_CHECK(sqe != nullptr, fmt::format("{}: no free submission queue entry", path_));
  const Piece& p = slots_[slot];
  if (p.inject_err)
    io_uring_prep_nop(sqe);  // goes through the ring like real I/O; complete() substitutes the error
  else if (p.write)
    io_uring_prep_write(sqe, fd_, p.buf, unsigned(p.bytes), p.offset);
  else
    io_uring_prep_read(sqe, fd_, p.buf, unsigned(p.bytes), p.offset);
  io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(uintptr_t(slot)));
  ++prepared_;
}

void UringFile::flush() {
  while (prepared_ > 0) {
    int r = io_uring_submit(ring_);
    if (r == -EINTR) continue;
    if (r <= 0)
      STRATA_THROW(IoError, fmt::format("{}: io_uring_submit failed: {}", path_, errno_str(r < 0 ? -r : EAGAIN)),
                   path_);
    prepared_ -= std::min(prepared_, unsigned(r));
  }
}

unsigned UringFile::reap(bool block) {
  if (block) {
    flush();
    io_uring_cqe* cqe = nullptr;
    int r;
    while ((r = io_uring_wait_cqe(ring_, &cqe)) == -EINTR) {
    }
    if (r < 0) STRATA_THROW(IoError, fmt::format("{}: io_uring_wait_cqe failed: {}", path_, errno_str(-r)), path_);
  }
  unsigned n = 0;
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(ring_, &cqe) == 0) {
    auto slot = unsigned(reinterpret_cast<uintptr_t>(io_uring_cqe_get_data(cqe)));
    int res = cqe->res;
    io_uring_cqe_seen(ring_, cqe);
    complete(slot, res);
    ++n;
  }
  flush();  // resubmissions of short or interrupted requests
  return n;
}

void UringFile::complete(unsigned slot, int res) {
  Piece& p = slots_[slot];
  if (p.inject_err) res = -p.inject_err;
  if ((res == -EAGAIN || res == -EINTR) && p.retries++ < kMaxRetries) {
    push_sqe(slot);
    return;
  }
  TicketState& st = open_.at(p.ticket);
  if (res > 0) {
    auto n = size_t(res);
    (p.write ? bytes_written_ : bytes_read_) += n;
    if (n < p.bytes) {  // short transfer: resubmit the rest from the same slot
      p.offset += n;
      p.buf += n;
      p.bytes -= n;
      p.retries = 0;
      push_sqe(slot);
      return;
    }
  } else if (st.err.empty()) {
    st.err_offset = p.offset;
    st.err = res < 0 ? errno_str(-res) : (p.write ? "write made no progress" : "unexpected end of file");
  }
  free_.push_back(slot);
  if (--st.pieces == 0 && st.err.empty()) open_.erase(p.ticket);
}

void UringFile::check_ticket(Ticket t) const {
  if (t == 0 || t >= next_ticket_) STRATA_THROW(Error, fmt::format("{}: unknown ticket {}", path_, t));
}

bool UringFile::finished(Ticket t) {
  auto it = open_.find(t);
  if (it == open_.end()) return true;
  if (it->second.pieces > 0) return false;
  throw_failure(t, it->second);
}

void UringFile::throw_failure(Ticket t, TicketState& s) {
  s.reported = true;
  STRATA_THROW(IoError,
               fmt::format("{}: {} at offset {} failed: {} (ticket {})", path_, s.write ? "write" : "read",
                           s.err_offset, s.err, t),
               path_);
}

bool UringFile::done(Ticket t) {
  check_ticket(t);
  reap(false);
  return finished(t);
}

void UringFile::wait(Ticket t) {
  check_ticket(t);
  reap(false);
  while (!finished(t)) reap(true);
}

void UringFile::wait_all() {
  while (free_.size() < slots_.size()) reap(true);
  // Report the oldest failure nobody has seen yet (failed tickets stay in open_ with pieces == 0).
  TicketState* first = nullptr;
  Ticket first_t = 0;
  for (auto& [t, s] : open_)
    if (!s.reported && (first == nullptr || t < first_t)) first = &s, first_t = t;
  if (first) throw_failure(first_t, *first);
}

void UringFile::inject_write_failure(int nth, int err) {
  if (nth < 1 || err <= 0)
    STRATA_THROW(Error, fmt::format("{}: inject_write_failure({}, {}): need nth >= 1 and err > 0", path_, nth, err));
  inject_countdown_ = nth;
  inject_err_ = err;
}

void UringFile::inject_read_failure(int nth, int err) {
  if (nth < 1 || err <= 0)
    STRATA_THROW(Error, fmt::format("{}: inject_read_failure({}, {}): need nth >= 1 and err > 0", path_, nth, err));
  inject_read_countdown_ = nth;
  inject_read_err_ = err;
}

std::pair<double, double> measure_direct_bandwidth(const std::string& dir, size_t bytes) {
  constexpr size_t kRequest = size_t(4) << 20;
  constexpr unsigned kDepth = 8;
  if (bytes == 0) STRATA_THROW(IoError, fmt::format("{}: bandwidth measurement of 0 bytes", dir), dir);
  const size_t total = (bytes + UringFile::kAlign - 1) / UringFile::kAlign * UringFile::kAlign;
  UringFile f(dir, total, kDepth);
  if (!f.direct())
    STRATA_THROW(IoError, fmt::format("{}: no O_DIRECT bandwidth baseline: {}", dir, f.note()), f.path());
  f.max_request_bytes_ = kRequest;  // one 4 MiB request per ticket, 8 in flight

  const size_t slot_bytes = std::min(total, kRequest);
  AlignedBuf bufs = aligned_buf(kDepth * slot_bytes);
  if (!bufs)
    STRATA_THROW(IoError, fmt::format("{}: cannot allocate {} bytes of buffers", dir, kDepth * slot_bytes), dir);
  uint64_t x = 0x9E3779B97F4A7C15ull;  // incompressible payload: some SSDs compress or dedupe
  auto* words = reinterpret_cast<uint64_t*>(bufs.get());
  for (size_t i = 0; i < kDepth * slot_bytes / 8; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    words[i] = x;
  }

  auto pass = [&](bool write) {
    auto t0 = std::chrono::steady_clock::now();
    UringFile::Ticket tickets[kDepth] = {};
    size_t i = 0;
    for (size_t off = 0; off < total; off += kRequest, ++i) {
      unsigned s = unsigned(i % kDepth);
      if (tickets[s]) f.wait(tickets[s]);  // that buffer is free again
      char* b = bufs.get() + s * slot_bytes;
      size_t n = std::min(kRequest, total - off);
      tickets[s] = write ? f.write_async(off, b, n) : f.read_async(off, b, n);
    }
    f.wait_all();
    if (write && ::fdatasync(f.fd_) != 0) {
      int e = errno;
      STRATA_THROW(IoError, fmt::format("{}: fdatasync failed: {}", f.path(), errno_str(e)), f.path());
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return double(total) / std::max(s, 1e-9) / 1e9;
  };
  double write_gbps = pass(true);
  double read_gbps = pass(false);
  return {write_gbps, read_gbps};
}

}  // namespace strata
