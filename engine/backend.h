// The Backend interface: cpu (reference), cuda (product) and sim (cost model) implement the
// same ops over Tensors in their own arena. Everything above it is written once.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/arena.h"
#include "engine/disk_file.h"
#include "engine/op_params.h"
#include "engine/op_table.h"
#include "engine/tensor.h"

namespace strata {

class Backend;
// "embedding bf16, rmsnorm bf16, ..., adamw f32, ...": what Backend::supports says, for messages.
std::string support_summary(const Backend& be);

// Host memory for the host tier and disk staging: pinned on cuda (one allocation sized up front),
// plain on cpu. `note` says why it is pageable when pinning failed.
class HostReservation {
 public:
  virtual ~HostReservation() = default;
  virtual std::byte* base() const = 0;
  virtual size_t bytes() const = 0;
  virtual bool pinned() const = 0;
  std::string note;
};

// Sample packing (several examples in one row): attention's segments. `pos` [B*T] i32 holds the
// positions restarting at 0 where each example starts (rope's positions); query i of a row attends
// keys j with i - pos[i] <= j <= i, its own example only. `pairs`: the (query, key) pairs attended
// per head over the batch, sum of L(L+1)/2 over the examples, what the sim prices (it has no data).
struct AttnSegments {
  Tensor pos;  // undefined: one causal sequence a row
  double pairs = 0;
  bool packed() const { return pos.defined(); }
};

// One asynchronous copy between the device and the host.
using CopyTicket = uint64_t;
// The copy streams ("lanes"). Copies on one lane complete in issue order; the two lanes run
// concurrently, so a device -> host stream of copies on one overlaps a host -> device stream on the
// other (the link is full duplex). `main` serves the tiers (slot store, weight pager, optimizer
// uploads); `second` the persistent state's downloads (model/train/optimizer.h).
enum class CopyLane : uint8_t { main, second };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The device tier. All activations, weights, gradients and optimizer state live here.
  virtual Arena& arena() = 0;
  // Which ops (and element types) this backend runs: dispatch says it plainly. The tape checks
  // every op it records against it (an unsupported op fails at record time, naming the op, the
  // value and what the backend runs: support_summary).
  virtual bool supports(OpKind op, DType dtype) const = 0;
  // Activation / weight element type this backend computes in (f32 on cpu, bf16 on cuda).
  virtual DType compute_dtype() const = 0;

