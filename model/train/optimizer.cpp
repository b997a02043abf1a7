#include "model/train/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace strata {

namespace {
size_t align_up(size_t b) {
  return (b + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
}
size_t page_up(size_t b) {
  return (b + DiskFile::kAlign - 1) / DiskFile::kAlign * DiskFile::kAlign;
}
bool off_device(size_t host_off, size_t disk_off) {
  return host_off != Parameter::kDevice || disk_off != Parameter::kDevice;
}
// A trainable weight whose compute copy is the pager's host block: streamed like host-tier state.
bool paged_weights(const Parameter& p) {
  return p.trainable && p.page >= 0 && !p.weights_sharded;
}
// A flat view of elements [begin, begin + n) of a contiguous tensor.
Tensor slice(const Tensor& t, size_t begin, size_t n) {
  std::byte* base = static_cast<std::byte*>(t.data);
  return Tensor(base ? base + begin * dtype_size(t.dtype) : nullptr, t.dtype, Shape{int64_t(n)});
}
Tensor at(const Buffer& staging, size_t off, DType dt, size_t n) {
  std::byte* base = static_cast<std::byte*>(staging.view().data);
  return Tensor(base ? base + off : nullptr, dt, Shape{int64_t(n)});
}
}  // namespace

Optimizer::Optimizer(Backend& be, LlamaModel& model, OptimizerOptions opt) : be_(be), model_(model), opt_(opt) {
  STRATA_CHECK(opt_.chunk_bytes >= (size_t(1) << 20), "optimizer: chunk_bytes must be at least 1 MiB");
  norms_[0] = Buffer(be_.arena(), DType::f32, Shape{1}, "grad_norm");
  if (opt_.defer_update) norms_[1] = Buffer(be_.arena(), DType::f32, Shape{1}, "grad_norm");
  lazy_grads_.resize(model_.params().size());
  // Disk-tier state's host staging: kDiskSlots blocks, each the largest chunk's disk arrays. The chunk
  // plan depends on the model and the options only, so every step's chunks fit.
  if (model_.state_disk()) {
    size_t chunks = 0;
    for (const Chunk& c : plan_chunks()) {
      disk_slot_bytes_ = std::max(disk_slot_bytes_, c.disk_bytes);
      ++chunks;
    }
    disk_slots_ = std::min(kDiskSlots, chunks);
    if (disk_slot_bytes_) disk_staging_ = be_.reserve_host(disk_slots_ * disk_slot_bytes_);
  }
  // ZeRO-2: one 8-byte norm part a parameter (at most every parameter becomes final once a backward).
  if (model_.options().zero.shards_grads())
    norm_parts_ = Buffer(be_.arena(), DType::i32, Shape{int64_t(2 * std::max<size_t>(1, model_.params().size()))},
                         "grad_norm.parts");
  model_.set_state_sync([this] { flush(); }, [this] { model_alive_ = false; });
}

Optimizer::~Optimizer() {
  if (model_alive_) {
    // The model stays: its weights get the last step's deferred update.
    try {
      if (pending()) flush();
    } catch (...) {
      // Never throws; a failed transfer has already been reported.
    }
    model_.set_state_sync(nullptr, nullptr);
  }
  reset();
}

size_t Optimizer::master_elem_bytes() const {
  return be_.compute_dtype() == DType::f32 ? sizeof(float) : dtype_size(be_.master_dtype());
}

DType Optimizer::moment_dtype() const {
  switch (model_.options().recipe.moments) {
    case OptimizerState::fp32:
      return DType::f32;
    case OptimizerState::bf16:
      return DType::bf16;
    case OptimizerState::q8:
      return DType::u8;
  }
  return DType::f32;
}

void Optimizer::install(Tape& tape) {
  tape_ = &tape;
  tape.set_grad_hooks(
      {[this](VId u) { return grad_sink(u); }, [this](const std::vector<VId>& ids) { grads_final(ids); }});
  tape.set_state_hook([this](int node) { before_node(node); });
}

void Optimizer::begin_step() {
  if (torn_chunks_ > 0)
    STRATA_THROW(Error, fmt::format("optimizer: the last step failed in backward after its update had begun (no "
                                    "clipping: chunks are updated as their gradients become final): {} of {} "
                                    "chunks of the streamed parameters hold the new weights and the rest the old; "
                                    "load a checkpoint into a new trainer (or session) to train on",
                                    torn_chunks_, torn_of_));
  if (pending() && upd_.norm == cur_) cur_ ^= 1;  // the pending update still reads its norm
  be_.zero(norms_[cur_].view());
  if (norm_parts_.allocated()) be_.zero(norm_parts_.view());
  parts_used_ = 0;
  stats_ = {};
}

void Optimizer::before_forward() {
  if (!pending()) return;
  for (size_t i = 0; i < upd_.end_of.size(); ++i)
    if (upd_.end_of[i] > upd_.computed && !tape_->has_param(model_.params()[i].name)) return flush();
}

void Optimizer::before_node(int node) {
  if (model_.state_disk() && (upd_.written < upd_.computed || upd_.retired < upd_.written))
    pump_disk(false, upd_.computed);       // write-backs of a finished update's last chunks
  if (!pending() || in_backward_) return;  // this step's update runs as its gradients become final
  size_t upto = upd_.computed;
  for (VId u : tape_->nodes()[size_t(node)].in) {
    const int o = tape_->value(u).owner;
    if (o >= 0 && size_t(o) < upd_.end_of.size()) upto = std::max(upto, upd_.end_of[size_t(o)]);
  }
  if (upto > upd_.computed) advance(upto);
}

void Optimizer::flush() {
  if (pending()) advance(upd_.chunks.size());
  wait_copies();
  finish_disk();  // the state file holds the result
}

Tensor Optimizer::grad_sink(VId u) {
  const Value& v = tape_->value(u);
  STRATA_CHECK(v.owner >= 0 && size_t(v.owner) < lazy_grads_.size(),
               fmt::format("optimizer: parameter '{}' carries no parameter index", v.cls));
  Buffer& b = lazy_grads_[size_t(v.owner)];
  if (!b.allocated())
    b = Buffer(be_.arena(), model_.grad_dtype(), v.shape,
               v.lazy == LazyGrad::transient ? "grads.transient" : "grads.host_tier");
  return b.view();
}

bool Optimizer::owned_here(VId u) const {
  const Value& v = tape_->value(u);
  return v.owner < 0 || model_.params()[size_t(v.owner)].state_here;
}

void Optimizer::grads_final(const std::vector<VId>& ids) {
  if (comm_ && reduce_ && comm_->world() > 1) {
    Reducing r{ids, 0, {}};
    std::vector<Tensor> sums;
    for (VId u : ids) {
      const Tensor g = tape_->value(u).grad_sink;
      // bf16 gradients (gradients: bf16) are summed as they are, whatever reduce_dtype says.
      if (opt_.reduce_dtype == DType::f32 || g.dtype != DType::f32) {
        sums.push_back(g);
        continue;
      }
      r.narrow.emplace_back(be_.arena(), opt_.reduce_dtype, g.shape, "grads.reduce");
      be_.cast(r.narrow.back().view(), g);
      sums.push_back(r.narrow.back().view());
    }
    if (model_.options().zero.shards_grads()) {
      // ZeRO-2: each gradient to its owner only (the others' transient blocks are read, then freed).
      std::vector<int> roots;
      for (VId u : ids) roots.push_back(model_.params()[size_t(tape_->value(u).owner)].owner);
      r.ticket = comm_->reduce_many(sums, roots);
    } else {
      r.ticket = comm_->all_reduce_many(sums);
    }
    reducing_.push_back(std::move(r));
    drain_reducing(1);
    return;
  }
  finish_group(ids, false);
}

void Optimizer::drain_reducing(size_t keep) {
  while (reducing_.size() > keep) {
    // The last collective of the group: a communicator's collectives complete in call order.
    Reducing& r = reducing_.front();
    comm_->wait_compute(r.ticket);
    if (!r.narrow.empty()) {
      // ZeRO-2: only an owner's copy holds the sum (a transient gradient is freed unread).
      const bool zero2 = model_.options().zero.shards_grads();
      size_t k = 0;
      for (VId u : r.ids) {
        const Tensor g = tape_->value(u).grad_sink;
        if (g.dtype != DType::f32) continue;
        const Tensor narrow = r.narrow[k++].view();
        if (!zero2 || owned_here(u)) be_.cast(g, narrow);
      }
      r.narrow.clear();  // freed before the next group's copies are made
    }
    finish_group(r.ids, true);
    reducing_.pop_front();
  }
}

void Optimizer::finish_group(const std::vector<VId>& ids, bool reduced) {
  if (model_.options().zero.shards_grads()) {
    // ZeRO-2. Reduced: the owners' gradients are the global ones; each goes into its norm part (the k-th
    // gradient backward made final: the same slot on every rank, added in this order by end_backward).
    // Not reduced (a backward without set_reduce): this rank's gradients' norm, as stage 0 forms it.
    std::vector<Tensor> grads;
    for (VId u : ids) {
      const size_t k = parts_used_++;
      if (!reduced) {
        grads.push_back(tape_->value(u).grad_sink);
      } else if (owned_here(u)) {
        be_.grad_norm_sq_part(norm_parts_.view(), k, tape_->value(u).grad_sink);
      }
    }
    if (!grads.empty()) be_.grad_norm_sq_list(norm_sq(), grads);
    // The transient blocks go back: a reduce's collective is done with them (drain_reducing's wait_compute) and
    // the compute stream orders the norm's reads before any later writer of the block.
    for (VId u : ids)
      if (!owned_here(u)) lazy_grads_[size_t(tape_->value(u).owner)].reset();
  } else if (!partial_) {
    std::vector<Tensor> grads;
    for (VId u : ids) grads.push_back(tape_->value(u).grad_sink);
    be_.grad_norm_sq_list(norm_sq(), grads);
  }
  // Host-tier gradients to the host (ZeRO-2: this rank's own; the others have no host tier here).
  for (VId u : ids) {
    const Value& v = tape_->value(u);
    if (v.owner < 0) continue;
    const Parameter& p = model_.params()[size_t(v.owner)];
    if (p.host_grad == Parameter::kDevice) continue;
    Buffer& b = lazy_grads_[size_t(v.owner)];
    STRATA_CHECK(b.allocated(), fmt::format("optimizer: '{}' has no gradient block to copy", p.name));
    const CopyTicket t = be_.copy_to_host_async(model_.host_state(p.host_grad), b.view(), kDown);
    last_down_ = t;
    stats_.downloaded_bytes += b.view().bytes();
    pending_bytes_ += b.view().bytes();
    pending_.push_back({std::move(b), t});
  }
  free_pending(opt_.grad_inflight_bytes);
  if (in_backward_) {
    for (VId u : ids)
      if (const int o = tape_->value(u).owner; o >= 0 && size_t(o) < final_.size()) final_[size_t(o)] = true;
    advance_final();
  }
}

void Optimizer::advance_final() {
  size_t upto = upd_.computed;
  while (upto < upd_.chunks.size() && std::all_of(upd_.chunks[upto].pieces.begin(), upd_.chunks[upto].pieces.end(),
                                                  [&](const Piece& pc) { return final_[pc.param]; }))
    ++upto;
  if (upto > upd_.computed) {
    stats_.chunks_in_backward += long(upto - upd_.computed);
    advance(upto);
  }
}

bool Optimizer::begin_update_in_backward(const AdamWParams& ap, int t) {
  in_backward_ = false;
  const bool several = comm_ && comm_->world() > 1;
  if (!opt_.update_in_backward || model_.grads_on_host() || model_.pages_trainable() || model_.state_disk() ||
      several || model_.options().zero.sharded())
    return false;
  if (pending()) flush();  // the last step's update, where this forward did not reach it
  plan_update(ap, 0.0f, t, true);
  if (upd_.chunks.empty()) return false;
  final_.assign(model_.params().size(), false);
  in_backward_ = true;
  return true;
}

void Optimizer::free_pending(size_t keep_bytes) {
  // The compute stream waits on the copy's event before the block can serve a later op. The
  // bound is in bytes (not "copy landed" polls), so the sim and the device free at the same point.
  while (!pending_.empty() && pending_bytes_ > keep_bytes) {
    Pending& f = pending_.front();
    be_.copy_wait_compute(f.ticket);
    pending_bytes_ -= f.buf.view().bytes();
    pending_.pop_front();
  }
}

std::vector<Optimizer::Chunk> Optimizer::plan_chunks(bool reverse) const {
  std::vector<Chunk> chunks;
  Chunk cur;
  const auto& params = model_.params();
  for (size_t k = 0; k < params.size(); ++k) {
    const size_t i = reverse ? params.size() - 1 - k : k;
    const Parameter& p = params[i];
    if (!p.trainable || !p.state_streamed()) continue;
    // Staging bytes per kQuantBlock elements (its host and disk arrays; 8-bit moments with their scale).
    const size_t mel = dtype_size(moment_dtype()), scale_bytes = quantised() ? sizeof(float) : 0;
    size_t per_block = 0;
    if (off_device(p.host_master, p.disk_master)) per_block += kQuantBlock * master_elem_bytes();
    for (auto [h, d] : {std::pair{p.host_m, p.disk_m}, std::pair{p.host_v, p.disk_v}})
      if (off_device(h, d)) per_block += kQuantBlock * mel + scale_bytes;
    if (p.host_grad != Parameter::kDevice) per_block += kQuantBlock * dtype_size(model_.grad_dtype());
    if (paged_weights(p)) per_block += kQuantBlock * dtype_size(be_.compute_dtype());
    // Pieces of a parameter with disk arrays start on `granule` elements: every array's piece then
    // starts on a page of its file region (8-bit scales: 4 bytes a block, so 1024 blocks a page).
    const bool disk_scales = quantised() && (p.disk_m != Parameter::kDevice || p.disk_v != Parameter::kDevice);
    const size_t granule = !p.state_on_disk() ? kQuantBlock : disk_scales ? kQuantBlock * 1024 : 4096;
    const size_t n = size_t(p.shape.numel());
    for (size_t begin = 0; begin < n;) {
      // Each array of a piece starts 256-byte aligned (7 arrays at most); a piece ends on a multiple
      // of kQuantBlock elements unless it ends the parameter, so device views stay 16-byte aligned
      // for the kernels and 8-bit scales split with their blocks.
      const size_t used = cur.bytes + 7 * Arena::kAlign;
      const size_t room = opt_.chunk_bytes > used ? opt_.chunk_bytes - used : 0;
      size_t take = std::min(n - begin, room / per_block * kQuantBlock / granule * granule);
      if (take == 0 && cur.pieces.empty() && granule > kQuantBlock)
        take = std::min(n - begin, granule);  // one granule alone may exceed chunk_bytes (staging is sized to it)
      if (take == 0) {
        STRATA_CHECK(!cur.pieces.empty(), "optimizer: a chunk holds no element (chunk_bytes too small)");
        chunks.push_back(std::move(cur));
        cur = {};
        continue;
      }
      Piece pc{i, begin, take};
      auto lay = [&](size_t& off, bool host, size_t elem) {
        if (!host) return;
        off = cur.bytes;
        cur.bytes = align_up(cur.bytes + take * elem);
      };
      auto lay_scales = [&](size_t& off, bool host) {
        if (!host || !quantised()) return;
        off = cur.bytes;
        cur.bytes = align_up(cur.bytes + quant_blocks(take) * sizeof(float));
      };
      lay(pc.master, off_device(p.host_master, p.disk_master), master_elem_bytes());
      lay(pc.m, off_device(p.host_m, p.disk_m), mel);
      lay_scales(pc.ms, off_device(p.host_m, p.disk_m));
      lay(pc.v, off_device(p.host_v, p.disk_v), mel);
      lay_scales(pc.vs, off_device(p.host_v, p.disk_v));
      lay(pc.g, p.host_grad != Parameter::kDevice, dtype_size(model_.grad_dtype()));
      lay(pc.w, paged_weights(p), dtype_size(be_.compute_dtype()));
      // Its disk arrays in the chunk's host staging block, each on pages (whole pages are read and written).
      auto lay_disk = [&](size_t& off, size_t disk_off, size_t bytes) {
        if (disk_off == Parameter::kDevice) return;
        off = cur.disk_bytes;
        cur.disk_bytes += page_up(bytes);
      };
      lay_disk(pc.hmaster, p.disk_master, take * master_elem_bytes());
      lay_disk(pc.hm, p.disk_m, take * mel);
      if (quantised()) lay_disk(pc.hms, p.disk_m, quant_blocks(take) * sizeof(float));
      lay_disk(pc.hv, p.disk_v, take * mel);
      if (quantised()) lay_disk(pc.hvs, p.disk_v, quant_blocks(take) * sizeof(float));
      cur.pieces.push_back(pc);
      begin += take;
    }
  }
  if (!cur.pieces.empty()) chunks.push_back(std::move(cur));
  return chunks;
}

template <class B, class F>
void Optimizer::each_staged(const Piece& pc, const Buffer& staging, B* hs, bool grad, F&& f) const {
  const Parameter& p = model_.params()[pc.param];
  // Elements [first, first + count) of a host array (default: the piece's), or the piece's disk array
  // from the host staging block `hs` at hs_off.
  auto one = [&](size_t host_off, bool disk, size_t hs_off, size_t st_off, DType dt, size_t elem,
                 size_t first = SIZE_MAX, size_t count = 0) {
    if (host_off == Parameter::kDevice && !disk) return;
    if (first == SIZE_MAX) first = pc.begin, count = pc.n;
    B* host = nullptr;
    if (host_off != Parameter::kDevice) {
      std::byte* h = model_.host_state(host_off);
      host = h ? h + first * elem : nullptr;
    } else {
      host = hs ? hs + hs_off : nullptr;
    }
    f(host, at(staging, st_off, dt, count));
  };
  const DType mdt = be_.compute_dtype() == DType::f32 ? DType::f32 : be_.master_dtype();
  const size_t mel = dtype_size(moment_dtype());
  one(p.host_master, p.disk_master != Parameter::kDevice, pc.hmaster, pc.master, mdt, master_elem_bytes());
  one(p.host_m, p.disk_m != Parameter::kDevice, pc.hm, pc.m, moment_dtype(), mel);
  one(p.host_v, p.disk_v != Parameter::kDevice, pc.hv, pc.v, moment_dtype(), mel);
  if (grad) one(p.host_grad, false, 0, pc.g, model_.grad_dtype(), dtype_size(model_.grad_dtype()));
  if (paged_weights(p)) {  // the compute weights, in the pager's host block (null on the sim)
    std::byte* h = model_.pager()->host_data(size_t(p.page));
    const size_t el = dtype_size(be_.compute_dtype());
    f(static_cast<B*>(h ? h + pc.begin * el : nullptr), at(staging, pc.w, be_.compute_dtype(), pc.n));
  }
  if (quantised()) {
    const size_t n = size_t(p.shape.numel());
    for (auto [host_off, disk, hs_off, st_off] : {std::tuple{p.host_m, p.disk_m != Parameter::kDevice, pc.hms, pc.ms},
                                                  std::tuple{p.host_v, p.disk_v != Parameter::kDevice, pc.hvs, pc.vs}})
      one(host_off == Parameter::kDevice ? host_off : host_off + moment_scale_offset(n), disk, hs_off, st_off,
          DType::f32, sizeof(float), pc.begin / kQuantBlock, quant_blocks(pc.n));
  }
}

void Optimizer::upload(const Chunk& c, const Buffer& staging, CopyTicket& last, const std::byte* hs) {
  for (const Piece& pc : c.pieces)
    each_staged(pc, staging, hs, true, [&](const std::byte* src, const Tensor& dst) {
      last = be_.copy_to_device_async(dst, src);
      stats_.uploaded_bytes += dst.bytes();
    });
  last_up_ = last;
}

void Optimizer::compute(const Chunk& c, const Buffer& staging, const AdamWParams& ap, float max_norm, int t,
                        Tensor norm_sq) {
  const auto& params = model_.params();
  const DType mdt = be_.compute_dtype() == DType::f32 ? DType::f32 : be_.master_dtype();
  std::vector<Backend::AdamWSlot> slots;
  for (const Piece& pc : c.pieces) {
    const Parameter& p = params[pc.param];
    auto pick = [&](bool off, size_t st_off, DType dt, const Buffer& dev) {
      return off ? at(staging, st_off, dt, pc.n) : slice(dev.view(), pc.begin, pc.n);
    };
    const bool master_off = off_device(p.host_master, p.disk_master), m_off = off_device(p.host_m, p.disk_m),
               v_off = off_device(p.host_v, p.disk_v);
    Backend::AdamWSlot s;
    if (master_off || p.master.allocated()) s.master = pick(master_off, pc.master, mdt, p.master);
    s.m = pick(m_off, pc.m, moment_dtype(), p.m);
    s.v = pick(v_off, pc.v, moment_dtype(), p.v);
    s.g = pick(p.host_grad != Parameter::kDevice, pc.g, model_.grad_dtype(), p.grad);
    s.param_out = paged_weights(p) ? at(staging, pc.w, be_.compute_dtype(), pc.n) : slice(p.value(), pc.begin, pc.n);
    if (quantised()) {
      const size_t b0 = pc.begin / kQuantBlock, nb = quant_blocks(pc.n);
      auto scales = [&](bool off, size_t st_off, const Buffer& dev) {
        return off ? at(staging, st_off, DType::f32, nb) : slice(dev.view(), b0, nb);
      };
      s.m_scale = scales(m_off, pc.ms, p.m_scale);
      s.v_scale = scales(v_off, pc.vs, p.v_scale);
    }
    slots.push_back(s);
  }
  be_.adamw_step_list(slots, norm_sq, max_norm, ap, t);
}

void Optimizer::download(const Chunk& c, const Buffer& staging, std::byte* hs) {
  // The gradients are not written back: the update only reads them.
  for (const Piece& pc : c.pieces)
    each_staged(pc, staging, hs, false, [&](std::byte* dst, const Tensor& src) {
      last_down_ = be_.copy_to_host_async(dst, src, kDown);
      stats_.downloaded_bytes += src.bytes();
    });
}

void Optimizer::end_backward() {
  be_.backward_ended();
  drain_reducing(0);
  if (model_.options().zero.shards_grads() && reduce_ && comm_ && comm_->world() > 1 && parts_used_ > 0) {
    // ZeRO-2's global norm: every part was formed on its owner alone (zero elsewhere), so the i32 sum of the
    // words is exact; every rank then adds the parts in backward's order with grad_norm_sq's arithmetic.
    const Tensor parts = slice(norm_parts_.view(), 0, 2 * parts_used_);
    comm_->wait_compute(comm_->all_reduce(parts));
    be_.grad_norm_sq_add_parts(norm_sq(), parts, parts_used_);
  }
  free_pending(0);  // every host-tier gradient is on its way to the host; the blocks go back
  for (auto& b : lazy_grads_) b.reset();
}

void Optimizer::upload_ahead(size_t ns, bool block) {
  // Uploads run up to ns chunks ahead of the compute. An upload into a block must follow the
  // download out of it, which runs on the other lane: the upload lane waits for that download (the
  // compute stream does not, so forward goes on meanwhile). A chunk with disk arrays uploads once its
  // reads landed: polled, or (block) waited for the chunk the compute needs next.
  Update& u = upd_;
  for (; u.uploaded < u.chunks.size() && u.uploaded < u.computed + ns; ++u.uploaded) {
    if (!disk_ready(u.uploaded, block && u.uploaded == u.computed)) break;
    const size_t s = u.uploaded % kStaging;
    if (u.out[s]) be_.copy_wait_lane(CopyLane::main, u.out[s]);
    upload(u.chunks[u.uploaded], u.staging[s], u.in[s], disk_slot(u.uploaded));
  }
  // Reads run up to disk_slots_ chunks ahead, as their host blocks come free.
  while (u.read < u.chunks.size() && u.read < u.computed + disk_slots_ && issue_read(false)) {
  }
}

void Optimizer::advance(size_t upto) {
  Update& u = upd_;
  const size_t ns = std::min(kStaging, u.chunks.size());
  if (!u.staging[0].allocated()) {
    size_t staging_bytes = 0;
    for (size_t c = u.computed; c < u.chunks.size(); ++c) staging_bytes = std::max(staging_bytes, u.chunks[c].bytes);
    for (size_t s = 0; s < ns; ++s)
      u.staging[s] = Buffer(be_.arena(), DType::u8, Shape{int64_t(staging_bytes)}, "optimizer.staging");
    u.uploaded = u.computed;
    std::fill(std::begin(u.out), std::end(u.out), CopyTicket(0));
  }
  upload_ahead(ns, false);
  const Tensor norm = norms_[u.norm].view();
  while (u.computed < upto) {
    const size_t s = u.computed % kStaging;
    if (u.uploaded == u.computed) upload_ahead(ns, true);  // its disk reads had not landed: wait for them
    be_.copy_wait_compute(u.in[s]);
    compute(u.chunks[u.computed], u.staging[s], u.ap, u.max_norm, u.t, norm);
    download(u.chunks[u.computed], u.staging[s], disk_slot(u.computed));  // ordered after the kernel
    u.out[s] = last_down_;
    u.down[u.computed] = last_down_;
    ++u.computed;
    pump_disk(false, u.computed);  // write back what landed
    upload_ahead(ns, false);       // the next chunk for block s, once its download is out
  }
  if (u.computed < u.chunks.size()) return;
  // The last chunk is computed: its staging goes back once the downloads out of it landed (the
  // compute stream waits for them; the host does not: flush() and reset() wait for the host arrays).
  if (last_down_) be_.copy_wait_compute(last_down_);
  for (auto& b : u.staging) b.reset();
}

namespace {

// Parameters whose state is all on the device: one list launch.
// ZeRO-1: this rank's own parameters only (the norm is still every gradient's).
void update_device_state(Backend& be, LlamaModel& model, Tensor norm_sq, float max_norm, const AdamWParams& ap, int t) {
  std::vector<Backend::AdamWSlot> slots;
  for (auto& p : model.params())
    if (p.trainable && !p.state_streamed() && p.state_here)
      slots.push_back(
          {p.master.view(), p.m.view(), p.v.view(), p.grad.view(), p.value(), p.m_scale.view(), p.v_scale.view()});
  if (!slots.empty()) be.adamw_step_list(slots, norm_sq, max_norm, ap, t);
}

}  // namespace

void Optimizer::plan_update(const AdamWParams& ap, float max_norm, int t, bool reverse) {
  upd_ = Update{};
  upd_.chunks = plan_chunks(reverse);
  upd_.reads.resize(upd_.chunks.size());
  upd_.writes.resize(upd_.chunks.size());
  upd_.down.assign(upd_.chunks.size(), 0);
  upd_.ap = ap;
  upd_.max_norm = max_norm;
  upd_.t = t;
  upd_.norm = cur_;
  upd_.end_of.assign(model_.params().size(), 0);
  for (size_t c = 0; c < upd_.chunks.size(); ++c)
    for (const Piece& pc : upd_.chunks[c].pieces) upd_.end_of[pc.param] = c + 1;
  stats_.chunks = long(upd_.chunks.size());
}

void Optimizer::step(const AdamWParams& ap, float max_norm, int t) {
  model_.clear_gathered_fp32();  // ZeRO-3: a save's gathered copies are stale after this update
  if (in_backward_) {
    // Planned before backward (begin_update_in_backward), which computed the chunks whose gradients became
    // final; the rest (a parameter this graph does not read) now, then as the eager update ends.
    in_backward_ = false;
    STRATA_CHECK(max_norm <= 0 && upd_.t == t, "optimizer: an update begun in backward is stepped with clipping");
    update_device_state(be_, model_, norm_sq(), max_norm, ap, t);
    advance(upd_.chunks.size());
    wait_copies();
    return;
  }
  if (pending()) flush();  // an update still pending (a forward that did not reach it) comes first
  finish_disk();           // the last update's writes land before this one reads the same regions
  plan_update(ap, max_norm, t, false);
  // Disk-tier state: the first chunks' reads start now, ahead of their uploads.
  while (upd_.read < upd_.chunks.size() && upd_.read < disk_slots_ && issue_read(false)) {
  }
  // Deferred only while every gradient is on the device: with host-tier gradients (state level
  // 'all') the H200 measured the deferred update slower than the eager one (1B, 2048 tokens, gc:
  // 0.554 s against 0.441 s a step; the sim, with the link's duplex share, forecasts the eager 0.4416 s).
  // Nor with trainable paged weights: the pager uploads a layer (prefetching it a layer ahead) from
  // its host block, which must hold the update by then; eager, the block is final when step returns.
  // Nor with ZeRO over several ranks: the owners' updated weights go to the other ranks when the step
  // ends (stages 1-2: broadcast_owned) or when the next forward gathers a layer (stage 3, a layer ahead of
  // the nodes that read it), so the owner's streamed update must be done by then.
  const bool pages = model_.pages_trainable();
  const bool sharded = model_.options().zero.sharded() && model_.options().zero.world > 1;
  const bool defer = opt_.defer_update && !upd_.chunks.empty() && !model_.grads_on_host() && !pages && !sharded;
  // The updates land in the pager's host block: no upload from it may be in flight, and no slot may
  // keep a copy of the old weights (the trainer's step already emptied them; an evaluation or a
  // caller's own forward may not have).
  if (pages) model_.pager()->reset();
  // Undeferred, the first chunks upload while the device-state list runs.
  if (!defer && !upd_.chunks.empty()) advance(0);

  update_device_state(be_, model_, norm_sq(), max_norm, ap, t);
  if (defer) return;  // the next forward applies the chunks (before_node)

  if (!upd_.chunks.empty()) {
    advance(upd_.chunks.size());
    // The host arrays (and the state file) are whole again before anyone reads them (a checkpoint; the
    // next step's uploads are ordered anyway).
    wait_copies();
    finish_disk();
  }
  // ZeRO-1/2: every owner's weights, streamed ones included, to the other ranks.
  if (model_.options().zero.sharded()) broadcast_owned();
}

void Optimizer::download_grad(const Parameter& p, float* dst) {
  if (model_.grad_transient(p))
    STRATA_THROW(Error, fmt::format("optimizer: '{}' has no gradient on rank {} (zero_stage 2: rank {} owns it)",
                                    p.name, model_.options().zero.rank, p.owner));
  if (p.host_grad == Parameter::kDevice) return be_.download_f32(dst, p.grad.view());
  wait_copies();
  const std::byte* h = model_.host_state(p.host_grad);
  if (h)
    convert_to_f32(dst, h, model_.grad_dtype(), size_t(p.shape.numel()));
  else
    std::fill(dst, dst + p.shape.numel(), 0.0f);
}

void Optimizer::wait_copies() {
  if (last_up_) be_.copy_wait_host(last_up_);
  if (last_down_) be_.copy_wait_host(last_down_);
}

void Optimizer::reset() noexcept {
  try {
    wait_copies();
  } catch (...) {
    // Error paths must not throw; a failed transfer has already been reported.
  }
  // Disk-tier state: the computed chunks are written back (the device weights have their update, so
  // the file must too); reads of chunks not computed are dropped (they read again) once they landed.
  if (model_alive_ && model_.state_disk()) {
    try {
      finish_disk();
    } catch (...) {
      // A failed write has already been reported (the file is then of no further use).
    }
    try {
      model_.state_disk()->wait_all();
    } catch (...) {
      // Likewise.
    }
    for (size_t c = upd_.computed; c < upd_.reads.size(); ++c) upd_.reads[c].clear();
    upd_.read = std::min(upd_.read, upd_.computed);
    upd_.written = upd_.retired = upd_.computed;
  }
  last_up_ = last_down_ = 0;
  if (in_backward_) {
    // An update begun in backward whose backward failed: the gradients of the rest are not final, so
    // they are never applied; what was applied stays (the next step refuses while some was).
    in_backward_ = false;
    if (upd_.computed > 0) torn_chunks_ = upd_.computed, torn_of_ = upd_.chunks.size();
    upd_.chunks.resize(upd_.computed);
  }
  try {
    if (comm_ && !reducing_.empty()) comm_->wait_host(reducing_.back().ticket);
  } catch (...) {
    // A failed collective has already been reported.
  }
  reducing_.clear();
  // A pending update keeps its progress: its computed chunks are applied, the rest upload again.
  for (auto& b : upd_.staging) b.reset();
  pending_.clear();
  pending_bytes_ = 0;
  for (auto& b : lazy_grads_) b.reset();
}

}  // namespace strata
