// strata-plan's output: the forecast, the host and disk tiers, the planner's verdict, as text and JSON.
#include "tools/plan_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>

#include "engine/ops.h"
#include "model/llama/shapes.h"
#include "model/plan/timeline_svg.h"
#include "model/run/job.h"

namespace strata::tools {

// "50257 (padded to 50304)", or the plain count when padding changes nothing.
std::string vocab_label(int vocab, int multiple) {
  const int64_t padded = padded_vocab(vocab, multiple);
  return padded == vocab ? std::to_string(vocab) : fmt::format("{} (padded to {})", vocab, padded);
}

std::string tiers_used(size_t host_budget, size_t disk_budget) {
  std::string t = "keep/recompute";
  if (host_budget) t += "/host";
  if (disk_budget) t += "/disk";
  return t;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The GPU of this machine, from --device-name or nvidia-smi; empty when neither says.
std::string current_device(const cli::Args& a) {
  if (a.has("device-name")) return a.str("device-name");
  std::FILE* p = popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", "r");
  if (!p) return "";
  char buf[256] = {0};
  std::string name = std::fgets(buf, sizeof buf, p) ? std::string(buf) : std::string();
  pclose(p);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  return name;
}

double pct(double part, double whole) {
  return whole > 0 ? 100.0 * part / whole : 0.0;
}

void print_host(const Forecast& f, size_t host_budget) {
  std::printf("peak host memory (host tier): %s = slot store %s (reserved %s; %s offloaded, %s loaded back)",
              format_bytes(f.peak_host_bytes).c_str(), format_bytes(f.peak_host_slot_bytes).c_str(),
              format_bytes(f.host_reserved_bytes).c_str(), format_bytes(f.offloaded_bytes).c_str(),
              format_bytes(f.loaded_bytes).c_str());
  if (f.paged_host_bytes)
    std::printf(" + weight pager %s (%ld layer uploads, %s this step)", format_bytes(f.paged_host_bytes).c_str(),
                f.paged_uploads, format_bytes(f.paged_bytes_uploaded).c_str());
  if (f.state_host_bytes)
    std::printf(" + persistent state %s (%s copied both ways this step)", format_bytes(f.state_host_bytes).c_str(),
                format_bytes(f.state_bytes_moved).c_str());
  std::printf("\n");
  if (f.copy_busy_s > 0)
    std::printf("host copies: copy stream busy %.4f s, compute waited %.4f s on them\n", f.copy_busy_s, f.copy_wait_s);
  if (f.peak_disk_bytes)
    std::printf(
        "peak disk (disk tier): %s = extents %s + persistent state file %s (%s written, %s read back; staging is in "
        "the host peak); disk busy %.4f s, waited on %.4f s\n",
        format_bytes(f.peak_disk_bytes).c_str(), format_bytes(f.peak_disk_bytes - f.state_disk_bytes).c_str(),
        format_bytes(f.state_disk_bytes).c_str(), format_bytes(f.disk_written_bytes).c_str(),
        format_bytes(f.disk_read_bytes).c_str(), f.disk_busy_s, f.disk_wait_s);
  if (host_budget) {
    // Held to the pinned reservations (taken whole), which the peak never exceeds.
    const size_t held = f.host_held_bytes();
    if (held <= host_budget)
      std::printf("fits the host budget: %s of %s left (pinned %s, peak %s)\n",
                  format_bytes(host_budget - held).c_str(), format_bytes(host_budget).c_str(),
                  format_bytes(f.pinned_bytes).c_str(), format_bytes(f.peak_host_bytes).c_str());
    else
      std::printf("does NOT fit the host budget (%s): its pinned host memory (%s) needs %s more\n",
                  format_bytes(host_budget).c_str(), format_bytes(held).c_str(),
                  format_bytes(held - host_budget).c_str());
  }
}

void print_forecast(const Forecast& f, size_t budget, const std::string& budget_what) {
  std::printf("\npeak device memory (arena in use): %s, in %s at %.4f s of the step\n",
              format_bytes(f.peak_bytes).c_str(), f.peak_phase.c_str(), f.peak_at_s);
  for (auto& it : f.breakdown)
    std::printf("  %-40s %12s  %5.1f%%\n", it.name.c_str(), format_bytes(it.bytes).c_str(),
                pct(double(it.bytes), double(f.peak_bytes)));
  if (!f.activations.empty()) {
    std::printf("  activations at the peak, by slot class:\n");
    for (auto& it : f.activations)
      std::printf("    %-30s %4d x %12s\n", it.name.c_str(), it.count, format_bytes(it.bytes).c_str());
  }
  if (!f.workspaces.empty()) {
    std::printf("  workspaces at the peak:");
    for (auto& it : f.workspaces) std::printf(" %s %s", it.name.c_str(), format_bytes(it.bytes).c_str());
    std::printf("\n");
  }
  std::printf("arena high-water %s: %s of holes under it (fragmentation); saved slots at the end of forward %s\n",
              format_bytes(f.high_water_bytes).c_str(),
              format_bytes(f.high_water_bytes > f.peak_bytes ? f.high_water_bytes - f.peak_bytes : 0).c_str(),
              format_bytes(f.saved_bytes).c_str());
  if (budget) {
    if (f.fits && f.high_water_bytes <= budget)
      std::printf("fits %s: %s of %s left at the peak\n", budget_what.c_str(),
                  format_bytes(budget - f.peak_bytes).c_str(), format_bytes(budget).c_str());
    else
      std::printf("does NOT fit %s (%s): %s\n", budget_what.c_str(), format_bytes(budget).c_str(),
                  f.oom.empty() ? fmt::format("needs {} more", format_bytes(f.high_water_bytes - budget)).c_str()
                                : f.oom.c_str());
  }
  std::printf(
      "\nstep time %.4f s: forward %.4f s, backward %.4f s (recompute %.4f s), optimizer %.4f s | %.0f tokens/s\n",
      f.step_s, f.forward_s, f.backward_s, f.recompute_s, f.optimizer_s, f.tokens_per_s);
  if (f.comm_busy_s > f.all_to_all_s)
    std::printf("  data parallel: gradient all-reduces busy %.4f s a step beside compute (per rank)\n",
                f.comm_busy_s - f.all_to_all_s);
  if (f.all_to_all_s > 0)
    std::printf(
        "  sequence parallel: all-to-alls around attention busy %.4f s a step; compute waited %.4f s on "
        "collectives (per rank)\n",
        f.all_to_all_s, f.comm_wait_s);
  std::printf("  time by op:");
  for (auto& [op, s] : f.time_by_op) std::printf(" %s %.1f%%", op.c_str(), pct(s, f.step_s));
  std::printf(" | %ld kernels, %ld recomputed nodes\n", f.kernels, f.recomputed_nodes);
  std::printf(
      "first step: %.1f s, the step's %.1f s + %.1f s once: the host tier's pinned allocation %.1f s (%s) and "
      "first-call tuning and plan builds %.1f s; before it, at load, the state's and paged weights' pinned allocation "
      "%.1f s (%s)\n",
      f.first_step_s(), f.step_s, f.first_step_extra_s, f.setup_pinned_s - f.load_pinned_s,
      format_bytes(f.host_reserved_bytes).c_str(), f.setup_tuning_s, f.load_pinned_s,
      format_bytes(f.paged_host_bytes + f.state_host_bytes).c_str());
  if (f.setup_fresh_pinned_s > 0)
    std::printf(
        "  on a freshly started machine (host memory never touched, as a new cloud VM's) that pinning can take up to "
        "%.1f s instead of %.1f s (%s on each of the machine's ranks at once, at the profile's machine-wide "
        "pinned_first_touch_gbps)\n",
        f.setup_fresh_pinned_s, f.setup_pinned_s, format_bytes(f.pinned_bytes).c_str());
}

json planner_json(const PlanResult& pr, size_t budget, size_t host_budget, size_t disk_budget) {
  json j = {{"found", pr.found},
            {"budget", budget},
            {"host_budget", host_budget},
            {"disk_budget", disk_budget},
            {"sim_runs", pr.sim_runs},
            {"label", pr.label},
            {"layer_offloading", pr.plan.pages_layer_weights()},
            {"mlp_tiles", pr.plan.mlp_tiles},
            {"stopped_at_time_limit", pr.stopped}};
  if (!pr.rank_peak_bytes.empty()) {  // ZeRO: the plan fits every rank; the forecast is max_rank's
    j["rank_peak_bytes"] = pr.rank_peak_bytes;
    j["max_rank"] = pr.rank;
    j["max_rank_peak_bytes"] = *std::max_element(pr.rank_peak_bytes.begin(), pr.rank_peak_bytes.end());
  }
  return j;
}

// ZeRO: every rank's peak under the chosen plan (the planner fitted each), and whose forecast follows; a run of
// ranks with the same peak as one entry ("ranks 21-99999 37.05 MiB": the ranks owning no state are many).
void print_rank_peaks(std::FILE* info, const PlanResult& pr) {
  if (pr.rank_peak_bytes.empty()) return;
  std::string peaks;
  const std::vector<size_t>& p = pr.rank_peak_bytes;
  for (size_t q = 0; q < p.size();) {
    size_t end = q + 1;
    while (end < p.size() && p[end] == p[q]) ++end;
    peaks += end == q + 1 ? fmt::format("{}rank {} {}", q ? ", " : "", q, format_bytes(p[q]))
                          : fmt::format("{}ranks {}-{} {}", q ? ", " : "", q, end - 1, format_bytes(p[q]));
    q = end;
  }
  std::fprintf(info, "ranks: peak device %s; the plan fits every rank, the forecast is rank %d's (the largest)\n",
               peaks.c_str(), pr.rank);
}

// Why the planner found nothing (stderr), and the same in out["planner"].
void report_unfit(const PlanResult& pr, size_t budget, size_t host_budget, size_t disk_budget, json& out) {
  if (pr.stopped) {  // no diagnosis: the search ran out of time before it found a plan
    std::fprintf(stderr,
                 "strata-plan: no plan found to fit a device budget of %s with %s before the search's time limit "
                 "(%d sim runs); raise --plan-time-limit (plan_time_limit) or lower the shape\n",
                 format_bytes(budget).c_str(), tiers_used(host_budget, disk_budget).c_str(), pr.sim_runs);
    return;
  }
  std::fprintf(stderr,
               "strata-plan: nothing fits a device budget of %s with %s: the lowest-memory plan (%s) needs "
               "at least %s, %s more (device tier; %d sim runs)\n",
               format_bytes(budget).c_str(), tiers_used(host_budget, disk_budget).c_str(), pr.label.c_str(),
               format_bytes(pr.minimum_bytes).c_str(), format_bytes(pr.minimum_bytes - budget).c_str(), pr.sim_runs);
  if (!pr.short_tier.empty()) {
    const size_t have = pr.short_tier == "host" ? host_budget : disk_budget;
    std::fprintf(stderr,
                 "strata-plan: with more %s memory it would fit: '%s' fits the device budget and needs %s of "
                 "%s (--%s-budget %s, %s more)\n",
                 pr.short_tier.c_str(), pr.short_tier_label.c_str(), format_bytes(pr.short_tier_needs).c_str(),
                 pr.short_tier.c_str(), pr.short_tier.c_str(), format_bytes(pr.short_tier_needs).c_str(),
                 format_bytes(pr.short_tier_needs - have).c_str());
    out["planner"]["short_tier"] = pr.short_tier;
    out["planner"]["short_tier_needs"] = pr.short_tier_needs;
  }
  if (pr.persistent_bytes >= budget)
    std::fprintf(stderr,
                 "strata-plan: the weights, gradients and optimizer state alone take %s (no activation "
                 "plan lowers them; frozen or LoRA training does)\n",
                 format_bytes(pr.persistent_bytes).c_str());
  out["planner"]["minimum_bytes"] = pr.minimum_bytes;
  out["planner"]["persistent_bytes"] = pr.persistent_bytes;
}

json items(const std::vector<MemoryItem>& v) {
  json j = json::array();
  for (auto& it : v) j.push_back({{"name", it.name}, {"bytes", it.bytes}, {"count", it.count}});
  return j;
}

json forecast_json(const Forecast& f) {
  json t = json::object();
  for (auto& [op, s] : f.time_by_op) t[op] = s;
  return {{"fits", f.fits},
          {"oom", f.oom},
          {"setup",
           {{"seconds", f.setup_s},
            {"pinned_bytes", f.pinned_bytes},
            {"pinned_alloc_s", f.setup_pinned_s},
            {"pinned_alloc_fresh_machine_s", f.setup_fresh_pinned_s},
            {"tuning_s", f.setup_tuning_s},
            {"load_pinned_alloc_s", f.load_pinned_s},
            {"first_step_extra_s", f.first_step_extra_s},
            {"first_step_s", f.first_step_s()}}},
          {"peak_bytes", f.peak_bytes},
          {"high_water_bytes", f.high_water_bytes},
          {"persistent_bytes", f.persistent_bytes},
          {"peak_phase", f.peak_phase},
          {"peak_at_s", f.peak_at_s},
          {"breakdown", items(f.breakdown)},
          {"activations", items(f.activations)},
          {"workspaces", items(f.workspaces)},
          {"saved_bytes", f.saved_bytes},
          {"step_s", f.step_s},
          {"forward_s", f.forward_s},
          {"backward_s", f.backward_s},
          {"recompute_s", f.recompute_s},
          {"optimizer_s", f.optimizer_s},
          {"tokens_per_s", f.tokens_per_s},
          {"comm_busy_s", f.comm_busy_s},
          {"all_to_all_s", f.all_to_all_s},
          {"comm_wait_s", f.comm_wait_s},
          {"time_by_op_s", t},
          {"kernels", f.kernels},
          {"recomputed_nodes", f.recomputed_nodes},
          {"peak_host_bytes", f.peak_host_bytes},
          {"peak_host_slot_bytes", f.peak_host_slot_bytes},
          {"host_reserved_bytes", f.host_reserved_bytes},
          {"paged_host_bytes", f.paged_host_bytes},
          {"state_host_bytes", f.state_host_bytes},
          {"state_bytes_moved", f.state_bytes_moved},
          {"offloaded_bytes", f.offloaded_bytes},
          {"loaded_bytes", f.loaded_bytes},
          {"paged_bytes_uploaded", f.paged_bytes_uploaded},
          {"paged_uploads", f.paged_uploads},
          {"copy_busy_s", f.copy_busy_s},
          {"copy_wait_s", f.copy_wait_s},
          {"peak_disk_bytes", f.peak_disk_bytes},
          {"state_disk_bytes", f.state_disk_bytes},
          {"disk_written_bytes", f.disk_written_bytes},
          {"disk_read_bytes", f.disk_read_bytes},
          {"disk_busy_s", f.disk_busy_s},
          {"disk_wait_s", f.disk_wait_s}};
}

std::string verdict(const Forecast& f, size_t budget, const std::string& budget_what) {
  if (!budget)
    return fmt::format("forecast: peak {}, {:.0f} tokens/s (no budget given)", format_bytes(f.peak_bytes),
                       f.tokens_per_s);
  if (f.fits && f.high_water_bytes <= budget)
    return fmt::format("fits: peak {} of {} ({}), {:.0f} tokens/s", format_bytes(f.peak_bytes), format_bytes(budget),
                       budget_what, f.tokens_per_s);
  return fmt::format("does not fit: {} ({}) {}", format_bytes(budget), budget_what,
                     f.oom.empty() ? fmt::format("needs {} more", format_bytes(f.high_water_bytes - budget)) : f.oom);
}

void warn_profile(const std::string& device, const PlanRequest& r) {
  const DeviceProfile& p = r.forecast.profile;
  const size_t budget = r.budgets.device;
  if (!device.empty() && !p.match.empty() && lower(device).find(lower(p.match)) == std::string::npos)
    std::fprintf(stderr,
                 "strata-plan: warning: the profile '%s' is for another GPU than this machine's '%s'; pass "
                 "--profile for it (or run strata-calibrate) for a time forecast of this GPU\n",
                 p.name.c_str(), device.c_str());
  if (r.planned() && p.memory_bytes && budget > p.default_arena_bytes())
    std::fprintf(stderr,
                 "strata-plan: warning: --budget %s is more than a %s's arena can hold (%s: its %s less the CUDA "
                 "context and headroom); a plan that needs it will not fit that GPU: --budget %s at most\n",
                 format_bytes(budget).c_str(), p.name.c_str(), format_bytes(p.default_arena_bytes()).c_str(),
                 format_bytes(p.memory_bytes).c_str(), format_bytes(p.default_arena_bytes()).c_str());
}

static bool calibrated(const DeviceProfile& p) {
  return p.source.find("not calibrated") == std::string::npos;
}

void print_question(std::FILE* info, const std::string& model, const PlanRequest& r) {
  const ForecastRequest& req = r.forecast;
  const DeviceProfile& p = req.profile;
  const io::LlamaConfig& c = req.model;
  const size_t host_budget = r.budgets.host, disk_budget = r.budgets.disk;
  std::fprintf(
      info,
      "strata-plan: %s | %d layers, hidden %d, heads %d/%d, head dim %d, mlp %d, vocab %s | seq %s x batch %d%s "
      "| %s training%s\n",
      model.c_str(), c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
      c.intermediate_size, vocab_label(c.vocab_size, req.pad_vocab_multiple).c_str(),
      r.ask == PlanAsk::max_seq ? fmt::format("longest multiple of {} up to {}", r.seq_multiple, r.seq_limit).c_str()
                                : std::to_string(req.seq).c_str(),
      req.batch,
      req.grad_accum > 1 ? fmt::format(" x {} micro-batches (gradient accumulation)", req.grad_accum).c_str() : "",
      train_mode_name(req.mode), req.mode == TrainMode::lora ? fmt::format(" (rank {})", req.lora_rank).c_str() : "");
  if (!r.data_note.empty()) std::fprintf(info, "%s\n", r.data_note.c_str());
  if (r.choose_layout)
    std::fprintf(info, "ranks: %d GPUs; the planner chooses %s\n", req.gpus,
                 r.fixed_sp > 0      ? fmt::format("the ZeRO stage (sequence parallel {} given)", r.fixed_sp).c_str()
                 : r.fixed_zero >= 0 ? fmt::format("the sequence-parallel degree (ZeRO-{} given)", r.fixed_zero).c_str()
                                     : "the sequence-parallel degree and the ZeRO stage (--sequence-parallel, "
                                       "--zero-stage fix them)");
  else if (req.gpus > 1)
    std::fprintf(info, "ranks: %d GPUs%s; %s%s\n", req.gpus,
                 req.sequence_parallel > 1
                     ? fmt::format(" in {} data-parallel group{} of {} (sequence parallel: each rank holds seq/{} "
                                   "tokens of a row, and attends over every token on {} heads)",
                                   req.gpus / req.sequence_parallel, req.gpus / req.sequence_parallel == 1 ? "" : "s",
                                   req.sequence_parallel, req.sequence_parallel,
                                   req.model.num_attention_heads / req.sequence_parallel)
                           .c_str()
                     : " (data parallel)",
                 (req.zero_stage > 0 && r.planned()
                      ? std::string("the planner fits every rank and forecasts the one with the largest peak")
                      : fmt::format("the forecast is rank {}'s", req.rank))
                     .c_str(),
                 req.zero_stage == 0   ? ""
                 : req.zero_stage == 1 ? " (ZeRO-1: its share of the optimizer state)"
                 : req.zero_stage == 2 ? " (ZeRO-2: its share of the optimizer state and of the gradients)"
                                       : " (ZeRO-3: its share of the optimizer state, gradients and layer weights)");
  std::fprintf(info, "sim: profile %s (%s), mirroring the %s backend's dtypes and allocations\n", p.name.c_str(),
               calibrated(p) ? p.source.c_str() : "datasheet/anchors, NOT calibrated: times are rough",
               sim_mirror_name(req.mirror));
  std::fprintf(info, "state precision: master_weights %s, optimizer_state %s, gradients %s\n",
               master_weights_name(req.recipe.master), optimizer_state_name(req.recipe.moments),
               gradients_name(req.recipe.gradients));
  std::fputs(
      fp8_line(req.fp8, req.model, int64_t(req.batch) * req.seq / std::max(1, req.sequence_parallel), req.mlp_tiles > 1)
          .c_str(),
      info);
  std::fprintf(info, "tiers: device, host and disk; %s%s%s%s\n",
               !req.plan.pages_layer_weights() ? "no weight paging"
               : req.mode == TrainMode::full   ? "trainable layer weights paged from host"
                                               : "frozen layer weights paged from host",
               host_budget ? fmt::format(", host budget {}", format_bytes(host_budget)).c_str() : "",
               disk_budget ? fmt::format(", disk budget {}", format_bytes(disk_budget)).c_str() : "",
               r.planned()
                   ? fmt::format("; the planner chooses {} per slot class{}", tiers_used(host_budget, disk_budget),
                                 req.mode != TrainMode::full && host_budget ? " and weight paging" : "")
                         .c_str()
                   : "");
}

// The layout the planner chose for several GPUs, why, and the others tried (fastest fitting first).
static void print_layouts(std::FILE* info, const PlanAnswer& a, json& out) {
  const LayoutChoice& lc = a.layout;
  const int gpus = a.request.gpus;
  std::fprintf(info, "%s\n",
               wrap_list(fmt::format("layout: {}{}: {}", layout_name(lc.layout, gpus),
                                     lc.found ? "" : " (nothing fits)", lc.why))
                   .c_str());
  json tried = json::array();
  for (const LayoutTried& t : lc.tried) {
    const bool chosen = lc.found && t.fits && t.layout.sequence_parallel == lc.layout.sequence_parallel &&
                        t.layout.zero_stage == lc.layout.zero_stage;
    std::string line = fmt::format("  {}{}: {}", chosen ? "* " : "  ", layout_name(t.layout, gpus), t.status);
    if (t.fits)
      line += fmt::format(", {:.0f} tokens/s, device peak {}: {}", t.tokens_per_s, format_bytes(t.peak_bytes), t.label);
    else if (t.status.rfind("nothing", 0) == 0)
      line += fmt::format(" (keeping everything would give {:.0f} tokens/s)", t.bound_tokens_per_s);
    if (t.sim_runs > 0) line += fmt::format(" [{} sim runs, {:.1f} s]", t.sim_runs, t.search_s);
    std::fprintf(info, "%s\n", line.c_str());
    tried.push_back({{"sequence_parallel", t.layout.sequence_parallel},
                     {"zero_stage", t.layout.zero_stage},
                     {"status", t.status},
                     {"fits", t.fits},
                     {"tokens_per_s", t.tokens_per_s},
                     {"peak_bytes", t.peak_bytes},
                     {"bound_tokens_per_s", t.bound_tokens_per_s},
                     {"plan", t.label},
                     {"sim_runs", t.sim_runs},
                     {"search_s", t.search_s}});
  }
  out["layout"] = {{"found", lc.found},
                   {"sequence_parallel", lc.layout.sequence_parallel},
                   {"zero_stage", lc.layout.zero_stage},
                   {"why", lc.why},
                   {"tried", tried}};
}

// The planner's lines (budget, max-seq) and its part of the JSON; false when it found nothing.
static bool print_planner(std::FILE* info, bool json_out, const PlanRequest& r, const PlanAnswer& a, json& out) {
  const size_t budget = r.budgets.device, host_budget = r.budgets.host, disk_budget = r.budgets.disk;
  const PlanResult& pr = a.planner;
  if (r.ask == PlanAsk::max_seq) {
    const MaxSeqResult& ms = a.search;
    json tried = json::array();
    for (auto& [s, fit] : ms.tried) tried.push_back({{"seq", s}, {"fits", fit}});
    out["max_seq"] = {{"found", ms.found},
                      {"seq", ms.seq},
                      {"next_seq", ms.next_seq},
                      {"limit_why", r.seq_limit_why},
                      {"at_limit", ms.at_limit},
                      {"lo", ms.lo},
                      {"hi", ms.hi},
                      {"multiple", ms.multiple},
                      {"tried", tried},
                      {"sim_runs", ms.sim_runs}};
    out["planner"] = planner_json(pr, budget, host_budget, disk_budget);
    if (!ms.found) {
      std::fprintf(stderr,
                   ms.stopped
                       ? "strata-plan: --max-seq: %d tokens not decided by the time limit (%zu lengths, %d sim runs)\n"
                       : "strata-plan: --max-seq: not even %d tokens fit (%zu lengths tried, %d sim runs)\n",
                   ms.lo, ms.tried.size(), ms.sim_runs);
      if (r.choose_layout) print_layouts(info, a, out);
      report_unfit(pr, budget, host_budget, disk_budget, out);
      return false;
    }
    print_rank_peaks(info, pr);
    // A time limit that passed once the length was decided (next_seq verified) cut only the plan's search short.
    std::string why = ms.at_limit ? fmt::format("the search's upper end, {}: {}", ms.hi, r.seq_limit_why)
                      : ms.stopped && !ms.next_seq
                          ? std::string("the search's time limit; longer was not decided (--plan-time-limit)")
                          : fmt::format("the budgets: {} tokens do not fit", ms.next_seq);
    if (ms.stopped && (ms.next_seq || ms.at_limit))
      why += "; the plan is the fastest found by the time limit (--plan-time-limit)";
    std::fprintf(info, "max-seq: %d tokens x batch %d (%s; %zu lengths tried, %d sim runs)\n", ms.seq, a.request.batch,
                 why.c_str(), ms.tried.size(), ms.sim_runs);
    if (r.choose_layout) print_layouts(info, a, out);  // at the answer's length
    std::fprintf(info, "%s\n", wrap_list(fmt::format("planner: {} under {}", pr.label, format_bytes(budget))).c_str());
    const Forecast& f = a.forecast;
    if (!json_out)
      std::printf(
          "longest sequence: %d tokens\nchosen plan: %s\n"
          "forecast: peak device %s (high-water %s), host %s, disk %s; %.0f tokens/s\n",
          ms.seq, pr.label.c_str(), format_bytes(f.peak_bytes).c_str(), format_bytes(f.high_water_bytes).c_str(),
          format_bytes(f.peak_host_bytes).c_str(), format_bytes(f.peak_disk_bytes).c_str(), f.tokens_per_s);
    return true;
  }
  out["planner"] = planner_json(pr, budget, host_budget, disk_budget);
  if (r.choose_layout) print_layouts(info, a, out);
  if (!pr.found) {
    report_unfit(pr, budget, host_budget, disk_budget, out);
    return false;
  }
  std::fprintf(info, "%s\n",
               wrap_list(fmt::format("planner: {} under {} ({} sim runs, {} plans tried)", pr.label,
                                     format_bytes(budget), pr.sim_runs, pr.tried.size()))
                   .c_str());
  print_rank_peaks(info, pr);
  return true;
}

int print_answer(std::FILE* info, bool json_out, const std::string& model, const PlanRequest& r, const PlanAnswer& a) {
  json out;
  if (r.planned() && !print_planner(info, json_out, r, a, out)) {
    if (json_out) std::printf("%s\n", out.dump(2).c_str());
    return 1;
  }
  const ForecastRequest& req = a.request;
  const DeviceProfile& p = req.profile;
  const Forecast& f = a.forecast;
  const Plan& plan = a.plan;
  const size_t budget = a.budget, host_budget = r.budgets.host, disk_budget = r.budgets.disk;
  const bool have_budget = r.planned();
  if (!json_out) {
    std::printf("%s\n", verdict(f, budget, a.budget_what).c_str());
    std::printf("plan: %s\n", plan.preset.c_str());
    if (req.mlp_tiles > 1)
      std::printf(
          "mlp tiles: %d (%lld rows each; the MLP's [tokens x intermediate] tensors exist one tile at a time)\n",
          req.mlp_tiles, (long long)ops::mlp_tile_rows(int64_t(req.seq) * req.batch, req.mlp_tiles));
    print_forecast(f, budget, a.budget_what);
    print_host(f, host_budget);
    if (have_budget) std::printf("\n# ---- strata-train --config (accepted unchanged) ----\n%s", a.yaml.c_str());
    return 0;
  }
  out["model"] = model;
  out["seq"] = req.seq;
  out["gpus"] = req.gpus;
  out["rank"] = req.rank;
  out["sequence_parallel"] = req.sequence_parallel;
  out["batch"] = req.batch;
  out["grad_accum"] = req.grad_accum;
  out["mode"] = train_mode_name(req.mode);
  out["master_weights"] = master_weights_name(req.recipe.master);
  out["optimizer_state"] = optimizer_state_name(req.recipe.moments);
  out["gradients"] = gradients_name(req.recipe.gradients);
  out["profile"] = {{"name", p.name}, {"source", p.source}, {"calibrated", calibrated(p)}};
  out["mirror"] = sim_mirror_name(req.mirror);
  out["tiers"] = "device, host and disk";
  out["disk_budget"] = disk_budget;
  if (have_budget) out["planner_decisions"] = tiers_used(host_budget, disk_budget);
  out["layer_offloading"] = plan.pages_layer_weights();
  out["layer_weights"] = decision_name(plan.layer_weights);
  out["mlp_tiles"] = std::max(1, req.mlp_tiles);
  out["host_budget"] = host_budget;
  if (host_budget) out["fits_host_budget"] = f.host_held_bytes() <= host_budget;
  out["plan"] = plan.preset;
  out["budget"] = budget;
  out["forecast"] = forecast_json(f);
  if (have_budget) out["config_yaml"] = a.yaml;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

void write_answer_files(std::FILE* info, const std::string& config_path, const std::string& svg_path,
                        const std::string& model, const PlanAnswer& a) {
  if (!config_path.empty()) {
    std::ofstream o(config_path, std::ios::trunc);
    o << a.yaml;
    if (!o) throw IoError(fmt::format("{}: cannot write the config", config_path), config_path);
    std::fprintf(info, "wrote %s\n", config_path.c_str());
  }
  if (!svg_path.empty()) {
    const ForecastRequest& req = a.request;
    std::string title =
        fmt::format("{} seq {} x {}, {} training: device arena over one step ({} profile)\nplan: {}", model, req.seq,
                    req.batch, train_mode_name(req.mode), req.profile.name, a.plan.preset);
    std::ofstream o(svg_path, std::ios::trunc);
    o << timeline_svg(a.forecast, title, a.budget);
    if (!o) throw IoError(fmt::format("{}: cannot write the SVG", svg_path), svg_path);
    std::fprintf(info, "wrote %s\n", svg_path.c_str());
  }
}

}  // namespace strata::tools
