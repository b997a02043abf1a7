// The Llama family (Llama, Mistral, Qwen2, Qwen3: io::Arch) on the tape: parameters in the device arena (fp32 master
// weights, gradients and Adam moments for trainable ones, or lower per ModelOptions::recipe), weights from Hugging Face
// checkpoints, LoRA adapters with the base frozen, and the forward graph recorded per batch.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/state_recipe.h"
#include "engine/tape.h"
#include "engine/weight_pager.h"
#include "io/hf_config.h"
#include "model/llama/seq_parallel.h"
#include "model/llama/zero.h"

namespace strata {

struct LoraConfig {
  int rank = 0;  // 0: no adapters
  float alpha = 16.0f;
  std::vector<std::string> target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  uint64_t seed = 0;
  bool enabled() const { return rank > 0; }
  float scale() const { return alpha / float(rank); }
};

// The vocabulary padding multiple every config and forecast defaults to (ModelOptions::pad_vocab_multiple).
inline constexpr int kDefaultPadVocabMultiple = 64;

struct ModelOptions {
  bool train_base = true;    // full finetune; false freezes the base weights (LoRA or frozen-base)
  bool train_norms = false;  // with train_base false: the RMSNorm weights still train (adapter-style)
  LoraConfig lora;
  int loss_chunk_tokens = 512;  // rows of logits alive at once in the fused LM head + loss
  // `pad_vocab_multiple`: the embedding and the LM head (tied or not) hold round_up(vocab_size, N) rows
  // in memory, so the LM head's GEMMs run on a GEMM-friendly shape (32001 or 50257 tokens are slow).
  // The rows past vocab_size are zero, take no part in the softmax, get zero gradients (so AdamW keeps
  // them zero) and are never saved or shown: files and logits have vocab_size rows. 1: no padding.
  int pad_vocab_multiple = kDefaultPadVocabMultiple;
  // Training steps form the LM head's gradients in its forward, from the logits it computes anyway
  // (ops::lm_head_ce's grad_in_forward): backward recomputes no logits. false: the recomputing path.
  bool loss_grad_in_forward = true;
  // `mlp_tiles`: > 1 runs each layer's MLP over that many row tiles of its [B*T, C] input
  // (ops::mlp_tiled), so only one tile's gate, up and activation exist at once, in forward and in
  // backward (which recomputes them per tile). 1: the untiled graph (gate, up, act are slot classes).
  int mlp_tiles = 1;
  // `fp8`: the layers' projections whose shapes allow it (ops::fp8_shape_ok) run their GEMMs in FP8
  // (ops::linear_fp8): each projection input's E4M3 codes are one fp8_cast node shared by the projections reading it
  // (slot classes "<input class>.fp8", ".fp8t" and ".fp8.scale"), each weight's one more ("<projection
  // class>.wfp8", ".wfp8t", ".wfp8.scale": cast once a pass, the transpose kept for backward or cast again as the
  // plan says); LoRA's adapters and the LM head stay in bf16.
  bool fp8 = false;
  // `layer_offloading`: the per-layer weight matrices (not norms, biases or adapters) live in host
  // memory and are paged through two device slots by a WeightPager, frozen or trainable (full
  // fine-tune). A trainable paged weight's compute copy is its host block: the optimizer streams it
  // like host-tier state and writes the update back there (model/train/optimizer.h); its master, moments
  // and gradient stay on the tiers state_plan gives them. Not with zero_stage 1, 2 or 3 (a full fine-tune).
  bool page_layers = false;
  // Where each trainable parameter's persistent state lives: Plan::decide_state on the classes
  // "<group>.w.master", "<group>.grad", "<group>.adam.m", "<group>.adam.v" (Parameter::group).
  // Only the state table is read; the activation plan is the Trainer's.
  Plan state_plan;
  // The disk tier's directory (TierOptions::offload_dir, the YAML's offload_dir; "" = $TMPDIR or
  // /tmp): state classes on disk live in one file there (Backend::open_disk_file: io_uring, O_DIRECT,
  // nameless, so nothing is left behind), created with the model at its full size.
  std::string state_dir;
  // The state's precision (master_weights, optimizer_state, gradients; engine/state_recipe.h).
  StateRecipe recipe;
  // ZeRO (model/llama/zero.h): with stage 1 or 2 and several ranks, this rank allocates the moments and the
  // master (low half) of the trainable parameters it owns only, and with stage 2 their gradients only
  // (grad_transient); with stage 3 the layers' matrices' weights of the parameters it owns only, the others
  // gathered per layer by a WeightPager (Parameter::weights_sharded). Needs state_offloading none, no LoRA;
  // stage 3 also a full fine-tune (train_base) and no layer_offloading.
  ZeroOptions zero;
};

struct Parameter {
  std::string name;      // Hugging Face / PEFT name
  Shape shape;           // in memory: the embedding and the LM head include pad_rows (ModelOptions::pad_vocab_multiple)
  int64_t pad_rows = 0;  // trailing rows of `shape` that are vocabulary padding: zero, never saved
  // The shape in checkpoint files ([vocab_size, C] for a padded embedding or head), and its element count.
  Shape file_shape() const {
    Shape s = shape;
    s.d[0] -= pad_rows;
    return s;
  }
  int64_t file_numel() const { return file_shape().numel(); }
  bool trainable = false;
  bool is_lora = false;
  // fp32 weights (also the compute weights on cpu). On cuda, trainable only, and split: `compute`
  // holds the high half, this the i16 low half (engine/master_split.h).
  Buffer master;
  Buffer compute;           // the weights in the backend's compute dtype (bf16 on cuda); empty on cpu
  Buffer grad;              // trainable only: fp32, or bf16 with the recipe's gradients: bf16 (grad_dtype())
  Buffer m, v;              // AdamW moments, trainable only, in ModelOptions::recipe's precision (f32, bf16, u8)
  Buffer m_scale, v_scale;  // 8-bit moments: f32 [quant_blocks(numel)]
  int page = -1;            // index in the model's WeightPager when the weight is paged
  // Then: its fixed view into the pager's device slot (layer % 2), and no compute buffer (nor an fp32
  // one where the compute dtype is f32): the pager's host block holds its weights. A trainable one keeps
  // the rest of its state (the i16 low half of a split master, moments, gradient) on its tiers.
  Tensor paged;
  std::string group;  // its state classes' group: "L<layer>", "embed", "head" or "final_norm"
  // State on the host tier: byte offsets into the model's state reservation (kDevice: on the device,
  // in the buffer above). The master there is f32 where the compute dtype is f32 (the device then
  // holds the compute copy in `compute`), else the i16 low half. A moment there takes
  // moment_bytes(recipe.moments, numel): 8-bit codes, then their scales at moment_scale_offset(numel).
  static constexpr size_t kDevice = SIZE_MAX;
  size_t host_master = kDevice, host_m = kDevice, host_v = kDevice, host_grad = kDevice;
  // State on the disk tier: byte offsets into the model's state file (4 KiB-aligned), laid out as on
  // the host except that an 8-bit moment's scales start at disk_scale_offset(numel) (a page boundary).
  // Gradients have no disk tier.
  size_t disk_master = kDevice, disk_m = kDevice, disk_v = kDevice;
  // ZeRO-1/2 (ModelOptions::zero): the rank that holds its optimizer state and updates it (-1: every
  // rank, unsharded). `state_here`: this rank holds it; elsewhere m, v and the master's low half (and
  // with stage 2 the gradient) are empty and its weights come from the owner's broadcast after each step.
  int owner = -1;
  bool state_here = true;
  // ZeRO-3 (ModelOptions::zero, stage 3 over several ranks): a layer matrix whose weights only its owner holds
  // (resident in master/compute there, the pager's gather sends from them); elsewhere it is paged (page, paged:
  // a view into the gathering pager's slot) and holds nothing between a layer's uses.
  bool weights_sharded = false;
  bool gathered() const { return weights_sharded && !state_here; }
  bool state_on_host() const {
    return host_master != kDevice || host_m != kDevice || host_v != kDevice || host_grad != kDevice;
  }
  bool state_on_disk() const { return disk_master != kDevice || disk_m != kDevice || disk_v != kDevice; }
  // Some of its state is off the device (host or disk), or it is a trainable paged weight (its
  // weights are in the pager's host block): the optimizer streams it (model/train/optimizer.h).
  bool state_streamed() const {
    return state_on_host() || state_on_disk() || (trainable && page >= 0 && !weights_sharded);
  }
  // Where an 8-bit moment's scales start in its disk array: after its codes, page-aligned.
  static size_t disk_scale_offset(size_t numel) { return (numel + 4095) / 4096 * 4096; }
  Tensor value() const { return paged.defined() ? paged : compute.allocated() ? compute.view() : master.view(); }
  Tensor grad_view() const { return grad.allocated() ? grad.view() : Tensor(); }
};

struct ForwardIds {
  VId loss = -1;
  VId final_hidden = -1;  // final-norm output, the LM head's input
};

class LlamaModel {
 public:
  LlamaModel(Backend& be, const io::LlamaConfig& cfg, ModelOptions opt);

