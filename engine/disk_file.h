// The disk tier's backing file as the slot store sees it: asynchronous writes and reads at 4 KiB-aligned offsets,
// each a ticket to poll or wait on. UringFile (engine/uring_file.h) is the real one; the sim backend's moves no
// bytes and only advances its clock (kernels/backend_sim.cpp). Backend::open_disk_file chooses.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

class DiskFile {
 public:
  using Ticket = uint64_t;
  static constexpr size_t kAlign = 4096;  // offsets, sizes and buffer addresses must be multiples (O_DIRECT)

  virtual ~DiskFile() = default;  // waits for requests in flight; a real file is nameless, so nothing is left
  DiskFile() = default;
  DiskFile(const DiskFile&) = delete;
  DiskFile& operator=(const DiskFile&) = delete;

  virtual const std::string& path() const = 0;
  // Whether requests move bytes. The sim's file does not: it takes no buffer (null is fine) and reads zeros.
  virtual bool moves_bytes() const { return true; }
  // Queue a write/read of `bytes` at `offset`; the buffer stays untouched until done()/wait() reports the ticket.
  virtual Ticket write_async(size_t offset, const void* buf, size_t bytes) = 0;
  virtual Ticket read_async(size_t offset, void* buf, size_t bytes) = 0;
  virtual bool done(Ticket t) = 0;  // never blocks; IoError naming the file on a failed request
  virtual void wait(Ticket t) = 0;  // blocks until the request completed; same errors
  virtual void wait_all() = 0;      // blocks until nothing is in flight; throws for the first failure not yet reported
  // Fault hook for tests: the `nth` write request from now (1 = next) fails with -err (e.g. EIO, ENOSPC).
  virtual void inject_write_failure(int nth, int err) = 0;
  // The same for reads: the `nth` read request from now fails with -err.
  virtual void inject_read_failure(int nth, int err) = 0;

 protected:
  // IoError naming `path` for a request that is misaligned, runs past `capacity`, or (when
  // `check_buffer`) has no buffer; every implementation checks requests the same way.
  static void check_request(const std::string& path, size_t capacity, const char* op, size_t offset, size_t bytes,
                            const void* buf, bool check_buffer);
};

}  // namespace strata
