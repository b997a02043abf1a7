// strata-plan: forecasts peak device memory and step time of one training step without a GPU,
// by running the engine itself on the sim backend; with --budget, chooses keep/recompute/host/disk
// per slot class (and weight paging) for the fastest forecast step that fits every tier's budget
// and prints it as a strata-train config; with --max-seq, the longest sequence that has such a plan.
// The host and disk tiers (activation offloading presets, layer offloading) are forecast.
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <set>

#include "model/run/plan_answer.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "tools/cli.h"
#include "tools/plan_report.h"

using namespace strata;

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
    "host budget holds them. The host budget is charged every pinned byte the plan reserves (the slot\n"
    "store's pool with its disk staging, the pager's and the state's), not only the peak in use. Without\n"
    "--budget, --host-budget reports whether that reservation fits.\n"
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
    "--gpus N (1 to 1048576, WORLD_SIZE's range): data parallel over N ranks (strata-train --gpus): one rank's\n"
    "peaks and step, --batch rows each, its gradients all-reduced at the profile's nccl_busbw_gbps (in bf16 with\n"
    "--grad-reduce bf16);\n"
    "tokens/s counts every rank's. --zero-stage 1 (YAML zero_stage): ZeRO-1, rank 0's share of the optimizer\n"
    "state only, and the weights' broadcasts after each step; --zero-stage 2: ZeRO-2, rank 0's share of the\n"
    "gradients too (the others' transient, reduced to their owners at nccl_busbw_gbps); --zero-stage 3: ZeRO-3,\n"
    "its share of the layers' weights too (the others' gathered per layer into two slots). --rank R: forecast\n"
    "rank R instead of rank 0 (ZeRO's shares, hence the peaks, differ between ranks); with --budget the plan\n"
    "fits every rank, and the forecast is the rank with the largest peak (every rank's peak listed; the ranks past\n"
    "the parameters' owners hold no state and share one forecast, so any N answers as fast as a few hundred).\n"
    "--sequence-parallel N (YAML sequence_parallel): groups of N of the --gpus ranks (default N) share each row,\n"
    "each rank holding seq/N of its tokens, with all-to-alls around attention (DeepSpeed-Ulysses): the forecast is\n"
    "one rank's (seq/N tokens, attention's whole-sequence head shards, the all-to-alls at nccl_busbw_gbps); with\n"
    "--max-seq, the longest sequence N GPUs train together.\n"
    "--gpus N with --budget and without --sequence-parallel or --zero-stage: the planner chooses them (each\n"
    "divisor of N that the heads and --seq allow, ZeRO 0-3): the fastest forecast per token that fits every\n"
    "budget, ties to the smaller device peak; it prints the layout, why, and the others tried. With --max-seq\n"
    "too, each length tried is asked of every layout (the lowest-memory first) and the layout is chosen at\n"
    "the answer's length.\n"
    "--max-seq: the longest sequence (a multiple of --seq-multiple, default 1024) whose step has a plan\n"
    "under --budget and the tier budgets, found by bisection (one planner run per length tried; fitting\n"
    "is taken as monotone in the length, and the answer is verified: it fits, the next multiple does\n"
    "not). The search stops at --seq-limit, by default the longest row the budgets could hold (a bf16\n"
    "hidden state of every rank's tokens on the device) or 2^24: the answer says what bounded it. Each\n"
    "length tried only asks whether a plan fits; the fastest is searched at the answer. It prints the\n"
    "plan and forecast at that length and its strata-train config, as --budget does. Built-in model\n"
    "names: Llama-3.2-1B, Llama-3.2-3B,\n"
    "Llama-3-8B, Llama-3.1-8B, Llama-3-70B, Qwen3-1.7B, Qwen3-8B, Qwen2.5-7B, Mistral-7B, tiny.\n";

using namespace strata::tools;

// The flags' combinations that make no question (the values themselves are checked by plan_request).
static void check_flag_combinations(const cli::Args& a) {
  if (!a.has("model")) throw ConfigError("--model DIR|config.json|NAME is required", "command line", "model");
  if (a.has("preset") && a.has("budget"))
    throw ConfigError("--preset and --budget exclude each other: --budget chooses the plan", "command line", "budget");
  const bool max_seq = a.has("max-seq");
  if (max_seq && a.has("seq"))
    throw ConfigError("--max-seq and --seq exclude each other: --max-seq searches the sequence length", "command line",
                      "seq");
  if (max_seq && !a.has("budget"))
    throw ConfigError("--max-seq needs --budget BYTES (the device budget the sequence must fit)", "command line",
                      "budget");
  for (const char* k : {"seq-multiple", "seq-limit"})
    if (a.has(k) && !max_seq) throw ConfigError(fmt::format("--{} goes with --max-seq", k), "command line", k);
  if (a.has("state-offloading-tier") && !a.has("state-offloading"))
    throw ConfigError("--state-offloading-tier needs --state-offloading (the level whose classes it places)",
                      "command line", "state-offloading-tier");
}

int main(int argc, char** argv) {
  PlanQuestion q;
  PlanRequest r;
  std::string svg_path, write_config, device;
  bool json_out = false;
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
    check_flag_combinations(a);
    if (a.has("config")) apply_yaml(q.cfg, a.str("config"));
    apply_flags(q.cfg, {a.values().begin(), a.values().end()}, Tool::plan);
    q.model = a.str("model");
    q.max_seq = a.has("max-seq");
    auto text = [&](const char* k) { return a.has(k) ? std::optional<std::string>(a.str(k)) : std::nullopt; };
    auto integer = [&](const char* k) { return a.has(k) ? std::optional<long long>(a.integer(k, 0)) : std::nullopt; };
    q.mode = text("mode"), q.preset = text("preset"), q.budget = text("budget"), q.data = text("data");
    q.seq = integer("seq"), q.batch = integer("batch"), q.lora_rank = integer("lora-rank");
    q.every = integer("every"), q.gpus = integer("gpus"), q.pack = integer("pack"), q.rank = integer("rank");
    q.seq_multiple = integer("seq-multiple"), q.seq_limit = integer("seq-limit");
    q.mirror = a.str("mirror", "cuda");
    q.profile = a.str("profile", "h100_80gb");
    r = plan_request(q);
    svg_path = a.str("svg");
    write_config = a.str("write-config");
    json_out = a.has("json");
    device = current_device(a);
  } catch (const Error& e) {
    std::fprintf(stderr, "strata-plan: error: %s\nsee strata-plan --help\n", e.what());
    return 2;
  }

  try {
    std::FILE* info = json_out ? stderr : stdout;
    warn_profile(device, r);
    print_question(info, q.model, r);
    const PlanAnswer answer = answer_plan(r);
    if (const int rc = print_answer(info, json_out, q.model, r, answer); rc != 0) return rc;
    write_answer_files(info, write_config, svg_path, q.model, answer);
    return 0;
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
