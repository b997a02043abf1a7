#include "model/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace strata {

namespace {
size_t align_up(size_t b) {
  return (b + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
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
  norm_sq_ = Buffer(be_.arena(), DType::f32, Shape{1}, "grad_norm");
  lazy_grads_.resize(model_.params().size());
}

Optimizer::~Optimizer() {
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
}

void Optimizer::begin_step() {
  be_.zero(norm_sq_.view());
  stats_ = {};
}

Tensor Optimizer::grad_sink(VId u) {
  const Value& v = tape_->value(u);
  STRATA_CHECK(v.owner >= 0 && size_t(v.owner) < lazy_grads_.size(),
               fmt::format("optimizer: parameter '{}' carries no parameter index", v.cls));
  Buffer& b = lazy_grads_[size_t(v.owner)];
  if (!b.allocated()) b = Buffer(be_.arena(), DType::f32, v.shape, "grads.host_tier");
  return b.view();
}

void Optimizer::grads_final(const std::vector<VId>& ids) {
  std::vector<Tensor> grads;
  for (VId u : ids) grads.push_back(tape_->value(u).grad_sink);
  be_.grad_norm_sq_list(norm_sq_.view(), grads);
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

std::vector<Optimizer::Chunk> Optimizer::plan_chunks() const {
  std::vector<Chunk> chunks;
  Chunk cur;
  const auto& params = model_.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    if (!p.trainable || !p.state_on_host()) continue;
    // Staging bytes per kQuantBlock elements (its host arrays; 8-bit moments with their scale).
    const size_t mel = dtype_size(moment_dtype()), scale_bytes = quantised() ? sizeof(float) : 0;
    size_t per_block = 0;
    if (p.host_master != Parameter::kDevice) per_block += kQuantBlock * master_elem_bytes();
    for (size_t off : {p.host_m, p.host_v})
      if (off != Parameter::kDevice) per_block += kQuantBlock * mel + scale_bytes;
    if (p.host_grad != Parameter::kDevice) per_block += kQuantBlock * sizeof(float);
    const size_t n = size_t(p.shape.numel());
    for (size_t begin = 0; begin < n;) {
      // Each array of a piece starts 256-byte aligned (6 arrays at most); a piece ends on a multiple
      // of kQuantBlock elements unless it ends the parameter, so device views stay 16-byte aligned
      // for the kernels and 8-bit scales split with their blocks.
      const size_t used = cur.bytes + 6 * Arena::kAlign;
      const size_t room = opt_.chunk_bytes > used ? opt_.chunk_bytes - used : 0;
      size_t take = std::min(n - begin, room / per_block * kQuantBlock);
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
      lay(pc.master, p.host_master != Parameter::kDevice, master_elem_bytes());
      lay(pc.m, p.host_m != Parameter::kDevice, mel);
      lay_scales(pc.ms, p.host_m != Parameter::kDevice);
      lay(pc.v, p.host_v != Parameter::kDevice, mel);
      lay_scales(pc.vs, p.host_v != Parameter::kDevice);
      lay(pc.g, p.host_grad != Parameter::kDevice, sizeof(float));
      cur.pieces.push_back(pc);
      begin += take;
    }
  }
  if (!cur.pieces.empty()) chunks.push_back(std::move(cur));
  return chunks;
}

void Optimizer::upload(const Chunk& c, const Buffer& staging, CopyTicket& last) {
  const auto& params = model_.params();
  for (const Piece& pc : c.pieces) {
    const Parameter& p = params[pc.param];
    // Elements [first, first + count) of a host array (default: the piece's).
    auto up = [&](size_t host_off, size_t st_off, DType dt, size_t elem, size_t first = SIZE_MAX, size_t count = 0) {
      if (host_off == Parameter::kDevice) return;
      if (first == SIZE_MAX) first = pc.begin, count = pc.n;
      std::byte* h = model_.host_state(host_off);
      const Tensor dst = at(staging, st_off, dt, count);
      last = be_.copy_to_device_async(dst, h ? h + first * elem : nullptr);
      stats_.uploaded_bytes += dst.bytes();
    };
    const DType mdt = be_.compute_dtype() == DType::f32 ? DType::f32 : be_.master_dtype();
    up(p.host_master, pc.master, mdt, master_elem_bytes());
    up(p.host_m, pc.m, moment_dtype(), dtype_size(moment_dtype()));
    up(p.host_v, pc.v, moment_dtype(), dtype_size(moment_dtype()));
    up(p.host_grad, pc.g, DType::f32, sizeof(float));
    if (quantised()) {
      const size_t n = size_t(p.shape.numel());
      for (auto [host_off, st_off] : {std::pair{p.host_m, pc.ms}, std::pair{p.host_v, pc.vs}})
        if (host_off != Parameter::kDevice)
          up(host_off + moment_scale_offset(n), st_off, DType::f32, sizeof(float), pc.begin / kQuantBlock,
             quant_blocks(pc.n));
    }
  }
  last_up_ = last;
}

void Optimizer::compute(const Chunk& c, const Buffer& staging, const AdamWParams& ap, float max_norm, int t) {
  const auto& params = model_.params();
  const DType mdt = be_.compute_dtype() == DType::f32 ? DType::f32 : be_.master_dtype();
  std::vector<Backend::AdamWSlot> slots;
  for (const Piece& pc : c.pieces) {
    const Parameter& p = params[pc.param];
    auto pick = [&](size_t host_off, size_t st_off, DType dt, const Buffer& dev) {
      return host_off != Parameter::kDevice ? at(staging, st_off, dt, pc.n) : slice(dev.view(), pc.begin, pc.n);
    };
    Backend::AdamWSlot s;
    if (p.host_master != Parameter::kDevice || p.master.allocated())
      s.master = pick(p.host_master, pc.master, mdt, p.master);
    s.m = pick(p.host_m, pc.m, moment_dtype(), p.m);
    s.v = pick(p.host_v, pc.v, moment_dtype(), p.v);
    s.g = pick(p.host_grad, pc.g, DType::f32, p.grad);
    s.param_out = slice(p.value(), pc.begin, pc.n);
    if (quantised()) {
      const size_t b0 = pc.begin / kQuantBlock, nb = quant_blocks(pc.n);
      auto scales = [&](size_t host_off, size_t st_off, const Buffer& dev) {
        return host_off != Parameter::kDevice ? at(staging, st_off, DType::f32, nb) : slice(dev.view(), b0, nb);
      };
      s.m_scale = scales(p.host_m, pc.ms, p.m_scale);
      s.v_scale = scales(p.host_v, pc.vs, p.v_scale);
    }
    slots.push_back(s);
  }
  be_.adamw_step_list(slots, norm_sq_.view(), max_norm, ap, t);
}

void Optimizer::download(const Chunk& c, const Buffer& staging) {
  const auto& params = model_.params();
  const DType mdt = be_.compute_dtype() == DType::f32 ? DType::f32 : be_.master_dtype();
  for (const Piece& pc : c.pieces) {
    const Parameter& p = params[pc.param];
    auto down = [&](size_t host_off, size_t st_off, DType dt, size_t elem, size_t first = SIZE_MAX, size_t count = 0) {
      if (host_off == Parameter::kDevice) return;
      if (first == SIZE_MAX) first = pc.begin, count = pc.n;
      std::byte* h = model_.host_state(host_off);
      const Tensor src = at(staging, st_off, dt, count);
      last_down_ = be_.copy_to_host_async(h ? h + first * elem : nullptr, src, kDown);
      stats_.downloaded_bytes += src.bytes();
    };
    down(p.host_master, pc.master, mdt, master_elem_bytes());
    down(p.host_m, pc.m, moment_dtype(), dtype_size(moment_dtype()));
    down(p.host_v, pc.v, moment_dtype(), dtype_size(moment_dtype()));
    if (quantised()) {
      const size_t n = size_t(p.shape.numel());
      for (auto [host_off, st_off] : {std::pair{p.host_m, pc.ms}, std::pair{p.host_v, pc.vs}})
        if (host_off != Parameter::kDevice)
          down(host_off + moment_scale_offset(n), st_off, DType::f32, sizeof(float), pc.begin / kQuantBlock,
               quant_blocks(pc.n));
    }
  }
}

void Optimizer::end_backward() {
  free_pending(0);  // every host-tier gradient is on its way to the host; the blocks go back
  for (auto& b : lazy_grads_) b.reset();
}

void Optimizer::step(const AdamWParams& ap, float max_norm, int t) {
  const std::vector<Chunk> chunks = plan_chunks();
  size_t staging_bytes = 0;
  for (const Chunk& c : chunks) staging_bytes = std::max(staging_bytes, c.bytes);
  constexpr size_t kStaging = 3;
  const size_t n_staging = std::min(kStaging, chunks.size());
  Buffer staging[kStaging];
  for (size_t s = 0; s < n_staging; ++s)
    staging[s] = Buffer(be_.arena(), DType::u8, Shape{int64_t(staging_bytes)}, "optimizer.staging");
  CopyTicket in[kStaging] = {0, 0, 0};
  for (size_t c = 0; c < n_staging; ++c) upload(chunks[c], staging[c], in[c]);

  // Parameters whose state is all on the device: one list launch, while the first chunks upload.
  std::vector<Backend::AdamWSlot> slots;
  for (auto& p : model_.params())
    if (p.trainable && !p.state_on_host())
      slots.push_back(
          {p.master.view(), p.m.view(), p.v.view(), p.grad.view(), p.value(), p.m_scale.view(), p.v_scale.view()});
  if (!slots.empty()) be_.adamw_step_list(slots, norm_sq_.view(), max_norm, ap, t);

  for (size_t c = 0; c < chunks.size(); ++c) {
    const size_t s = c % kStaging;
    be_.copy_wait_compute(in[s]);
    compute(chunks[c], staging[s], ap, max_norm, t);
    download(chunks[c], staging[s]);  // ordered after the kernel (the copy stream waits on compute)
    if (c + kStaging < chunks.size()) {
      // The upload overwrites this staging block: it must follow the download out of it, which runs
      // on the other lane. The compute stream waits for that download (copies wait on compute).
      be_.copy_wait_compute(last_down_);
      upload(chunks[c + kStaging], staging[s], in[s]);
    }
  }
  stats_.chunks = long(chunks.size());
  // The host arrays are whole again before anyone reads them (a checkpoint, the next step's uploads
  // are ordered anyway), and the staging blocks go back only once their last copy landed.
  wait_copies();
}

void Optimizer::download_grad(const Parameter& p, float* dst) {
  if (p.host_grad == Parameter::kDevice) return be_.download_f32(dst, p.grad.view());
  wait_copies();
  const std::byte* h = model_.host_state(p.host_grad);
  if (h)
    std::memcpy(dst, h, size_t(p.shape.numel()) * sizeof(float));
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
  last_up_ = last_down_ = 0;
  pending_.clear();
  pending_bytes_ = 0;
  for (auto& b : lazy_grads_) b.reset();
}

}  // namespace strata
