// The tape. A step is recorded first as a graph of nodes over values (shapes only), then run:
// forward allocates each output from the arena, frees a value at its last forward use unless
// backward needs it, and then applies the plan to the saved slots; backward walks the nodes in
// reverse, rebuilds dropped slots by replaying their producers, has the first op to write each
// gradient overwrite it and later ones add into it (nothing is zeroed up front), and frees
// every slot at its last backward use. The tape is cleared after every step, also when a
// step throws, so no slot outlives it.
// An op may write a parameter's gradient in its forward (Op::grad_in_forward: the LM head's
// training variant): the first-write bookkeeping then starts at forward, and the node is never
// replayed (its outputs are always kept), since a replay would write the gradient again.
// A pass-through backward (Op::passes_grad: the residual add) runs no kernel where it can: its
// first input takes the output's gradient buffer over and its second borrows a view of it (see
// GradAlias).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend.h"
#include "engine/plan.h"
#include "engine/slot_store.h"
#include "engine/tensor.h"

namespace strata {

using VId = int32_t;

// A saved slot's life. RESIDENT -> (OFFLOADING -> ON_HOST) | (WRITING -> ON_DISK) | DROPPED,
// and back through LOADING (or a replay) to RESIDENT when backward asks for it. EMPTY: not
// produced yet, or released after its last use.
enum class SlotState : uint8_t { EMPTY, RESIDENT, OFFLOADING, ON_HOST, WRITING, ON_DISK, DROPPED, LOADING, READING };
const char* slot_state_name(SlotState s);

// What the tape is doing when it calls the node hook.
enum class TapePhase : uint8_t { forward, replay, backward };

struct OpArgs {
  std::vector<Tensor> in, out;    // forward: all resident; backward: the saved ones resident, others undefined
  std::vector<Tensor> gout, gin;  // backward: output grads (undefined if none), input grads to write
  std::vector<bool> acc;          // per gin: add into it, or overwrite it (its first write this step)
  // Forward of an op with grad_in_forward inputs: gin/acc have one entry per input, defined only
  // for those inputs when their gradient is wanted; empty for every other forward (and replays).
  // Replays only: per output, whether it was resident before the replay. It then holds what this forward
  // writes there (the same inputs, this step), so the op may read it instead of computing it again.
  std::vector<bool> kept;
};

// An autograd op. forward() must be deterministic: recompute replays it and must reproduce the
// forward bit for bit. backward() writes every defined gin, as its acc flag says: an
// overwritten gradient holds garbage until then.
class Op {
 public:
  virtual ~Op() = default;
  virtual const char* name() const = 0;
  // The backend op family it dispatches to (Backend::supports is asked at record time).
  virtual OpKind kind() const = 0;
  virtual void forward(Backend& be, const OpArgs& a) = 0;
  virtual void backward(Backend& be, const OpArgs& a) = 0;
  // Whether backward reads input i / output i.
  virtual bool saves_input(int i) const = 0;
  virtual bool saves_output(int i) const = 0;
  // Whether forward (not backward) writes input i's gradient. Only for external inputs
  // (parameters), each read once by the node; backward then gets an undefined gin for it. Such a
  // forward has side effects, so the tape never replays it and keeps all its outputs.
  virtual bool grad_in_forward(int) const { return false; }
  // Whether backward is exactly gin[i] = gout[0] for each of its two inputs (one output): the
  // tape may then alias gradient buffers instead of calling backward.
  virtual bool passes_grad() const { return false; }
  // Whether forward reads input i. One it does not (backward may: saves_input) may be absent when forward runs or
  // replays, and its forward use ends with its producer.
  virtual bool forward_reads(int) const { return true; }
  // Whether forward takes output i undefined (and skips writing it). The first forward leaves such an output
  // unwritten when nothing reads it before backward and the plan recomputes it: the replay writes it then.
  virtual bool optional_output(int) const { return false; }
  // Whether output i stays resident whatever the plan says: a few bytes, which a replay reads (OpArgs::kept)
  // to skip work (an FP8 cast's scale block: the replay skips the amax pass).
  virtual bool keep_output(int) const { return false; }
};

struct OutSpec {
  std::string cls;  // slot class, e.g. "L3.attn.q"
  Shape shape;
  DType dtype;
  bool no_grad = false;  // no gradient flows through it (FP8 codes): it never requires grad
};

// A trainable parameter whose gradient buffer the GradHooks' sink() provides at its first write each backward
// (Tape::param): `host` (its gradient lives on the host tier: accumulation on the device is refused), or
// `transient` (ZeRO-2: a gradient this rank does not own, a fresh block each backward that is written, never added
// to, even under set_accumulate_param_grads: its owner sums the micro-batches).
enum class LazyGrad : uint8_t { none, host, transient };

struct Value {
  std::string cls;
  Shape shape;
  DType dtype = DType::f32;
  bool external = false;           // a parameter or input: storage owned elsewhere
  Tensor ext;                      // its view, when external
  Tensor grad_sink;                // external only: where its gradient goes (undefined = frozen, unless lazy)
  LazyGrad lazy = LazyGrad::none;  // a parameter whose grad_sink the grad hooks provide at its first write
  int owner = -1;                  // a parameter: the caller's index for it (the grad hooks report it)
  int grad_final_node = -1;  // a trainable parameter: the node after whose backward its gradient is final (-1: end)
  bool requires_grad = false;
  int producer = -1;                                // node index (-1 for external values)
  int last_fwd_use = -1;                            // last node reading it in forward
  int first_bwd_reader = -1, last_bwd_reader = -1;  // lowest / highest node index whose backward reads it
  bool is_loss = false;
  // What the model says the value is (Tape::mark_layer_input, begin_head, mark_head); the engine
  // reads these, never the class name: the input of layer `layer_input` (gradient checkpointing
  // keeps every k-th), or a value of the loss head (backward reads it first: no tier moves it).
  int layer_input = -1;
  bool head = false;
  Decision decision = Decision::keep;
  // Runtime state.
  SlotState state = SlotState::EMPTY;
  Buffer buf;
  Buffer grad;
  Tensor grad_alias;          // a borrowed view of another value's grad (GradAlias::pass); owns nothing
  bool grad_written = false;  // this step wrote its gradient (grad, or grad_sink): later writes add
  // Tier bookkeeping (engine/slot_store.cpp).
  static constexpr size_t kNone = SIZE_MAX;
  size_t host_off = kNone;  // host pool block: the slot's bytes (host) or its staging (disk)
  size_t disk_off = kNone;  // disk extent
  CopyTicket copy = 0;      // the device<->host transfer in flight
  uint64_t io = 0;          // the io_uring request in flight

