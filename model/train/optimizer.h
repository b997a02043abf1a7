// The optimizer side of a step, over persistent state on any tier (ModelOptions::state_plan).
//
// Gradient norm: each parameter's squared norm is added when the tape reports its gradient final
// (Tape::GradHooks), in backward's fixed order, whatever the plan: every plan sums the same
// numbers in the same order, so clipping sees the same norm bit for bit (cpu).
//
// Gradients on the host tier: the tape asks for such a gradient's buffer at its first write; it
// is carved from the arena then, copied to its host array on the copy stream as soon as it is
// final, and freed once at most TrainOptions::grad_inflight_bytes of such copies are pending (the
// compute stream waits on the oldest copy's event before its block can be reused). ZeRO-2's
// transient gradients (parameters another rank owns) come the same way and go once reduced (set_comm).
//
// AdamW, after backward (exact global-norm clipping needs every gradient first): parameters whose
// state is all on the device in one list launch; the others streamed in chunks through three device
// staging buffers: uploads on the main copy lane, downloads on the second, so chunk c+1's and c+2's
// state comes in while chunk c's updated master and moments go out; each hand-off through an event. The compute
// weights stay on the device and are updated in place. Pieces of a parameter start on multiples of
// kQuantBlock elements, so 8-bit moments' scales split with their codes.
//
// Trainable paged weights (a full fine-tune with layer_offloading, LlamaModel::pages_trainable): the
// compute weights live in the pager's host block only, so they stream like host-tier state whatever
// the tiers of their master, moments and gradient: each piece's weights are uploaded from the block
// into staging, updated there (the kernel's param_out; a device-tier master low half, moments or
// gradient are read in place) and downloaded back into the block. Such a step empties the pager's slots
// first and is never deferred: when step() returns the block holds the update, and the next forward
// uploads it.
//
// State on the disk tier (Plan::decide_state `disk`: moments and masters, never gradients) lives in
// the model's state file (LlamaModel::state_disk). Its pieces travel file -> pinned host staging ->
// device staging and back: each chunk has a host staging block (kDiskSlots of them, one reservation
// made with the optimizer, 4 KiB-aligned arrays); its reads (io_uring) are issued up to kDiskSlots
// chunks ahead of the compute, as soon as the block's previous chunk is written back; the upload
// waits for its reads (polled; the host blocks only when the compute needs the chunk now); after the
// compute and download, the write back is issued once the download has landed (polled at every
// advance and node, waited where a block or a region is needed again), so a region's write completes
// before the next read of it: the next chunk through the block, the next step's update (step() waits
// for every write first), flush() (the file holds the result: checkpoints read it). Pieces of a
// parameter with disk arrays start on multiples of 4096 elements (of 1024 quantisation blocks with
// 8-bit moments on disk, so their scales split on pages too), so every request is page-aligned.
//
// Deferred update (OptimizerOptions::defer_update, the default): step() launches the device-state
// list and leaves the streamed chunks pending, with this step's learning rate, step count and norm
// (kept in a second norm buffer). The next forward applies them in parameter order: before a node
// runs, the tape's state hook computes every chunk up to the last one of each parameter the node
// reads, and uploads run up to three chunks ahead. So the state's transfers overlap forward compute
// instead of following backward, and every parameter is updated before anything reads it. The
// arithmetic is the same (same gradients, norm, lr and t; AdamW is elementwise, so the order of
// parameters changes nothing): bit-identical to the undeferred update on cpu. Anything else that
// reads weights or state between steps calls LlamaModel::sync_state() (flush) first.
#pragma once
#include <deque>
#include <vector>

#include "engine/comm.h"
#include "engine/tape.h"
#include "model/llama/llama.h"

