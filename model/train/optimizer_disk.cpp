// The optimizer's disk tier (model/train/optimizer.h): persistent state in the model's state file, read
// ahead into pinned host staging and written back after each chunk's download. Split from
// optimizer.cpp: the chunk pipeline there calls pump_disk / disk_ready / finish_disk.
#include <fmt/format.h>

#include <algorithm>

#include "model/train/optimizer.h"

namespace strata {

namespace {
size_t page_up(size_t b) {
  return (b + DiskFile::kAlign - 1) / DiskFile::kAlign * DiskFile::kAlign;
}
}  // namespace

std::byte* Optimizer::disk_slot(size_t c) const {
  if (!disk_staging_ || !disk_staging_->base()) return nullptr;  // the sim: no bytes
  return disk_staging_->base() + (c % disk_slots_) * disk_slot_bytes_;
}

std::string Optimizer::disk_classes(size_t c) const {
  std::vector<std::string> cls;
  for (const Piece& pc : upd_.chunks[c].pieces) {
    const Parameter& p = model_.params()[pc.param];
    for (auto [off, kind] :
         {std::pair{p.disk_master, ".w.master"}, std::pair{p.disk_m, ".adam.m"}, std::pair{p.disk_v, ".adam.v"}})
      if (off != Parameter::kDevice && std::find(cls.begin(), cls.end(), p.group + kind) == cls.end())
        cls.push_back(p.group + kind);
  }
  std::string out;
  for (const std::string& name : cls) out += (out.empty() ? "" : ", ") + name;
  return out;
}

void Optimizer::disk_requests(size_t c, bool write) {
  Update& u = upd_;
  const Chunk& ch = u.chunks[c];
  std::vector<DiskFile::Ticket>& tickets = write ? u.writes[c] : u.reads[c];
  tickets.clear();
  if (!ch.disk_bytes) return;
  DiskFile& f = *model_.state_disk();
  std::byte* hs = disk_slot(c);
  const size_t mel = dtype_size(moment_dtype());
  try {
    for (const Piece& pc : ch.pieces) {
      const Parameter& p = model_.params()[pc.param];
      // Whole pages: a piece's array starts on one (the granule) and its file region is padded to one.
      auto req = [&](size_t file_off, size_t hs_off, size_t bytes) {
        void* buf = hs ? hs + hs_off : nullptr;
        tickets.push_back(write ? f.write_async(file_off, buf, page_up(bytes))
                                : f.read_async(file_off, buf, page_up(bytes)));
        (write ? stats_.disk_written_bytes : stats_.disk_read_bytes) += page_up(bytes);
      };
      if (p.disk_master != Parameter::kDevice)
        req(p.disk_master + pc.begin * master_elem_bytes(), pc.hmaster, pc.n * master_elem_bytes());
      for (auto [d, h, hsc] : {std::tuple{p.disk_m, pc.hm, pc.hms}, std::tuple{p.disk_v, pc.hv, pc.hvs}}) {
        if (d == Parameter::kDevice) continue;
        req(d + pc.begin * mel, h, pc.n * mel);
        if (quantised())
          req(d + Parameter::disk_scale_offset(size_t(p.shape.numel())) + pc.begin / kQuantBlock * sizeof(float), hsc,
              quant_blocks(pc.n) * sizeof(float));
      }
    }
  } catch (const Error& e) {
    model_.throw_state_disk_error(disk_classes(c), write, e.what());
  }
}

bool Optimizer::issue_read(bool block) {
  Update& u = upd_;
  const size_t r = u.read;
  if (u.chunks[r].disk_bytes && r >= disk_slots_) {
    // Its host block's previous chunk must be written back first.
    const size_t prev = r - disk_slots_;
    if (u.retired <= prev) pump_disk(false, u.computed);
    if (u.retired <= prev) {
      if (!block) return false;
      STRATA_CHECK(prev < u.computed, "optimizer: a disk staging block is needed before its chunk was computed");
      pump_disk(true, prev + 1);
    }
  }
  disk_requests(r, false);
  ++u.read;
  return true;
}

bool Optimizer::disk_ready(size_t c, bool block) {
  Update& u = upd_;
  if (!u.chunks[c].disk_bytes) return true;
  while (u.read <= c)
    if (!issue_read(block)) return false;
  DiskFile& f = *model_.state_disk();
  std::vector<DiskFile::Ticket>& rd = u.reads[c];
  try {
    while (!rd.empty()) {
      if (block)
        f.wait(rd.back());
      else if (!f.done(rd.back()))
        return false;
      rd.pop_back();
    }
  } catch (const Error& e) {
    model_.throw_state_disk_error(disk_classes(c), false, e.what());
  }
  return true;
}

void Optimizer::pump_disk(bool block, size_t upto) {
  Update& u = upd_;
  if (!model_.state_disk()) return;
  upto = std::min(upto, u.computed);
  // Write back every chunk whose download landed (block: every chunk below upto, waiting for it).
  while (u.written < u.computed) {
    const size_t c = u.written;
    if (u.chunks[c].disk_bytes) {
      const bool must = block && c < upto;
      if (!must && !be_.copy_done(u.down[c])) break;
      if (must) be_.copy_wait_host(u.down[c]);
      disk_requests(c, true);
    }
    ++u.written;
  }
  DiskFile& f = *model_.state_disk();
  while (u.retired < u.written) {
    const size_t c = u.retired;
    std::vector<DiskFile::Ticket>& wr = u.writes[c];
    try {
      while (!wr.empty()) {
        if (block && c < upto)
          f.wait(wr.back());
        else if (!f.done(wr.back()))
          return;
        wr.pop_back();
      }
    } catch (const Error& e) {
      model_.throw_state_disk_error(disk_classes(c), true, e.what());
    }
    ++u.retired;
  }
}

void Optimizer::finish_disk() {
  pump_disk(true, upd_.computed);
}

}  // namespace strata
