#include "engine/slot_store.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "engine/switches.h"
#include "engine/tape.h"

namespace strata {

namespace {
constexpr size_t kPage = 4096;  // O_DIRECT granule: host staging and disk extents
}

SlotStore::SlotStore(Backend& be, TierOptions opt) : be_(be), opt_(std::move(opt)) {}

SlotStore::~SlotStore() {
  reset();
}

size_t SlotStore::padded(size_t bytes) const {
  return (bytes + kPage - 1) / kPage * kPage;
}

std::byte* SlotStore::staging_base() const {
  // The sim's host reservation has a null base: its offsets stay offsets (no pointer arithmetic on null).
  return host_mem_->base() ? host_mem_->base() + slot_bytes_ : nullptr;
}

std::string SlotStore::disk_path() const {
  return disk_ ? disk_->path() : std::string();
}

void SlotStore::prepare(size_t host_bytes, size_t disk_bytes, size_t largest_disk_slot) {
  // Disk slots pass through host staging: room for the in-flight bound and at least one slot, never more than the
  // disk slots themselves (the staging is pinned memory, held to the host budget whole).
  const size_t staging =
      disk_bytes ? padded(std::max(std::min(opt_.max_inflight_bytes, disk_bytes), largest_disk_slot)) : 0;
  const size_t slots = padded(host_bytes);
  if (slots + staging && (!host_mem_ || slot_bytes_ < slots || staging_bytes_ < staging)) {
    host_arena_.reset();
    staging_arena_.reset();
    host_mem_.reset();
    slot_bytes_ = std::max(slots, slot_bytes_);
    staging_bytes_ = std::max(staging, staging_bytes_);
    host_mem_ = be_.reserve_host(slot_bytes_ + staging_bytes_);
    stats_.host_reserved_bytes = slot_bytes_ + staging_bytes_;
    stats_.host_pinned = host_mem_->pinned();
    stats_.host_note = host_mem_->note;
  }
  if (host_mem_ && !host_arena_) {
    host_arena_ = std::make_unique<Arena>("host", slot_bytes_, host_mem_->base(), kPage);
    staging_arena_ = std::make_unique<Arena>("host.staging", staging_bytes_, staging_base(), kPage);
  }
  if (disk_bytes && (!disk_ || disk_arena_->budget() < padded(disk_bytes))) {
    disk_arena_.reset();
    disk_.reset();
    std::string dir = opt_.offload_dir;
    if (dir.empty()) dir = switches().temp_dir;
    disk_ = be_.open_disk_file(dir, padded(disk_bytes));
    disk_arena_ = std::make_unique<Arena>("disk", padded(disk_bytes), nullptr, kPage);
  }
}

void SlotStore::note_host_peak() {
  // Disk staging counts whole: its blocks go back when their writes land, a moment each backend's clock
  // places differently (the sim's is not the drive's), so its in-use peak is no forecast; the reservation is.
  stats_.peak_host_bytes = std::max(stats_.peak_host_bytes, host_arena_->in_use() + staging_bytes_);
}

Arena& SlotStore::arena_for(const Value& v) {
  return v.decision == Decision::disk ? *staging_arena_ : *host_arena_;
}

size_t SlotStore::host_alloc(Arena& a, size_t bytes, const std::string& tag) {
  STRATA_CHECK(host_arena_ != nullptr, "host tier used before prepare()");
  // Blocks wait on transfers that still read them; reclaim those first when the pool is full.
  for (;;) {
    if (const size_t off = a.try_allocate(bytes, tag); off != Arena::kNoBlock) {
      note_host_peak();
      return off;
    }
    if (host_frees_.empty() && offloads_.empty() && writes_.empty() && reads_.empty()) a.out_of_memory(bytes, tag);
    wait_oldest();
  }
}

void SlotStore::free_host_later(Arena* a, size_t off, CopyTicket after) {
  host_frees_.push_back({a, off, after});
}

void SlotStore::offload(Value& v) {
  const size_t bytes = v.buf.view().bytes();
  const bool disk = v.decision == Decision::disk;
  v.host_off = host_alloc(arena_for(v), disk ? padded(bytes) : bytes, disk ? "staging:" + v.cls : v.cls);
  v.copy = be_.copy_to_host_async(arena_for(v).ptr(v.host_off), v.buf.view());
  v.state = disk ? SlotState::WRITING : SlotState::OFFLOADING;
  offloads_.push_back({&v, v.copy});
  held_.push_back({&v, v.copy});
  held_bytes_ += bytes;
  stats_.offloaded_bytes += bytes;
  if (opt_.synchronous) {
    while (!offloads_.empty()) wait_oldest();
    release_held(0);
    return;
  }
  // Held blocks raise the peak: bound them in bytes, not by when their copies land, so the sim
  // and the device return the same blocks at the same program points (the same arena layout).
  release_held(opt_.max_inflight_bytes);
  poll();
}

void SlotStore::release_held(size_t keep_bytes) {
  while (held_bytes_ > keep_bytes && !held_.empty()) {
    const Flight f = held_.front();
    held_.pop_front();
    // The compute stream waits on the copy's event before any later op (or copy, which is ordered
    // after the compute stream) may reuse the block; the host does not wait.
    be_.copy_wait_compute(f.ticket);
    held_bytes_ -= f.v->buf.view().bytes();
    f.v->buf.reset();
  }
}

void SlotStore::end_forward() {
  release_held(0);
}

void SlotStore::finish_offload(Value& v) {
  // The copy landed (the host saw it): the host copy is whole. The device block is release_held's.
  v.copy = 0;
  if (v.state == SlotState::OFFLOADING) {
    v.state = SlotState::ON_HOST;
  } else {
    start_disk_write(v);
  }
}

void SlotStore::start_disk_write(Value& v) {
  const size_t bytes = padded(v.shape.numel() * dtype_size(v.dtype));
  try {
    v.disk_off = disk_arena_->allocate(bytes, v.cls);
    stats_.peak_disk_bytes = std::max(stats_.peak_disk_bytes, disk_arena_->in_use());
    v.io = disk_->write_async(v.disk_off, staging_arena_->ptr(v.host_off), bytes);
  } catch (...) {
    fail_disk();
    throw;
  }
  writes_.push_back(&v);
}

void SlotStore::finish_disk_write(Value& v) {
  staging_arena_->free(v.host_off);
  v.host_off = Value::kNone;
  v.io = 0;
  v.state = SlotState::ON_DISK;
}

void SlotStore::wait_disk(uint64_t io) {
  try {
    disk_->wait(io);
  } catch (...) {
    fail_disk();  // a failed request leaves the file useless
    throw;
  }
}

void SlotStore::wait_oldest() {
  if (!offloads_.empty()) {
    Flight f = offloads_.front();
    offloads_.pop_front();
    be_.copy_wait_host(f.ticket);
    finish_offload(*f.v);
  } else if (!writes_.empty()) {
    Value* v = writes_.front();
    writes_.pop_front();
    wait_disk(v->io);
    finish_disk_write(*v);
  } else if (!reads_.empty()) {
    finish_disk_read(*reads_.front());
  } else if (!host_frees_.empty()) {
    HostFree f = host_frees_.front();
    host_frees_.pop_front();
    be_.copy_wait_host(f.after);
    f.arena->free(f.off);
  }
}

void SlotStore::poll() {
  while (!offloads_.empty() && be_.copy_done(offloads_.front().ticket)) {
    Flight f = offloads_.front();
    offloads_.pop_front();
    finish_offload(*f.v);
  }
  try {
    while (!writes_.empty() && disk_->done(writes_.front()->io)) {
      Value* v = writes_.front();
      writes_.pop_front();
      finish_disk_write(*v);
    }
    while (!reads_.empty() && disk_->done(reads_.front()->io)) finish_disk_read(*reads_.front());
  } catch (...) {
    fail_disk();
    throw;
  }
  while (!host_frees_.empty() && be_.copy_done(host_frees_.front().after)) {
    host_frees_.front().arena->free(host_frees_.front().off);
    host_frees_.pop_front();
  }
}

void SlotStore::prefetch(Value& v) {
  if (v.state == SlotState::OFFLOADING || v.state == SlotState::WRITING) {
    // Still leaving: let it land first (short steps, or a slot read right after forward).
    while (v.state == SlotState::OFFLOADING || v.state == SlotState::WRITING) wait_oldest();
  }
  if (v.state != SlotState::ON_HOST && v.state != SlotState::ON_DISK) return;
  release_through(v);
  const size_t bytes = v.shape.numel() * dtype_size(v.dtype);
  v.buf = Buffer(be_.arena(), v.dtype, v.shape, v.cls);
  loading_bytes_ += bytes;
  stats_.loaded_bytes += bytes;
  if (v.state == SlotState::ON_DISK) {
    // The read runs while compute goes on; the upload follows once it lands (poll, or make_resident's wait).
    const size_t pbytes = padded(bytes);
    v.host_off = host_alloc(*staging_arena_, pbytes, "staging:" + v.cls);
    try {
      v.io = disk_->read_async(v.disk_off, staging_arena_->ptr(v.host_off), pbytes);
    } catch (...) {
      fail_disk();
      throw;
    }
    v.state = SlotState::READING;
    reads_.push_back(&v);
    if (opt_.synchronous) finish_disk_read(v);
    return;
  }
  start_upload(v);
}

void SlotStore::land(Value& v) {
  if (v.state == SlotState::READING) finish_disk_read(v);
  if (v.state == SlotState::LOADING) make_resident(v);
}

void SlotStore::finish_disk_read(Value& v) {
  // Reads land in order (one disk queue): finish the older ones first.
  while (!reads_.empty()) {
    Value* r = reads_.front();
    reads_.pop_front();
    wait_disk(r->io);
    r->io = 0;
    disk_arena_->free(r->disk_off);
    r->disk_off = Value::kNone;
    start_upload(*r);
    if (r == &v) return;
  }
}

void SlotStore::start_upload(Value& v) {
  v.copy = be_.copy_to_device_async(v.buf.view(), arena_for(v).ptr(v.host_off));
  free_host_later(&arena_for(v), v.host_off, v.copy);  // the block returns once the upload has read it
  v.host_off = Value::kNone;
  v.state = SlotState::LOADING;
  if (opt_.synchronous) be_.copy_wait_host(v.copy);
}

void SlotStore::release_through(const Value& v) {
  // A slot read back before end_forward (a short step): its block and every older one go back first.
  if (!v.buf.allocated()) return;
  size_t keep = held_bytes_;
  for (const Flight& f : held_) {
    keep -= f.v->buf.view().bytes();
    if (f.v == &v) return release_held(keep);
  }
}

void SlotStore::make_resident(Value& v) {
  prefetch(v);
  if (v.state == SlotState::READING) finish_disk_read(v);
  if (v.state != SlotState::LOADING) return;
  be_.copy_wait_compute(v.copy);  // the compute stream reads the slot only after its upload
  loading_bytes_ -= v.shape.numel() * dtype_size(v.dtype);
  v.copy = 0;
  v.state = SlotState::RESIDENT;
}

void SlotStore::drop(Value& v) {
  release_through(v);
  if (v.state == SlotState::OFFLOADING || v.state == SlotState::WRITING || v.state == SlotState::LOADING ||
      v.state == SlotState::READING) {
    while (v.state == SlotState::OFFLOADING || v.state == SlotState::WRITING) wait_oldest();
    if (v.state == SlotState::READING) finish_disk_read(v);
    if (v.state == SlotState::LOADING) make_resident(v);
  }
  if (v.host_off != Value::kNone && host_arena_) arena_for(v).free(v.host_off);
  if (v.disk_off != Value::kNone && disk_arena_) disk_arena_->free(v.disk_off);
  v.host_off = v.disk_off = Value::kNone;
}

void SlotStore::inject_disk_write_failure(int nth, int err) {
  STRATA_CHECK(disk_ != nullptr, "no disk tier to inject a failure into");
  disk_->inject_write_failure(nth, err);
}

void SlotStore::inject_disk_read_failure(int nth, int err) {
  STRATA_CHECK(disk_ != nullptr, "no disk tier to inject a failure into");
  disk_->inject_read_failure(nth, err);
}

void SlotStore::fail_disk() noexcept {
  // A failed write or read leaves the file useless: remove it now, not at exit.
  for (Value* v : writes_) v->io = 0;
  for (Value* v : reads_) v->io = 0;
  writes_.clear();
  reads_.clear();
  disk_.reset();
}

void SlotStore::reset() noexcept {
  try {
    for (auto& f : offloads_) be_.copy_wait_host(f.ticket);
    for (auto& f : host_frees_) be_.copy_wait_host(f.after);
    if (disk_) disk_->wait_all();
  } catch (...) {
    // Destructors and error paths must not throw; a failed transfer has already been reported.
  }
  offloads_.clear();
  writes_.clear();
  reads_.clear();
  host_frees_.clear();
  held_.clear();  // their Values (and blocks) go with the tape
  held_bytes_ = loading_bytes_ = 0;
  // Every slot is gone with the tape: start the pools empty (the reservations stay).
  if (host_mem_) {
    host_arena_ = std::make_unique<Arena>("host", slot_bytes_, host_mem_->base(), kPage);
    staging_arena_ = std::make_unique<Arena>("host.staging", staging_bytes_, staging_base(), kPage);
  }
  if (disk_arena_) disk_arena_ = std::make_unique<Arena>("disk", disk_arena_->budget(), nullptr, kPage);
}

}  // namespace strata