  // False where values are discarded (the sim, which accounts for work without computing it): a caller may skip
  // computing values only this backend would receive (a LoRA adapter's random init), still moving them as it would.
  virtual bool holds_values() const { return true; }
  // Data movement between host (plain memory, f32 or i32) and this backend's tensors.
  virtual void upload_f32(Tensor dst, const float* src) = 0;  // converts to dst.dtype
  virtual void download_f32(float* dst, Tensor src) = 0;      // converts from src.dtype
  virtual void upload_i32(Tensor dst, const int32_t* src) = 0;
  // A small tensor read without waiting for the work queued after it: the copy is ordered after every op queued so
  // far, and dst (which must stay valid until then) holds src's values, converted to f32, once
  // wait_queued_downloads() returns. Ops queued after the call may still be running then (a step's update, while the
  // host records the next step's graph). Default: download_f32 now (a backend that runs each op as it is queued).
  virtual void download_f32_queued(float* dst, Tensor src) { download_f32(dst, src); }
  virtual void wait_queued_downloads() {}
  // Whether a training step may return before its last ops ran (Trainer::step, TrainOptions::time_parts): false
  // where every step must end in synchronize() (the cuda backend's op profiler sums its times there, step by step).
  virtual bool steps_may_overlap() const { return true; }
  // Trainable weights' fp32 masters. f32 (cpu): the master is one f32 tensor (also the compute
  // weights). i16 (cuda): the master is split (engine/master_split.h): the bf16 compute weights hold
  // its rounded high half and an i16 tensor `lo` the rest, bit-exact, 2 bytes a weight fewer.
  virtual DType master_dtype() const { return DType::f32; }
  // With master_dtype() == i16: fp32 masters from the host into (lo, hi), and back.
  virtual void upload_master(Tensor lo, Tensor hi, const float* src);
  virtual void download_master(float* dst, Tensor lo, Tensor hi);
  virtual void zero(Tensor t) = 0;
  virtual void fill(Tensor t, float value) = 0;
  // dst = src converted (f32 <-> bf16, round to nearest even), same element count; may not alias.
  // Default: UnsupportedError (the cpu, cuda and sim backends implement it).
  virtual void cast(Tensor dst, Tensor src);
  // The argument checks of cast (Error naming both dtypes and sizes).
  static void check_cast(const Tensor& dst, const Tensor& src);
  // The strided block copy (kernels/block_copy.h) between tensors of one dtype (the compute dtype): out (+)= in's
  // blocks.
  void block_copy(Tensor out, Tensor in, const BlockCopy& c, bool accumulate) {
    check_block_copy(out, in, c);
    run(OpKind::block_copy, {.t = {out, in}, .acc = {accumulate}, .params = &c});
  }
  // The argument checks of block_copy (Error naming the spans and sizes).
  static void check_block_copy(const Tensor& out, const Tensor& in, const BlockCopy& c);
  // Blocks until all queued work finished (a step boundary; never inside a step).
  virtual void synchronize() {}
  // The optimizer's mark that a backward's ops are all issued (Optimizer::end_backward): the sim's phase
  // accounting counts updates before it (an update during backward) as backward time. A no-op elsewhere.
  virtual void backward_ended() {}
  // Timestamps where the compute stream reaches them (a step's boundaries, StepStats::part_s):
  // time_mark() queues one; time_marks_s() waits for the last and returns each mark's seconds after the first,
  // and forgets them. Default: mark_clock_s() at the call (a backend that runs each op as it is queued); cuda: an
  // event on the compute stream.
  virtual void time_mark();
  virtual std::vector<double> time_marks_s();
  // The compute stream as the device API knows it (cudaStream_t on cuda; null elsewhere), for a
  // communicator that orders its collectives after compute (engine/comm.h).
  virtual void* native_stream() { return nullptr; }
  // Device memory in use by the whole process as the driver sees it (cudaMemGetInfo: total -
  // free), beside the arena's own accounting; 0 where there is no such device.
  virtual size_t device_used_bytes() { return 0; }
  // A one-line description of the device ("cpu", "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB").
  virtual std::string device_name() { return std::string(name()); }
  // A block of work an op runs several times alike (ops::mlp_tiled's middle tiles: the same shapes from the same
  // arena state), which a backend that only accounts for work may apply again without running it (the sim: a
  // planner's search runs millions of them). begin_repeat() before one run of the block; end_repeat(times) after
  // it returns true when the backend applied the block `times` more times, exactly as running it would have (the
  // same clock, sums and arena), and false when the caller must run them (the default; and the sim's answer when
  // the block did anything it cannot repeat, or left the arena otherwise than it found it).
  virtual bool begin_repeat() { return false; }
  virtual bool end_repeat(int64_t /*times*/) { return false; }

  // --- transfers for the host and disk tiers (engine/slot_store.h). Copies run on a copy
  // stream, never the compute stream; every hand-off goes through an event.
  // Backends without tiers keep the defaults, which refuse with UnsupportedError.
  // Reserves `bytes` of host memory (pinned where the backend can; else pageable, with a note).
  virtual std::unique_ptr<HostReservation> reserve_host(size_t bytes);
  // Device -> host copy of src on `lane`, ordered after every op queued on the compute stream so far.
  virtual CopyTicket copy_to_host_async(void* host_dst, Tensor src, CopyLane lane = CopyLane::main);
  // Host -> device copy into dst on `lane`, ordered after every op queued so far (dst may be a block
  // the compute stream released a moment ago). Before compute reads dst: copy_wait_compute.
  virtual CopyTicket copy_to_device_async(Tensor dst, const void* host_src, CopyLane lane = CopyLane::main);
  // A finished ticket means every earlier ticket of its lane finished (not the other lane's).
  virtual bool copy_done(CopyTicket t);          // polls, never blocks
  virtual void copy_wait_host(CopyTicket t);     // the host blocks until the copy landed
  virtual void copy_wait_compute(CopyTicket t);  // the compute stream waits; the host does not
  // Copies issued on `lane` from now on start after copy t (of the other lane) landed; neither the
  // compute stream nor the host waits. (Default: copy_wait_compute, correct but it stalls compute.)
  virtual void copy_wait_lane(CopyLane lane, CopyTicket t);
  // The disk tier's file of `bytes` inside `dir`: by default a real UringFile (io_uring, O_DIRECT); the sim
  // backend returns one that moves no bytes and only costs time. IoError naming the path on failure.
  virtual std::unique_ptr<DiskFile> open_disk_file(const std::string& dir, size_t bytes);

