// The host and disk tiers for saved slots. Forward moves a slot's bytes off the device
// (RESIDENT -> OFFLOADING -> ON_HOST, or -> WRITING -> ON_DISK) on the backend's copy stream.
// Device blocks go back at program points, never when a copy happens to land: oldest first once
// more than max_inflight_bytes are held, and all at the end of forward, each with the compute
// stream waiting on its copy; so every backend (the sim included) frees and allocates the same
// blocks in the same order and the arena's layout, fragmentation included, is the forecast's.
// Backward brings slots back
// (-> LOADING -> RESIDENT), prefetched ahead of use, with the compute stream waiting on the
// copy's event. In-flight offload is bounded in bytes. Host memory is one reservation sized
// exactly for the plan (pinned on cuda); the disk tier is one io_uring O_DIRECT file (the
// backend's open_disk_file: the sim's moves no bytes), removed when the store goes away, also
// after an error.
#pragma once
#include <deque>
#include <memory>
#include <string>

#include "engine/arena.h"
#include "engine/backend.h"

namespace strata {

struct Value;

struct TierOptions {
  std::string offload_dir;                        // disk tier directory; "" = $TMPDIR or /tmp
  size_t max_inflight_bytes = size_t(512) << 20;  // device bytes of offloaded slots held at once
  size_t prefetch_bytes = size_t(512) << 20;      // bytes loaded ahead of use in backward
  bool synchronous = false;                       // `legacy`: every transfer waits at once
};

struct TierStats {
  size_t peak_host_bytes = 0, peak_disk_bytes = 0;
  size_t offloaded_bytes = 0, loaded_bytes = 0;
  size_t host_reserved_bytes = 0;
  bool host_pinned = false;
  std::string host_note;  // why the host pool is pageable, when it is
};

class SlotStore {
 public:
  SlotStore(Backend& be, TierOptions opt);
  ~SlotStore();
  SlotStore(const SlotStore&) = delete;
  SlotStore& operator=(const SlotStore&) = delete;

  // Before a step: the host pool must hold `host_bytes` of slots plus disk staging (the in-flight bound, at least
  // the largest disk slot, at most `disk_bytes`), the disk file `disk_bytes`. Grows the reservations when the plan
  // needs more; never per step otherwise.
  void prepare(size_t host_bytes, size_t disk_bytes, size_t largest_disk_slot);
  // Forward, after a slot's last forward use (decision host or disk).
  void offload(Value& v);
  // Moves slots whose copies landed along (host state, disk writes, host blocks). Never blocks and
  // never frees a device block: those go back at program points (release_held), the same on every backend.
  void poll();
  // End of forward: every offloaded slot's device block goes back (the compute stream waits on its copy).
  void end_forward();
  // Backward: start bringing a slot back (no-op unless it is ON_HOST/ON_DISK).
  void prefetch(Value& v);
  // A slot on its way back (READING or LOADING) made resident: its read and upload land first, the compute stream
  // waiting for the upload. For a replay about to rewrite the slot in a new block (Tape::run_forward): the old
  // block goes back to the arena only once nothing still writes it.
  void land(Value& v);
  // Backward: the slot is RESIDENT and the compute stream is ordered after its upload.
  void make_resident(Value& v);
  // Releases whatever host or disk copy a slot still holds.
  void drop(Value& v);
  // End of step or error: waits for every transfer, frees every host block and disk extent.
  void reset() noexcept;
  size_t loading_bytes() const { return loading_bytes_; }
  // Test hook: the nth disk write from now fails with errno `err` (after prepare()).
  void inject_disk_write_failure(int nth, int err);
  void inject_disk_read_failure(int nth, int err);

  const TierStats& stats() const { return stats_; }
  const Arena* host_arena() const { return host_arena_.get(); }
  const Arena* staging_arena() const { return staging_arena_.get(); }
  const Arena* disk_arena() const { return disk_arena_.get(); }
  std::string disk_path() const;
  const TierOptions& options() const { return opt_; }

 private:
  struct Flight {
    Value* v;
    CopyTicket ticket;
  };
  void finish_offload(Value& v);
  // Device blocks of offloaded slots go back oldest first while more than keep_bytes are held.
  void release_held(size_t keep_bytes);
  void release_through(const Value& v);
  void start_disk_write(Value& v);
  void finish_disk_write(Value& v);
  // A disk read landed in staging (waiting for it if not): the extent goes back and the upload starts (LOADING).
  void finish_disk_read(Value& v);
  void start_upload(Value& v);
  void wait_oldest();
  // Waits for one disk request; a failure removes the file (fail_disk) and propagates.
  void wait_disk(uint64_t io);
  // Host slots and disk staging live in two arenas carved from the one reservation: slots are
  // only allocated in forward and sum exactly to their part, so they always fit; staging is
  // bounded and recycled, waiting on transfers when full.
  size_t host_alloc(Arena& a, size_t bytes, const std::string& tag);
  void free_host_later(Arena* a, size_t off, CopyTicket after);
  Arena& arena_for(const Value& v);
  void note_host_peak();
  void fail_disk() noexcept;
  size_t padded(size_t bytes) const;
  std::byte* staging_base() const;

  Backend& be_;
  TierOptions opt_;
  std::unique_ptr<HostReservation> host_mem_;
  std::unique_ptr<Arena> host_arena_, staging_arena_;
  size_t slot_bytes_ = 0, staging_bytes_ = 0;
  std::unique_ptr<DiskFile> disk_;  // Backend::open_disk_file: io_uring on cpu/cuda, a cost-model clock on sim
  std::unique_ptr<Arena> disk_arena_;
  std::deque<Flight> offloads_;  // D2H in flight (host or disk staging)
  std::deque<Flight> held_;      // offloaded slots whose device block is not back yet, oldest first
  std::deque<Value*> writes_;    // staging -> disk writes in flight
  std::deque<Value*> reads_;     // disk -> staging reads in flight (READING), oldest first
  struct HostFree {
    Arena* arena;
    size_t off;
    CopyTicket after;
  };
  std::deque<HostFree> host_frees_;  // host blocks freed once the copy reading them is done
  size_t held_bytes_ = 0, loading_bytes_ = 0;
  TierStats stats_;
};

}  // namespace strata
