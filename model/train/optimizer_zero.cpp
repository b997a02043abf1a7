// The optimizer's ZeRO collectives between steps (model/train/optimizer.h): the owners' updated weights broadcast to
// every rank after a step (ZeRO-1/2), and the masters (and ZeRO-3's sharded weights) gathered for a save, an
// owner's master low halves read from its host or disk tier where the plan put them.
// Split from optimizer.cpp: step() calls broadcast_owned.
#include <fmt/format.h>

#include <vector>

#include "model/train/optimizer.h"

namespace strata {

Communicator& Optimizer::zero_comm() const {
  const ZeroOptions& z = model_.options().zero;
  if (!comm_ || comm_->world() != z.world || comm_->rank() != z.rank)
    STRATA_THROW(Error, fmt::format("optimizer: the model's optimizer state is sharded as rank {} of {} (zero_stage "
                                    "{}) but the trainer's communicator is {}",
                                    z.rank, z.world, z.stage,
                                    comm_ ? fmt::format("rank {} of {}", comm_->rank(), comm_->world()) : "none"));
  return *comm_;
}

void Optimizer::broadcast_owned() {
  Communicator& c = zero_comm();
  std::vector<Tensor> ts;
  std::vector<int> roots;
  for (const Parameter& p : model_.params())
    if (p.trainable && !p.weights_sharded) {  // ZeRO-3's sharded weights stay with their owner
      ts.push_back(p.value());
      roots.push_back(p.owner);
    }
  if (ts.empty()) return;
  // The next forward (or a reader of the weights) waits for the owners' weights.
  c.wait_compute(c.broadcast_many(ts, roots));
}

void Optimizer::gather_masters() {
  if (!model_.options().zero.sharded()) return;
  Communicator& c = zero_comm();
  flush();
  const bool split = be_.compute_dtype() != DType::f32 && model_.options().recipe.master != MasterWeights::none;
  if (model_.options().zero.shards_weights()) gather_sharded(c, split);
  if (!split) return;  // the weights are the master (f32), or there is none: every rank has them whole
  std::vector<Tensor> ts;
  std::vector<int> roots;
  std::vector<Buffer> owned_off_device;  // an owner's low halves from its host or disk tier, until the broadcast
  for (Parameter& p : model_.params()) {
    if (!p.trainable || p.weights_sharded) continue;
    Tensor lo;
    if (p.state_here && !p.master.allocated()) {
      owned_off_device.emplace_back(be_.arena(), be_.master_dtype(), p.shape, "weights.gather");
      lo = owned_off_device.back().view();
      load_low_half(p, lo);
    } else {
      if (!p.master.allocated()) p.master = Buffer(be_.arena(), be_.master_dtype(), p.shape, "weights.master_lo");
      lo = p.master.view();
    }
    // The low halves' bits travel as a 16-bit float type (a broadcast copies bytes, never converts).
    ts.push_back(Tensor(lo.data, DType::bf16, lo.shape));
    roots.push_back(p.owner);
  }
  if (!ts.empty()) c.wait_host(c.broadcast_many(ts, roots));
}

void Optimizer::gather_sharded(Communicator& c, bool split) {
  // One parameter at a time (a transient block of one matrix on the ranks that do not own it), each from its
  // owner: rank 0 keeps the fp32 weights for a save (LlamaModel::set_gathered_fp32).
  const int rank = model_.options().zero.rank;
  std::vector<Parameter>& ps = model_.params();
  std::vector<std::vector<float>> host(rank == 0 ? ps.size() : 0);
  for (size_t i = 0; i < ps.size(); ++i) {
    const Parameter& p = ps[i];
    if (!p.weights_sharded) continue;
    const bool mine = p.state_here;
    Buffer w, lo;
    const Tensor wt =
        mine ? p.value() : (w = Buffer(be_.arena(), be_.compute_dtype(), p.shape, "weights.gather"), w.view());
    std::vector<Tensor> ts = {wt};
    Tensor lt;
    if (split) {
      // The low halves' bits travel as a 16-bit float type (a broadcast copies bytes, never converts).
      if (mine && p.master.allocated()) {
        lt = p.master.view();
      } else {
        lo = Buffer(be_.arena(), be_.master_dtype(), p.shape, "weights.gather");
        lt = lo.view();
        if (mine) load_low_half(p, lt);  // the owner's master on the host or disk tier
      }
      ts.push_back(Tensor(lt.data, DType::bf16, lt.shape));
    }
    c.wait_host(c.broadcast_many(ts, std::vector<int>(ts.size(), p.owner)));
    if (rank != 0 || mine) continue;
    host[i].resize(size_t(p.shape.numel()));
    if (split)
      be_.download_master(host[i].data(), lt, wt);
    else
      be_.download_f32(host[i].data(), wt);
  }
  model_.set_gathered_fp32(std::move(host));
}

void Optimizer::load_low_half(const Parameter& p, Tensor dst) {
  const size_t bytes = size_t(p.shape.numel()) * dtype_size(be_.master_dtype());
  if (p.host_master != Parameter::kDevice) {
    const std::byte* h = model_.host_state(p.host_master);
    if (h) be_.copy_wait_host(be_.copy_to_device_async(dst, h));
  } else if (p.disk_master != Parameter::kDevice) {
    std::vector<std::byte> h(bytes);
    model_.read_state_disk(p.disk_master, h.data(), bytes, p.group + ".w.master");
    be_.copy_wait_host(be_.copy_to_device_async(dst, h.data()));
  }
}

}  // namespace strata
