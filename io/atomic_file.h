// Crash-safe file replacement: write a temp file in the target's directory, fsync it, rename it
// over the target, fsync the directory. A failure at any step leaves the previous file intact and
// removes the temp file. A save killed mid-write (SIGKILL) leaves its temp, which the next save
// into that directory removes; SIGINT and SIGTERM remove it at once where the tool installed
// remove_temps_on_signals().
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace strata::io {

// Writes `contents` to `path` atomically (temp + fsync + rename). Throws IoError naming the path.
void write_file_atomic(const std::string& path, std::string_view contents);

// Removes "<name>.tmp.<pid>.<n>" regular files in `dir` (owned by this user) whose writing
// process no longer exists: what a save killed mid-write leaves. AtomicFile calls it on every save
// into a directory. Returns how many it removed. Caveat: a writer in another PID namespace sharing
// the directory looks dead from here.
size_t remove_stale_temps(const std::string& dir) noexcept;

// Installs a handler for SIGINT and SIGTERM (each one not ignored) that unlinks the temp file of
// every save in progress, then re-raises the signal with the default disposition, so the process
// still ends killed by it. The tools call it once, first thing in main(); not thread-safe itself.
void remove_temps_on_signals();

// The handler's work, async-signal-safe: unlinks the temp file of every save in progress (each
// AtomicFile registers its temp in a fixed table of 32 paths; a 33rd concurrent save, or a path
// of 4096 bytes or more, is not registered and is left to remove_stale_temps). Returns how many
// temps it unlinked.
int unlink_live_temps() noexcept;

// Test hook for crash safety: every file-system mutation of a save calls it first (AtomicFile: the
// temp's creation, each write, the fsync, the rename; the checkpoint writer: each directory it creates,
// renames or removes). With STRATA_TEST_KILL_AT=N in the environment the Nth call in this process
// raises SIGKILL, so a test can stop a save at every step in turn; unset, it only counts. Returns the
// number of calls so far.
long kill_point() noexcept;

// Streaming form for large payloads (checkpoints): write() any number of times, then commit().
// Destroying it uncommitted (e.g. after an exception) unlinks the temp file. Move-only.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates the temp file; throws IoError
  ~AtomicFile();
  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);  // throws IoError (disk full, EFBIG, ...)
  void commit();                               // fsync, close, rename over path, fsync dir
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  void abandon() noexcept;  // close + unlink the temp file
  std::string path_, tmp_;
  int fd_ = -1;
  int slot_ = -1;  // the temp's entry in the signal handler's table, -1 when not registered
};

}  // namespace strata::io