  // Loads every base weight from a Hugging Face checkpoint directory; errors name the file and tensor.
  // drop_file_cache: then the file's pages leave the page cache (io::Checkpoint::release), for a process that alone
  // reads it on its host (other ranks there may still be reading it from the cache).
  void load(const std::string& dir, bool drop_file_cache = false);
  // Deterministic random init of the base weights (HF-like: normal(0, 0.02), norms at 1).
  void init_random(uint64_t seed);

  // Records one batch: tokens/targets/pos are [B*T] i32 device tensors. `training`: backward will
  // follow this forward, so the loss may write gradients in forward (never for evaluation).
  // `packed_pairs` > 0: the rows are packed (sample packing): pos restarts at 0 where each example
  // starts and attention stays within each example; the value is AttnSegments::pairs.
  // Sequence parallelism (`sp` over n > 1 ranks, model/llama/seq_parallel.h): T is the whole rows' length and
  // tokens/targets/pos hold this rank's [B*T/n] share (pos: their positions in the row or example); packed rows
  // also give every token's position in sp.packed_pos [B*T] for attention.
  ForwardIds build(Tape& tape, Tensor tokens, Tensor targets, Tensor pos, int B, int T, bool training = false,
                   double packed_pairs = 0, const SeqShard& sp = {});
  // Logits [N, V] of a retained final-hidden value (evaluation and golden tests).
  void logits(Tape& tape, VId final_hidden, Tensor out);
  // The rope table for a batch of length `seq_len` (its largest position + 1): dynamic and longrope pick theirs
  // from it as transformers' dynamic_rope_update does (dynamic keeps the longest length seen above
  // max_position_embeddings until a batch shorter than max_position_embeddings resets it). Uploads only a changed
  // table, ordered after the work already queued; call before recording the batch.
  void set_rope_length(int seq_len);
  // Whether set_rope_length can change the table (rope type dynamic or longrope).
  bool rope_follows_length() const;

