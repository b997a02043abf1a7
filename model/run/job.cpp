#include "model/run/job.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <span>

#include "io/tokens.h"
#include "model/data/datasets.h"
#include "model/data/row_data.h"
#include "model/llama/llama.h"
#include "model/llama/seq_parallel.h"
#include "model/plan/arena_sizing.h"
#include "model/run/checkpoint.h"
#include "model/run/forecast_request.h"

namespace strata {

DeviceProfile profile_for_device(const std::string& device) {
  auto lower = [](std::string x) {
    for (auto& c : x) c = char(std::tolower(static_cast<unsigned char>(c)));
    return x;
  };
  for (auto& [name, p] : builtin_profiles())
    if (!p.match.empty() && lower(device).find(lower(p.match)) != std::string::npos) return p;
  return find_profile("h100_80gb");
}

bool planner_chooses_layout(const TrainConfig& cfg, int world) {
  return cfg.memory_budget_bytes && world > 1 && !(cfg.sequence_parallel_given && cfg.zero_stage_given);
}

PlanResult plan_run_to_budget(const TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& backend,
                              const std::string& device, const std::string& profile, int world, int rank,
                              Layout* layout, std::string* why) {
  ForecastRequest req = train_forecast_request(cfg, mc, backend == "cuda" ? SimMirror::cuda : SimMirror::cpu,
                                               profile.empty() ? profile_for_device(device) : find_profile(profile));
  req.gpus = world;  // one rank's plan
  req.rank = rank;
  // The planner chooses the plan, the paging (plan.layer_weights) and the MLP tiles; a state placement
  // the config gives (state_offloading, state_offloading_layers, state_plan) stays, planned around.
  req.plan = Plan::keep_everything();
  req.plan.take_state(cfg.plan);
  req.plan.set_layer_weights(Decision::keep, "budget planner");
  const TierBudgets budgets{cfg.memory_budget_bytes, cfg.host_budget_bytes, cfg.disk_budget_bytes};
  if (!layout || !planner_chooses_layout(cfg, world)) return plan_for_budget(req, budgets);
  LayoutChoice lc = plan_layout(req, budgets, cfg.sequence_parallel_given ? cfg.sequence_parallel : 0,
                                cfg.zero_stage_given ? cfg.zero_stage : -1);
  *layout = lc.layout;
  if (why) *why = fmt::format("layout: {}: {}", layout_name(lc.layout, world), lc.why);
  return std::move(lc.plan);
}

size_t default_arena_bytes(const TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& backend,
                           const LaunchEnv& env, std::string* note) {
  if (cfg.device_budget_bytes) return cfg.device_budget_bytes;
  if (cfg.memory_budget_bytes) return cfg.memory_budget_bytes;  // hold the run to the budget
  if (backend != "cuda") return 0;
  ForecastRequest req = train_forecast_request(cfg, mc, SimMirror::cuda, find_profile("h100_80gb"));
  req.gpus = env.world;  // this rank's peak (its bf16 gradient copies, its ZeRO share: ranks differ)
  req.rank = env.rank;
  const ArenaSizing a = cfg.batch_lengths.size() > 1 ? arena_for_lengths(req, cfg.batch_lengths) : arena_for_plan(req);
  if (note)
    *note = fmt::format(
        "arena: {} from the plan's forecast{} (high-water {} + headroom {}); --device-memory / device_memory sets it",
        format_bytes(a.bytes),
        cfg.batch_lengths.size() > 1 ? fmt::format(" of each of the {} batch lengths", cfg.batch_lengths.size()) : "",
        format_bytes(a.high_water), format_bytes(a.headroom));
  return a.bytes;
}

std::vector<int> batch_lengths_within(const TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& backend,
                                      const std::string& device, const std::string& profile, int world, int rank,
                                      size_t budget) {
  std::vector<int> kept;
  if (cfg.batch_lengths.empty()) return kept;
  ForecastRequest req = train_forecast_request(cfg, mc, backend == "cuda" ? SimMirror::cuda : SimMirror::cpu,
                                               profile.empty() ? profile_for_device(device) : find_profile(profile));
  req.gpus = world;
  req.rank = rank;
  req.budget = budget;
  req.plan_progress = nullptr;
  for (size_t i = 0; i + 1 < cfg.batch_lengths.size(); ++i) {
    req.seq = cfg.batch_lengths[i];
    try {
      const Forecast f = forecast(req);
      if (f.fits && f.high_water_bytes <= budget) kept.push_back(req.seq);
    } catch (const OutOfMemoryError&) {  // not even the persistent state fits: the length is left out
    }
  }
  kept.push_back(cfg.batch_lengths.back());  // the planned length
  return kept;
}

std::string describe_batch_lengths(const TrainConfig& c, int longest_row) {
  if (c.batch_lengths.empty())
    return fmt::format("batches: {} tokens a row (sequence_len{})", c.seq,
                       c.pad_to_sequence_len ? "; pad_to_sequence_len: true" : "");
  const int mult = row_multiple(c.sequence_parallel);
  std::string s = fmt::format(
      "batches: sized to the data: the longest row is {} tokens, so batches are at most {} tokens (sequence_len {}); "
      "each batch is as long as its longest row rounded up to a multiple of {} (the kernels' tile{})",
      longest_row, c.batch_lengths.back(), c.seq, mult,
      mult != kRowMultiple ? fmt::format(", and of sequence_parallel {}", c.sequence_parallel) : "");
  if (c.batch_lengths.size() > 1)
    s += fmt::format(": {} lengths, {}", c.batch_lengths.size(), fmt::join(c.batch_lengths, ", "));
  return s;
}

std::string budget_failure(const TrainConfig& cfg, const PlanResult& pr) {
  const size_t budget = cfg.memory_budget_bytes;
  if (pr.stopped)  // no diagnosis: the search ran out of time first
    return fmt::format(
        "no plan found to fit a device budget of {} (host budget {}, disk budget {}) within plan_time_limit ({} s; "
        "{} sim runs): raise plan_time_limit (--plan-time-limit) or lower the shape",
        format_bytes(budget), format_bytes(cfg.host_budget_bytes), format_bytes(cfg.disk_budget_bytes),
        cfg.plan_time_limit_s, pr.sim_runs);
  std::string s = fmt::format(
      "nothing fits a device budget of {} (host budget {}, disk budget {}): the minimum is {}, {} more, with the "
      "lowest-memory plan ({}; {} sim runs)",
      format_bytes(budget), format_bytes(cfg.host_budget_bytes), format_bytes(cfg.disk_budget_bytes),
      format_bytes(pr.minimum_bytes), format_bytes(pr.minimum_bytes > budget ? pr.minimum_bytes - budget : 0), pr.label,
      pr.sim_runs);
  if (!pr.short_tier.empty())
    s += fmt::format("\n'{}' fits the device budget with {} of {} memory (--{}-budget)", pr.short_tier_label,
                     format_bytes(pr.short_tier_needs), pr.short_tier, pr.short_tier);
  if (pr.persistent_bytes >= budget)
    s += fmt::format(
        "\nthe weights, gradients and optimizer state alone take {} (no activation plan lowers them; frozen or LoRA "
        "training does)",
        format_bytes(pr.persistent_bytes));
  return s;
}

std::string wrap_list(const std::string& text, size_t width, const std::string& indent) {
  std::string out, line;
  size_t at = 0;
  while (at < text.size()) {
    size_t comma = text.find(", ", at);
    const size_t end = comma == std::string::npos ? text.size() : comma + 2;
    const std::string item = text.substr(at, end - at);
    if (!line.empty() && line.size() + item.size() > width + 1) {  // the trailing space of ", " may hang over
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
      line = indent;
    }
    line += item;
    at = end;
  }
  return out + line;
}

std::string format_plan_table(const std::string& preset, const std::vector<PlanRow>& rows) {
  std::string s = wrap_list(fmt::format("plan ({}):", preset)) +
                  fmt::format("\n  {:<24} {:<10} {:>8} {:>14}\n", "class", "decision", "count", "bytes");
  for (const PlanRow& r : rows)
    s += fmt::format("  {:<24} {:<10} {:>8} {:>14}\n", r.cls, r.decision, r.count, format_bytes(r.bytes));
  return s;
}

namespace {
std::string origin_file(const TrainConfig& c) {
  return c.config_file.empty() ? "command line" : c.config_file;
}
}  // namespace

Job::Job(TrainConfig cfg, const Platform& platform, JobOptions opt) : cfg_(std::move(cfg)), opt_(std::move(opt)) {
  if (!opt_.info) opt_.info = sink_ = std::fopen("/dev/null", "w");
  std::FILE* info = opt_.info;
  TrainConfig& c = cfg_;
  env_ = read_launch_env();
  if (env_.world % c.sequence_parallel != 0)
    throw ConfigError(fmt::format("sequence_parallel {} does not divide the {} rank{} (--gpus {}): each group of {} "
                                  "ranks shares its rows; use --gpus a multiple of {}",
                                  c.sequence_parallel, env_.world, env_.world == 1 ? "" : "s", env_.world,
                                  c.sequence_parallel, c.sequence_parallel),
                      origin_file(c), "sequence_parallel");
  check_seq_parallel_len(c.seq, c.sequence_parallel);
  if ((c.host_budget_bytes || c.disk_budget_bytes) && !c.memory_budget_bytes)
    throw ConfigError(
        "host_memory_budget / disk_memory_budget (--host-budget / --disk-budget) are the planner's tier budgets: give "
        "memory_budget (--budget) too",
        origin_file(c), "memory_budget");

  // The model's shape, then the training rows: a token file's stream, or the datasets rendered, tokenised and masked.
  const bool random = opt_.random_shape.has_value();
  if (random) {
    mc_ = *opt_.random_shape;
  } else {
    if (c.model_dir.empty()) throw ConfigError("base_model (--model DIR) is required", origin_file(c), "base_model");
    mc_ = io::read_llama_config(c.model_dir);
  }
  tokenizer_dir_ = c.tokenizer_dir.empty() ? c.model_dir : c.tokenizer_dir;
  std::optional<TokenRows> rows;
  if (!random && !c.datasets.empty() && !c.data_path.empty())
    throw ConfigError(fmt::format("data ({}) and datasets both give the training data: keep one", c.data_path),
                      origin_file(c), "data");
  if (!random && c.datasets.empty() && !c.data_path.empty()) {
    if (c.sample_packing)
      throw ConfigError(
          "sample_packing packs the examples of `datasets`; a token file (data) has no examples to pack (its rows are "
          "full windows already)",
          origin_file(c), "sample_packing");
    std::vector<int32_t> tokens = io::read_tokens(c.data_path, mc_.vocab_size, long(c.seq) + 1);
    data_tokens_ = tokens.size();
    rows.emplace(std::move(tokens), c.seq);
  } else if (!random && !c.datasets.empty()) {
    DatasetRows dr = build_dataset_rows(dataset_options(c), tokenizer_dir_, info);
    if (dr.max_id >= mc_.vocab_size)
      throw ConfigError(fmt::format("{}: the tokenizer gives id {}, outside the model's vocab_size {} ({}/config.json)",
                                    tokenizer_dir_, dr.max_id, mc_.vocab_size, c.model_dir),
                        tokenizer_dir_, "vocab_size");
    data_tokens_ = dr.inputs.size();
    if (c.sample_packing)
      rows.emplace(std::move(dr.inputs), std::move(dr.targets), std::move(dr.positions), c.seq, dr.examples);
    else
      rows.emplace(std::move(dr.inputs), std::move(dr.targets), c.seq);
    // Rows sized to the data: a batch is as long as its longest row, rounded up; the forecast, the arena and the
    // planner size for the longest, and every shorter length is checked below where memory is bounded.
    if (!c.pad_to_sequence_len) c.batch_lengths = rows->bucket_lengths(row_multiple(c.sequence_parallel));
    data_tokens_ = 0;  // the rows' tokens up to their last trained target, not their padding
    for (long r = 0; r < rows->rows(); ++r) data_tokens_ += size_t(rows->row_len(r));
    std::fprintf(info, "%s\n", describe_batch_lengths(c, rows->longest_row()).c_str());
  } else if (!random && opt_.needs_data) {
    throw ConfigError("data FILE (--data) or datasets is required", origin_file(c), "data");
  }

  // Positions reach the longest batch (rows sized to the data), not sequence_len.
  if (!random && longest_batch_len(c) > mc_.max_position_embeddings)
    std::fprintf(stderr, "warning: %s %d exceeds max_position_embeddings %d of %s/config.json\n",
                 c.batch_lengths.empty() ? "sequence_len" : "the longest batch", longest_batch_len(c),
                 mc_.max_position_embeddings, c.model_dir.c_str());

  // The backend: the caller's, or one whose arena on cuda is what the plan's forecast needs (other
  // processes can share the GPU).
  if (opt_.backend) {
    be_ = opt_.backend;
    be_name_ = opt_.backend_name;
  } else {
    be_name_ = platform.resolve_backend(c.backend);
    std::string note;
    c.device_budget_bytes = default_arena_bytes(c, mc_, be_name_, env_, &note);
    if (!note.empty()) std::fprintf(info, "%s\n", note.c_str());
  }
  if (env_.world > 1) {
    rdv_ = Rendezvous::join(env_.rendezvous());  // before the backend and the communicator: they outlive neither
    std::fprintf(info, "data parallel: %d ranks (%s), %d on this node; rank 0 of %s:%d\n", env_.world,
                 env_.launcher.c_str(), env_.local_world, env_.master_addr.c_str(), env_.master_port);
  }
  if (!be_) {
    own_be_ = platform.make_backend(be_name_, c.device_budget_bytes, env_.local_rank);
    be_ = own_be_.get();
  }
  if (c.memory_budget_bytes) {
    // Several ranks: the planner chooses what the run leaves open of the layout (sequence_parallel, zero_stage);
    // every rank searches, and rank 0's choice is the one all take.
    Layout layout{c.sequence_parallel, c.zero_stage};
    std::string why;
    PlanResult pr =
        plan_run_to_budget(c, mc_, be_name_, be_->device_name(), opt_.profile, env_.world, env_.rank, &layout, &why);
    if (planner_chooses_layout(c, env_.world)) {
      const int mine[2] = {layout.sequence_parallel, layout.zero_stage};
      const std::vector<std::byte> root = rdv_->broadcast(std::as_bytes(std::span(mine)));
      int chosen[2];
      std::memcpy(chosen, root.data(), sizeof chosen);
      c.sequence_parallel = chosen[0];
      c.zero_stage = chosen[1];
      c.sequence_parallel_given = c.zero_stage_given = true;
      if (chosen[0] != mine[0] || chosen[1] != mine[1])  // another answer within its time limit: rank 0's layout
        pr = plan_run_to_budget(c, mc_, be_name_, be_->device_name(), opt_.profile, env_.world, env_.rank);
      check_seq_parallel_len(c.seq, c.sequence_parallel);
      std::fprintf(info, "%s\n", wrap_list(why).c_str());
    }
    if (!pr.found) throw ConfigError(budget_failure(c, pr), origin_file(c), "memory_budget");
    const Forecast& f = pr.forecast;
    const std::string profile_name =
        (opt_.profile.empty() ? profile_for_device(be_->device_name()) : find_profile(opt_.profile)).name;
    std::fprintf(info, "%s\n",
                 wrap_list(fmt::format("planner: {} fits a budget of {} (sim mirroring the {} backend, profile {}; {} "
                                       "sim runs)",
                                       pr.label, format_bytes(c.memory_budget_bytes),
                                       be_name_ == "cuda" ? "cuda" : "cpu", profile_name, pr.sim_runs))
                     .c_str());
    const int micro = plan_moves_grads_off_device(c.plan, mc_) ? 1 : c.grad_accum;  // as forecast
    std::fprintf(info,
                 "forecast: peak %s (high-water %s) in %s | step %.4f s (forward %.4f, backward %.4f of which "
                 "recompute %.4f, optimizer %.4f)%s\n",
                 format_bytes(f.peak_bytes).c_str(), format_bytes(f.high_water_bytes).c_str(), f.peak_phase.c_str(),
                 f.step_s, f.forward_s, f.backward_s, f.recompute_s, f.optimizer_s,
                 micro > 1 ? fmt::format(" over {} micro-batches", micro).c_str() : "");
    c.plan = pr.plan;
    planned_ = std::move(pr);
    if (c.batch_lengths.size() > 1) {  // planned for the longest batch: each shorter one must fit too
      const std::vector<int> kept = batch_lengths_within(c, mc_, be_name_, be_->device_name(), opt_.profile, env_.world,
                                                         env_.rank, c.memory_budget_bytes);
      if (kept.size() < c.batch_lengths.size())
        std::fprintf(info,
                     "batch lengths: %zu of %zu do not fit the budget with this plan; their batches take the next "
                     "longer length that does\n",
                     c.batch_lengths.size() - kept.size(), c.batch_lengths.size());
      c.batch_lengths = kept;
    }
  }
  if (env_.world > 1 && c.sequence_parallel > 1)
    std::fprintf(info,
                 "sequence parallel: groups of %d ranks share each row (%d tokens a rank, all-to-alls around "
                 "attention); %d data-parallel group%s\n",
                 c.sequence_parallel, c.seq / c.sequence_parallel, env_.world / c.sequence_parallel,
                 env_.world / c.sequence_parallel == 1 ? "" : "s");
  if (env_.world > 1) {
    if (platform.make_comm) comm_ = platform.make_comm(*rdv_, *be_, env_, 1);
    if (!comm_) comm_ = make_cpu_communicator(*rdv_);
    // Sequence parallel: the group's own communicator beside the world's, unless the group is the world.
    if (c.sequence_parallel > 1 && c.sequence_parallel < env_.world) {
      if (platform.make_comm) group_ = platform.make_comm(*rdv_, *be_, env_, c.sequence_parallel);
      if (!group_) group_ = make_cpu_communicator(*rdv_, c.sequence_parallel);
    }
  }

  ModelOptions mo = model_options(c);
  mo.zero.rank = env_.rank;
  mo.zero.world = env_.world;
  TrainOptions to = train_options(c);
  if (opt_.tune) opt_.tune(mo, to);
  model_ = std::make_unique<LlamaModel>(*be_, mc_, mo);
  if (random) {
    model_->init_random(0);
  } else {
    if (!c.output_dir.empty() && env_.rank == 0) {
      // Before loading and training: a save that cannot succeed must not cost the run. fp32 tensors
      // (the adapters alone with LoRA) plus the header and config.json.
      const size_t saved = c.lora.enabled() ? model_->trainable_count() : model_->param_count();
      const std::vector<std::string> files =
          c.lora.enabled() ? std::vector<std::string>{"adapter_model.safetensors", "adapter_config.json"}
                           : std::vector<std::string>{"model.safetensors", "config.json"};
      check_save_dir(c.output_dir, saved * sizeof(float) + (size_t(1) << 20), files);
      // A checkpoint's name taken by something strata did not write fails the save: say so now.
      for (const CheckpointEntry& e : list_checkpoint_names(c.output_dir)) check_checkpoint_path_free(e.path);
    }
    // A long run pins most of the host's memory next; the cached checkpoint would be reclaimed page by page then.
    model_->load(c.model_dir, env_.local_world == 1);
  }

  to.time_parts = opt_.json;         // the JSON progress lines carry each step's parts
  to.warmup_steps = c.warmup_steps;  // a caller's own batches (Session::step(batch)); the loop passes its lr
  to.comm = comm_.get();
  if (c.sequence_parallel > 1) to.seq_comm = group_ ? group_.get() : comm_.get();
  trainer_ = std::make_unique<Trainer>(*be_, *model_, to);
  if (rows) {
    LoopOptions lo;
    lo.info = info;
    lo.text = env_.rank > 0 ? nullptr : opt_.text;  // rank 0 alone reports progress
    lo.json = opt_.json && env_.rank == 0;
    lo.stop_requested = opt_.stop_requested;
    lo.on_step = opt_.on_step;
    loop_ = std::make_unique<TrainLoop>(c, *be_, *model_, *trainer_, std::move(*rows), lo);
  }
}

Job::~Job() {
  loop_.reset();
  trainer_.reset();
  model_.reset();
  group_.reset();
  comm_.reset();
  own_be_.reset();
  rdv_.reset();
  if (sink_) std::fclose(sink_);
}

TrainLoop& Job::loop() {
  if (!loop_)
    throw ConfigError("no training data (data or datasets): pass the batches yourself", origin_file(cfg_), "data");
  return *loop_;
}

std::string Job::plan_table() const {
  return format_plan_table(cfg_.plan.preset, trainer_->plan_table(cfg_.batch, longest_batch_len(cfg_)));
}

LoopResult Job::run() {
  return loop().run();
}

std::string Job::save(const std::string& dir) {
  if (dir.empty()) throw ConfigError("no output directory (output_dir, --save)", origin_file(cfg_), "output_dir");
  // ZeRO-1 on a split master: rank 0 needs every owner's low halves for the fp32 save (every rank joins).
  if (!cfg_.lora.enabled()) trainer_->optimizer().gather_masters();
  if (env_.rank != 0) return {};  // every rank holds the same weights
  std::string what;
  if (cfg_.lora.enabled()) {
    model_->save_lora(dir, cfg_.model_dir);
    what = "adapter";
    std::fprintf(opt_.info, "saved LoRA adapter (PEFT layout) to %s\n", dir.c_str());
  } else {
    model_->save(dir);
    what = "model";
    std::fprintf(opt_.info, "saved model to %s\n", dir.c_str());
  }
  if (!tokenizer_dir_.empty())
    if (int n = copy_tokenizer_files(tokenizer_dir_, dir, trained_chat_template(cfg_, tokenizer_dir_)))
      std::fprintf(opt_.info, "copied %d tokenizer file%s from %s\n", n, n == 1 ? "" : "s", tokenizer_dir_.c_str());
  return what;
}

void preview_data(std::FILE* out, const TrainConfig& cfg, const std::string& n_text) {
  const bool digits = !n_text.empty() && n_text.size() <= 6 &&
                      std::all_of(n_text.begin(), n_text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int n = digits ? std::stoi(n_text) : 0;
  if (n <= 0 || cfg.datasets.empty())
    throw ConfigError("--preview-data N needs N in [1, 999999] and datasets in the --config file", "command line",
                      "preview-data");
  const std::string tok_dir = cfg.tokenizer_dir.empty() ? cfg.model_dir : cfg.tokenizer_dir;
  const text::Tokenizer tok = text::Tokenizer::load(tok_dir);
  for (const DatasetSpec& d : cfg.datasets) preview_dataset(out, d, tok, tok_dir, n);
  // The rows the run would take, and the batch lengths they give (rows sized to the data).
  std::fprintf(out, "=== rows\n");
  DatasetRows dr = build_dataset_rows(dataset_options(cfg), tok_dir, out);
  const TokenRows rows = cfg.sample_packing ? TokenRows(std::move(dr.inputs), std::move(dr.targets),
                                                        std::move(dr.positions), cfg.seq, dr.examples)
                                            : TokenRows(std::move(dr.inputs), std::move(dr.targets), cfg.seq);
  TrainConfig c = cfg;
  c.batch_lengths = rows.bucket_lengths(row_multiple(cfg.sequence_parallel));
  std::fprintf(out, "%s\n", describe_batch_lengths(c, rows.longest_row()).c_str());
  std::vector<long> per_len(c.batch_lengths.size());
  long sized = 0;
  for (long r = 0; r < rows.rows(); ++r) {
    const size_t k = size_t(std::lower_bound(c.batch_lengths.begin(), c.batch_lengths.end(), rows.row_len(r)) -
                            c.batch_lengths.begin());
    ++per_len[k];
    sized += c.batch_lengths[k];
  }
  std::string hist;
  for (size_t k = 0; k < per_len.size(); ++k)
    if (per_len[k]) hist += fmt::format("{}{}: {}", hist.empty() ? "" : ", ", c.batch_lengths[k], per_len[k]);
  std::fprintf(out,
               "rows by length (a row alone in its batch): %s | %ld tokens a pass over the rows, against %ld padded "
               "to sequence_len (%.1fx); a batch of several rows takes its longest row's length\n",
               hist.c_str(), sized, rows.rows() * long(cfg.seq), double(rows.rows()) * cfg.seq / double(sized));
}

}  // namespace strata
