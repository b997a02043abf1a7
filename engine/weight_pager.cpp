#include "engine/weight_pager.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "engine/comm.h"
#include "engine/tape.h"

namespace strata {

namespace {
size_t align_up(size_t b) {
  return (b + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
}
}  // namespace

const char* WeightPager::state_name(SlotState s) {
  static const char* names[] = {"EMPTY", "LOADING", "READY", "IN_USE"};
  return names[int(s)];
}

WeightPager::WeightPager(Backend& be, int n_layers, const std::vector<PagedWeight>& weights, int rank)
    : be_(be), dtype_(be.compute_dtype()), n_layers_(n_layers), weights_(weights), rank_(rank) {
  STRATA_CHECK(n_layers > 0, "weight pager: no layers to page");
  layer_bytes_.assign(size_t(n_layers), 0);
  offset_.resize(weights_.size());
  if (gathers()) {
    resident_.resize(weights_.size());
    of_layer_.resize(size_t(n_layers));
  }
  // One block per layer, laid out exactly as in its device slot (each weight 256-byte aligned,
  // like an arena block), so a layer moves in one copy. Gathered: this rank's own weights take no space.
  for (size_t i = 0; i < weights_.size(); ++i) {
    const PagedWeight& w = weights_[i];
    STRATA_CHECK(w.layer >= 0 && w.layer < n_layers,
                 fmt::format("weight pager: '{}' has layer {} outside [0, {})", w.name, w.layer, n_layers));
    STRATA_CHECK((w.root >= 0) == gathers(),
                 fmt::format("weight pager: '{}' has root {} in a pager of rank {}", w.name, w.root, rank_));
    layer_of_[w.name] = w.layer;
    if (gathers()) of_layer_[size_t(w.layer)].push_back(i);
    if (gathers() && w.root == rank_) continue;
    size_t& lb = layer_bytes_[size_t(w.layer)];
    offset_[i] = align_up(lb);
    lb = offset_[i] + size_t(w.shape.numel()) * dtype_size(dtype_);
  }
  size_t total = 0;
  for (size_t b : layer_bytes_) {
    host_off_.push_back(total);
    total += align_up(b);  // each layer block starts aligned too
    slot_bytes_ = std::max(slot_bytes_, b);
  }
  total = host_off_.back() + layer_bytes_.back();  // exact: no padding after the last block
  if (!gathers()) {
    STRATA_CHECK(slot_bytes_ > 0, "weight pager: no layer weights to page");
    host_ = be_.reserve_host(total);
  }
  slots_.resize(size_t(std::min(2, n_layers)));
  // Gathered: a rank that holds every paged weight itself needs no slot space (the slots stay, for the order).
  if (slot_bytes_ > 0)
    for (size_t s = 0; s < slots_.size(); ++s)
      slots_[s].buf = Buffer(be_.arena(), DType::u8, Shape{int64_t(slot_bytes_)}, fmt::format("weights.page{}", s));
}

void WeightPager::set_resident(size_t i, Tensor t) {
  STRATA_CHECK(gathers() && weights_[i].root == rank_,
               fmt::format("weight pager: '{}' is not resident on rank {}", weights_[i].name, rank_));
  STRATA_CHECK(t.dtype == dtype_ && t.numel() == weights_[i].shape.numel(),
               fmt::format("weight pager: '{}' resident tensor is not its shape and compute dtype", weights_[i].name));
  resident_[i] = t;
}

WeightPager::~WeightPager() {
  reset();
  detach();
}

const std::string& WeightPager::host_note() const {
  static const std::string none;
  return host_ ? host_->note : none;
}

Tensor WeightPager::view(size_t i) const {
  const PagedWeight& w = weights_[i];
  if (gathers() && w.root == rank_) return resident_[i];
  std::byte* base = static_cast<std::byte*>(slots_[size_t(w.layer) % slots_.size()].buf.view().data);
  return Tensor(base ? base + offset_[i] : nullptr, dtype_, w.shape);
}

void WeightPager::invalidate(int layer) {
  for (auto& s : slots_)
    if (s.layer == layer) {  // a copy of the old bytes on the device is stale now
      if (s.ticket) wait_host(s.ticket);
      s.layer = -1;
      s.state = SlotState::EMPTY;
      s.ticket = 0;
    }
  if (in_use_ == layer) in_use_ = -1;
}

std::byte* WeightPager::host_data(size_t i) const {
  const PagedWeight& w = weights_[i];
  if (!host_) return nullptr;  // gather source: no host block
  return host_->base() ? host_->base() + host_off_[size_t(w.layer)] + offset_[i] : nullptr;
}

size_t WeightPager::weight_bytes(size_t i) const {
  return size_t(weights_[i].shape.numel()) * dtype_size(dtype_);
}

void WeightPager::write_host(size_t i, const float* src) {
  STRATA_CHECK(!gathers(), "weight pager: a gathering pager has no host block to write");
  invalidate(weights_[i].layer);
  if (std::byte* dst = host_data(i))  // the sim backend's host tier has no memory: nothing to write
    convert_from_f32(dst, dtype_, src, size_t(weights_[i].shape.numel()));
}

void WeightPager::write_host_bits(size_t i, const void* src) {
  STRATA_CHECK(!gathers(), "weight pager: a gathering pager has no host block to write");
  invalidate(weights_[i].layer);
  if (std::byte* dst = host_data(i)) std::memcpy(dst, src, weight_bytes(i));
}

void WeightPager::read_host(size_t i, float* dst) const {
  const PagedWeight& w = weights_[i];
  if (const std::byte* src = host_data(i))
    convert_to_f32(dst, src, dtype_, size_t(w.shape.numel()));
  else  // sim backend: no data
    std::fill(dst, dst + w.shape.numel(), 0.0f);
}

void WeightPager::install(Tape& tape) {
  if (tape_ && tape_ != &tape) detach();
  tape_ = &tape;
  node_layer_.clear();
  tape.set_node_hook([this](int node, TapePhase phase) { on_node(node, phase); });
}

void WeightPager::detach() noexcept {
  if (tape_) tape_->set_node_hook({});
  tape_ = nullptr;
}

void WeightPager::wait_compute(uint64_t t) {
  if (gathers())
    comm_->wait_compute(t);
  else
    be_.copy_wait_compute(t);
}

void WeightPager::wait_host(uint64_t t) {
  if (gathers())
    comm_->wait_host(t);
  else
    be_.copy_wait_host(t);
}

void WeightPager::start_gather(Slot& s, int layer) {
  STRATA_CHECK(comm_ && comm_->rank() == rank_,
               fmt::format("weight pager: gathering layer {} as rank {} needs that rank's communicator (zero_stage "
                           "3: the trainer's), got {}",
                           layer, rank_, comm_ ? fmt::format("rank {}", comm_->rank()) : "none"));
  // Like an upload, the broadcasts read and write after every op queued so far (the communicator's
  // ordering): the old occupant's readers finish first. The roots send from their resident copies.
  s.layer = -1;
  s.state = SlotState::EMPTY;
  std::vector<Tensor> ts;
  std::vector<int> roots;
  std::byte* base = static_cast<std::byte*>(s.buf.allocated() ? s.buf.view().data : nullptr);
  size_t received = 0;
  for (size_t i : of_layer_[size_t(layer)]) {
    const PagedWeight& w = weights_[i];
    if (w.root == rank_) {
      STRATA_CHECK(resident_[i].defined(),
                   fmt::format("weight pager: '{}' has no resident tensor on rank {}", w.name, rank_));
      ts.push_back(resident_[i]);
    } else {
      ts.push_back(Tensor(base ? base + offset_[i] : nullptr, dtype_, w.shape));
      received += ts.back().bytes();
    }
    roots.push_back(w.root);
  }
  if (!ts.empty()) s.ticket = comm_->broadcast_many(ts, roots);
  s.layer = layer;
  s.state = SlotState::LOADING;
  stats_.uploads++;
  stats_.bytes_uploaded += received;
}

void WeightPager::start_upload(Slot& s, int layer) {
  if (gathers()) return start_gather(s, layer);
  // The upload is ordered after every op queued so far: the old occupant's readers finish
  // first. Its bytes are simply dropped (the host block is the weights' owner: a trainable weight's
  // update is written there by the optimizer, never from a slot).
  s.layer = -1;
  s.state = SlotState::EMPTY;
  const size_t bytes = layer_bytes_[size_t(layer)];
  s.ticket = be_.copy_to_device_async(Tensor(s.buf.view().data, DType::u8, Shape{int64_t(bytes)}),
                                      host_->base() + host_off_[size_t(layer)]);
  s.layer = layer;
  s.state = SlotState::LOADING;
  stats_.uploads++;
  stats_.bytes_uploaded += bytes;
}

void WeightPager::ensure(int layer) {
  Slot& s = slots_[size_t(layer) % slots_.size()];
  if (s.layer != layer) start_upload(s, layer);
  if (s.state == SlotState::LOADING) {
    if (s.ticket) wait_compute(s.ticket);  // READY only once compute is ordered after the upload
    s.state = SlotState::READY;
  }
  for (auto& o : slots_)
    if (&o != &s && o.state == SlotState::IN_USE) o.state = SlotState::READY;
  s.state = SlotState::IN_USE;
  in_use_ = layer;
}

void WeightPager::prefetch(int layer) {
  if (layer < 0 || layer >= n_layers_) return;
  Slot& s = slots_[size_t(layer) % slots_.size()];
  if (s.layer == layer || (in_use_ >= 0 && s.layer == in_use_)) return;  // never evict the layer in use
  start_upload(s, layer);
}

int WeightPager::node_layer(int node) {
  if (size_t(node) >= node_layer_.size()) node_layer_.resize(tape_->nodes().size(), -2);
  int& c = node_layer_[size_t(node)];
  if (c != -2) return c;
  c = -1;
  for (VId u : tape_->nodes()[size_t(node)].in) {
    const Value& v = tape_->value(u);
    if (!v.external) continue;
    auto it = layer_of_.find(v.cls);
    if (it == layer_of_.end()) continue;
    STRATA_CHECK(c < 0 || c == it->second,
                 fmt::format("weight pager: node {} reads paged weights of layers {} and {}", node, c, it->second));
    c = it->second;
  }
  return c;
}

void WeightPager::on_node(int node, TapePhase phase) {
  const int layer = node_layer(node);
  if (layer < 0) return;  // reads no paged weight
  ensure(layer);
  switch (phase) {
    case TapePhase::forward:
      prefetch(layer + 1);
      break;
    case TapePhase::backward:
      prefetch(layer - 1);
      break;
    case TapePhase::replay: {
      // A replay serves the backward node running now. Replays of its own layer come last before
      // it, then backward moves on to layer - 1; replays of earlier layers (every-N checkpointing)
      // move up towards it.
      const int b = tape_->backward_node();
      const int bl = b >= 0 ? node_layer(b) : -1;
      if (bl < 0) break;
      prefetch(layer < bl ? layer + 1 : layer - 1);
      break;
    }
  }
}

void WeightPager::reset() noexcept {
  for (auto& s : slots_) {
    try {
      if (s.ticket) wait_host(s.ticket);  // nothing may still be in flight
    } catch (...) {
      // Error paths must not throw; a failed transfer has already been reported.
    }
    s.layer = -1;
    s.state = SlotState::EMPTY;
    s.ticket = 0;
  }
  in_use_ = -1;
  node_layer_.clear();
}

}  // namespace strata