  // Writes config.json + model.safetensors (base weights, fp32), atomically. `fp32_of`, where given, may
  // supply a parameter's fp32 weights into host [numel] (returning true) instead of this rank's copy
  // (a ZeRO-1 checkpoint: the low halves of the masters other ranks own come from their shards).
  using Fp32Source = std::function<bool(const Parameter&, float*)>;
  void save(const std::string& dir, const Fp32Source& fp32_of = {}) const;
  // Writes adapter_config.json + adapter_model.safetensors in PEFT's layout.
  void save_lora(const std::string& dir, const std::string& base_model_path) const;

  const io::LlamaConfig& config() const { return cfg_; }
  // The rows of the embedding and the LM head in memory: vocab_size rounded up to pad_vocab_multiple.
  int64_t padded_vocab() const { return padded_vocab_; }
  const ModelOptions& options() const { return opt_; }
  // The trainable parameters' gradient dtype on every tier (ModelOptions::recipe's gradients): f32 or bf16.
  DType grad_dtype() const { return strata::grad_dtype(opt_.recipe); }
  std::vector<Parameter>& params() { return params_; }
  const std::vector<Parameter>& params() const { return params_; }
  Parameter* find(const std::string& name);
  // Parameter counts as in the checkpoint files (vocabulary padding excluded).
  size_t trainable_count() const;
  size_t param_count() const;
  // The weight pager when options().page_layers, or the gathering one of ZeRO-3 (the Trainer drives it), else null.
  WeightPager* pager() { return pager_.get(); }
  const WeightPager* pager() const { return pager_.get(); }
  // Some trainable weight is paged (a full fine-tune with layer_offloading): its updates go to the
  // pager's host block, so the optimizer does not defer them and empties the pager's slots first.
  bool pages_trainable() const {
    for (const Parameter& p : params_)
      if (p.trainable && p.page >= 0 && !p.weights_sharded) return true;
    return false;
  }
  // The same pager as a weak handle: a Trainer that outlives its model finds it gone, never dangling.
  std::weak_ptr<WeightPager> pager_handle() const { return pager_; }
  // Host-tier persistent state (ModelOptions::state_plan): one reservation, pinned where the backend
  // can. host_state(off) is null on the sim backend (no bytes).
  size_t state_host_bytes() const { return state_host_ ? state_host_->bytes() : 0; }
  bool state_host_pinned() const { return state_host_ && state_host_->pinned(); }
  std::string state_host_note() const { return state_host_ ? state_host_->note : std::string(); }
  // Some trainable parameter's gradient lives on the host tier (a fresh device block each backward).
  bool grads_on_host() const {
    for (const Parameter& p : params_)
      if (p.trainable && p.host_grad != Parameter::kDevice) return true;
    return false;
  }
  std::byte* host_state(size_t off) const {
    return state_host_ && state_host_->base() ? state_host_->base() + off : nullptr;
  }
  // Disk-tier persistent state (ModelOptions::state_plan, `disk` decisions): one file of
  // state_disk_bytes(), created with the model (IoError naming the disk tier, the classes, the bytes
  // and the directory when it cannot be: a disk too small fails here, not mid-run), gone with it.
  // Null when no class is on disk. The optimizer streams through it (model/train/optimizer.h).
  DiskFile* state_disk() const { return state_disk_.get(); }
  size_t state_disk_bytes() const { return state_disk_bytes_; }
  // Synchronous reads and writes of `bytes` at `off` (4 KiB-aligned, an array's start) of the state
  // file through an aligned bounce buffer (initialisation, checkpoints; never in a step). `cls` names
  // the state class in errors: IoError naming the disk tier, the class and the file.
  void read_state_disk(size_t off, void* dst, size_t bytes, const std::string& cls) const;
  void write_state_disk(size_t off, const void* src, size_t bytes, const std::string& cls) const;
  // The master's bytes (fp32, or a split master's low halves) to wherever p's master lives off the device: its
  // host-tier block and/or its place in the state file; nothing when it is on the device.
  void write_master_off_device(const Parameter& p, const void* src, size_t bytes) const;
  // The IoError of a failed state-file request: the disk tier, `what` (the classes), the file, `err`.
  [[noreturn]] void throw_state_disk_error(const std::string& what, bool write, const std::string& err) const;
  // ZeRO-2 (ModelOptions::zero, stage 2 over several ranks): a trainable parameter another rank owns, whose gradient
  // this rank holds only from its first write in backward until its reduce to the owner (model/train/optimizer.h).
  bool grad_transient(const Parameter& p) const { return p.trainable && opt_.zero.shards_grads() && !p.state_here; }
  // ZeRO-3: the fp32 weights of parameters other ranks own, gathered for a save on every rank together
  // (Optimizer::gather_masters); `host[i]` for params()[i] (empty: not gathered). Cleared by the next step.
  void set_gathered_fp32(std::vector<std::vector<float>> host) { gathered_fp32_ = std::move(host); }
  void clear_gathered_fp32() { gathered_fp32_.clear(); }
  // The layer of a Hugging Face name "model.layers.<i>...." or -1.
  static int layer_of_param(const std::string& name);
  // Updates the trainer left pending (the optimizer defers host-tier updates to the next forward,
  // model/train/optimizer.h) are applied before the weights or the state are read or replaced: save,
  // save_lora, load and checkpoints call this; so must any other reader of Parameter values.
  void sync_state() const {
    if (state_sync_) state_sync_();
  }
  // The optimizer registers its flush here, and what to call if the model goes first (nulls to
  // unregister): a Trainer may outlive its model.
  void set_state_sync(std::function<void()> flush, std::function<void()> on_model_gone) {
    state_sync_ = std::move(flush);
    on_gone_ = std::move(on_model_gone);
  }
  ~LlamaModel() {
    if (on_gone_) on_gone_();
  }
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

