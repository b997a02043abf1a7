// strata-plan: forecasts peak device memory and step time of one training step without a GPU,
// by running the engine itself on the sim backend; with --budget, chooses keep/recompute/host/disk
// per slot class (and weight paging) for the fastest forecast step that fits every tier's budget
// and prints it as a strata-train config; with --max-seq, the longest sequence that has such a plan.
// The host and disk tiers (activation offloading presets, layer offloading) are forecast.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "engine/ops.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/plan/timeline_svg.h"
#include "model/run/forecast_request.h"
#include "model/run/job.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "tools/cli.h"
#include "tools/plan_report.h"

using namespace strata;
using json = nlohmann::ordered_json;

static const char* kUsage =
    "usage: strata-plan --model DIR|config.json|NAME --seq N [--batch 1] [--mode full|frozen|lora]\n"
    "                   [--lora-rank R] [--lora-alpha A] [--loss-chunk 512] [--config FILE.yaml]\n"
    "                   [--preset keep|gradient_checkpointing|selective_recompute|offload|legacy|hidden_states|disk\n"
    "                    [--every N] | --budget BYTES] [--layer-offloading] [--host-budget BYTES]\n"
    "                   [--disk-budget BYTES] [--state-offloading none|optimizer|master|all]\n"
    "                   [--state-offloading-tier host|disk]\n"
    "                   [--state-offloading-layers optimizer|master|all:K]\n"
    "                   [--profile h100_80gb|h200|FILE.json] [--mirror cuda|cpu] [--device-name NAME]\n"
    "                   [--master-weights fp32|none] [--optimizer-state fp32|bf16|8bit] [--gradients fp32|bf16]\n"
    "                   [--max-grad-norm 1.0]\n"
    "                   [--mlp-tiles auto|N]\n"
    "                   [--gpus N [--grad-reduce fp32|bf16] [--zero-stage 0|1|2|3] [--sequence-parallel N] [--rank "
    "0]]\n"
    "                   [--pad-vocab 64] [--pack N]\n"
    "                   [--write-config FILE.yaml] [--data FILE] [--json] [--svg FILE.svg]\n"
    "       strata-plan --model ... --max-seq --budget BYTES [--host-budget BYTES] [--disk-budget BYTES]\n"
    "                   [--seq-multiple 1024] [--seq-limit N] [other options as above, --seq and --preset excluded]\n"
    "Forecasts one step on the sim backend (the engine's own tape and allocator, a cost-model clock,\n"
    "host copies on a copy-stream timeline). offload|legacy|hidden_states: activation_offloading true|\n"
    "legacy|hidden_states (host tier); disk: activation_offloading: disk (through host staging to a disk\n"
    "queue at the profile's disk_write_gbps / disk_read_gbps; no file is written); --layer-offloading\n"
    "pages the layers' weight matrices from host (the plan's layer_weights: page; frozen or lora: the\n"
    "frozen base; full: the trainable weights, their updates streamed through the optimizer).\n"
    "--write-config: the YAML strata-train --config runs alone: the plan, shape and recipe, plus\n"
    "base_model when --model is a checkpoint directory and data from --data (or --config's data).\n"
    "--budget: the fastest plan whose step fits an arena of BYTES (e.g. 40GiB), printed as YAML for\n"
    "strata-train --config. It chooses keep or recompute for every slot class, and host or disk where\n"
    "--host-budget / --disk-budget give those tiers room (a tier without a budget is not used); it\n"
    "also tries paging the layers (layer_weights: page; a full fine-tune's too, not with ZeRO) when the\n"
    "host budget holds them. Without --budget, --host-budget reports whether the host tier's peak fits.\n"
    "--state-offloading: persistent state on the host tier (Adam moments; + fp32 masters; + gradients);\n"
    "--state-offloading-tier disk: those classes (gradients excepted) in a state file on the disk tier;\n"
    "--state-offloading-layers LEVEL:K: also LEVEL's classes in K layers spread evenly (YAML\n"
    "state_offloading_layers);\n"
    "with --budget and --host-budget (or --disk-budget) the planner chooses the level and tier itself,\n"
    "unless these flags (or --config's state keys) give the placement: then it keeps it and plans the rest.\n"
    "--max-grad-norm: the run's global-norm clipping (YAML max_grad_norm, default 1.0); 0 (off) forecasts the\n"
    "streamed state's update during backward, as strata-train runs it without clipping.\n"
    "--master-weights none: no fp32 master (bf16 weights updated in place); --optimizer-state bf16|8bit:\n"
    "AdamW's moments in bf16 or block-wise 8-bit (YAML master_weights, optimizer_state; default fp32);\n"
    "--gradients bf16: the trainable parameters' gradients in bf16, 2 bytes each (YAML gradients; default fp32).\n"
    "--mlp-tiles N: each layer's MLP runs over N row tiles, so its [tokens x intermediate] tensors never\n"
    "exist whole (YAML mlp_tiles); auto (the default): untiled, but with --budget the planner tiles when\n"
    "nothing fits untiled (2, 4, ... 64 tiles).\n"
    "--pad-vocab N: the vocabulary rows padded to a multiple of N in memory, as strata-train runs them (YAML\n"
    "pad_vocab_multiple, default 64; 1: unpadded): the forecast runs that shape.\n"
    "--pack N: each row as N packed examples of seq/N tokens (sample packing: attention within each example,\n"
    "on cuda through strata's flash kernel, priced at the profile's attention_flash_tflops).\n"
    "--gpus N: data parallel over N ranks (strata-train --gpus): one rank's peaks and step, --batch rows\n"
    "each, its gradients all-reduced at the profile's nccl_busbw_gbps (in bf16 with --grad-reduce bf16);\n"
    "tokens/s counts every rank's. --zero-stage 1 (YAML zero_stage): ZeRO-1, rank 0's share of the optimizer\n"
    "state only, and the weights' broadcasts after each step; --zero-stage 2: ZeRO-2, rank 0's share of the\n"
    "gradients too (the others' transient, reduced to their owners at nccl_busbw_gbps); --zero-stage 3: ZeRO-3,\n"
    "its share of the layers' weights too (the others' gathered per layer into two slots). --rank R: forecast\n"
    "rank R instead of rank 0 (ZeRO's shares, hence the peaks, differ between ranks); with --budget the plan\n"
    "fits every rank, and the forecast is the rank with the largest peak (every rank's peak listed).\n"
    "--sequence-parallel N (YAML sequence_parallel): groups of N of the --gpus ranks (default N) share each row,\n"
    "each rank holding seq/N of its tokens, with all-to-alls around attention (DeepSpeed-Ulysses): the forecast is\n"
    "one rank's (seq/N tokens, attention's whole-sequence head shards, the all-to-alls at nccl_busbw_gbps); with\n"
    "--max-seq, the longest sequence N GPUs train together.\n"
    "--max-seq: the longest sequence (a multiple of --seq-multiple, default 1024) whose step has a plan\n"
    "under --budget and the tier budgets, found by bisection (one planner run per length tried; fitting\n"
    "is taken as monotone in the length, and the answer is verified: it fits, the next multiple does\n"
    "not). The search stops at --seq-limit, by default the model's max_position_embeddings (at most\n"
    "1048576): an answer equal to the limit says so. It prints the plan and forecast at that length\n"
    "and its strata-train config, as --budget does. Built-in model names: Llama-3.2-1B, Llama-3.2-3B,\n"
    "Llama-3-8B, Llama-3.1-8B, Llama-3-70B, Qwen3-1.7B, Qwen3-8B, Qwen2.5-7B, Mistral-7B, tiny.\n";

