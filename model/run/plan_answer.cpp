#include "model/run/plan_answer.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "engine/backend_sim.h"
#include "model/data/datasets.h"
#include "model/data/row_data.h"
#include "model/llama/seq_parallel.h"
#include "model/run/forecast_request.h"
#include "model/run/job.h"
#include "model/run/settings.h"

namespace strata {

namespace {

ConfigError flag_error(const std::string& msg, const char* flag) {
  return ConfigError(msg, "command line", flag);
}

}  // namespace

PlanRequest plan_request(const PlanQuestion& q) {
  PlanRequest r;
  TrainConfig tc = q.cfg;
  const bool max_seq = q.max_seq;
  r.ask = max_seq ? PlanAsk::max_seq : q.budget ? PlanAsk::budget : PlanAsk::forecast;
  // What strata-train also needs to run the written config alone: the checkpoint directory
  // (not a built-in name or a bare config.json) and the data (--data, or --config's data).
  {
    std::error_code ec;
    const std::string model_dir =
        std::filesystem::is_directory(q.model, ec) ? std::filesystem::absolute(q.model, ec).string() : "";
    const std::string data = q.data ? *q.data : tc.data_path;
    if (!model_dir.empty()) r.run_keys += fmt::format("base_model: {}\n", nlohmann::json(model_dir).dump());
    if (!data.empty())
      r.run_keys += fmt::format("data: {}\n", nlohmann::json(std::filesystem::absolute(data, ec).string()).dump());
  }
  // The run's settings, then its forecast request as the run builder makes it (model/run/forecast_request.h);
  // the tool's own flags (--seq, --batch, --mode, --preset, --gpus, --rank, --pack) on top.
  tc.seq = max_seq ? 0 : tool_flag_int(q.seq, "seq", tc.seq, 1);  // --max-seq: sequence_len of a --config is ignored
  tc.batch = tool_flag_int(q.batch, "batch", tc.batch, 1);
  const TrainMode mode = q.mode              ? parse_train_mode(*q.mode)
                         : q.lora_rank       ? TrainMode::lora
                         : tc.lora.enabled() ? TrainMode::lora
                         : tc.freeze_base    ? TrainMode::frozen
                                             : TrainMode::full;
  tc.lora.rank =
      mode == TrainMode::lora ? tool_flag_int(q.lora_rank, "lora-rank", tc.lora.rank ? tc.lora.rank : 16, 1) : 0;
  tc.freeze_base = mode == TrainMode::frozen;
  if (q.preset) {  // the preset's activation rules; the config's state placement stays
    Plan preset = preset_plan(*q.preset, tool_flag_int(q.every, "every", 1, 1), "--preset", "command line", "preset");
    preset.take_state(tc.plan);
    preset.mlp_tiles = tc.plan.mlp_tiles;
    tc.plan = preset;
  }
  const std::optional<SimMirror> mirror = parse_name(kSimMirrors, q.mirror);
  if (!mirror)
    throw flag_error(fmt::format("--mirror must be {}, got '{}'", name_choices(kSimMirrors), q.mirror), "mirror");
  // A config's datasets and no --seq: the forecast is of the longest batch the data gives (rows sized to the data),
  // as strata-train's. The tokenizer is the config's, or the --model checkpoint's.
  if (!max_seq && !q.seq && !tc.datasets.empty() && !q.pack && tc.seq > 0 && !tc.pad_to_sequence_len) {
    std::error_code ec;
    const std::string tok_dir = !tc.tokenizer_dir.empty()                    ? tc.tokenizer_dir
                                : std::filesystem::is_directory(q.model, ec) ? q.model
                                                                             : "";
    if (tok_dir.empty())
      throw flag_error(fmt::format("the --config's datasets need a tokenizer to size the rows: give --model a "
                                   "checkpoint directory, tokenizer in the config, or --seq N (got --model {})",
                                   q.model),
                       "model");
    DatasetRows dr = build_dataset_rows(dataset_options(tc), tok_dir, nullptr);
    const TokenRows rows = tc.sample_packing ? TokenRows(std::move(dr.inputs), std::move(dr.targets),
                                                         std::move(dr.positions), tc.seq, dr.examples)
                                             : TokenRows(std::move(dr.inputs), std::move(dr.targets), tc.seq);
    tc.batch_lengths = rows.bucket_lengths(row_multiple(tc.sequence_parallel));
    r.batch_lengths = tc.batch_lengths;
    r.sequence_len = tc.seq;
    r.data_note = describe_batch_lengths(tc, rows.longest_row());
  }
  ForecastRequest& req = r.forecast;
  req = train_forecast_request(tc, resolve_model(q.model), *mirror, find_profile(q.profile));
  req.lora_rank = std::max(1, tc.lora.rank);
  req.gpus = tool_flag_int(q.gpus, "gpus", req.sequence_parallel, 1,
                           kMaxForecastRanks);  // --sequence-parallel N alone: N GPUs
  if (req.gpus % req.sequence_parallel != 0)
    throw flag_error(fmt::format("--sequence-parallel {} must divide --gpus {} (data-parallel groups of {} ranks)",
                                 req.sequence_parallel, req.gpus, req.sequence_parallel),
                     "sequence-parallel");
  if (!max_seq && req.seq > 0)  // the shape's range before anything is allocated for it (--pack's positions)
    check_seq_parallel_len(req.seq, req.sequence_parallel), check_forecast_shape(req);
  if (const int pack = tool_flag_int(q.pack, "pack", 1, 1); pack > 1) {  // rows of `pack` packed examples
    if (max_seq) throw flag_error("--pack goes with --seq, not --max-seq", "pack");
    if (req.seq % pack) throw flag_error(fmt::format("--pack {} must divide --seq {}", pack, req.seq), "pack");
    for (long i = 0; i < long(req.batch) * req.seq; ++i) req.positions.push_back(int32_t(i % (req.seq / pack)));
  }
  if (tc.grad_reduce == DType::bf16) r.run_keys += "grad_reduce_dtype: bf16\n";
  req.rank = tool_flag_int(q.rank, "rank", 0, 0);  // ZeRO's shares differ between ranks
  if (req.rank >= req.gpus)
    throw flag_error(
        fmt::format("--rank {} is not one of the --gpus {} ranks (0..{})", req.rank, req.gpus, req.gpus - 1), "rank");
  if (max_seq) {
    r.seq_multiple = tool_flag_int(q.seq_multiple, "seq-multiple", 1024, 1, kMaxForecastSeq);
    // Every length tried splits evenly over a sequence-parallel group (as max_seq_for_budget rounds it).
    if (r.seq_multiple % req.sequence_parallel != 0) r.seq_multiple = std::lcm(r.seq_multiple, req.sequence_parallel);
    if (q.seq_limit) {
      r.seq_limit = tool_flag_int(q.seq_limit, "seq-limit", 0, r.seq_multiple, kMaxForecastSeq);
      r.seq_limit_why = fmt::format("--seq-limit {}", r.seq_limit);
    }
  } else if (req.seq < 1) {  // the flags and the YAML keys are checked as read; only a missing --seq is left
    throw flag_error("--seq N (or sequence_len in the --config file) is required", "seq");
  }
  if (req.max_grad_norm != TrainConfig{}.max_grad_norm)
    r.run_keys += fmt::format("max_grad_norm: {}\n", req.max_grad_norm);
  // Several GPUs under a budget: what the run leaves open of the layout, the planner chooses.
  r.choose_layout = (r.ask == PlanAsk::budget || r.ask == PlanAsk::max_seq) && req.gpus > 1 &&
                    !(tc.sequence_parallel_given && tc.zero_stage_given);
  r.fixed_sp = tc.sequence_parallel_given ? tc.sequence_parallel : 0;
  r.fixed_zero = tc.zero_stage_given ? tc.zero_stage : -1;
  r.budgets.host = tc.host_budget_bytes;
  r.budgets.disk = tc.disk_budget_bytes;
  r.budgets.device = q.budget ? parse_bytes(*q.budget, "--budget") : tc.device_budget_bytes;
  if (max_seq && !q.seq_limit) {  // no silent cap: as long as the budgets could hold
    // Choosing the layout: as long as the widest sequence-parallel group could hold.
    ForecastRequest widest = req;
    if (r.choose_layout) widest.sequence_parallel = widest_sequence_parallel(req, r.fixed_sp);
    const SeqLimit lim = max_seq_upper_bound(widest, r.budgets);
    r.seq_limit = lim.seq / r.seq_multiple * r.seq_multiple;
    r.seq_limit_why = lim.why;
    if (r.seq_limit < r.seq_multiple)
      throw flag_error(fmt::format("--max-seq: not even {} tokens can fit: {}", r.seq_multiple, lim.why), "budget");
  }
  return r;
}

PlanAnswer answer_plan(const PlanRequest& r) {
  PlanAnswer a;
  a.request = r.forecast;
  a.plan = r.forecast.plan;
  a.budget = r.budgets.device;
  a.budget_what = a.budget ? "the budget" : "";
  ForecastRequest& req = a.request;
  if (r.planned()) {
    if (r.ask == PlanAsk::max_seq) {
      if (r.choose_layout) {  // the layout chosen at each length tried
        MaxSeqLayout ml =
            max_seq_with_layout(req, r.budgets, r.seq_multiple, r.seq_limit, r.seq_multiple, r.fixed_sp, r.fixed_zero);
        a.search = std::move(ml.search);
        a.layout = std::move(ml.layout);
        req.sequence_parallel = a.layout.layout.sequence_parallel;
        req.zero_stage = a.layout.layout.zero_stage;
      } else {
        a.search = max_seq_for_budget(req, r.budgets, r.seq_multiple, r.seq_limit, r.seq_multiple);
      }
      a.planner = std::move(a.search.plan);
      a.search.plan = PlanResult{};
      if (a.search.found) req.seq = a.search.seq;
    } else if (r.choose_layout) {
      a.layout = plan_layout(req, r.budgets, r.fixed_sp, r.fixed_zero);
      a.planner = std::move(a.layout.plan);
      a.layout.plan = PlanResult{};
      req.sequence_parallel = a.layout.layout.sequence_parallel;
      req.zero_stage = a.layout.layout.zero_stage;
    } else {
      a.planner = plan_for_budget(req, r.budgets);
    }
    a.found = r.ask == PlanAsk::max_seq ? a.search.found : a.planner.found;
    if (!a.found) return a;
    a.forecast = a.planner.forecast;
    a.plan = a.planner.plan;
    req.mlp_tiles = a.planner.plan.mlp_tiles;
    if (!a.planner.rank_peak_bytes.empty()) req.rank = a.planner.rank;
  } else {
    const DeviceProfile& p = req.profile;
    if (!a.budget) {
      a.budget = p.default_arena_bytes();
      a.budget_what = fmt::format("a {} (default arena: total less the context and 2 GiB headroom)", p.name);
    }
    ForecastRequest fr = req;
    fr.budget = 0;
    a.forecast = forecast(fr);
    if (a.forecast.peak_bytes <= a.budget) {  // the placement under the real budget decides whether it fits
      fr.budget = a.budget;
      Forecast fb = forecast(fr);
      if (fb.fits)
        a.forecast = std::move(fb);
      else
        a.forecast.fits = false, a.forecast.oom = fb.oom;
    }
  }
  a.yaml = plan_yaml(req, a.plan, a.forecast, r.planned() ? a.budget : 0) + r.run_keys;
  if (req.zero_stage) a.yaml += fmt::format("zero_stage: {}\n", req.zero_stage);
  if (!r.batch_lengths.empty()) {  // the config's sequence_len: the rows stay what they were, batches data-sized
    const std::string planned = fmt::format("sequence_len: {}\n", req.seq);
    if (const size_t at = a.yaml.find(planned); at != std::string::npos)
      a.yaml.replace(at, planned.size(),
                     fmt::format("sequence_len: {}  # batches sized to the data: at most {} tokens, as planned\n",
                                 r.sequence_len, req.seq));
  }
  return a;
}

}  // namespace strata