 private:
  int add_param(std::string name, Shape shape, bool trainable, bool is_lora, int page = -1, int owner = -1);
  void place_state(Parameter& p, size_t& host_bytes, size_t& disk_bytes);
  void open_state_disk(size_t bytes);
  void set_weights(Parameter& p, const float* host);
  // A trainable paged weight: its compute dtype's bits into the pager's host block, a split master's low
  // half onto its tier.
  void set_paged_weights(Parameter& p, const float* host);
  // A trainable weight on a low-precision backend with an fp32 master: compute copy + i16 low half.
  bool split_master_of(const Parameter& p) const;
  // The fp32 weights of a parameter (joined from a split master; a frozen paged one: save reads the
  // pager) into host [numel].
  void download_master(const Parameter& p, float* host) const;
  // The projection `module` ("q_proj", ...) of `layer`, with its bias and LoRA adapter where they exist.
  VId proj(Tape& t, VId x, int layer, const std::string& module, const std::string& cls);
  // fp8: the E4M3 codes of a projection input or weight, recorded once per tensor and tape as class `cls` (the build
  // clears them).
  const ops::Fp8Codes& fp8_codes(Tape& t, VId x, bool transpose, const std::string& cls);
  std::map<VId, ops::Fp8Codes> fp8_codes_;
  VId pid(Tape& t, const std::string& name);