  bool saved() const { return first_bwd_reader >= 0; }
  bool has_grad() const { return grad.allocated() || grad_alias.defined(); }
  Tensor grad_view() const { return grad.allocated() ? grad.view() : grad_alias; }
};

// How a pass-through node's backward may go without its kernel (decided in finish_graph; checked
// again when it runs). move_a: input 0 takes the output's gradient buffer over as its first write;
// the kernel then writes input 1's gradient only. pass: no kernel at all; input 1 wants no
// gradient, or borrows a view of that buffer: it is read by this node alone, and its producer's
// backward, which reads the view, comes before every other writer of input 0's gradient and
// before input 0's producer (whose backward frees that gradient).
enum class GradAlias : uint8_t { none, move_a, pass };

struct Node {
  std::unique_ptr<Op> op;
  std::vector<VId> in, out;
  bool needs_backward = false;  // some input requires grad
  bool replayable = true;       // false: its forward writes gradients (Op::grad_in_forward)
  GradAlias alias = GradAlias::none;
};

struct TapeStats {
  long recomputed_nodes = 0;  // producer replays in the last backward
  size_t saved_bytes_at_end_of_forward = 0;
  long grad_moves = 0;   // pass-through backwards whose first input took the output's gradient over
  long grad_passes = 0;  // of those, the ones that ran no kernel (GradAlias::pass)
};

class Tape {
 public:
  // The gradient backward seeds the loss with by default; an op that writes gradients in forward
  // takes the tape's seed when it is recorded.
  static constexpr float kLossSeed = 1.0f;

  explicit Tape(Backend& be);
  ~Tape();
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  // Graph building (no memory is touched).
  VId input(std::string cls, Tensor t);
  // A parameter; backward writes its gradient into grad_sink when that is defined (else it is
  // frozen), and zeroes grad_sink when no gradient reaches it. One value per name: a weight
  // recorded twice (tied embeddings) gets the same value, so its two gradients add up.
  VId param(std::string cls, Tensor t, Tensor grad_sink);
  // A trainable parameter with a caller's index; `lazy` (grad_sink undefined): the GradHooks' sink()
  // provides it when its gradient is first written (LazyGrad).
  VId param(std::string cls, Tensor t, Tensor grad_sink, int owner, LazyGrad lazy);
  bool has_param(std::string_view cls) const { return params_.find(cls) != params_.end(); }
  std::vector<VId> record(std::unique_ptr<Op> op, const std::vector<VId>& in, std::vector<OutSpec> outs);
  VId record1(std::unique_ptr<Op> op, const std::vector<VId>& in, OutSpec out) {
    return record(std::move(op), in, {std::move(out)})[0];
  }
  void set_loss(VId v);
  // The loss's gradient backward starts from (set before recording: ops that write gradients in
  // forward read it then). A micro-batch's share of the step's loss tokens, so that gradients
  // summed over micro-batches (or ranks) are the gradient of the step's mean loss.
  void set_loss_seed(float s) { loss_seed_ = s; }
  float loss_seed() const { return loss_seed_; }
  // On: every parameter gradient this graph writes is added to what its buffer holds (gradient
  // accumulation on the device); parameters it does not reach keep theirs. Lazy gradients' blocks are
  // fresh each step: host-tier ones cannot accumulate (refused), transient ones are written as without.
  void set_accumulate_param_grads(bool on) { accumulate_params_ = on; }
  bool accumulate_param_grads() const { return accumulate_params_; }
  // The model's marks (Value::layer_input, Value::head): `v` is the input of layer `layer`; `v` feeds
  // the loss head; every value recorded after begin_head() belongs to the head (until clear()).
  void mark_layer_input(VId v, int layer);
  void mark_head(VId v);
  void begin_head() { head_scope_ = true; }
  // Keeps `v` resident after forward (e.g. logits for evaluation), whatever the plan says.
  void retain(VId v);

