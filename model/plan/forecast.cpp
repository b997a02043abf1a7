#include "model/plan/forecast.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "engine/comm_sim.h"
#include "engine/names.h"
#include "engine/op_scratch.h"
#include "model/llama/shapes.h"

namespace strata {

namespace {
constexpr EnumName<TrainMode> kTrainModes[] = {
    {TrainMode::full, "full"}, {TrainMode::frozen, "frozen"}, {TrainMode::lora, "lora"}};
}  // namespace

const char* train_mode_name(TrainMode m) {
  return name_of(kTrainModes, m);
}

TrainMode parse_train_mode(const std::string& s) {
  if (auto m = parse_name(kTrainModes, s)) return *m;
  throw ConfigError(fmt::format("--mode must be {}, got '{}'", name_choices(kTrainModes), s), "command line", "mode");
}

ModelOptions forecast_model_options(const ForecastRequest& r) {
  ModelOptions mo;
  mo.loss_chunk_tokens = r.loss_chunk_tokens;
  mo.pad_vocab_multiple = r.pad_vocab_multiple;
  mo.loss_grad_in_forward = r.loss_grad_in_forward;
  mo.mlp_tiles = std::max(1, r.mlp_tiles);
  // As strata-train builds them: --freeze-base trains the norms only; LoRA freezes the base.
  mo.train_base = r.mode == TrainMode::full;
  mo.train_norms = r.mode == TrainMode::frozen;
  mo.page_layers = r.plan.pages_layer_weights();
  mo.state_plan = r.plan;
  mo.state_dir = r.tiers.offload_dir;  // the sim creates no file
  mo.recipe = r.recipe;
  mo.fp8 = r.fp8;
  mo.zero = {r.zero_stage, r.rank, r.gpus};  // the forecast rank's share
  if (r.mode == TrainMode::lora) {
    mo.lora.rank = r.lora_rank;
    mo.lora.alpha = r.lora_alpha;
    mo.lora.target_modules = r.lora_targets;
  }
  return mo;
}

// The sim moves no token data: the forecasts of one shape share one set of zero batches (the planner runs
// thousands, on several threads, up to 2^25 tokens each); a packed request gets its own, with its positions.
std::shared_ptr<const std::vector<Batch>> forecast_batches(const ForecastRequest& r) {
  const auto make = [&] {
    Batch b;
    b.B = r.batch;
    b.T = r.seq;
    b.inputs.assign(size_t(r.batch) * size_t(r.seq), 0);
    b.targets.assign(b.inputs.size(), 0);
    b.positions = r.positions;
    b.zeros = true;
    return std::make_shared<const std::vector<Batch>>(size_t(std::max(1, r.grad_accum)), b);
  };
  if (!r.positions.empty()) return make();
  static std::mutex mu;
  static std::shared_ptr<const std::vector<Batch>> last;  // the latest shape's
  const std::lock_guard<std::mutex> lock(mu);
  if (!last || last->front().B != r.batch || last->front().T != r.seq ||
      last->size() != size_t(std::max(1, r.grad_accum)))
    last = make();
  return last;
}

io::LlamaConfig resolve_model(const std::string& spec) {
  if (std::filesystem::exists(spec)) return io::read_llama_config(spec);
  return builtin_shape(spec);  // ConfigError listing the known names
}

std::string fold_layers(const std::string& cls) {
  if (cls.size() > 1 && cls[0] == 'L' && std::isdigit(static_cast<unsigned char>(cls[1]))) {
    size_t dot = cls.find('.');
    return "L*" + (dot == std::string::npos ? std::string() : cls.substr(dot));
  }
  return cls;
}

namespace {

// The breakdown category of an arena tag.
std::string category(const std::string& tag) {
  if (tag == "weights") return "weights (fp32 master)";
  if (tag == "weights.master_lo") return "weights (master low halves)";
  if (tag == "weights.compute") return "weights.compute";
  if (tag.rfind("weights.page", 0) == 0) return "weights (paged layer slots)";
  if (tag == "grads" || tag == "adam.m" || tag == "adam.v") return tag;
  if (tag == "grads.host_tier") return "gradients on their way to the host tier";
  if (tag == "optimizer.staging") return "optimizer staging (host-tier state)";
  if (is_scratch_tag(tag)) return "workspaces";
  if (tag.rfind("grad:", 0) == 0) return "activation gradients";
  if (tag.rfind("batch.", 0) == 0 || tag == "rope.inv_freq" || tag == "grad_norm" || tag == "eval.logits")
    return "other (batch, rope table, norm scalar)";
  return "activations";
}

std::vector<MemoryItem> sorted(const std::map<std::string, MemoryItem>& m) {
  std::vector<MemoryItem> v;
  for (auto& [k, item] : m)
    if (item.bytes) v.push_back(item);
  std::stable_sort(v.begin(), v.end(), [](const MemoryItem& a, const MemoryItem& b) { return a.bytes > b.bytes; });
  return v;
}

// Replays the event log up to the step's peak and sorts the live blocks into the breakdown.
void breakdown_at_peak(Forecast& f) {
  const auto& ev = f.events;
  size_t peak_i = ev.size();
  size_t best = f.persistent_bytes;
  for (size_t i = f.step_first_event; i < ev.size(); ++i)
    if (ev[i].in_use > best) best = ev[i].in_use, peak_i = i;
  // peak_i == size: the step never rose above what it started with; take the state before it.
  const size_t upto = peak_i == ev.size() ? f.step_first_event : peak_i + 1;
  std::map<std::string, int64_t> live_bytes;
  std::map<std::string, int> live_count;
  for (size_t i = 0; i < upto; ++i) {
    live_bytes[ev[i].tag] += ev[i].delta;
    live_count[ev[i].tag] += ev[i].delta > 0 ? 1 : -1;
  }
  f.peak_at_s = peak_i == ev.size() ? 0.0 : ev[peak_i].time_s - f.step_start_s;
  std::map<std::string, MemoryItem> cats, acts, ws;
  for (auto& [tag, bytes] : live_bytes) {
    if (bytes <= 0) continue;
    const size_t b = size_t(bytes);
    const int n = live_count[tag];
    std::string c = category(tag);
    auto add = [&](std::map<std::string, MemoryItem>& m, const std::string& k) {
      MemoryItem& it = m[k];
      it.name = k;
      it.bytes += b;
      it.count += n;
    };
    add(cats, c);
    if (c == "activations") add(acts, fold_layers(tag));
    if (c == "workspaces") add(ws, tag);
  }
  f.breakdown = sorted(cats);
  f.activations = sorted(acts);
  f.workspaces = sorted(ws);
}

}  // namespace

void check_forecast_shape(const ForecastRequest& r) {
  if (r.seq < 1 || r.batch < 1)
    throw ConfigError(fmt::format("seq ({}) and batch ({}) must be >= 1", r.seq, r.batch), "command line", "seq");
  if (r.seq > kMaxForecastSeq)
    throw ConfigError(fmt::format("seq {} is longer than a forecast runs (at most {})", r.seq, kMaxForecastSeq),
                      "command line", "seq");
  if (int64_t(r.batch) * r.seq > kMaxForecastTokens)
    throw ConfigError(fmt::format("batch {} x seq {} is {} tokens a step, more than a forecast runs (at most {})",
                                  r.batch, r.seq, int64_t(r.batch) * r.seq, kMaxForecastTokens),
                      "command line", "batch");
  if (r.grad_accum < 1 || r.grad_accum > kMaxForecastMicroBatches)
    throw ConfigError(fmt::format("gradient_accumulation_steps {} is outside what a forecast runs (1 to {} "
                                  "micro-batches a step)",
                                  r.grad_accum, kMaxForecastMicroBatches),
                      "command line", "grad-accum");
  if (int64_t(r.batch) * r.seq * r.grad_accum > kMaxForecastStepTokens)
    throw ConfigError(
        fmt::format("{} micro-batches of batch {} x seq {} are {} tokens a step, more than a forecast "
                    "runs (at most {})",
                    r.grad_accum, r.batch, r.seq, int64_t(r.batch) * r.seq * r.grad_accum, kMaxForecastStepTokens),
        "command line", "grad-accum");
  if (r.gpus < 1 || r.gpus > kMaxForecastRanks)
    throw ConfigError(fmt::format("gpus {} is outside the ranks a forecast runs (1 to {})", r.gpus, kMaxForecastRanks),
                      "command line", "gpus");
}

Forecast forecast(const ForecastRequest& r) {
  check_forecast_shape(r);
  Forecast f;
  SimOptions so;
  so.budget = r.budget;
  so.profile = r.profile;
  so.mirror = r.mirror;
  so.log_events = r.detail;
  auto be = make_sim_backend(so);
  f.device = be->device_name();
  Arena& arena = be->arena();
  try {
    // No weights are generated or loaded: there is no data to put them in.
    LlamaModel model(*be, r.model, forecast_model_options(r));
    f.params = model.param_count();
    f.trainable = model.trainable_count();
    if (r.zero_stage >= 1 && r.gpus > 1)
      for (const Parameter& p : model.params()) f.zero_owning_ranks = std::max(f.zero_owning_ranks, p.owner + 1);
    TrainOptions to;
    to.plan = r.plan;
    to.tiers = r.tiers;
    to.max_grad_norm = r.max_grad_norm;
    to.optimizer.reduce_dtype = r.grad_reduce;
    to.batch_tokens = r.batch_tokens;
    if (r.gpus < 1) throw ConfigError(fmt::format("gpus must be >= 1, got {}", r.gpus), "command line", "gpus");
    const int sp = r.sequence_parallel;
    if (sp < 1 || r.gpus % sp != 0)
      throw ConfigError(fmt::format("sequence_parallel {} must be >= 1 and divide the {} GPUs (data-parallel groups "
                                    "of sequence_parallel ranks)",
                                    sp, r.gpus),
                        "command line", "sequence-parallel");
    std::unique_ptr<SimCommunicator> comm, seq_comm;
    if (r.rank < 0 || r.rank >= r.gpus)
      throw ConfigError(fmt::format("rank {} is not one of the {} GPUs' ranks", r.rank, r.gpus), "command line",
                        "rank");
    if (r.gpus > 1) comm = make_sim_communicator(*be, r.rank, r.gpus);
    if (sp > 1 && sp < r.gpus) seq_comm = make_sim_communicator(*be, r.rank % sp, sp);  // the group: its own
    to.comm = comm.get();
    if (sp > 1) to.seq_comm = seq_comm ? seq_comm.get() : comm.get();
    Trainer trainer(*be, model, to);
    const std::shared_ptr<const std::vector<Batch>> shared_batches = forecast_batches(r);
    const std::span<const Batch> micro(*shared_batches);
    if (micro.size() > 1 && model.grads_on_host())
      throw ConfigError(
          fmt::format("gradient accumulation ({} micro-batches) with the gradients on the host (state_offloading: "
                      "all, or a state_plan moving '*.grad' there) is summed on the host, which a forecast does not "
                      "price; keep the gradients on the device (state_offloading: master or less)",
                      micro.size()),
          "command line", "grad-accum");
    // Trainer::step(batch)'s learning rate (the value does not change memory or time).
    auto one_step = [&] { return trainer.step(micro, to.adam.lr); };
    be->reset_times();
    f.step_first_event = arena.events().size();
    f.persistent_bytes = arena.in_use();
    f.step_start_s = be->now_s();
    size_t first_peak = 0;  // a first step's peak, where a second is the one reported
    // The collectives' busy time (and that of all-to-alls) before the reported step.
    auto busy = [&](bool a2a) {
      double s = 0;
      for (SimCommunicator* c : {comm.get(), seq_comm.get()})
        if (c) s += a2a ? c->times().all_to_all_s : c->times().busy_s;
      return s;
    };
    double comm_before = 0.0, a2a_before = 0.0;
    auto steps = [&] {
      StepStats one = one_step();
      if (!trainer.optimizer().pending()) return one;
      // The step left its streamed updates to the next forward (model/train/optimizer.h): a second step
      // carries the previous one's, as every step of a run after the first does. It is the one
      // reported; the peak is the larger of the two.
      first_peak = one.peak_device_bytes;
      comm_before = busy(false);
      a2a_before = busy(true);
      be->reset_times();
      f.step_first_event = arena.events().size();
      f.step_start_s = be->now_s();
      return one_step();
    };
    StepStats st;
    try {
      st = steps();
      be->synchronize();  // a step may return with its update still queued (TrainOptions::time_parts)
    } catch (const OutOfMemoryError& e) {
      f.fits = false;
      f.oom = e.what();
    }
    const double end_s = be->now_s();
    if (r.detail) f.events = arena.events();
    f.high_water_bytes = arena.high_water();
    if (f.fits) {
      f.peak_bytes = std::max(st.peak_device_bytes, first_peak);
      f.saved_bytes = st.saved_bytes;
      f.recomputed_nodes = st.recomputed_nodes;
      const TierStats& ts = trainer.store().stats();
      f.peak_host_slot_bytes = st.peak_host_bytes;
      f.host_reserved_bytes = ts.host_reserved_bytes;
      f.offloaded_bytes = ts.offloaded_bytes;
      f.loaded_bytes = ts.loaded_bytes;
      f.state_disk_bytes = st.state_disk_bytes;
      f.peak_disk_bytes = ts.peak_disk_bytes + f.state_disk_bytes;
      if (const WeightPager* pager = model.pager()) f.paged_host_bytes = pager->host_bytes();
      f.state_host_bytes = st.state_host_bytes;  // the model's reservation and the optimizer's disk staging
      f.state_bytes_moved = st.state_bytes_moved;
      f.peak_host_bytes = f.peak_host_slot_bytes + f.paged_host_bytes + f.state_host_bytes;
      f.pinned_bytes = f.host_reserved_bytes + f.paged_host_bytes + f.state_host_bytes;
      f.setup_pinned_s = double(f.pinned_bytes) / (r.profile.pinned_alloc_gbps * 1e9);
      f.setup_tuning_s = r.profile.first_step_tuning_s + be->tuning_s();
      f.setup_s = f.setup_pinned_s + f.setup_tuning_s;
      f.load_pinned_s = double(f.paged_host_bytes + f.state_host_bytes) / (r.profile.pinned_alloc_gbps * 1e9);
      f.first_step_extra_s = f.setup_s - f.load_pinned_s;
      if (r.profile.pinned_first_touch_gbps > 0)
        f.setup_fresh_pinned_s =
            double(f.pinned_bytes) * double(std::max(r.gpus, 1)) / (r.profile.pinned_first_touch_gbps * 1e9);
      f.paged_bytes_uploaded = st.paged_bytes_uploaded;
      f.paged_uploads = st.paged_uploads;
      const SimTimes& t = be->times();
      f.copy_wait_s = t.copy_wait_s;
      f.copy_busy_s = t.copy_busy_s;
      f.disk_written_bytes = t.disk_write_bytes;
      f.disk_read_bytes = t.disk_read_bytes;
      f.disk_busy_s = t.disk_busy_s;
      f.disk_wait_s = t.disk_wait_s;
      f.step_s = end_s - f.step_start_s;
      const double bwd0 = t.backward_start_s >= 0 ? t.backward_start_s : end_s;
      const double opt0 = t.optimizer_start_s >= 0 ? t.optimizer_start_s : end_s;
      f.forward_s = bwd0 - f.step_start_s + t.between_backwards_s;  // every micro-batch's forward
      f.backward_s = opt0 - bwd0 - t.between_backwards_s;
      f.optimizer_s = end_s - opt0;
      f.recompute_s = t.recompute_s;
      f.kernels = t.kernels;
      f.repeated_blocks = t.repeats;
      // Every data-parallel group's rows (a group's ranks share theirs).
      f.tokens_per_s = f.step_s > 0 ? double(r.batch) * r.seq * double(micro.size()) * (r.gpus / sp) / f.step_s : 0.0;
      f.comm_busy_s = busy(false) - comm_before;
      f.all_to_all_s = busy(true) - a2a_before;
      f.comm_wait_s = t.comm_wait_s;
      for (int k = 0; k < int(OpKind::count_); ++k)
        if (t.op_s[size_t(k)] > 0) f.time_by_op.emplace_back(op_kind_name(OpKind(k)), t.op_s[size_t(k)]);
      if (t.memset_s > 0) f.time_by_op.emplace_back("memset", t.memset_s);
      if (t.copy_s > 0) f.time_by_op.emplace_back("host copies", t.copy_s);
      if (t.copy_wait_s > 0) f.time_by_op.emplace_back("waiting on tier copies", t.copy_wait_s);
      if (t.disk_wait_s > 0) f.time_by_op.emplace_back("waiting on the disk tier", t.disk_wait_s);
      if (t.comm_wait_s > 0) f.time_by_op.emplace_back("waiting on collectives", t.comm_wait_s);
      std::stable_sort(f.time_by_op.begin(), f.time_by_op.end(), [](auto& a, auto& b) { return a.second > b.second; });
      if (r.detail) {
        breakdown_at_peak(f);
        const double peak_abs = f.step_start_s + f.peak_at_s;
        f.peak_phase = peak_abs < bwd0 ? "forward" : peak_abs < opt0 ? "backward" : "optimizer";
        f.plan_rows = trainer.plan_table(r.batch, r.seq);  // after the log was copied: no effect on it
      }
    }
  } catch (const OutOfMemoryError& e) {  // the weights and optimizer state alone do not fit
    f.fits = false;
    f.oom = e.what();
    if (r.detail) f.events = arena.events();
    f.high_water_bytes = arena.high_water();
  }
  return f;
}

}  // namespace strata
