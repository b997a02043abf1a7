// strata-plan's output (tools/strata_plan.cpp): the question, the forecast, the host and disk tiers and the planner's
// result as text lines and as JSON.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/plan_answer.h"
#include "tools/cli.h"

namespace strata::tools {

using json = nlohmann::ordered_json;

// "50257 (padded to 50304)", or the plain count when padding changes nothing.
std::string vocab_label(int vocab, int multiple);
// "keep/recompute/host/disk": the decisions the tier budgets allow.
std::string tiers_used(size_t host_budget, size_t disk_budget);
std::string lower(std::string s);
// The GPU of this machine, from --device-name or nvidia-smi; empty when neither says.
std::string current_device(const cli::Args& a);
double pct(double part, double whole);
// The host and disk tiers' peaks, and the host budget's verdict.
void print_host(const Forecast& f, size_t host_budget);
// The device peak's breakdown, the budget's verdict and the step time.
void print_forecast(const Forecast& f, size_t budget, const std::string& budget_what);
json planner_json(const PlanResult& pr, size_t budget, size_t host_budget, size_t disk_budget);
// ZeRO: every rank's peak under the chosen plan (the planner fitted each), and whose forecast follows.
void print_rank_peaks(std::FILE* info, const PlanResult& pr);
// Why the planner found nothing (stderr), and the same in out["planner"].
void report_unfit(const PlanResult& pr, size_t budget, size_t host_budget, size_t disk_budget, json& out);
json items(const std::vector<MemoryItem>& v);
json forecast_json(const Forecast& f);
// The answer in one line, printed first: "fits: peak X of Y (...), Z tokens/s" or "does not fit: ...".
std::string verdict(const Forecast& f, size_t budget, const std::string& budget_what);

// On stderr: the profile is for another GPU than `device` (this machine's), or the budget exceeds its arena.
void warn_profile(const std::string& device, const PlanRequest& r);
// What is asked, on `info`, before the answer is worked out: the model and shape, the ranks, the sim's
// profile, the state precision, the tiers.
void print_question(std::FILE* info, const std::string& model, const PlanRequest& r);
// The answer: text on stdout and notes on `info`, or with `json_out` one JSON object on stdout.
// Returns the exit code: 1 when nothing fits the budgets (why, on stderr), else 0.
int print_answer(std::FILE* info, bool json_out, const std::string& model, const PlanRequest& r, const PlanAnswer& a);
// The answer's strata-train config into `config_path` and its arena timeline into `svg_path` (each: "" = none).
void write_answer_files(std::FILE* info, const std::string& config_path, const std::string& svg_path,
                        const std::string& model, const PlanAnswer& a);

}  // namespace strata::tools