  Backend& be_;
  io::LlamaConfig cfg_;
  ModelOptions opt_;
  std::vector<Parameter> params_;
  std::unordered_map<std::string, int> param_index_;  // name -> params_ index (find, once per projection a build)
  int64_t padded_vocab_ = 0;
  Buffer inv_freq_;              // [head_dim/2] f32
  float rope_attention_ = 1.0f;  // yarn's and longrope's factor on cos and sin
  int rope_len_ = 0;             // the RopeTableKey::seq_len inv_freq_ holds
  void upload_rope_table();
  std::shared_ptr<WeightPager> pager_;
  std::unique_ptr<HostReservation> state_host_;
  std::unique_ptr<DiskFile> state_disk_;
  size_t state_disk_bytes_ = 0;
  // The synchronous state-file transfers' bounce buffer (kBounceBytes, page-aligned for O_DIRECT),
  // made at the first use; `bounce_zero_`: it holds zeros (a zero write needs no fill).
  static constexpr size_t kBounceBytes = size_t(8) << 20;
  mutable std::vector<std::byte> bounce_;
  mutable bool bounce_zero_ = false;
  std::byte* bounce(bool zeroed) const;
  std::function<void()> state_sync_, on_gone_;
  std::vector<std::vector<float>> gathered_fp32_;
};

// Hugging Face names of the base weights for a config, in checkpoint order, with their shapes in the files.
std::vector<std::pair<std::string, Shape>> llama_weight_shapes(const io::LlamaConfig& c);
// Whether `plan`'s state placement sends some weight's gradient of a model shaped `c` off the device
// (state_offloading: all, a state_plan moving '*.grad' there): its state classes as LlamaModel places them.
bool plan_moves_grads_off_device(const Plan& plan, const io::LlamaConfig& c);
// vocab rounded up to a multiple of `multiple` (ModelOptions::pad_vocab_multiple; ConfigError unless 1..65536).
int64_t padded_vocab(int64_t vocab, int multiple);

}  // namespace strata