  // The host/disk tiers (owned by the caller). Without one, host and disk decisions are refused.
  void set_store(SlotStore* store) { store_ = store; }
  // Called right before a node's forward (phase forward, or replay when backward recomputes it)
  // and right before its backward, after its saved inputs are materialised (the weight pager).
  void set_node_hook(std::function<void(int node, TapePhase)> hook) { hook_ = std::move(hook); }
  // Called first thing in a node's forward (not its replays), before its outputs are allocated: the
  // optimizer applies the pending updates of the parameters that node reads (model/train/optimizer.h).
  void set_state_hook(std::function<void(int node)> hook) { state_hook_ = std::move(hook); }
  // Parameter gradients: `sink` provides a lazy parameter's gradient tensor at its first write;
  // `final` runs after the backward of the node that writes a group of parameters' gradients for the
  // last time (the parameters whose gradient is now final, in a fixed order), and once at the end of
  // backward for the ones no node writes (zeroed). Used by the trainer for the gradient norm and to
  // stream gradients off the device while backward goes on.
  struct GradHooks {
    std::function<Tensor(VId)> sink;
    std::function<void(const std::vector<VId>&)> final;
  };
  void set_grad_hooks(GradHooks h) { grad_hooks_ = std::move(h); }
  // Gradient aliasing for pass-through backwards (GradAlias). On by default; STRATA_GRAD_ALIAS=0
  // in the environment turns it off for A/B runs. Same bits either way on cpu; elsewhere a -0
  // in an output gradient may stay -0 where the kernel wrote 0 + -0 = +0.
  void set_grad_aliasing(bool on) { grad_aliasing_ = on; }
  bool grad_aliasing() const { return grad_aliasing_; }
  // The node whose backward is running (replays happen on its behalf); -1 outside backward.
  int backward_node() const { return bwd_node_; }
  // Applies the plan to every saved slot (call after recording, before forward). The last
  // layer's input and the loss inputs are never offloaded: backward needs them at once. Outputs
  // of a node that is not replayable are always kept, whatever the plan says.
  void apply_plan(const Plan& plan);
  // Bytes the plan sends to each tier, for sizing the host pool and the disk file up front.
  struct TierBytes {
    size_t host = 0, disk = 0, largest_disk = 0;
  };
  TierBytes tier_bytes() const;
  // forward() starts the step's gradient bookkeeping (an op may write gradients in forward);
  // backward() must follow the forward of the same graph.
  void forward();
  void backward();
  // Releases every buffer and forgets the graph. Safe to call at any point.
  void clear();

  Tensor tensor(VId v) const;  // a resident value's view
  const Value& value(VId v) const { return values_[size_t(v)]; }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const TapeStats& stats() const { return stats_; }
  Backend& backend() { return be_; }
  // Sum of the bytes of saved slots per class (after apply_plan), for printing the plan.
  std::vector<std::pair<std::string, Decision>> slot_classes() const;

 private:
  void finish_graph();
  GradAlias plan_alias(int n, const std::vector<std::vector<int>>& readers) const;
  GradAlias alias_grads(const Node& node);
  void input_grads(const Node& node, OpArgs& a, bool first_moved);
  DType grad_dtype(const Value& v) const;
  void release(VId v);
  void materialize(VId v, int cur);
  bool needed_from(const Value& v, int cur) const;
  int out_index(int node, VId id) const;  // id's place among node's outputs
  bool written_for_nothing(VId id) const;
  void run_forward(int n, bool replay);
  void forward_grads(const Node& node, OpArgs& a);
  void prefetch_ahead(int n);
  Tensor sink(VId u);
  void grads_final(int node);
  OpArgs args(const Node& n, bool backward);

  Backend& be_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<bool> retained_;
  std::map<std::string, VId, std::less<>> params_;  // parameter values by name
  VId loss_ = -1;
  bool finished_ = false;
  SlotStore* store_ = nullptr;
  int prefetch_cursor_ = -1;
  std::function<void(int, TapePhase)> hook_;
  std::function<void(int)> state_hook_;
  GradHooks grad_hooks_;
  std::vector<std::vector<VId>> final_after_;  // per node: parameters whose gradient is final after its backward
  std::vector<VId> final_at_end_;
  int bwd_node_ = -1;
  bool grad_aliasing_ = true;
  bool head_scope_ = false;  // begin_head() was called: new values belong to the loss head
  float loss_seed_ = kLossSeed;
  bool accumulate_params_ = false;
  TapeStats stats_;
};

// Clears the tape when the scope ends, on success or on an exception.
class TapeGuard {
 public:
  explicit TapeGuard(Tape& t) : t_(t) {}
  ~TapeGuard() { t_.clear(); }

 private:
  Tape& t_;
};

}  // namespace strata
