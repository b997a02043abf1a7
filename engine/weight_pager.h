// Weight paging (`layer_offloading: true`). Every paged per-layer weight (frozen, or trainable in a
// full fine-tune) lives in ONE host reservation (pinned on cuda, sized exactly: one block per layer, laid out as
// in a device slot). Two device slots carved from the arena ("weights.page0/1") hold the layers
// the step is using: layer L always maps to slot L % 2 at a fixed offset, so a paged weight's
// Tensor never changes; the pager only makes sure its slot holds the right layer when an op runs.
//
// Slot states, tied to copy tickets: EMPTY -> LOADING (upload issued on the copy stream, ordered
// after every op already queued, so the previous occupant's readers finish first) -> READY (the
// compute stream waits on the upload's event) -> IN_USE (the layer of the op running now).
// A slot's bytes are dropped on eviction, never copied back: the host block is the only owner. A
// trainable weight is brought in for its forward and again for its backward like a frozen one; its
// gradient goes wherever the model put it, and the optimizer writes its update straight into the
// host block (host_data) after reset() emptied the slots, so no slot holds a stale copy and the next
// forward uploads the updated layers. The tape's node hook drives it:
// forward prefetches L+1; backward and the replays inside it prefetch L-1 (a replay of an earlier
// layer, under every-N checkpointing, prefetches the layer after it); a prefetch never evicts the
// layer in use.
//
// Two sources fill a slot, with the same slots, states, hook and prefetch order:
//  - host (layer_offloading): the layer's block uploaded from the host reservation over PCIe (a copy ticket);
//  - gather (ZeRO-3, model/llama/zero.h): the layer's weights come from the ranks holding them, one fused
//    Communicator::broadcast_many a layer (a comm ticket), every weight from its root. A weight this rank holds
//    (root == rank) is resident: it takes no slot space, view() is its own tensor (set_resident), and the
//    broadcast sends from it. Every rank runs the same tape and so fills the same layers in the same order: the
//    collectives match. There is no host block (host_data is null, write_host refused).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"

namespace strata {

class Tape;
enum class TapePhase : uint8_t;

struct PagedWeight {
  std::string name;  // the tape's class of the param (its Hugging Face name)
  int layer = 0;
  Shape shape;
  int root = -1;  // gather source: the rank holding its weights (-1: host source)
};

class Communicator;

struct PagerStats {
  long uploads = 0;           // layer uploads (gathers) issued (prefetches included)
  size_t bytes_uploaded = 0;  // host -> device bytes (gather: bytes received from other ranks)
  long waits = 0;             // ensure() that found its layer not yet READY (compute waited)
};

class WeightPager {
 public:
  enum class SlotState : uint8_t { EMPTY, LOADING, READY, IN_USE };
  static const char* state_name(SlotState s);

  // Lays out `weights` (compute dtype, 256-byte aligned inside each layer block), reserves the
  // host memory and carves the two slots from the backend's arena.
  // Every weight with root >= 0: the gather source, as rank `rank` (its own weights take no slot space).
  WeightPager(Backend& be, int n_layers, const std::vector<PagedWeight>& weights, int rank = -1);
  ~WeightPager();
  WeightPager(const WeightPager&) = delete;
  WeightPager& operator=(const WeightPager&) = delete;

  // The fixed device view of weight i (into slot layer % 2); valid only while that layer is there.
  Tensor view(size_t i) const;
  // Host copies of weight i: write converts f32 to the compute dtype, read converts back.
  void write_host(size_t i, const float* src);
  void read_host(size_t i, float* dst) const;
  // Weight i's bytes (compute dtype, contiguous) in the host block: null on the sim backend (no
  // memory). A writer must empty the slots first (reset()) or write through write_host, which empties
  // the slot holding the weight's layer.
  std::byte* host_data(size_t i) const;
  size_t weight_bytes(size_t i) const;
  // Writes weight i's bytes as they are (compute dtype: the high half of a split master).
  void write_host_bits(size_t i, const void* src);
  // Empties the slot holding `layer` (waiting for its upload): its copy is stale once the host changes.
  void invalidate(int layer);

  // Gather source: weight i's resident tensor on its root (this rank), before any fill; and the communicator
  // the gathers run on (rank `rank` of any world; null detaches). Error when a gather finds none.
  bool gathers() const { return rank_ >= 0; }
  void set_resident(size_t i, Tensor t);
  void set_comm(Communicator* c) { comm_ = c; }

  // Installs the node hook on `tape` (one tape at a time); detach() removes the link.
  void install(Tape& tape);
  void detach() noexcept;
  bool installed_on(const Tape& tape) const { return tape_ == &tape; }

  // Before an op reading layer L's weights: the slot holds L and compute is ordered after its upload.
  void ensure(int layer);
  // Starts filling layer L into its slot unless it is there already or the slot holds the layer in use.
  void prefetch(int layer);
  // End of a step or an error: waits for every upload in flight and empties both slots. Never throws.
  void reset() noexcept;
  // The node hook's body (public so a test or tool can chain its own hook around it).
  void on_node(int node, TapePhase phase);

  int n_layers() const { return n_layers_; }
  int slot_count() const { return int(slots_.size()); }
  SlotState slot_state(int s) const { return slots_[size_t(s)].state; }
  int slot_layer(int s) const { return slots_[size_t(s)].layer; }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t layer_bytes(int layer) const { return layer_bytes_[size_t(layer)]; }
  size_t host_bytes() const { return host_ ? host_->bytes() : 0; }
  bool host_pinned() const { return host_ && host_->pinned(); }
  const std::string& host_note() const;
  const PagerStats& stats() const { return stats_; }

 private:
  struct Slot {
    Buffer buf;
    int layer = -1;
    SlotState state = SlotState::EMPTY;
    uint64_t ticket = 0;  // a CopyTicket (host source) or a CommTicket (gather source)
  };
  int node_layer(int node);
  void start_upload(Slot& s, int layer);
  void start_gather(Slot& s, int layer);
  void wait_compute(uint64_t ticket);
  void wait_host(uint64_t ticket);

  Backend& be_;
  DType dtype_;
  int n_layers_;
  std::vector<PagedWeight> weights_;
  std::vector<size_t> offset_;       // weight i's offset inside its layer block
  std::vector<size_t> layer_bytes_;  // each layer's block
  std::vector<size_t> host_off_;     // each layer's block inside the host reservation
  size_t slot_bytes_ = 0;
  std::unique_ptr<HostReservation> host_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int> layer_of_;  // paged param name -> layer
  std::vector<int> node_layer_;                    // per node of this step's tape: -2 unknown, -1 none
  int rank_ = -1;                                  // gather source: this rank (-1: host source)
  std::vector<Tensor> resident_;                   // gather source: per weight, this rank's own (root == rank)
  std::vector<std::vector<size_t>> of_layer_;      // gather source: each layer's weights, in order
  Communicator* comm_ = nullptr;
  Tape* tape_ = nullptr;
  int in_use_ = -1;  // the layer of the op running now
  PagerStats stats_;
};

}  // namespace strata
