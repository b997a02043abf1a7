#include "engine/tape.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "engine/step_progress.h"
#include "engine/switches.h"

namespace strata {

const char* slot_state_name(SlotState s) {
  static const char* names[] = {"EMPTY",   "RESIDENT", "OFFLOADING", "ON_HOST", "WRITING",
                                "ON_DISK", "DROPPED",  "LOADING",    "READING"};
  return names[int(s)];
}

Tape::Tape(Backend& be) : be_(be), grad_aliasing_(switches().grad_alias) {}

Tape::~Tape() {
  clear();
}

VId Tape::input(std::string cls, Tensor t) {
  Value v;
  v.cls = std::move(cls);
  v.shape = t.shape;
  v.dtype = t.dtype;
  v.external = true;
  v.ext = t;
  v.state = SlotState::RESIDENT;
  values_.push_back(std::move(v));
  retained_.push_back(false);
  finished_ = false;
  return VId(values_.size() - 1);
}

VId Tape::param(std::string cls, Tensor t, Tensor grad_sink) {
  return param(std::move(cls), t, grad_sink, -1, LazyGrad::none);
}

VId Tape::param(std::string cls, Tensor t, Tensor grad_sink, int owner, LazyGrad lazy) {
  const bool lazy_grad = lazy != LazyGrad::none;
  const bool trainable = grad_sink.defined() || lazy_grad;
  if (auto it = params_.find(cls); it != params_.end()) {
    const Value& v = values_[size_t(it->second)];
    STRATA_CHECK(v.shape == t.shape && v.dtype == t.dtype && v.requires_grad == trainable && v.owner == owner,
                 fmt::format("parameter '{}' recorded twice with different shapes or trainability", cls));
    return it->second;
  }
  STRATA_CHECK(!lazy_grad || !grad_sink.defined(), fmt::format("parameter '{}': a lazy gradient has no sink yet", cls));
  const std::string name = cls;
  VId id = input(std::move(cls), t);
  Value& v = values_[size_t(id)];
  v.grad_sink = grad_sink;
  v.lazy = lazy;
  v.owner = owner;
  v.requires_grad = trainable;
  params_.emplace(name, id);
  return id;
}

Tensor Tape::sink(VId u) {
  Value& v = values_[size_t(u)];
  if (!v.grad_sink.defined() && v.lazy != LazyGrad::none) {
    STRATA_CHECK(bool(grad_hooks_.sink), fmt::format("parameter '{}' has a lazy gradient but no sink hook", v.cls));
    v.grad_sink = grad_hooks_.sink(u);
    STRATA_CHECK(v.grad_sink.defined() && v.grad_sink.shape.numel() == v.shape.numel(),
                 fmt::format("parameter '{}': the sink hook returned no gradient of its size", v.cls));
  }
  return v.grad_sink;
}

void Tape::grads_final(int node) {
  std::vector<VId> ids;
  // A parameter whose writers wrote nothing this step (no gradient reached them) is zeroed at the
  // end of backward: it is final only then.
  for (VId u : node >= 0 ? final_after_[size_t(node)] : final_at_end_)
    (values_[size_t(u)].grad_written || node < 0 ? ids : final_at_end_).push_back(u);
  if (!ids.empty() && grad_hooks_.final) grad_hooks_.final(ids);
}

std::vector<VId> Tape::record(std::unique_ptr<Op> op, const std::vector<VId>& in, std::vector<OutSpec> outs) {
  Node n;
  n.op = std::move(op);
  n.in = in;
  for (VId u : in) {
    STRATA_CHECK(u >= 0 && size_t(u) < values_.size(),
                 fmt::format("{}: input value {} does not exist", n.op->name(), u));
    n.needs_backward = n.needs_backward || values_[size_t(u)].requires_grad;
  }
  // Dispatch: the op runs in the element type of its first floating-point input.
  for (VId u : in) {
    const Value& x = values_[size_t(u)];
    if (x.dtype != DType::f32 && x.dtype != DType::bf16 && x.dtype != DType::f16) continue;
    if (!be_.supports(n.op->kind(), x.dtype))
      throw UnsupportedError(fmt::format("the {} backend has no {} {} (input '{}'); it runs: {}", be_.name(),
                                         dtype_name(x.dtype), op_kind_name(n.op->kind()), x.cls, support_summary(be_)));
    break;
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (!n.op->grad_in_forward(int(i))) continue;
    n.replayable = false;
    const Value& u = values_[size_t(in[i])];
    STRATA_CHECK(
        !u.requires_grad || (u.external && std::count(in.begin(), in.end(), in[i]) == 1),
        fmt::format("{}: input '{}' gets its gradient in forward, so it must be a parameter the node reads once",
                    n.op->name(), u.cls));
  }
  std::vector<VId> ids;
  for (auto& o : outs) {
    Value v;
    v.cls = std::move(o.cls);
    v.shape = o.shape;
    v.dtype = o.dtype;
    v.producer = int(nodes_.size());
    v.requires_grad = n.needs_backward && !o.no_grad;
    v.head = head_scope_;
    values_.push_back(std::move(v));
    retained_.push_back(false);
    ids.push_back(VId(values_.size() - 1));
  }
  n.out = ids;
  nodes_.push_back(std::move(n));
  finished_ = false;
  return ids;
}

void Tape::set_loss(VId v) {
  loss_ = v;
  values_[size_t(v)].is_loss = true;
}

void Tape::mark_layer_input(VId v, int layer) {
  STRATA_CHECK(v >= 0 && size_t(v) < values_.size() && layer >= 0, "mark_layer_input: no such value or layer");
  values_[size_t(v)].layer_input = layer;
}

void Tape::mark_head(VId v) {
  STRATA_CHECK(v >= 0 && size_t(v) < values_.size(), "mark_head: no such value");
  values_[size_t(v)].head = true;
}

void Tape::retain(VId v) {
  retained_[size_t(v)] = true;
}

void Tape::finish_graph() {
  if (finished_) return;
  for (auto& v : values_) v.last_fwd_use = v.first_bwd_reader = v.last_bwd_reader = -1;
  // Which values carry a gradient back from the loss: walk the nodes in reverse.
  std::vector<bool> grad_flows(values_.size(), false);
  if (loss_ >= 0) grad_flows[size_t(loss_)] = true;
  for (int n = int(nodes_.size()) - 1; n >= 0; --n) {
    Node& node = nodes_[size_t(n)];
    bool flows = false;
    for (VId o : node.out) flows = flows || grad_flows[size_t(o)];
    node.needs_backward = flows && node.needs_backward;
    if (!node.needs_backward) continue;
    for (VId u : node.in)
      if (values_[size_t(u)].requires_grad) grad_flows[size_t(u)] = true;
  }
  auto mark_reader = [](Value& v, int n) {
    if (v.external) return;
    if (v.first_bwd_reader < 0 || n < v.first_bwd_reader) v.first_bwd_reader = n;
    v.last_bwd_reader = std::max(v.last_bwd_reader, n);
  };
  for (int n = 0; n < int(nodes_.size()); ++n) {
    Node& node = nodes_[size_t(n)];
    for (size_t i = 0; i < node.in.size(); ++i) {
      Value& u = values_[size_t(node.in[i])];
      if (node.op->forward_reads(int(i))) u.last_fwd_use = n;
      if (node.needs_backward && node.op->saves_input(int(i))) mark_reader(u, n);
    }
    for (size_t i = 0; i < node.out.size(); ++i)
      if (node.needs_backward && node.op->saves_output(int(i))) mark_reader(values_[size_t(node.out[i])], n);
  }
  std::vector<std::vector<int>> readers(values_.size());  // the nodes reading each value, ascending
  for (int n = 0; n < int(nodes_.size()); ++n)
    for (VId u : nodes_[size_t(n)].in) readers[size_t(u)].push_back(n);
  for (int n = 0; n < int(nodes_.size()); ++n) nodes_[size_t(n)].alias = plan_alias(n, readers);
  // A trainable parameter's gradient is final after the backward of the lowest node that writes it
  // (backward runs in reverse); one no node writes is zeroed at the end of backward.
  final_after_.assign(nodes_.size(), {});
  final_at_end_.clear();
  for (size_t u = 0; u < values_.size(); ++u) {
    Value& v = values_[u];
    if (!v.external || !v.requires_grad) continue;
    v.grad_final_node = -1;
    for (int n : readers[u]) {
      const Node& node = nodes_[size_t(n)];
      if (!node.needs_backward) continue;  // writes no gradient of it
      v.grad_final_node = n;
      break;
    }
    (v.grad_final_node >= 0 ? final_after_[size_t(v.grad_final_node)] : final_at_end_).push_back(VId(u));
  }
  finished_ = true;
}

DType Tape::grad_dtype(const Value& v) const {
  return be_.compute_dtype() == DType::f32 ? DType::f32 : v.dtype;
}

GradAlias Tape::plan_alias(int n, const std::vector<std::vector<int>>& readers) const {
  const Node& node = nodes_[size_t(n)];
  if (!node.needs_backward || !node.op->passes_grad() || node.in.size() != 2 || node.out.size() != 1)
    return GradAlias::none;
  const VId a = node.in[0], b = node.in[1];
  const Value &av = values_[size_t(a)], &bv = values_[size_t(b)], &ov = values_[size_t(node.out[0])];
  // a == b: the node writes two gradients into one (backward zeroes it first); leave it to the kernel.
  if (a == b || av.external || !av.requires_grad || !(av.shape == ov.shape)) return GradAlias::none;
  if (!bv.requires_grad) return GradAlias::pass;  // the move is all there is to do
  if (bv.external || !(bv.shape == av.shape) || grad_dtype(bv) != grad_dtype(av) || readers[size_t(b)].size() != 1)
    return GradAlias::move_a;
  // b's producer reads the borrowed view: nothing may add into a's gradient before that (a's other
  // readers, p_b itself included, come earlier in the graph), nor free it (a's producer does).
  const int pb = bv.producer;
  if (av.producer >= pb) return GradAlias::move_a;
  for (int r : readers[size_t(a)])
    if (r != n && nodes_[size_t(r)].needs_backward && r >= pb) return GradAlias::move_a;
  return GradAlias::pass;
}

void Tape::apply_plan(const Plan& plan) {
  finish_graph();
  // The last layer's input: the highest layer input the model marked.
  int last_layer = -1;
  for (auto& v : values_)
    if (!v.external) last_layer = std::max(last_layer, v.layer_input);
  for (VId id = 0; id < VId(values_.size()); ++id) {
    Value& v = values_[size_t(id)];
    if (v.external) continue;
    v.decision = v.saved() ? plan.decide(v.cls, v.layer_input) : Decision::keep;
    if (v.producer >= 0 && !nodes_[size_t(v.producer)].replayable) {
      v.decision = Decision::keep;  // its producer wrote gradients in forward: it must never be replayed
      continue;
    }
    if (v.producer >= 0 && nodes_[size_t(v.producer)].op->keep_output(out_index(v.producer, id))) {
      v.decision = Decision::keep;  // a few bytes a replay of its producer reads (Op::keep_output)
      continue;
    }
    const bool tier = v.decision == Decision::host || v.decision == Decision::disk;
    if (!tier) continue;
    if ((v.layer_input >= 0 && v.layer_input == last_layer) || v.head || v.is_loss) {
      v.decision = Decision::keep;  // backward reads these first: moving them only adds a round trip
      continue;
    }
    if (!store_)
      STRATA_THROW(UnsupportedError, fmt::format("plan: slot class '{}' asks for the {} tier, but this tape has no "
                                                 "slot store (Trainer sets one)",
                                                 v.cls, decision_name(v.decision)));
  }
}

Tape::TierBytes Tape::tier_bytes() const {
  TierBytes t;
  for (auto& v : values_) {
    if (v.external || !v.saved()) continue;
    const size_t b = size_t(v.shape.numel()) * dtype_size(v.dtype);
    if (v.decision == Decision::host) t.host += (b + 4095) / 4096 * 4096;
    if (v.decision == Decision::disk) {
      t.disk += (b + 4095) / 4096 * 4096;
      t.largest_disk = std::max(t.largest_disk, b);
    }
  }
  return t;
}

Tensor Tape::tensor(VId id) const {
  const Value& v = values_[size_t(id)];
  if (v.external) return v.ext;
  STRATA_CHECK(v.state == SlotState::RESIDENT,
               fmt::format("value '{}' is not resident (state {})", v.cls, slot_state_name(v.state)));
  return v.buf.view();
}

void Tape::release(VId id) {
  Value& v = values_[size_t(id)];
  if (v.external) return;
  if (store_) store_->drop(v);
  v.buf.reset();
  v.state = SlotState::EMPTY;
}

OpArgs Tape::args(const Node& n, bool backward) {
  OpArgs a;
  a.in.reserve(n.in.size());
  a.out.reserve(n.out.size());
  if (backward) a.gout.reserve(n.out.size());
  for (VId u : n.in) {
    const Value& v = values_[size_t(u)];
    a.in.push_back(v.external ? v.ext : (v.state == SlotState::RESIDENT ? v.buf.view() : Tensor()));
  }
  for (VId o : n.out) {
    const Value& v = values_[size_t(o)];
    a.out.push_back(v.state == SlotState::RESIDENT ? v.buf.view() : Tensor());
    if (backward) a.gout.push_back(v.grad_view());
  }
  return a;
}

void Tape::run_forward(int n, bool replay) {
  if (state_hook_ && !replay) state_hook_(n);
  Node& node = nodes_[size_t(n)];
  std::vector<bool> kept(replay ? node.out.size() : 0);
  for (size_t i = 0; i < node.out.size(); ++i) {
    const VId o = node.out[i];
    Value& v = values_[size_t(o)];
    if (v.state == SlotState::RESIDENT) {
      if (replay) kept[i] = true;
      continue;
    }
    if (!replay && node.op->optional_output(int(i)) && written_for_nothing(o)) continue;
    if (store_) store_->land(v);  // a replay rewrites a slot on its way back: its read and upload land first
    v.buf = Buffer(be_.arena(), v.dtype, v.shape, v.cls);
    v.state = SlotState::RESIDENT;
  }
  // Never reached through apply_plan (it keeps such outputs); a guard for hand-made graphs.
  STRATA_CHECK(!replay || node.replayable, fmt::format("{}: its forward writes gradients, so it cannot be replayed to "
                                                       "rebuild a dropped output",
                                                       node.op->name()));
  OpArgs a = args(node, false);
  a.kept = std::move(kept);
  for (size_t i = 0; i < a.in.size(); ++i)
    STRATA_CHECK(a.in[i].defined() || !node.op->forward_reads(int(i)),
                 fmt::format("{}: input '{}' is not resident{}", node.op->name(), values_[size_t(node.in[i])].cls,
                             replay ? " during recompute" : ""));
  if (!node.replayable) forward_grads(node, a);
  if (hook_) hook_(n, replay ? TapePhase::replay : TapePhase::forward);
  node.op->forward(be_, a);
}

void Tape::forward_grads(const Node& node, OpArgs& a) {
  a.gin.assign(node.in.size(), Tensor());
  a.acc.assign(node.in.size(), false);
  if (!node.needs_backward) return;  // no gradient flows through it: it must write none
  for (size_t i = 0; i < node.in.size(); ++i) {
    Value& u = values_[size_t(node.in[i])];
    if (!node.op->grad_in_forward(int(i)) || !u.requires_grad) continue;
    a.gin[i] = sink(node.in[i]);
    a.acc[i] = u.grad_written;
    u.grad_written = true;
  }
}

int Tape::out_index(int node, VId id) const {
  const std::vector<VId>& out = nodes_[size_t(node)].out;
  return int(std::find(out.begin(), out.end(), id) - out.begin());
}

// Forward writes it, then drops it unread: no forward node reads it, and backward gets it by replaying its producer.
bool Tape::written_for_nothing(VId id) const {
  const Value& v = values_[size_t(id)];
  return v.last_fwd_use < 0 && v.saved() && v.decision == Decision::recompute && !retained_[size_t(id)] && !v.is_loss;
}

bool Tape::needed_from(const Value& v, int cur) const {
  return v.saved() && v.first_bwd_reader <= cur;
}

void Tape::forward() {
  finish_graph();
  stats_ = {};
  for (auto& v : values_) v.grad_written = false;  // the step's first gradient writes may come in forward
  if (accumulate_params_)
    for (auto& v : values_) {
      if (!v.external) continue;
      STRATA_CHECK(v.lazy != LazyGrad::host,
                   fmt::format("parameter '{}': a host-tier gradient cannot accumulate on the device", v.cls));
      v.grad_written = v.grad_sink.defined();  // the first write adds to the buffer's gradient (a lazy one: none)
    }
  auto after_last_use = [&](VId id) {
    Value& v = values_[size_t(id)];
    if (v.external || retained_[size_t(id)] || v.is_loss) return;
    if (!v.saved()) {
      release(id);
    } else if (v.decision == Decision::recompute) {
      v.buf.reset();
      v.state = SlotState::DROPPED;
    } else if (v.decision == Decision::host || v.decision == Decision::disk) {
      store_->offload(v);
    }
  };
  const int count = int(nodes_.size());
  for (int n = 0; n < count; ++n) {
    note_step_progress(StepPhase::forward, n, count);
    run_forward(n, false);
    const Node& node = nodes_[size_t(n)];
    for (VId u : node.in)
      if (values_[size_t(u)].last_fwd_use == n) after_last_use(u);
    for (VId o : node.out)
      if (values_[size_t(o)].last_fwd_use < 0) after_last_use(o);
    if (store_) store_->poll();
  }
  if (store_) store_->end_forward();
  for (auto& v : values_)
    if (!v.external && v.state == SlotState::RESIDENT) stats_.saved_bytes_at_end_of_forward += v.buf.view().bytes();
  note_step_progress(StepPhase::idle, 0, count);
}

void Tape::materialize(VId id, int cur) {
  Value& v = values_[size_t(id)];
  if (v.external || v.state == SlotState::RESIDENT) return;
  if (v.state != SlotState::DROPPED && v.state != SlotState::EMPTY) {
    store_->make_resident(v);  // on the host or disk tier, or on its way
    return;
  }
  STRATA_CHECK(v.producer >= 0, fmt::format("value '{}' has no producer to replay", v.cls));
  const Node& p = nodes_[size_t(v.producer)];
  std::vector<VId> transient;
  for (size_t i = 0; i < p.in.size(); ++i) {
    const VId u = p.in[i];
    Value& uv = values_[size_t(u)];
    if (uv.external || uv.state == SlotState::RESIDENT || !p.op->forward_reads(int(i))) continue;
    materialize(u, cur);
    if (!needed_from(uv, cur)) transient.push_back(u);
  }
  run_forward(v.producer, true);
  stats_.recomputed_nodes++;
  for (VId o : p.out)
    if (o != id && !needed_from(values_[size_t(o)], cur) && !retained_[size_t(o)] && !values_[size_t(o)].is_loss)
      release(o);
  for (VId u : transient) release(u);
}

// Runs a pass-through node's backward by moving its output's gradient buffer to input 0, which is
// what add_bwd would write there bit for bit: the cpu kernels write 0 + v, so no cpu gradient
// holds -0. Checks finish_graph's decision against the step's state; returns what it did.
GradAlias Tape::alias_grads(const Node& node) {
  if (!grad_aliasing_ || node.alias == GradAlias::none) return GradAlias::none;
  Value& ov = values_[size_t(node.out[0])];
  Value& av = values_[size_t(node.in[0])];
  if (!ov.grad.allocated() || av.grad_written || av.has_grad()) return GradAlias::none;
  const Tensor& g = ov.grad.view();
  if (g.dtype != grad_dtype(av) || !(g.shape == av.shape)) return GradAlias::none;
  av.grad = std::move(ov.grad);
  av.grad_written = true;  // later writers add into it
  stats_.grad_moves++;
  Value& bv = values_[size_t(node.in[1])];
  if (node.alias != GradAlias::pass) return GradAlias::move_a;
  if (bv.requires_grad) {
    if (bv.grad_written || bv.has_grad()) return GradAlias::move_a;
    bv.grad_alias = av.grad.view();
    bv.grad_written = true;
  }
  stats_.grad_passes++;
  return GradAlias::pass;
}

void Tape::input_grads(const Node& node, OpArgs& a, bool first_moved) {
  for (size_t i = 0; i < node.in.size(); ++i) {
    const VId u = node.in[i];
    Value& uv = values_[size_t(u)];
    // None, written in forward, or alias_grads moved the output's gradient to it.
    if (!uv.requires_grad || node.op->grad_in_forward(int(i)) || (i == 0 && first_moved)) {
      a.gin.emplace_back();
      a.acc.push_back(false);
      continue;
    }
    if (!uv.external && !uv.grad.allocated()) uv.grad = Buffer(be_.arena(), grad_dtype(uv), uv.shape, "grad:" + uv.cls);
    const Tensor g = uv.external ? sink(u) : uv.grad.view();
    // An input this node reads twice gets two gradients: both add, into a zeroed one.
    if (!uv.grad_written && std::count(node.in.begin(), node.in.end(), u) > 1) {
      be_.zero(g);
      uv.grad_written = true;
    }
    a.gin.push_back(g);
    a.acc.push_back(uv.grad_written);
    uv.grad_written = true;
  }
}

void Tape::backward() {
  STRATA_CHECK(loss_ >= 0, "backward without a loss value");
  finish_graph();
  Value& lv = values_[size_t(loss_)];
  lv.grad = Buffer(be_.arena(), DType::f32, lv.shape, "grad:" + lv.cls);
  be_.fill(lv.grad.view(), loss_seed_);
  lv.grad_written = true;
  prefetch_cursor_ = int(nodes_.size()) - 1;
  for (int n = int(nodes_.size()) - 1; n >= 0; --n) {
    Node& node = nodes_[size_t(n)];
    bwd_node_ = n;
    note_step_progress(StepPhase::backward, n, int(nodes_.size()));
    if (store_) {
      store_->poll();
      prefetch_ahead(n);
    }
    bool any_gout = false;
    for (VId o : node.out) any_gout = any_gout || values_[size_t(o)].has_grad();
    if (node.needs_backward && any_gout) {
      for (size_t i = 0; i < node.in.size(); ++i)
        if (node.op->saves_input(int(i))) materialize(node.in[i], n);
      for (size_t i = 0; i < node.out.size(); ++i)
        if (node.op->saves_output(int(i))) materialize(node.out[i], n);
      OpArgs a = args(node, true);  // gout views stay valid when alias_grads moves a buffer
      const GradAlias aliased = alias_grads(node);
      if (aliased != GradAlias::pass) input_grads(node, a, aliased == GradAlias::move_a);
      if (hook_) hook_(n, TapePhase::backward);
      if (aliased != GradAlias::pass) node.op->backward(be_, a);  // pass: no kernel at all
    }
    for (VId o : node.out) {  // grad_written stays: nothing writes it again
      values_[size_t(o)].grad.reset();
      values_[size_t(o)].grad_alias = Tensor();  // a borrowed view: nothing to free
    }
    // Slots whose last backward reader was this node leave now.
    for (VId u : node.in)
      if (values_[size_t(u)].first_bwd_reader == n && !retained_[size_t(u)]) release(u);
    for (VId o : node.out)
      if (values_[size_t(o)].first_bwd_reader == n && !retained_[size_t(o)]) release(o);
    grads_final(n);
  }
  bwd_node_ = -1;
  note_step_progress(StepPhase::idle, 0, int(nodes_.size()));
  // A trainable parameter no gradient reached still gets this step's gradient: zero.
  for (size_t u = 0; u < values_.size(); ++u) {
    Value& v = values_[u];
    if (v.external && v.requires_grad && !v.grad_written) be_.zero(sink(VId(u)));
  }
  grads_final(-1);
}

void Tape::prefetch_ahead(int n) {
  // Uploads are issued a bounded number of bytes ahead of the node that reads them.
  prefetch_cursor_ = std::min(prefetch_cursor_, n);
  while (prefetch_cursor_ >= 0 && store_->loading_bytes() < store_->options().prefetch_bytes) {
    const Node& node = nodes_[size_t(prefetch_cursor_)];
    if (node.needs_backward) {
      for (size_t i = 0; i < node.in.size(); ++i)
        if (node.op->saves_input(int(i)) && !values_[size_t(node.in[i])].external)
          store_->prefetch(values_[size_t(node.in[i])]);
      for (size_t i = 0; i < node.out.size(); ++i)
        if (node.op->saves_output(int(i))) store_->prefetch(values_[size_t(node.out[i])]);
    }
    --prefetch_cursor_;
  }
}

void Tape::clear() {
  // Transfers finish first, then buffers go back to the arena and the graph is forgotten;
  // nothing here throws.
  if (store_) store_->reset();
  for (auto& v : values_) {
    v.buf.reset();
    v.grad.reset();
    v.grad_alias = Tensor();
  }
  values_.clear();
  nodes_.clear();
  retained_.clear();
  params_.clear();
  final_after_.clear();
  final_at_end_.clear();
  loss_ = -1;
  bwd_node_ = -1;
  head_scope_ = false;
  finished_ = false;
}

std::vector<std::pair<std::string, Decision>> Tape::slot_classes() const {
  std::vector<std::pair<std::string, Decision>> out;
  for (auto& v : values_)
    if (!v.external && v.saved()) out.emplace_back(v.cls, v.decision);
  return out;
}

}  // namespace strata
