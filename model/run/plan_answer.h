// strata-plan's answers: a plain forecast of one step, the fastest plan under a budget, or the longest
// sequence that has one. The tool reads its flags into a PlanQuestion and prints the PlanAnswer
// (tools/plan_report.h); everything between is here.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "model/plan/layout.h"
#include "model/plan/planner.h"
#include "model/run/train_config.h"

namespace strata {

// The command line as read: the run's settings and the tool's own flags (unset: not given).
struct PlanQuestion {
  std::string model;  // --model: a checkpoint directory, a config.json or a built-in name
  // strata-train's defaults but no sequence length, then --config, then the settings' flags
  TrainConfig cfg = [] {
    TrainConfig c;
    c.seq = 0;
    return c;
  }();
  // Checked by plan_request, the errors naming the flag.
  std::optional<long long> seq, batch, lora_rank, every, gpus, pack, rank, seq_multiple, seq_limit;
  std::optional<std::string> mode;    // full|frozen|lora (unset: lora_rank, the settings' LoRA or freeze_base)
  std::optional<std::string> preset;  // the preset's activation rules over the settings' plan
  std::optional<std::string> budget;  // the device budget to plan under (BYTES)
  std::optional<std::string> data;    // the data for the written config (unset: the settings')
  std::string mirror = "cuda", profile = "h100_80gb";
  bool max_seq = false;  // search the longest sequence (needs budget)
};

enum class PlanAsk { forecast, budget, max_seq };

// The question resolved into what the planner runs.
struct PlanRequest {
  PlanAsk ask = PlanAsk::forecast;
  ForecastRequest forecast;             // the run's request as the run builder makes it; max_seq: seq 0 (searched)
  TierBudgets budgets;                  // device: the budget, else the settings' device budget (0: none)
  int seq_multiple = 0, seq_limit = 0;  // max_seq: the lengths searched
  std::string seq_limit_why;            // max_seq: what set seq_limit (--seq-limit, or max_seq_upper_bound's why)
  // budget over several GPUs without both a sequence_parallel and a zero_stage given: the planner chooses the
  // layout (model/plan/layout.h); fixed_sp (> 0) and fixed_zero (>= 0) are the ones given.
  bool choose_layout = false;
  int fixed_sp = 0, fixed_zero = -1;
  // YAML the written config adds to the plan's: base_model, data, grad_reduce_dtype, zero_stage, max_grad_norm.
  std::string run_keys;
  // Rows sized to the data (a --config with datasets and no --seq): the datasets' batch lengths, the forecast
  // being of the longest; `data_note` says so (describe_batch_lengths). The written config keeps sequence_len.
  std::vector<int> batch_lengths;
  int sequence_len = 0;
  std::string data_note;
  bool planned() const { return ask != PlanAsk::forecast; }
};
// ConfigError naming the flag for a value out of range or a combination the planner cannot run.
PlanRequest plan_request(const PlanQuestion& q);

struct PlanAnswer {
  bool found = true;        // false: nothing fits the budgets (planner.minimum_bytes etc. say why)
  ForecastRequest request;  // at the answer's sequence length, MLP tiles and rank (ZeRO: the largest peak)
  Plan plan;                // the chosen plan (forecast: the request's)
  Forecast forecast;        // the plan's step
  size_t budget = 0;        // what the verdict measures against (forecast without a budget: the default arena)
  std::string budget_what;  // "the budget", "a h100_80gb (default arena: ...)", "" (none)
  PlanResult planner;       // budget, max_seq: the planner's result
  MaxSeqResult search;      // max_seq: the search (its plan moved to `planner`)
  LayoutChoice layout;      // choose_layout: the layouts tried (its plan moved to `planner`)
  std::string yaml;         // found: the strata-train config (plan_yaml and the run keys)
};
PlanAnswer answer_plan(const PlanRequest& r);

}  // namespace strata
