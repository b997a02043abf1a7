#include "model/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <numeric>

#include "model/train/grad_accum.h"

namespace strata {

Trainer::Trainer(Backend& be, LlamaModel& model, TrainOptions opt)
    : be_(be), model_(model), opt_(std::move(opt)), optimizer_(be, model, opt_.optimizer), tape_(be) {
  if (opt_.plan.sync_transfers) opt_.tiers.synchronous = true;
  store_ = std::make_unique<SlotStore>(be_, opt_.tiers);
  tape_.set_store(store_.get());
  optimizer_.install(tape_);
  if (opt_.seq_comm && opt_.seq_comm->world() > 1) check_seq_parallel();
  optimizer_.set_comm(opt_.comm);
  if (const ZeroOptions& z = model_.options().zero;
      z.sharded() && (!opt_.comm || opt_.comm->world() != z.world || opt_.comm->rank() != z.rank))
    STRATA_THROW(ConfigError,
                 fmt::format("zero_stage {}: the model shards its optimizer state as rank {} of {}, but the trainer's "
                             "communicator is {}",
                             z.stage, z.rank, z.world,
                             opt_.comm ? fmt::format("rank {} of {}", opt_.comm->rank(), opt_.comm->world()) : "none"),
                 "train options", "zero_stage");
  // A model that pages its layers is driven from this tape's node hook.
  pager_ = model_.pager_handle();
  if (auto pager = pager_.lock()) {
    pager->install(tape_);
    if (pager->gathers()) pager->set_comm(opt_.comm);  // ZeRO-3: layers gathered over the data-parallel ranks
  }
}

void Trainer::check_seq_parallel() {
  Communicator& sp = *opt_.seq_comm;
  if (!opt_.comm) opt_.comm = &sp;  // sequence parallel over the whole world
  const int n = sp.world(), world = opt_.comm->world();
  if (world % n != 0 || opt_.comm->rank() % n != sp.rank())
    STRATA_THROW(ConfigError,
                 fmt::format("sequence_parallel {}: the group's rank {} is not world rank {} of {} in groups of "
                             "consecutive ranks (the world must be a multiple of {}: data-parallel groups x {})",
                             n, sp.rank(), opt_.comm->rank(), world, n, n),
                 "train options", "sequence_parallel");
  seq_parallel_kv_heads(model_.config(), n);  // UnsupportedError naming the heads
}

Trainer::~Trainer() {
  // Reads nothing of the model, which may be gone already (its pager then detached itself).
  if (auto pager = pager_.lock(); pager && pager->installed_on(tape_)) {
    pager->detach();
    pager->set_comm(nullptr);
  }
}

double packed_pairs(const Batch& b) {
  if (b.positions.empty()) return 0;
  STRATA_CHECK(int64_t(b.positions.size()) == int64_t(b.B) * b.T, "batch: positions size != B*T");
  double pairs = 0;
  for (int r = 0; r < b.B; ++r) {
    const int32_t* p = b.positions.data() + size_t(r) * size_t(b.T);
    int64_t run = 0;  // tokens of the example so far
    for (int i = 0; i < b.T; ++i) {
      if (p[i] != 0 && p[i] != (i > 0 ? p[i - 1] + 1 : 0))
        STRATA_THROW(ConfigError,
                     fmt::format("batch: position {} at row {} index {} neither starts an example (0) nor follows "
                                 "the previous one",
                                 p[i], r, i),
                     "batch", "positions");
      run = p[i] == 0 ? 1 : run + 1;
      pairs += double(run);  // query i attends the run's keys so far
    }
  }
  return pairs;
}

long Trainer::counted(const Batch& b) const {
  if (seq_parallel() > 1) return seq_slice_targets(b, seq_rank(), seq_parallel());
  if (b.zeros) return long(b.targets.size());  // every target is 0: each counts
  return long(std::count_if(b.targets.begin(), b.targets.end(), [](int32_t x) { return x >= 0; }));
}

void Trainer::upload(const Batch& b) {
  const int64_t n = int64_t(b.B) * b.T;
  STRATA_CHECK(int64_t(b.inputs.size()) == n && int64_t(b.targets.size()) == n, "batch: inputs/targets size != B*T");
  const int V = model_.config().vocab_size;
  // One branch-free pass (it vectorizes: a forecast uploads up to 2^25 tokens a step), then the index.
  bool bad = false;
  if (!b.zeros)
    for (int64_t i = 0; i < n; ++i) bad |= (uint32_t(b.inputs[size_t(i)]) >= uint32_t(V)) | (b.targets[size_t(i)] >= V);
  for (int64_t i = 0; bad && i < n; ++i)
    if (b.inputs[size_t(i)] < 0 || b.inputs[size_t(i)] >= V || b.targets[size_t(i)] >= V)
      STRATA_THROW(ConfigError, fmt::format("batch: token id at index {} is outside [0, vocab_size={})", i, V), "batch",
                   "tokens");
  pairs_ = packed_pairs(b);
  rope_len_ = 0;
  if (model_.rope_follows_length())  // transformers decides from the batch's largest position
    rope_len_ = b.positions.empty() ? b.T : *std::max_element(b.positions.begin(), b.positions.end()) + 1;
  // The batch's blocks: this rank's tokens, in blocks of TrainOptions::batch_tokens (kept from step to step,
  // so every batch length leaves the arena as the forecast does) or of this batch's size.
  const int sp = seq_parallel();
  const int64_t m = sp > 1 ? n / sp : n;
  const int64_t cap = std::max<int64_t>(m, opt_.batch_tokens / sp);
  const bool fresh =
      !tokens_.allocated() || (opt_.batch_tokens ? tokens_.view().numel() < m : tokens_.view().numel() != m);
  if (fresh) {
    tokens_.reset();
    targets_.reset();
    pos_.reset();
    tokens_ = Buffer(be_.arena(), DType::i32, Shape{cap}, "batch.tokens");
    targets_ = Buffer(be_.arena(), DType::i32, Shape{cap}, "batch.targets");
    pos_ = Buffer(be_.arena(), DType::i32, Shape{cap}, "batch.positions");
  }
  auto prefix = [](const Buffer& buf, int64_t k) { return Tensor(buf.view().data, DType::i32, Shape{k}); };
  tok_ = prefix(tokens_, m);
  tgt_ = prefix(targets_, m);
  posv_ = prefix(pos_, m);
  if (sp > 1) {
    // This rank's T/sp tokens of each row, with their positions in the row (or example); attention's segments
    // need every token's (packed rows).
    slice_ = seq_slice_shared(b, seq_rank(), sp);
    const SeqSlice& sl = *slice_;
    if (!b.positions.empty()) {
      if (!rows_pos_.allocated() || rows_pos_.view().numel() < n ||
          (!opt_.batch_tokens && rows_pos_.view().numel() != n)) {
        rows_pos_.reset();
        rows_pos_ = Buffer(be_.arena(), DType::i32, Shape{std::max<int64_t>(n, opt_.batch_tokens)}, "batch.positions");
      }
      rows_posv_ = prefix(rows_pos_, n);
      uploads_.push_back({rows_posv_, b.positions.data()});
    } else {
      rows_pos_.reset();
      rows_posv_ = Tensor();
    }
    uploads_.push_back({posv_, sl.positions.data()});
    pos_packed_ = true;  // not 0..T-1 a row: an unsharded batch after this one uploads its own
    uploads_.push_back({tok_, sl.inputs.data()});
    uploads_.push_back({tgt_, sl.targets.data()});
    return;
  }
  if (!b.positions.empty()) {
    uploads_.push_back({posv_, b.positions.data()});
    pos_packed_ = true;
  } else if (fresh || pos_packed_ || pos_len_ != b.T || pos_n_ != n) {  // pos_ holds other rows' positions
    // 0..T-1 a row, row by row: no division per token (a forecast's Trainer is new each sim run, and at 524,288
    // tokens a `%` per token was a fifth of a planner search), and no zeroing before the fill.
    // A backend that holds no data (the sim: its arena has no memory) copies none: nothing to form.
    if (posv_.data) {
      pos_host_.reset(new int32_t[size_t(n)]);
      for (int r = 0; r < b.B; ++r)
        std::iota(pos_host_.get() + size_t(r) * size_t(b.T), pos_host_.get() + size_t(r + 1) * size_t(b.T), 0);
    }
    uploads_.push_back({posv_, pos_host_.get()});
    pos_packed_ = false;
    pos_len_ = b.T;
    pos_n_ = n;
  }
  uploads_.push_back({tok_, b.inputs.data()});
  uploads_.push_back({tgt_, b.targets.data()});
}

void Trainer::send_uploads() {
  if (rope_len_ > 0) model_.set_rope_length(rope_len_);
  for (const auto& [dst, src] : uploads_) be_.upload_i32(dst, src);
  uploads_.clear();
  slice_.reset();
  pos_host_.reset();
}

const char* step_part_name(StepPart p) {
  static const char* const names[kStepParts] = {"setup", "forward", "backward", "optimizer"};
  return names[int(p)];
}

void Trainer::mark(StepPart p) {
  if (!timing_) return;
  be_.time_mark();
  part_marks_.push_back(p);
}

void Trainer::run(const Batch& b, bool with_backward, std::vector<float>* logits, float* loss) {
  mark(StepPart::setup);
  struct Unsent {  // a step that throws before its uploads leaves none for the next
    Trainer& t;
    ~Unsent() {
      t.uploads_.clear();
      t.slice_.reset();
      t.pos_host_.reset();
    }
  } unsent{*this};
  upload(b);
  TapeGuard guard(tape_);  // no slot outlives the step, also when it throws
  // Nor a paged layer or a host-tier gradient's block: nothing is in flight after the step.
  struct Reset {
    WeightPager* p;
    Optimizer& o;
    int uncaught = std::uncaught_exceptions();
    ~Reset() {
      if (p) p->reset();
      if (std::uncaught_exceptions() > uncaught) o.reset();  // a step that completed has nothing left
    }
  } reset{model_.pager(), optimizer_};
  const SeqShard sp{opt_.seq_comm, rows_posv_};
  ForwardIds ids = model_.build(tape_, tok_, tgt_, posv_, b.B, b.T, with_backward, pairs_, sp);
  // The previous step's deferred updates land as forward reaches each parameter (model/train/optimizer.h);
  // one of a parameter this graph does not read lands now, before its gradient is zeroed below.
  optimizer_.before_forward();
  tape_.apply_plan(with_backward ? opt_.plan : Plan::keep_everything());
  const Tape::TierBytes tb = tape_.tier_bytes();
  if (tb.host || tb.disk) store_->prepare(tb.host, tb.disk, tb.largest_disk);
  if (logits) tape_.retain(ids.final_hidden);
  // Backward overwrites each recorded parameter's gradient (or zeroes it); only a trainable one
  // this graph does not use needs zeroing here.
  if (with_backward) {
    optimizer_.begin_step();
    for (auto& p : model_.params()) {
      if (!p.trainable || tape_.has_param(p.name)) continue;
      if (p.host_grad == Parameter::kDevice) {
        if (p.grad.allocated()) be_.zero(p.grad.view());  // ZeRO-2: another rank's has none here
      } else if (std::byte* h = model_.host_state(p.host_grad))
        std::memset(h, 0, size_t(p.shape.numel()) * dtype_size(model_.grad_dtype()));  // no copy reads it now
    }
  }
  // The batch goes up only now: a copy waits for the device (its host array may go after), and recording the graph
  // above overlaps the previous step's update still running there (step()).
  send_uploads();
  mark(StepPart::forward);
  tape_.forward();
  if (logits) {
    const int64_t n = tok_.numel(), V = model_.config().vocab_size;  // this rank's tokens under sp
    Buffer out(be_.arena(), DType::f32, Shape{n, V}, "eval.logits");
    model_.logits(tape_, ids.final_hidden, out.view());
    logits->resize(size_t(n * V));
    be_.download_f32(logits->data(), out.view());
  }
  if (with_backward) {
    last_.saved_bytes = tape_.stats().saved_bytes_at_end_of_forward;
    if (update_in_backward_) {
      optimizer_.begin_update_in_backward(update_in_backward_->first, update_in_backward_->second);
      update_in_backward_.reset();
    }
    mark(StepPart::backward);
    tape_.backward();
    optimizer_.end_backward();
    last_.recomputed_nodes = tape_.stats().recomputed_nodes;
  }
  be_.download_f32_queued(loss, tape_.tensor(ids.loss));
}

float Trainer::run_now(const Batch& b, bool with_backward, std::vector<float>* logits) {
  float loss = 0.0f;
  run(b, with_backward, logits, &loss);
  be_.wait_queued_downloads();
  return loss;
}

std::vector<PlanRow> Trainer::plan_table(int B, int T) {
  Batch b;
  b.B = B;
  b.T = T;
  b.inputs.assign(size_t(B) * T, 0);
  b.targets.assign(size_t(B) * T, 0);
  upload(b);
  send_uploads();
  TapeGuard guard(tape_);
  // A training step's slots.
  model_.build(tape_, tok_, tgt_, posv_, B, T, true, 0, SeqShard{opt_.seq_comm, Tensor()});
  tape_.apply_plan(opt_.plan);
  std::vector<PlanRow> rows;
  for (auto& v : tape_.values()) {
    if (v.external || !v.saved()) continue;
    std::string cls = v.cls;
    if (cls.size() > 1 && cls[0] == 'L' && std::isdigit(static_cast<unsigned char>(cls[1]))) {
      size_t dot = cls.find('.');
      cls = "L*" + (dot == std::string::npos ? std::string() : cls.substr(dot));
    }
    auto it = std::find_if(rows.begin(), rows.end(), [&](const PlanRow& r) { return r.cls == cls; });
    if (it == rows.end()) {
      rows.push_back({cls, decision_name(v.decision), 0, 0});
      it = rows.end() - 1;
    } else if (it->decision != decision_name(v.decision)) {
      it->decision = "mixed";
    }
    it->bytes += size_t(v.shape.numel()) * dtype_size(v.dtype);
    it->count++;
  }
  return rows;
}

std::array<float, 2> Trainer::all_reduce_host(const float (&v)[2], Communicator* c) {
  if (!c) c = opt_.comm;
  Buffer b(be_.arena(), DType::f32, Shape{2}, "comm.scalars");
  be_.upload_f32(b.view(), v);
  c->wait_host(c->all_reduce(b.view()));
  std::array<float, 2> out{};
  be_.download_f32(out.data(), b.view());
  return out;
}

float Trainer::sum_over_ranks(float v) {
  if (world() == 1) return v;
  const float parts[2] = {v, 0.0f};
  return all_reduce_host(parts)[0];
}

float Trainer::compute_gradients(const Batch& b, std::vector<float>* logits) {
  return run_now(b, true, logits);
}

float Trainer::evaluate(const Batch& b) {
  const float loss = run_now(b, false, nullptr);
  if (seq_parallel() == 1) return loss;
  // Each rank's mean over its tokens; the rows' mean weighs them by their tokens (an exact count below 2^24).
  const long k = counted(b);
  const float parts[2] = {loss * float(k), float(k)};
  const std::array<float, 2> sum = all_reduce_host(parts, opt_.seq_comm);
  return sum[1] > 0 ? sum[0] / sum[1] : 0.0f;
}

StepStats Trainer::step(const Batch& b) {
  const int t = t_ + 1;
  float lr = opt_.adam.lr;
  if (opt_.warmup_steps > 0 && t <= opt_.warmup_steps) lr = opt_.adam.lr * float(t) / float(opt_.warmup_steps);
  return step(std::span<const Batch>(&b, 1), lr);
}

StepStats Trainer::step(std::span<const Batch> micro, float lr) {
  STRATA_CHECK(!micro.empty(), "a step needs at least one batch");
  auto t0 = std::chrono::steady_clock::now();
  if (!part_marks_.empty()) be_.time_marks_s();  // a step that threw left its marks queued
  part_marks_.clear();
  // With every piece of state on the device and one rank, nothing the host reads after the step needs its update
  // finished: step() returns once the loss and the norm are read, and the next step records its graph while the
  // update runs (its batch's upload queues behind it, run()). Host and disk state, trainable paged weights and
  // several ranks keep the step's end a synchronisation point, and so do TrainOptions::time_parts and a backend
  // that counts on it (STRATA_PROFILE's per-op sums).
  const bool overlap = !opt_.time_parts && be_.steps_may_overlap() && world() == 1 && !model_.grads_on_host() &&
                       !model_.pager() && model_.state_host_bytes() == 0 && model_.state_disk_bytes() == 0;
  timing_ = !overlap;
  struct Timing {
    bool& on;
    ~Timing() { on = false; }
  } timing{timing_};
  be_.arena().reset_peak();
  last_ = {};
  const PagerStats paged0 = model_.pager() ? model_.pager()->stats() : PagerStats{};
  float loss = 0.0f;
  size_t tokens = 0, moved_before = 0;  // host-tier bytes moved by the micro-batches before the last
  // Gradient accumulation on the device: each micro-batch's backward starts from its share of the
  // step's loss tokens and adds into the parameters' gradient buffers, so the buffers end holding
  // the gradient of the step's mean loss. Host-tier gradients (fresh device blocks each backward)
  // are summed on the host instead (GradAccumulator).
  const bool host_grads = model_.grads_on_host();
  // Data parallel: each rank brings its own micro-batches of the step; the token shares are of the
  // step's tokens over every rank, and the last backward sums the gradients over the ranks. Sequence
  // parallel: the ranks of a group bring the same rows and count the loss tokens of their share.
  const int world = opt_.comm ? opt_.comm->world() : 1;
  long total = 0;
  for (const Batch& b : micro) total += counted(b);
  if (world > 1) {
    if (host_grads && micro.size() > 1)
      STRATA_THROW(UnsupportedError,
                   "data parallel with gradient accumulation needs the gradients on the device: "
                   "state_offloading 'all' (or a state_plan moving '*.grad' to the host) sums micro-batches on "
                   "the host, which is not reduced across ranks; use state_offloading: master or fewer");
    // Counts are exact in f32 up to 2^24; split in two so sums stay exact up to 2^36 tokens.
    const float parts[2] = {float(total >> 12), float(total & 4095)};
    const std::array<float, 2> sum = all_reduce_host(parts);
    total = (long(sum[0]) << 12) + long(sum[1]);
  }
  // Without clipping the last backward's gradients are applied as they become final (model/train/optimizer.h).
  AdamWParams ap = opt_.adam;
  ap.lr = lr;
  const bool in_backward = opt_.max_grad_norm <= 0 && (!host_grads || micro.size() == 1);
  struct Clear {
    std::optional<std::pair<AdamWParams, int>>& u;
    ~Clear() { u.reset(); }
  } clear{update_in_backward_};
  // Each micro-batch's loss and the gradient norm are read once the step's update is queued (below), not before
  // it: the host does not wait for backward's end to queue the update.
  std::vector<float> losses(micro.size(), 0.0f), weights(micro.size(), 1.0f);
  float norm_sq = 0.0f;
  struct Drain {  // a step that throws leaves no read pending into its locals
    Backend& be;
    ~Drain() {
      try {
        be.wait_queued_downloads();
      } catch (...) {
      }
    }
  } drain{be_};
  auto mean_loss = [&] {  // the micro-batches' losses weighted by their shares of the loss tokens
    double sum = 0;
    for (size_t i = 0; i < micro.size(); ++i) sum += double(weights[i]) * double(losses[i]);
    return float(sum);
  };
  if (micro.size() == 1 && world == 1) {
    if (in_backward) update_in_backward_.emplace(ap, t_ + 1);
    run(micro[0], true, nullptr, &losses[0]);
  } else if (!host_grads || micro.size() == 1) {
    struct Restore {
      Tape& t;
      Optimizer& o;
      ~Restore() {
        t.set_loss_seed(Tape::kLossSeed);
        t.set_accumulate_param_grads(false);
        o.set_reduce(false);
        o.set_partial(false);
      }
    } restore{tape_, optimizer_};
    const double all_micro = double(micro.size()) * world;
    for (size_t i = 0; i < micro.size(); ++i) {
      const float w = total > 0 ? float(double(counted(micro[i])) / double(total)) : float(1.0 / all_micro);
      weights[i] = w;
      tape_.set_loss_seed(w);
      tape_.set_accumulate_param_grads(i > 0);
      // ZeRO-2 reduces every micro-batch into the owners' accumulating buffers (a transient gradient lives one
      // backward); otherwise the last backward sums what the micro-batches accumulated.
      optimizer_.set_reduce(i + 1 == micro.size() || model_.options().zero.shards_grads());
      optimizer_.set_partial(i + 1 < micro.size());
      if (in_backward && i + 1 == micro.size()) update_in_backward_.emplace(ap, t_ + 1);
      run(micro[i], true, nullptr, &losses[i]);
      if (i + 1 < micro.size()) moved_before += optimizer_.stats().uploaded_bytes + optimizer_.stats().downloaded_bytes;
    }
    if (world > 1) {
      be_.wait_queued_downloads();
      const float parts[2] = {mean_loss(), 0.0f};
      loss = all_reduce_host(parts)[0];  // the step's mean loss over every rank's tokens
    }
  } else {
    if (!accum_) accum_ = std::make_unique<GradAccumulator>(be_, model_, optimizer_);
    long total = 0;
    for (const Batch& b : micro) total += counted(b);
    for (size_t i = 0; i < micro.size(); ++i) {
      weights[i] = total > 0 ? float(double(counted(micro[i])) / double(total)) : 1.0f / float(micro.size());
      run(micro[i], true, nullptr, &losses[i]);
      accum_->add(i, micro.size(), weights[i]);
      if (i + 1 < micro.size()) moved_before += optimizer_.stats().uploaded_bytes + optimizer_.stats().downloaded_bytes;
    }
  }
  for (const Batch& b : micro) tokens += size_t(b.B) * size_t(b.T);
  tokens *= size_t(dp_world());  // every rank's micro-batches have the same shapes (a group's the same rows)
  ++t_;
  // The squared norm was summed in backward as each gradient became final (model/train/optimizer.h); the update
  // reads it and leaves it.
  be_.download_f32_queued(&norm_sq, optimizer_.norm_sq());
  mark(StepPart::optimizer);
  optimizer_.step(ap, opt_.max_grad_norm, t_);
  be_.wait_queued_downloads();
  if (world == 1) loss = mean_loss();
  StepStats s = last_;
  if (!overlap) {
    be_.synchronize();
    be_.time_mark();  // the step's end
    const std::vector<double> at = be_.time_marks_s();
    for (size_t i = 0; i + 1 < at.size() && i < part_marks_.size(); ++i)
      s.part_s[size_t(part_marks_[i])] += at[i + 1] - at[i];
  }
  part_marks_.clear();
  s.step = t_;
  s.loss = loss;
  s.grad_norm = std::sqrt(norm_sq);
  s.lr = ap.lr;
  s.tokens = tokens;
  s.peak_device_bytes = be_.arena().peak();
  s.peak_host_bytes = store_->stats().peak_host_bytes;
  s.peak_disk_bytes = store_->stats().peak_disk_bytes;
  s.state_host_bytes = model_.state_host_bytes() + optimizer_.disk_staging_bytes();
  s.state_disk_bytes = model_.state_disk_bytes();
  s.state_bytes_moved = moved_before + optimizer_.stats().uploaded_bytes + optimizer_.stats().downloaded_bytes;
  if (const WeightPager* pager = model_.pager()) {
    s.paged_bytes_uploaded = pager->stats().bytes_uploaded - paged0.bytes_uploaded;
    s.paged_uploads = pager->stats().uploads - paged0.uploads;
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace strata