using namespace strata::tools;

int main(int argc, char** argv) {
  ForecastRequest req;
  std::string model_spec, svg_path, write_config, device;
  std::string run_keys;  // base_model and data for --write-config's YAML, where known
  size_t budget = 0, host_budget = 0, disk_budget = 0;
  bool json_out = false, have_budget = false, max_seq = false;
  int seq_multiple = 1024, seq_limit = 0;
  try {
    // The tool's own flags; the settings' flags (--loss-chunk, --gradients, ...) come from the settings table.
    std::set<std::string> options = {"model",        "seq",          "batch", "mode",   "lora-rank",
                                     "config",       "preset",       "every", "budget", "profile",
                                     "mirror",       "device-name",  "svg",   "data",   "seq-limit",
                                     "write-config", "seq-multiple", "gpus",  "pack",   "rank"},
                          switches = {"json", "help", "max-seq"};
    for (const std::string& f : setting_flags(Tool::plan, false)) options.insert(f);
    for (const std::string& f : setting_flags(Tool::plan, true)) switches.insert(f);
    cli::Args a(argc, argv, options, switches);
    if (a.has("help")) {
      std::fputs((kUsage + std::string("settings (YAML key; default; range):\n") + settings_usage(Tool::plan)).c_str(),
                 stdout);
      return 0;
    }
    if (!a.has("model")) throw ConfigError("--model DIR|config.json|NAME is required", "command line", "model");
    if (a.has("preset") && a.has("budget"))
      throw ConfigError("--preset and --budget exclude each other: --budget chooses the plan", "command line",
                        "budget");
    max_seq = a.has("max-seq");
    if (max_seq && a.has("seq"))
      throw ConfigError("--max-seq and --seq exclude each other: --max-seq searches the sequence length",
                        "command line", "seq");
    if (max_seq && !a.has("budget"))
      throw ConfigError("--max-seq needs --budget BYTES (the device budget the sequence must fit)", "command line",
                        "budget");
    for (const char* k : {"seq-multiple", "seq-limit"})
      if (a.has(k) && !max_seq) throw ConfigError(fmt::format("--{} goes with --max-seq", k), "command line", k);
    TrainConfig tc;  // strata-train's defaults, then --config, then the command line
    tc.seq = 0;
    if (a.has("config")) apply_yaml(tc, a.str("config"));
    apply_flags(tc, {a.values().begin(), a.values().end()}, Tool::plan);
    model_spec = a.str("model");
    // What strata-train also needs to run the written config alone: the checkpoint directory
    // (not a built-in name or a bare config.json) and the data (--data, or --config's data).
    {
      std::error_code ec;
      const std::string model_dir =
          std::filesystem::is_directory(model_spec, ec) ? std::filesystem::absolute(model_spec, ec).string() : "";
      const std::string data = a.has("data") ? a.str("data") : tc.data_path;
      if (!model_dir.empty()) run_keys += fmt::format("base_model: {}\n", nlohmann::json(model_dir).dump());
      if (!data.empty())
        run_keys += fmt::format("data: {}\n", nlohmann::json(std::filesystem::absolute(data, ec).string()).dump());
    }
    // Range-checked as strata-train's flags are (4294967312 is refused, not read as 16); the
    // error names the flag. Values from --config were checked by apply_yaml.
    auto int_flag = [&](const char* k, int def, int lo) {
      return a.has(k) ? check_int(a.integer(k, 0), lo, Origin::flag(k)) : def;
    };
    // The run's settings, then its forecast request as the run builder makes it (model/run/forecast_request.h);
    // the tool's own flags (--seq, --batch, --mode, --preset, --gpus, --rank, --pack) on top.
    tc.seq = max_seq ? 0 : int_flag("seq", tc.seq, 1);  // --max-seq: sequence_len of a --config is ignored
    tc.batch = int_flag("batch", tc.batch, 1);
    const TrainMode mode = a.has("mode")        ? parse_train_mode(a.str("mode"))
                           : a.has("lora-rank") ? TrainMode::lora
                           : tc.lora.enabled()  ? TrainMode::lora
                           : tc.freeze_base     ? TrainMode::frozen
                                                : TrainMode::full;
    tc.lora.rank = mode == TrainMode::lora ? int_flag("lora-rank", tc.lora.rank ? tc.lora.rank : 16, 1) : 0;
    tc.freeze_base = mode == TrainMode::frozen;
    if (a.has("preset")) {  // the preset's activation rules; the config's state placement stays
      Plan preset = preset_plan(a.str("preset"), int_flag("every", 1, 1), "--preset", "command line", "preset");
      preset.take_state(tc.plan);
      preset.mlp_tiles = tc.plan.mlp_tiles;
      tc.plan = preset;
    }
    if (a.has("state-offloading-tier") && !a.has("state-offloading"))
      throw ConfigError("--state-offloading-tier needs --state-offloading (the level whose classes it places)",
                        "command line", "state-offloading-tier");
    const std::string mirror = a.str("mirror", "cuda");
    if (mirror != "cuda" && mirror != "cpu")
      throw ConfigError("--mirror must be cuda or cpu", "command line", "mirror");
    req = train_forecast_request(tc, resolve_model(model_spec), mirror == "cpu" ? SimMirror::cpu : SimMirror::cuda,
                                 find_profile(a.str("profile", "h100_80gb")));
    req.lora_rank = std::max(1, tc.lora.rank);
    req.gpus = int_flag("gpus", req.sequence_parallel, 1);  // --sequence-parallel N alone: N GPUs
    if (req.gpus % req.sequence_parallel != 0)
      throw ConfigError(fmt::format("--sequence-parallel {} must divide --gpus {} (data-parallel groups of {} ranks)",
                                    req.sequence_parallel, req.gpus, req.sequence_parallel),
                        "command line", "sequence-parallel");
    if (!max_seq && req.seq > 0)  // the shape's range before anything is allocated for it (--pack's positions)
      check_seq_parallel_len(req.seq, req.sequence_parallel), check_forecast_shape(req);
    if (const int pack = int_flag("pack", 1, 1); pack > 1) {  // rows of `pack` packed examples (sample packing)
      if (max_seq) throw ConfigError("--pack goes with --seq, not --max-seq", "command line", "pack");
      if (req.seq % pack)
        throw ConfigError(fmt::format("--pack {} must divide --seq {}", pack, req.seq), "command line", "pack");
      for (long i = 0; i < long(req.batch) * req.seq; ++i) req.positions.push_back(int32_t(i % (req.seq / pack)));
    }
    if (tc.grad_reduce == DType::bf16) run_keys += "grad_reduce_dtype: bf16\n";
    if (req.zero_stage) run_keys += fmt::format("zero_stage: {}\n", req.zero_stage);
    req.rank = int_flag("rank", 0, 0);  // ZeRO's shares differ between ranks
    if (req.rank >= req.gpus)
      throw ConfigError(
          fmt::format("--rank {} is not one of the --gpus {} ranks (0..{})", req.rank, req.gpus, req.gpus - 1),
          "command line", "rank");
    if (max_seq) {
      seq_multiple = int_flag("seq-multiple", 1024, 1);
      // Every length tried splits evenly over a sequence-parallel group (as max_seq_for_budget rounds it).
      if (seq_multiple % req.sequence_parallel != 0) seq_multiple = std::lcm(seq_multiple, req.sequence_parallel);
      seq_limit = int_flag("seq-limit", default_max_seq_limit(req.model), seq_multiple);
    } else if (req.seq < 1)  // the flags and the YAML keys are checked as read; only a missing --seq is left
      throw ConfigError("--seq N (or sequence_len in the --config file) is required", "command line", "seq");
    if (req.max_grad_norm != TrainConfig{}.max_grad_norm)
      run_keys += fmt::format("max_grad_norm: {}\n", req.max_grad_norm);
    host_budget = tc.host_budget_bytes;
    disk_budget = tc.disk_budget_bytes;
    have_budget = a.has("budget");
    if (have_budget)
      budget = parse_bytes(a.str("budget"), "--budget");
    else if (tc.device_budget_bytes)
      budget = tc.device_budget_bytes;
    svg_path = a.str("svg");
    write_config = a.str("write-config");
    json_out = a.has("json");
    device = current_device(a);
  } catch (const Error& e) {
    std::fprintf(stderr, "strata-plan: error: %s\nsee strata-plan --help\n", e.what());
    return 2;
  }

  try {
    const DeviceProfile& p = req.profile;
    if (!device.empty() && !p.match.empty() && lower(device).find(lower(p.match)) == std::string::npos)
      std::fprintf(stderr,
                   "strata-plan: warning: the profile '%s' is for another GPU than this machine's '%s'; pass "
                   "--profile for it (or run strata-calibrate) for a time forecast of this GPU\n",
                   p.name.c_str(), device.c_str());
    if (have_budget && p.memory_bytes && budget > p.default_arena_bytes())
      std::fprintf(stderr,
                   "strata-plan: warning: --budget %s is more than a %s's arena can hold (%s: its %s less the CUDA "
                   "context and headroom); a plan that needs it will not fit that GPU: --budget %s at most\n",
                   format_bytes(budget).c_str(), p.name.c_str(), format_bytes(p.default_arena_bytes()).c_str(),
                   format_bytes(p.memory_bytes).c_str(), format_bytes(p.default_arena_bytes()).c_str());
    const bool calibrated = p.source.find("not calibrated") == std::string::npos;
    std::FILE* info = json_out ? stderr : stdout;
    const io::LlamaConfig& c = req.model;
    std::fprintf(
        info,
        "strata-plan: %s | %d layers, hidden %d, heads %d/%d, head dim %d, mlp %d, vocab %s | seq %s x batch %d "
        "| %s training%s\n",
        model_spec.c_str(), c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
        c.head_dim, c.intermediate_size, vocab_label(c.vocab_size, req.pad_vocab_multiple).c_str(),
        max_seq ? fmt::format("longest multiple of {} up to {}", seq_multiple, seq_limit).c_str()
                : std::to_string(req.seq).c_str(),
        req.batch, train_mode_name(req.mode),
        req.mode == TrainMode::lora ? fmt::format(" (rank {})", req.lora_rank).c_str() : "");
    if (req.gpus > 1)
      std::fprintf(info, "ranks: %d GPUs%s; %s%s\n", req.gpus,
                   req.sequence_parallel > 1
                       ? fmt::format(" in {} data-parallel group{} of {} (sequence parallel: each rank holds seq/{} "
                                     "tokens of a row, and attends over every token on {} heads)",
                                     req.gpus / req.sequence_parallel, req.gpus / req.sequence_parallel == 1 ? "" : "s",
                                     req.sequence_parallel, req.sequence_parallel,
                                     req.model.num_attention_heads / req.sequence_parallel)
                             .c_str()
                       : " (data parallel)",
                   (req.zero_stage > 0 && have_budget
                        ? std::string("the planner fits every rank and forecasts the one with the largest peak")
                        : fmt::format("the forecast is rank {}'s", req.rank))
                       .c_str(),
                   req.zero_stage == 0   ? ""
                   : req.zero_stage == 1 ? " (ZeRO-1: its share of the optimizer state)"
                   : req.zero_stage == 2 ? " (ZeRO-2: its share of the optimizer state and of the gradients)"
                                         : " (ZeRO-3: its share of the optimizer state, gradients and layer weights)");
    std::fprintf(info, "sim: profile %s (%s), mirroring the %s backend's dtypes and allocations\n", p.name.c_str(),
                 calibrated ? p.source.c_str() : "datasheet/anchors, NOT calibrated: times are rough",
                 sim_mirror_name(req.mirror));
    std::fprintf(info, "state precision: master_weights %s, optimizer_state %s, gradients %s\n",
                 master_weights_name(req.recipe.master), optimizer_state_name(req.recipe.moments),
                 gradients_name(req.recipe.gradients));
    std::fprintf(info, "tiers: device, host and disk; %s%s%s%s\n",
                 !req.plan.pages_layer_weights() ? "no weight paging"
                 : req.mode == TrainMode::full   ? "trainable layer weights paged from host"
                                                 : "frozen layer weights paged from host",
                 host_budget ? fmt::format(", host budget {}", format_bytes(host_budget)).c_str() : "",
                 disk_budget ? fmt::format(", disk budget {}", format_bytes(disk_budget)).c_str() : "",
                 have_budget
                     ? fmt::format("; the planner chooses {} per slot class{}", tiers_used(host_budget, disk_budget),
                                   req.mode != TrainMode::full && host_budget ? " and weight paging" : "")
                           .c_str()
                     : "");

    Forecast f;
    Plan plan = req.plan;
    std::string budget_what = budget ? "the budget" : "";
    int exit_code = 0;
    json out;
    if (max_seq) {
      const TierBudgets tb{budget, host_budget, disk_budget};
      MaxSeqResult ms = max_seq_for_budget(req, tb, seq_multiple, seq_limit, seq_multiple);
      json tried = json::array();
      for (auto& [s, fit] : ms.tried) tried.push_back({{"seq", s}, {"fits", fit}});
      out["max_seq"] = {{"found", ms.found},       {"seq", ms.seq},  {"next_seq", ms.next_seq},
                        {"at_limit", ms.at_limit}, {"lo", ms.lo},    {"hi", ms.hi},
                        {"multiple", ms.multiple}, {"tried", tried}, {"sim_runs", ms.sim_runs}};
      PlanResult& pr = ms.plan;
      out["planner"] = planner_json(pr, budget, host_budget, disk_budget);
      if (!ms.found) {
        std::fprintf(
            stderr,
            ms.stopped ? "strata-plan: --max-seq: %d tokens not decided by the time limit (%zu lengths, %d sim runs)\n"
                       : "strata-plan: --max-seq: not even %d tokens fit (%zu lengths tried, %d sim runs)\n",
            ms.lo, ms.tried.size(), ms.sim_runs);
        report_unfit(pr, budget, host_budget, disk_budget, out);
        if (json_out) std::printf("%s\n", out.dump(2).c_str());
        return 1;
      }
      req.seq = ms.seq;
      if (!pr.rank_peak_bytes.empty()) req.rank = pr.rank;
      print_rank_peaks(info, pr);
      f = std::move(pr.forecast);
      plan = pr.plan;
      req.mlp_tiles = pr.plan.mlp_tiles;
      const std::string why =
          ms.at_limit  ? fmt::format("the search limit; longer was not tried (--seq-limit, now {})", ms.hi)
          : ms.stopped ? std::string("the search's time limit; longer was not decided (--plan-time-limit)")
                       : fmt::format("{} tokens do not fit", ms.next_seq);
      std::fprintf(info, "max-seq: %d tokens x batch %d (%s; %zu lengths tried, %d sim runs)\n", ms.seq, req.batch,
                   why.c_str(), ms.tried.size(), ms.sim_runs);
      std::fprintf(info, "%s\n",
                   wrap_list(fmt::format("planner: {} under {}", pr.label, format_bytes(budget))).c_str());
      if (!json_out)
        std::printf(
            "longest sequence: %d tokens\nchosen plan: %s\n"
            "forecast: peak device %s (high-water %s), host %s, disk %s; %.0f tokens/s\n",
            ms.seq, pr.label.c_str(), format_bytes(f.peak_bytes).c_str(), format_bytes(f.high_water_bytes).c_str(),
            format_bytes(f.peak_host_bytes).c_str(), format_bytes(f.peak_disk_bytes).c_str(), f.tokens_per_s);
    } else if (have_budget) {
      PlanResult pr = plan_for_budget(req, TierBudgets{budget, host_budget, disk_budget});
      out["planner"] = planner_json(pr, budget, host_budget, disk_budget);
      if (!pr.found) {
        report_unfit(pr, budget, host_budget, disk_budget, out);
        if (json_out) std::printf("%s\n", out.dump(2).c_str());
        return 1;
      }
      f = std::move(pr.forecast);
      plan = pr.plan;
      req.mlp_tiles = pr.plan.mlp_tiles;
      if (!pr.rank_peak_bytes.empty()) req.rank = pr.rank;
      std::fprintf(info, "%s\n",
                   wrap_list(fmt::format("planner: {} under {} ({} sim runs, {} plans tried)", pr.label,
                                         format_bytes(budget), pr.sim_runs, pr.tried.size()))
                       .c_str());
      print_rank_peaks(info, pr);
    } else {
      if (!budget) {
        budget = p.default_arena_bytes();
        budget_what = fmt::format("a {} (default arena: total less the context and 2 GiB headroom)", p.name);
      }
      ForecastRequest r = req;
      r.budget = 0;
      f = forecast(r);
      if (f.peak_bytes <= budget) {  // the placement under the real budget decides whether it fits
        r.budget = budget;
        Forecast fb = forecast(r);
        if (fb.fits)
          f = std::move(fb);
        else
          f.fits = false, f.oom = fb.oom;
      }
    }
    std::string yaml = plan_yaml(req, plan, f, have_budget ? budget : 0) + run_keys;
    if (!json_out) {
      std::printf("%s\n", verdict(f, budget, budget_what).c_str());
      std::printf("plan: %s\n", plan.preset.c_str());
      if (req.mlp_tiles > 1)
        std::printf(
            "mlp tiles: %d (%lld rows each; the MLP's [tokens x intermediate] tensors exist one tile at a time)\n",
            req.mlp_tiles, (long long)ops::mlp_tile_rows(int64_t(req.seq) * req.batch, req.mlp_tiles));
      print_forecast(f, budget, budget_what);
      print_host(f, host_budget);
      if (have_budget) std::printf("\n# ---- strata-train --config (accepted unchanged) ----\n%s", yaml.c_str());
    } else {
      out["model"] = model_spec;
      out["seq"] = req.seq;
      out["gpus"] = req.gpus;
      out["rank"] = req.rank;
      out["sequence_parallel"] = req.sequence_parallel;
      out["batch"] = req.batch;
      out["mode"] = train_mode_name(req.mode);
      out["master_weights"] = master_weights_name(req.recipe.master);
      out["optimizer_state"] = optimizer_state_name(req.recipe.moments);
      out["gradients"] = gradients_name(req.recipe.gradients);
      out["profile"] = {{"name", p.name}, {"source", p.source}, {"calibrated", calibrated}};
      out["mirror"] = sim_mirror_name(req.mirror);
      out["tiers"] = "device, host and disk";
      out["disk_budget"] = disk_budget;
      if (have_budget) out["planner_decisions"] = tiers_used(host_budget, disk_budget);
      out["layer_offloading"] = plan.pages_layer_weights();
      out["layer_weights"] = decision_name(plan.layer_weights);
      out["mlp_tiles"] = std::max(1, req.mlp_tiles);
      out["host_budget"] = host_budget;
      if (host_budget) out["fits_host_budget"] = f.peak_host_bytes <= host_budget;
      out["plan"] = plan.preset;
      out["budget"] = budget;
      out["forecast"] = forecast_json(f);
      if (have_budget) out["config_yaml"] = yaml;
      std::printf("%s\n", out.dump(2).c_str());
    }
    if (!write_config.empty()) {
      std::ofstream o(write_config, std::ios::trunc);
      o << yaml;
      if (!o) throw IoError(fmt::format("{}: cannot write the config", write_config), write_config);
      std::fprintf(info, "wrote %s\n", write_config.c_str());
    }
    if (!svg_path.empty()) {
      std::string title = fmt::format("{} seq {} x {}, {} training: device arena over one step ({} profile)\nplan: {}",
                                      model_spec, req.seq, req.batch, train_mode_name(req.mode), p.name, plan.preset);
      std::ofstream o(svg_path, std::ios::trunc);
      o << timeline_svg(f, title, budget);
      if (!o) throw IoError(fmt::format("{}: cannot write the SVG", svg_path), svg_path);
      std::fprintf(info, "wrote %s\n", svg_path.c_str());
    }
    return exit_code;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "strata-plan: %s\n", e.what());
    return 2;
  } catch (const UnsupportedError& e) {
    std::fprintf(stderr, "strata-plan: unsupported: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-plan: error: %s\n", e.what());
    return 1;
  }
}