  // --- ops. A backward writes each defined gradient output and skips undefined ones. Its
  // `acc_*` flag says how: true adds into the gradient (another op already wrote it this step),
  // false overwrites it (the first write), so nobody zeroes a gradient before backward.
  // The table-dispatched ops (engine/op_table.h STRATA_OPS): one entry point; the named forms below
  // pack their arguments into an OpCall.
  virtual void run(OpKind k, const OpCall& c) = 0;
  void embedding_fwd(Tensor out, Tensor tokens, Tensor wte) { run(OpKind::embedding, {{out, tokens, wte}}); }
  void embedding_bwd(Tensor dwte, Tensor dout, Tensor tokens, bool acc_dwte) {
    run(OpKind::embedding, {{dwte, dout, tokens}, {acc_dwte}, 0, true});
  }
  void rmsnorm_fwd(Tensor out, Tensor rstd, Tensor x, Tensor w, float eps) {
    run(OpKind::rmsnorm, {{out, rstd, x, w}, {}, eps, false});
  }
  void rmsnorm_bwd(Tensor dx, Tensor dw, Tensor dout, Tensor x, Tensor w, Tensor rstd, bool acc_dx, bool acc_dw) {
    run(OpKind::rmsnorm, {{dx, dw, dout, x, w, rstd}, {acc_dx, acc_dw}, 0, true});
  }
  // y [N, O] = x [N, I] w^T; backward: dx (+)= dy w, dw (+)= dy^T x (x undefined for a frozen weight).
  void linear_fwd(Tensor y, Tensor x, Tensor w) { run(OpKind::linear, {{y, x, w}}); }
  void linear_bwd(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, bool acc_dx, bool acc_dw) {
    run(OpKind::linear, {{dx, dw, dy, x, w}, {acc_dx, acc_dw}, 0, true});
  }
  // FP8 (engine/fp8.h): the codes of x [N, C] in format `f` (fp8::Format: 0 E4M3, 1 E5M2), out [N, C] and/or
  // out_t [C, N] u8 (either may be undefined), and its scale block sb (fp8::kScaleFloats f32); with
  // fp8::kScaleGiven in `f`, sb already holds x's block and only the codes are written.
  void fp8_cast(Tensor out, Tensor out_t, Tensor sb, Tensor x, uint8_t f) {
    run(OpKind::fp8_cast, {.t = {out, out_t, sb, x}, .form = f});
  }
  // y [N, O] = x w^T through FP8 GEMMs on E4M3 codes (fp8_cast): x8 [N, I] with its scale block sx, w8 [O, I] with
  // sw. Backward: dy cast to E5M2 in the call; dx (+)= dy w from w's transposed codes w8t [I, O], dw (+)= dy^T x from
  // x's, x8t [I, N] (either side undefined when its gradient is).
  void linear_fp8_fwd(Tensor y, Tensor x8, Tensor sx, Tensor w8, Tensor sw) {
    run(OpKind::linear_fp8, {{y, x8, sx, w8, sw}});
  }
  void linear_fp8_bwd(Tensor dx, Tensor dw, Tensor dy, Tensor x8t, Tensor sx, Tensor w8t, Tensor sw, bool acc_dx,
                      bool acc_dw) {
    run(OpKind::linear_fp8, {{dx, dw, dy, x8t, sx, w8t, sw}, {acc_dx, acc_dw}, 0, true});
  }
  // x [N, H, D] (or [B, T, H, D]) at positions pos [N] i32, frequencies inv_freq [D/2] f32; cos and sin scaled by
  // attention_factor (yarn's and longrope's).
  void rope_fwd(Tensor out, Tensor x, Tensor pos, Tensor inv_freq, float attention_factor = 1.0f) {
    run(OpKind::rope, {{out, x, pos, inv_freq}, {}, attention_factor});
  }
  void rope_bwd(Tensor dx, Tensor dout, Tensor pos, Tensor inv_freq, bool acc_dx, float attention_factor = 1.0f) {
    run(OpKind::rope, {{dx, dout, pos, inv_freq}, {acc_dx}, attention_factor, true});
  }
  // q [B,T,Hq,D], k/v [B,T,Hkv,D], out [B,T,Hq,D], lse [B,Hq,T]; `seg` packed: attention within
  // each example of a row (AttnSegments).
  void attention_fwd(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, const AttnSegments& seg) {
    run(OpKind::attention, {.t = {out, lse, q, k, v, seg.pos}, .pairs = seg.pairs});
  }
  void attention_bwd(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse,
                     bool acc_dq, bool acc_dk, bool acc_dv, const AttnSegments& seg) {
    run(OpKind::attention, {.t = {dq, dk, dv, dout, q, k, v, out, lse, seg.pos},
                            .acc = {acc_dq, acc_dk, acc_dv},
                            .backward = true,
                            .pairs = seg.pairs});
  }
  void swiglu_fwd(Tensor out, Tensor gate, Tensor up) { run(OpKind::swiglu, {{out, gate, up}}); }
  void swiglu_bwd(Tensor dgate, Tensor dup, Tensor dout, Tensor gate, Tensor up, bool acc_dgate, bool acc_dup) {
    run(OpKind::swiglu, {{dgate, dup, dout, gate, up}, {acc_dgate, acc_dup}, 0, true});
  }
  void add_fwd(Tensor out, Tensor a, Tensor b, float scale) { run(OpKind::add, {{out, a, b}, {}, scale, false}); }
  void add_bwd(Tensor da, Tensor db, Tensor dout, float scale, bool acc_da, bool acc_db) {
    run(OpKind::add, {{da, db, dout}, {acc_da, acc_db}, scale, true});
  }
  // A projection's bias: y [N, O] += b [O] in place; db [O] (f32, a parameter gradient) (+)= the
  // column sums of dy [N, O].
  void bias_fwd(Tensor y, Tensor b) { run(OpKind::bias, {{y, b}}); }
  void bias_bwd(Tensor db, Tensor dy, bool acc_db) { run(OpKind::bias, {{db, dy}, {acc_db}, 0, true}); }
  // loss [1] f32 (mean over targets >= 0), lse [N] f32. w [V, C] holds `vocab` <= V real rows; the
  // rest is padding (a vocabulary padded to a GEMM-friendly size): those logits take no part in the
  // softmax (probability 0, gradient 0, so dw's padded rows get exact zeros). A target >= vocab is
  // out of range. The four passes are the op's forms (engine/ops/lm_head_ce.cpp).
  void lm_head_ce_fwd(Tensor loss, Tensor lse, Tensor x, Tensor w, Tensor targets, int chunk, int vocab) {
    run(OpKind::lm_head_ce, {.t = {loss, lse, x, w, targets}, .form = 0, .n = chunk, .n2 = vocab});
  }
  // dloss [1] f32 is the incoming gradient of the loss.
  void lm_head_ce_bwd(Tensor dx, Tensor dw, Tensor dloss, Tensor x, Tensor w, Tensor targets, Tensor lse, int chunk,
                      int vocab, bool acc_dx, bool acc_dw) {
    run(OpKind::lm_head_ce, {.t = {dx, dw, dloss, x, w, targets, lse},
                             .acc = {acc_dx, acc_dw},
                             .backward = true,
                             .form = 1,
                             .n = chunk,
                             .n2 = vocab});
  }
  // The training variant (no logits recompute): the forward, and from each chunk's logits at once
  // the gradients for dL = dloss_assumed * loss: dx [N, C] (x's dtype, overwritten: the op saves it)
  // and dw [V, C] f32 ((+)= by acc_dw; undefined for a frozen head: skipped). Same results as
  // lm_head_ce_fwd then lm_head_ce_bwd with dloss = dloss_assumed and acc_dx false.
  void lm_head_ce_fwd_grad(Tensor loss, Tensor dx, Tensor dw, Tensor x, Tensor w, Tensor targets, int chunk, int vocab,
                           float dloss_assumed, bool acc_dw) {
    run(OpKind::lm_head_ce, {.t = {loss, dx, dw, x, w, targets},
                             .acc = {false, acc_dw},
                             .scalar = dloss_assumed,
                             .form = 2,
                             .n = chunk,
                             .n2 = vocab});
  }
  // Its backward: dx (+)= saved_dx * dloss[0] / dloss_assumed. With dw_written (the forward wrote
  // a weight gradient for dloss_assumed), any other dloss is an error: cpu throws; cuda cannot,
  // so it writes NaN into dx (the gradient norm shows it).
  void lm_head_ce_bwd_saved(Tensor dx, Tensor dloss, Tensor saved_dx, float dloss_assumed, bool dw_written,
                            bool acc_dx) {
    run(OpKind::lm_head_ce, {.t = {dx, dloss, saved_dx},
                             .acc = {acc_dx, dw_written},
                             .scalar = dloss_assumed,
                             .backward = true,
                             .form = 3});
  }
  // logits [N, V] f32 = x w^T (evaluation: no backward).
  void lm_head_logits(Tensor logits, Tensor x, Tensor w) { run(OpKind::lm_head_logits, {{logits, x, w}}); }
  // out [1] f32 += sum of squares of g.
  void grad_norm_sq(Tensor out, Tensor g) { run(OpKind::grad_norm, {{out, g}}); }
  // The list form the trainer calls, over every trainable parameter at once: the same sum as the per-tensor calls
  // in order (a backend may launch once per many tensors).
  void grad_norm_sq_list(Tensor out, const std::vector<Tensor>& gs) {
    run(OpKind::grad_norm, {.t = {out}, .form = 1, .tensors = gs});
  }
  // ZeRO-2's global norm (model/train/optimizer.h). `parts` [2 * n] i32 holds n partial squared norms of 8 bytes each
  // in the backend's own representation, all-zero bits meaning 0: grad_norm_sq_part adds g's sum of squares into part
  // k; grad_norm_sq_add_parts adds parts 0..n-1, in order, into out [1] f32 with grad_norm_sq's arithmetic. Parts each
  // formed on one rank and summed over the ranks as i32 words (one nonzero word a slot: exact for any bits) give
  // out as grad_norm_sq_list over the same gradients in the same order would, on cpu bit for bit (a part is the
  // double grad_norm_sq adds); cuda keeps an f32 in a part's first word, as its kernels accumulate in fp32.
  void grad_norm_sq_part(Tensor parts, size_t k, Tensor g) {
    check_norm_parts(parts, k);
    run(OpKind::grad_norm, {.t = {parts, g}, .form = 2, .n = int64_t(k)});
  }
  void grad_norm_sq_add_parts(Tensor out, Tensor parts, size_t n) {
    if (n == 0) return;
    check_norm_parts(parts, n - 1);
    run(OpKind::grad_norm, {.t = {out, parts}, .form = 3, .n = int64_t(n)});
  }
  static void check_norm_parts(const Tensor& parts, size_t k);  // Error unless parts is i32 with a part k
  // One AdamW step of one tensor (engine/op_params.h AdamWSlot). The clip scale min(1, max_norm / sqrt(norm_sq)) is
  // formed from the device scalar norm_sq, so clipping never forces a host sync.
  using AdamWSlot = strata::AdamWSlot;
  void adamw_step(const AdamWSlot& s, Tensor norm_sq, float max_norm, const AdamWParams& p, int t) {
    run(OpKind::adamw, {.t = {norm_sq}, .scalar = max_norm, .n = t, .params = &p, .slots = {&s, 1}});
  }
  // Over every trainable parameter at once: the same results as the per-tensor calls in order (a backend may
  // launch once per many tensors; every slot of one call shares one state precision).
  void adamw_step_list(const std::vector<AdamWSlot>& slots, Tensor norm_sq, float max_norm, const AdamWParams& p,
                       int t) {
    run(OpKind::adamw, {.t = {norm_sq}, .scalar = max_norm, .form = 1, .n = t, .params = &p, .slots = slots});
  }

  // The accumulating forms of two backward ops (strata-calibrate times these).
  void linear_bwd(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w) { linear_bwd(dx, dw, dy, x, w, true, true); }
  void attention_bwd(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out,
                     Tensor lse) {
    attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, true, true, true, AttnSegments{});
  }

 protected:
  // The clock the default time marks read, in seconds: the host's steady clock (sim: its model clock).
  virtual double mark_clock_s() const;

 private:
  std::vector<double> marks_;  // the default time_mark's: mark_clock_s() at each
};

std::unique_ptr<Backend> make_cpu_backend(size_t arena_budget_bytes);

}  // namespace strata
