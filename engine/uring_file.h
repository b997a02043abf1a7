// The disk tier's backing file: one preallocated file per run, O_DIRECT where the filesystem allows it, driven by
// io_uring with a bounded number of requests in flight. Offsets, sizes and buffer addresses are 4 KiB-aligned.
// Not thread-safe: one owner thread submits and reaps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/disk_file.h"

struct io_uring;

namespace strata {

class UringFile final : public DiskFile {
 public:
  // Creates a new file inside `dir` (created if missing) that never has a name there: O_TMPFILE, or a unique name
  // unlinked right after open() where the filesystem lacks O_TMPFILE. So no exit, not even SIGKILL, leaves it
  // behind. Sized `capacity_bytes` (fallocate/ftruncate), O_DIRECT when the filesystem allows it (else buffered,
  // and direct() returns false with note() saying why, e.g. ramfs, or tmpfs before Linux 6.6). queue_depth bounds
  // the requests in flight. IoError naming the path on failure.
  UringFile(const std::string& dir, size_t capacity_bytes, unsigned queue_depth = 64);
  // Waits for in-flight requests and closes, which frees the (nameless) file's blocks.
  ~UringFile() override;

  // "<dir>/strata-offload-<pid>-<n>.bin (unlinked)": a label for messages; no file of that name exists.
  const std::string& path() const override { return path_; }
  bool direct() const { return direct_; }
  const std::string& note() const { return note_; }

  // kAlign (4096: offsets, sizes and buffer addresses must be multiples) and Ticket come from DiskFile.

  // Queue a write/read of `bytes` at `offset` (split internally into <= 1 MiB requests; short completions are
  // resubmitted for the rest). Returns at once unless queue_depth requests are in flight, then reaps first.
  // The buffer must stay alive and untouched until done()/wait() reports the ticket complete.
  Ticket write_async(size_t offset, const void* buf, size_t bytes) override;
  Ticket read_async(size_t offset, void* buf, size_t bytes) override;
  // Reaps completions without blocking; throws IoError naming the file, offset and errno text on a failed request
  // (only once all pieces of `t` are back, so its buffer is free).
  bool done(Ticket t) override;
  void wait(Ticket t) override;  // blocks until that request (all its pieces) completed; same errors
  void wait_all() override;      // blocks until nothing is in flight; throws for the first failure not yet reported
  size_t bytes_written() const { return bytes_written_; }
  size_t bytes_read() const { return bytes_read_; }

  // Fault hook for tests: the `nth` write request from now (1 = next) fails with -err (e.g. EIO, ENOSPC).
  void inject_write_failure(int nth, int err) override;
  void inject_read_failure(int nth, int err) override;

 private:
  friend std::pair<double, double> measure_direct_bandwidth(const std::string& dir, size_t bytes);

  struct Piece {  // one request in flight: the part of a ticket not yet transferred
    Ticket ticket = 0;
    size_t offset = 0, bytes = 0;
    char* buf = nullptr;
    bool write = false;
    int inject_err = 0;  // test hook: complete with -inject_err instead of doing I/O
    int retries = 0;     // EAGAIN/EINTR resubmissions
  };
  struct TicketState {
    unsigned pieces = 0;  // requests still in flight
    std::string err;      // first failure, empty if none
    size_t err_offset = 0;
    bool write = false, reported = false;
  };

  Ticket submit(bool write, size_t offset, char* buf, size_t bytes);
  void check_request(const char* op, size_t offset, const void* buf, size_t bytes) const;
  void queue_piece(const Piece& p);  // takes a free slot, reaping first when all are busy
  void push_sqe(unsigned slot);
  void flush();               // io_uring_submit of prepared entries
  unsigned reap(bool block);  // processes completions; returns how many
  void complete(unsigned slot, int res);
  void check_ticket(Ticket t) const;
  bool finished(Ticket t);  // all pieces back; throws if it failed
  [[noreturn]] void throw_failure(Ticket t, TicketState& s);
  void release() noexcept;  // wait for everything in flight, close, unlink; never throws

  std::string path_, note_;
  int fd_ = -1;
  bool direct_ = false;
  size_t capacity_ = 0;
  size_t max_request_bytes_ = size_t(1) << 20;
  io_uring* ring_ = nullptr;
  std::vector<Piece> slots_;    // queue_depth entries
  std::vector<unsigned> free_;  // free slot indices
  unsigned prepared_ = 0;       // SQEs prepared but not yet submitted
  Ticket next_ticket_ = 1;
  std::unordered_map<Ticket, TicketState> open_;  // in flight, or failed (kept so done/wait can report it)
  size_t bytes_written_ = 0, bytes_read_ = 0;
  long inject_countdown_ = 0, inject_read_countdown_ = 0;
  int inject_err_ = 0, inject_read_err_ = 0;
};

// Sequential O_DIRECT bandwidth of `dir` (writes then reads `bytes` in 4 MiB requests, queue depth 8) for the
// benchmark's "same disk, same run" baseline: returns {write_GBps, read_GBps}. The write time includes the final
// fdatasync. IoError when `dir`'s filesystem refuses O_DIRECT (a buffered number would measure the page cache).
std::pair<double, double> measure_direct_bandwidth(const std::string& dir, size_t bytes);

}  // namespace strata