namespace strata {

struct OptimizerOptions {
  size_t chunk_bytes = size_t(256) << 20;        // device staging per streamed chunk (two of them)
  size_t grad_inflight_bytes = size_t(1) << 30;  // host-tier gradients copied but not yet freed
  bool defer_update = true;  // streamed updates wait for the next forward (above); not with host-tier gradients,
                             // trainable paged weights or ZeRO over several ranks
  // Without clipping (max_grad_norm <= 0) no update needs the global norm: each streamed chunk is updated
  // during backward once every parameter in it has its final gradient (begin_update_in_backward, below).
  bool update_in_backward = true;
  // Data parallel: the dtype fp32 gradients are summed over the ranks in. f32: exact sums of the fp32
  // gradients. bf16: each group's gradients are rounded to bf16 copies, summed in bf16 (half the
  // bytes on the links; as PyTorch DDP with bf16 parameters) and widened back into the fp32 buffers.
  // bf16 gradients (the recipe's gradients: bf16) are summed in bf16 in place, with no copies, and
  // this is not read (the configs refuse an explicit fp32 with them: check_grad_reduce).
  DType reduce_dtype = DType::f32;
};

struct OptimizerStats {
  size_t uploaded_bytes = 0, downloaded_bytes = 0;     // host-tier state moved this step (gradients included)
  size_t disk_read_bytes = 0, disk_written_bytes = 0;  // disk-tier state read and written back this step
  long chunks = 0;                                     // streamed chunks this step
  long chunks_in_backward = 0;                         // of them, updated during backward (begin_update_in_backward)
};

class Optimizer {
 public:
  Optimizer(Backend& be, LlamaModel& model, OptimizerOptions opt);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Installs the gradient hooks on `tape` (its graph's parameters carry model.params() indices).
  void install(Tape& tape);
  // Before a forward whose backward follows: zeroes the norm and this step's counters.
  void begin_step();
  // After backward (also without a step): the host-tier gradients' device blocks go back.
  void end_backward();
  // After end_backward: clips by the global norm (max_norm <= 0: no clipping) and updates every
  // trainable parameter (the streamed ones possibly deferred: see above). `norm_sq()` holds the
  // squared gradient norm until the next begin_step.
  void step(const AdamWParams& p, float max_norm, int t);
  // Before the backward whose gradients step(ap, 0, t) will apply, with no clipping (max_norm <= 0): the
  // streamed update is planned now, its chunks in reverse parameter order (the order backward makes the
  // gradients final, the tied embedding's last), and each chunk is computed as soon as every parameter in
  // it has its final gradient (Tape::GradHooks), so the state's transfers overlap the rest of backward.
  // The arithmetic is step()'s, parameter by parameter (AdamW is elementwise and unclipped needs no norm):
  // bit-identical on cpu. A layer's weights are updated only after backward stops reading them: its
  // gradients are final once its last backward node ran, and recompute reads only layers not yet reached.
  // Not with host-tier gradients, trainable paged weights, disk-tier state or several ranks (each needs
  // the gradients somewhere first); a no-op then, and step() updates as before. False when not used.
  bool begin_update_in_backward(const AdamWParams& ap, int t);
  // Applies every pending (deferred) update now and waits until the host arrays hold the result.
  void flush();
  bool pending() const { return upd_.computed < upd_.chunks.size(); }
  // After recording a graph, before its forward: a pending update of a parameter the graph does not
  // read is applied now (no node of it would).
  void before_forward();
  // End of a step or an error: waits for every copy in flight and frees the step's buffers; a pending
  // update stays pending (its applied chunks stay applied). Never throws.
  void reset() noexcept;

  Tensor norm_sq() const { return norms_[cur_].view(); }
  const OptimizerStats& stats() const { return stats_; }
  // The pinned host staging of disk-tier state (kDiskSlots blocks; 0 without disk-tier state): part of
  // the host tier's bytes (StepStats::state_host_bytes).
  size_t disk_staging_bytes() const { return disk_staging_ ? disk_staging_->bytes() : 0; }
  // Data parallel: with a communicator of several ranks, a backward that set_reduce(true) marked
  // sums each gradient over the ranks (on the communicator's stream) as it becomes final: one fused
  // all_reduce_many per group of gradients the tape reports final together (in reduce_dtype). A group's norm and host
  // copies wait for its collective one group later (so it overlaps the next group's backward compute) and end_backward
  // waits for the rest: the norm is the global gradient's, summed in the same order on every rank, so every rank clips
  // and updates the same.
  // ZeRO-2 (model/llama/zero.h): one fused reduce_many per group, each gradient to its owner. A group's owned gradients
  // put their squared norms into their parts (the k-th final gradient: part k) and its transient gradients go back
  // to the arena one group later (after the compute stream waits on the collective); end_backward all-reduces the
  // parts (i32 words, exact) and adds them in order into norm_sq() (Backend::grad_norm_sq_add_parts): the same norm,
  // on cpu the same bits, as the stage-0 sum. Without set_reduce, the norm is this rank's local one (as stage 0's)
  // and the transient gradients are dropped.
  void set_comm(Communicator* c) { comm_ = c; }
  void set_reduce(bool on) { reduce_ = on; }
  // Gradient accumulation on the device: a backward before a step's last micro-batch leaves partial sums in the
  // gradient buffers, whose norm nothing reads (begin_step zeroes it again; the last backward's is the step's), so
  // it is not formed. Stage 0 and 1 only: ZeRO-2's owners still form their parts as each micro-batch is reduced.
  void set_partial(bool on) { partial_ = on; }
  // ZeRO-1 (ModelOptions::zero): every rank's non-owned parameters get their master's low half from
  // its owner, so the model's fp32 weights are whole on every rank (a final model save: call on every
  // rank, after the last step; later steps leave the copies stale). A no-op unsharded or where the
  // weights are the master (f32 backend) or there is none (master_weights: none).
  // ZeRO-3: also every layer matrix's fp32 weights from its owner, kept on rank 0 for a save
  // (LlamaModel::set_gathered_fp32; the next step drops them).
  void gather_masters();
  // A parameter's gradient of the last backward, to the host (tests and tools; f32 [numel], bf16
  // gradients widened).
  void download_grad(const Parameter& p, float* dst);

 private:
  struct Pending {
    Buffer buf;
    CopyTicket ticket;
  };
  // One piece of a parameter: elements [begin, begin + n), and where its host arrays sit in staging.
  struct Piece {
    size_t param, begin, n;
    size_t master = 0, m = 0, v = 0, g = 0;  // device staging offsets (bytes) of its host and disk arrays
    size_t w = 0;  // a trainable paged weight: its compute weights' staging offset (from the pager's host block)
    size_t ms = 0, vs = 0;                                 // 8-bit moments: their scales' staging offsets
    size_t hmaster = 0, hm = 0, hv = 0, hms = 0, hvs = 0;  // its disk arrays' offsets in the host staging block
  };
  struct Chunk {
    std::vector<Piece> pieces;
    size_t bytes = 0;       // device staging
    size_t disk_bytes = 0;  // host staging of its disk arrays (0: none)
  };
  static constexpr size_t kStaging = 3;
  static constexpr size_t kDiskSlots = 4;  // host staging blocks: one read ahead of the three uploads
  // One step's streamed update: its chunks, the step's hyperparameters and norm, and how far the
  // upload and compute pipeline through the staging blocks has got.
  struct Update {
    std::vector<Chunk> chunks;
    std::vector<size_t> end_of;  // per parameter: one past its last chunk (0: none)
    AdamWParams ap;
    float max_norm = 0;
    int t = 0, norm = 0;  // norm: index into norms_
    Buffer staging[kStaging];
    CopyTicket in[kStaging] = {0, 0, 0}, out[kStaging] = {0, 0, 0};
    size_t uploaded = 0, computed = 0;
    // Disk-tier state, per chunk: its reads and writes in flight and its last download. Chunks
    // [0, read) have their reads issued, [0, written) their writes, [0, retired) their writes done.
    std::vector<std::vector<DiskFile::Ticket>> reads, writes;
    std::vector<CopyTicket> down;
    size_t read = 0, written = 0, retired = 0;
  };
  void advance(size_t upto);  // computes upd_'s chunks [computed, upto), uploads ahead; frees staging at the end
  void upload_ahead(size_t ns, bool block);  // uploads to computed + ns (block: at least the next chunk)
  // Disk-tier state of upd_ (all no-ops without it). `block` false: only what is ready; true: waits.
  bool disk_ready(size_t c, bool block);     // chunk c's reads issued and landed
  bool issue_read(bool block);               // chunk upd_.read's reads, once its host block is free
  void pump_disk(bool block, size_t upto);   // writes of downloaded chunks < upto, then their completion
  void finish_disk();                        // every computed chunk written back and done
  std::byte* disk_slot(size_t c) const;      // chunk c's host staging block (null on the sim)
  std::string disk_classes(size_t c) const;  // the state classes of chunk c's disk arrays, for errors
  void disk_requests(size_t c, bool write);  // issues chunk c's reads or writes
  void before_node(int node);
  Tensor grad_sink(VId u);
  void grads_final(const std::vector<VId>& ids);
  // The norm and host copies of final gradients (reduced: their collective is done); ZeRO-2 frees the transients.
  void finish_group(const std::vector<VId>& ids, bool reduced);
  bool owned_here(VId u) const;      // a parameter value this rank owns (ZeRO), or any where unsharded
  void drain_reducing(size_t keep);  // finishes reduced groups until `keep` are left
  void free_pending(size_t keep_bytes);
  std::vector<Chunk> plan_chunks(bool reverse = false) const;  // reverse: the parameters last to first
  void plan_update(const AdamWParams& ap, float max_norm, int t, bool reverse);  // upd_ for a step
  void advance_final();  // in backward (in_backward_): the chunks whose parameters all have final gradients
  // `hs`: the chunk's host staging block (its disk arrays; null without them or on the sim).
  void upload(const Chunk& c, const Buffer& staging, CopyTicket& last, const std::byte* hs);
  // Each array of piece `pc` that moves through `staging`, in one order for the upload and the download:
  // f(its host address (the host tier's array, the pager's block, or its disk array in `hs`; null on the sim),
  // its tensor in `staging`). `grad`: the host-tier gradient too (uploaded, never downloaded).
  template <class B, class F>
  void each_staged(const Piece& pc, const Buffer& staging, B* hs, bool grad, F&& f) const;
  void compute(const Chunk& c, const Buffer& staging, const AdamWParams& p, float max_norm, int t, Tensor norm_sq);
  void download(const Chunk& c, const Buffer& staging, std::byte* hs);
  size_t master_elem_bytes() const;
  Communicator& zero_comm() const;  // the communicator matching the model's ZeRO rank and world, or Error
  void broadcast_owned();           // ZeRO-1: every trainable parameter's weights from its owner
  void gather_sharded(Communicator& c, bool split);  // ZeRO-3's part of gather_masters
  // A parameter whose split master's low half is on the host or disk tier: its bits into dst (device), for the
  // owner's broadcast in gather_masters. A no-op for a master on the device.
  void load_low_half(const Parameter& p, Tensor dst);
  void wait_copies();
  DType moment_dtype() const;
  bool quantised() const { return moment_dtype() == DType::u8; }

  Backend& be_;
  LlamaModel& model_;
  OptimizerOptions opt_;
  Tape* tape_ = nullptr;
  Buffer norms_[2];  // this step's squared norm, and a pending update's (the previous step's)
  int cur_ = 0;
  Update upd_;
  std::unique_ptr<HostReservation> disk_staging_;  // kDiskSlots blocks of disk_slot_bytes_
  size_t disk_slot_bytes_ = 0, disk_slots_ = 0;
  bool model_alive_ = true;
  Communicator* comm_ = nullptr;
  bool reduce_ = false;
  bool partial_ = false;  // set_partial
  struct Reducing {
    std::vector<VId> ids;
    CommTicket ticket;
    std::vector<Buffer> narrow;  // reduce_dtype bf16: the group's bf16 copies being summed
  };
  std::deque<Reducing> reducing_;  // cleared by the model's destructor (a Trainer may outlive its model)
  // Per parameter: its host-tier gradient's device block this step, or (ZeRO-2) its transient gradient.
  std::vector<Buffer> lazy_grads_;
  Buffer norm_parts_;  // ZeRO-2: i32 [2 * params], one 8-byte norm part a final gradient (Backend::grad_norm_sq_part)
  size_t parts_used_ = 0;  // this backward's final gradients so far (the next part's index)
  std::deque<Pending> pending_;
  size_t pending_bytes_ = 0;
  // The last copy of each lane: uploads on the main lane, downloads (gradients, updated state) on
  // the second, so they overlap (the link is full duplex).
  static constexpr CopyLane kDown = CopyLane::second;
  CopyTicket last_up_ = 0, last_down_ = 0;
  OptimizerStats stats_;
  // begin_update_in_backward: upd_ is this step's, computed as its gradients become final (final_, per
  // parameter) until step() takes it over.
  bool in_backward_ = false;
  std::vector<bool> final_;
  // A backward that failed after updating some of its chunks (reset): the weights are part old, part new,
  // so the next begin_step refuses (Error naming how much was applied).
  size_t torn_chunks_ = 0, torn_of_ = 0;
};

}  // namespace strata
