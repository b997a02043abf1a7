// strata-train: trains a Hugging Face Llama checkpoint (full finetune, frozen base or LoRA) on a
// token file through the tape, with the memory plan from the YAML config.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include "io/atomic_file.h"
#include "model/llama/shapes.h"
#include "model/plan/forecast.h"
#include "model/run/job.h"
#include "model/run/launch.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "model/run/train_loop.h"
#include "tools/backend_select.h"
#include "tools/cli.h"
#include "tools/platform.h"

using namespace strata;

// The settings' flags come from the settings table (model/run/settings.h); these are the tool's own.
static const char* kUsageHead =
    "usage: strata-train --model DIR --data FILE [--config FILE.yaml] [options]\n"
    "  --config FILE.yaml             the settings of a YAML file, applied before the flags below\n"
    "  --profile NAME|FILE.json       with --budget: the device profile the planner prices steps with\n"
    "  --gpus N                       N data-parallel ranks on this node, one process per GPU\n"
    "  --json                         one JSON object per step on stdout\n"
    "  --write-config FILE.yaml       write the effective settings (every one not at its default) and exit\n"
    "  --settings-markdown            print the settings table (docs/USER_GUIDE.md's) and exit\n"
    "  --preview-data N               print the first N examples of each dataset (trained text in [[ ]]) and exit\n"
    "  --help                         this text\n"
    "settings (YAML key; default; range):\n";
static const char* kUsage =
    "Command-line options override the YAML file. --json prints one JSON object per step on stdout.\n"
    "Instead of --data, the --config file may list datasets (completion, alpaca or chat; .txt or .jsonl),\n"
    "tokenised with the tokenizer of base_model (or tokenizer) and cached next to each file.\n"
    "--sample-packing (YAML sample_packing: true): the datasets' examples packed whole into each row, in order,\n"
    "each attending only to itself, with positions restarting per example.\n"
    "--steps counts optimizer steps; without it --epochs (num_epochs) sets them. --grad-accum K sums K\n"
    "micro-batches of --batch rows into each step. --save-steps N writes DIR/checkpoint-<step>/ every N\n"
    "steps into the --save DIR; SIGINT/SIGTERM save one and stop; --resume auto continues the newest one\n"
    "exactly (YAML resume_from_checkpoint: true).\n"
    "--budget 20GiB: before training, the budget planner (as strata-plan --budget) chooses the fastest\n"
    "plan whose step fits BYTES of device memory; --device-memory defaults to it. With --host-budget /\n"
    "--disk-budget (YAML host_memory_budget / disk_memory_budget) it may also offload slot classes to\n"
    "those tiers and page the layers' weights (layer_weights: page: frozen ones, or a full fine-tune's\n"
    "trainable ones, whose updates the optimizer streams into the host block).\n"
    "The planner prices steps with the built-in profile of this GPU (h100_80gb when none matches); --profile\n"
    "names another or a strata-calibrate JSON file (as strata-plan --profile).\n"
    "--gpus N: N data-parallel ranks on this node, one process per GPU (under torchrun or srun: one rank per\n"
    "process); --batch rows a rank, gradients all-reduced per layer during backward; --grad-reduce bf16 sums\n"
    "them in bf16 (half the bytes; YAML grad_reduce_dtype), fp32 (exact) by default. --zero-stage 1 (YAML\n"
    "zero_stage): ZeRO-1, each rank keeps the optimizer state (moments, fp32 master) of its share of the\n"
    "parameters only and broadcasts their updated weights; each rank saves its shard in checkpoints. --zero-stage 2:\n"
    "ZeRO-2, also each rank's gradients of its share only (the others' reduced to their owners during backward).\n"
    "--zero-stage 3: ZeRO-3, also the layers' weight matrices of its share only: each layer's are gathered from their\n"
    "owners into two device slots before its forward and its backward (the next layer's while one computes); not\n"
    "with layer_weights: page (layer_offloading), LoRA or a frozen base.\n"
    "--sequence-parallel N (YAML sequence_parallel): each row's tokens spread over groups of N of the ranks (N must\n"
    "divide --gpus; --seq a multiple of N): each rank holds seq/N tokens, all-to-alls around attention give it every\n"
    "token of its heads (DeepSpeed-Ulysses); the groups are data parallel (--batch rows a group).\n"
    "--gpus N with --budget: the planner also chooses --sequence-parallel and --zero-stage where they are not\n"
    "given (the fastest forecast per token that fits, as strata-plan --gpus N --budget; rank 0's choice wins).\n"
    "--master-weights none: no fp32 master, the bf16 weights are updated in place; --optimizer-state\n"
    "bf16|8bit: AdamW's moments rounded to bf16, or block-wise 8-bit (YAML master_weights, optimizer_state).\n"
    "--gradients bf16: every trainable parameter's gradient kept in bf16, 2 bytes instead of 4, each write rounded\n"
    "once (YAML gradients; with --gpus they are summed in bf16, so --grad-reduce fp32 is refused).\n"
    "--mlp-tiles N: each layer's MLP over N row tiles (YAML mlp_tiles); auto: untiled, or as the budget planner\n"
    "chooses under --budget.\n"
    "--pad-vocab N: the embedding and LM head hold the vocabulary rounded up to a multiple of N in memory (zero\n"
    "rows, outside the softmax, never saved; YAML pad_vocab_multiple, default 64; 1: no padding).\n";

namespace {

// The setup lines: device, model, data, state precision, the plan and where the state lives.
void print_setup(std::FILE* info, Job& job) {
  const TrainConfig& cfg = job.config();
  const io::LlamaConfig& mc = job.model_config();
  Backend& be = job.backend();
  LlamaModel& model = job.model();
  std::fprintf(info, "device: %s | arena budget %s\n", be.device_name().c_str(),
               format_bytes(be.arena().budget()).c_str());
  std::fprintf(info,
               "strata-train: %s on %s backend | %d layers, hidden %d, heads %d/%d, vocab %d%s | %.2fM params, "
               "%.2fM trainable%s\n",
               cfg.model_dir.c_str(), job.backend_name().c_str(), mc.num_hidden_layers, mc.hidden_size,
               mc.num_attention_heads, mc.num_key_value_heads, mc.vocab_size,
               model.padded_vocab() != mc.vocab_size
                   ? fmt::format(" (padded to {} in memory)", model.padded_vocab()).c_str()
                   : "",
               model.param_count() / 1e6, model.trainable_count() / 1e6,
               cfg.lora.enabled() ? fmt::format(" (LoRA r={})", cfg.lora.rank).c_str() : "");
  std::fprintf(
      info, "data: %s, %zu tokens | batch %d x seq %s | %d steps, lr %g\n",
      cfg.datasets.empty()
          ? cfg.data_path.c_str()
          : fmt::format("{} dataset{}", cfg.datasets.size(), cfg.datasets.size() == 1 ? "" : "s").c_str(),
      job.data_tokens(), cfg.batch,
      cfg.batch_lengths.empty()
          ? std::to_string(cfg.seq).c_str()
          : fmt::format("{} at most (sized to the data; sequence_len {})", cfg.batch_lengths.back(), cfg.seq).c_str(),
      job.loop().total_steps(), double(cfg.lr));
  if (cfg.grad_accum > 1 && job.backend_name() == "cuda" && model.grads_on_host())
    std::fprintf(stderr,
                 "strata-train: note: gradient_accumulation_steps %d with the gradients on the host tier sums "
                 "them in host memory (%s) and moves %s of gradients each way per micro-batch\n",
                 cfg.grad_accum, format_bytes(model.trainable_count() * sizeof(float)).c_str(),
                 format_bytes(model.trainable_count() * sizeof(float)).c_str());
  std::fprintf(info, "state precision: master_weights %s, optimizer_state %s, gradients %s\n",
               master_weights_name(cfg.recipe.master), optimizer_state_name(cfg.recipe.moments),
               gradients_name(cfg.recipe.gradients));
  std::fputs(fp8_line(cfg.fp8, mc, int64_t(cfg.batch) * longest_batch_len(cfg) / std::max(1, cfg.sequence_parallel),
                      cfg.plan.mlp_tiles > 1)
                 .c_str(),
             info);
  std::fputs(job.plan_table().c_str(), info);
  if (const WeightPager* pg = model.pager())
    std::fprintf(info, "weight paging: %d %s layers in a %s %s host block%s%s, %d device slots of %s\n", pg->n_layers(),
                 model.pages_trainable() ? "trainable" : "frozen", format_bytes(pg->host_bytes()).c_str(),
                 pg->host_pinned() ? "pinned" : "pageable", pg->host_note().empty() ? "" : " — ",
                 pg->host_note().c_str(), pg->slot_count(), format_bytes(pg->slot_bytes()).c_str());
  if (model.state_host_bytes())
    std::fprintf(info, "state on the host tier (%s): %s %s%s%s\n", cfg.plan.state_label().c_str(),
                 format_bytes(model.state_host_bytes()).c_str(), model.state_host_pinned() ? "pinned" : "pageable",
                 model.state_host_note().empty() ? "" : " — ", model.state_host_note().c_str());
  if (const DiskFile* f = model.state_disk())
    std::fprintf(info, "state on the disk tier (%s): %s in %s\n", cfg.plan.state_label().c_str(),
                 format_bytes(model.state_disk_bytes()).c_str(), f->path().c_str());
  std::fflush(info);
}

// The summary after the loop: this run's steps (a resumed run counts from where it resumed).
void print_done(std::FILE* info, Job& job, const LoopResult& res) {
  const Arena& ar = job.backend().arena();
  const int ran = res.steps_done - res.first_step + 1;
  const float first_loss = res.losses.empty() ? 0.0f : res.losses.front();
  const float last_loss = res.losses.empty() ? 0.0f : res.losses.back();
  std::fprintf(info,
               "done: %d step%s%s, loss %.4f -> %.4f | %.0f tok/s | device arena peak %s (high-water %s, "
               "fragmentation %.1f%%, budget %s)\n",
               ran, ran == 1 ? "" : "s",
               res.first_step > 1
                   ? fmt::format(" ({} to {} of {}, resumed)", res.first_step, res.steps_done, res.total_steps).c_str()
                   : "",
               double(first_loss), double(last_loss), res.seconds > 0 ? res.tokens / res.seconds : 0.0,
               format_bytes(res.peak_device_bytes).c_str(), format_bytes(ar.high_water()).c_str(),
               100.0 * ar.fragmentation(), format_bytes(ar.budget()).c_str());
  const TierStats& ts = job.trainer().store().stats();
  if (ts.host_reserved_bytes)
    std::fprintf(info, "host tier: peak %s of a %s %s pool%s%s | disk tier: peak %s\n",
                 format_bytes(ts.peak_host_bytes).c_str(), format_bytes(ts.host_reserved_bytes).c_str(),
                 ts.host_pinned ? "pinned" : "pageable", ts.host_note.empty() ? "" : " — ", ts.host_note.c_str(),
                 format_bytes(ts.peak_disk_bytes).c_str());
  if (size_t used = job.backend().device_used_bytes())
    std::fprintf(info, "device memory in use (cudaMemGetInfo, whole process incl. the arena reservation): %s\n",
                 format_bytes(used).c_str());
  std::fflush(info);
}

}  // namespace

// A metrics or progress write that failed (a full disk) was warned about when it happened; the model is saved,
// but the run's record is not whole: each loss is named and the run exits 1.
static bool lost_output(std::FILE* info, LoopResult& res) {
  if (info && (std::fflush(info) != 0 || std::ferror(info)))
    res.output_errors.push_back("the progress output: writing failed");
  for (const std::string& e : res.output_errors) std::fprintf(stderr, "strata-train: error: %s\n", e.c_str());
  if (!res.output_errors.empty())
    std::fprintf(stderr, "strata-train: the run trained and saved, but lost output lines (exit 1)\n");
  return !res.output_errors.empty();
}

int main(int argc, char** argv) {
  // --gpus N, torchrun, srun (model/run/launch.h): one process per rank, data parallel (Trainer's comm).
  if (std::optional<int> rc = launch_hook(argc, argv, "strata-train", true)) return *rc;
  TrainConfig cfg;
  std::string profile;  // --profile: the budget planner's device profile (empty: this GPU's built-in one)
  bool json = false;
  try {
    // SIGINT/SIGTERM: a --save in progress removes its temp file, then the signal ends the run
    // as it would have (the disk tier's offload file has no name to leave behind).
    io::remove_temps_on_signals();
    std::set<std::string> valued = {"config", "profile", "write-config", "preview-data"},
                          switches = {"json", "help", "settings-markdown"};
    for (const std::string& f : setting_flags(Tool::train, false)) valued.insert(f);
    for (const std::string& f : setting_flags(Tool::train, true)) switches.insert(f);
    cli::Args a(argc, argv, valued, switches);
    if (a.has("help")) {
      std::fputs((kUsageHead + settings_usage(Tool::train) + kUsage).c_str(), stdout);
      return 0;
    }
    if (a.has("settings-markdown")) {
      std::fputs(settings_markdown().c_str(), stdout);
      return 0;
    }
    cfg.backend = "auto";
    if (a.has("config")) apply_yaml(cfg, a.str("config"));
    // Each flag is checked as it is read, by the rules its YAML key follows (model/run/settings.h): its
    // error names the flag; a YAML value's error names the file, the line and the key.
    apply_flags(cfg, {a.values().begin(), a.values().end()}, Tool::train);
    if (a.has("write-config")) {
      io::write_file_atomic(a.str("write-config"), write_config(cfg, "# strata-train --write-config\n"));
      return 0;
    }
    if (a.has("profile")) {
      profile = a.str("profile");
      find_profile(profile);  // a bad name or file fails here, before any model is loaded
      if (!cfg.memory_budget_bytes)
        throw ConfigError("--profile prices the budget planner's steps: give --budget (memory_budget) too",
                          "command line", "profile");
    }
    if ((cfg.host_budget_bytes || cfg.disk_budget_bytes) && !cfg.memory_budget_bytes)
      throw ConfigError(
          "--host-budget / --disk-budget (host_memory_budget / disk_memory_budget) are the planner's tier budgets: "
          "give --budget (memory_budget) too",
          "command line", "budget");
    if (cfg.memory_budget_bytes) {
      if (cfg.plan.pages_layer_weights())
        std::fprintf(stderr,
                     "strata-train: warning: with --budget the planner decides layer_weights itself (it pages "
                     "the layers only where that fits or is faster within --host-budget)\n");
      const Plan keep = Plan::keep_everything();
      if (cfg.plan.preset != keep.preset || !cfg.plan.overrides.empty() || !cfg.plan.rules.empty())
        std::fprintf(stderr,
                     "strata-train: warning: the budget (%s) replaces the config's activation plan (%s); its state "
                     "placement (%s) stays\n",
                     format_bytes(cfg.memory_budget_bytes).c_str(), cfg.plan.preset.c_str(),
                     cfg.plan.state_label().c_str());
      if (!cfg.device_budget_bytes)
        cfg.device_budget_bytes = cfg.memory_budget_bytes;  // hold the run to it
      else if (cfg.device_budget_bytes < cfg.memory_budget_bytes)
        std::fprintf(stderr,
                     "strata-train: warning: --device-memory %s is below the budget %s: the plan may not "
                     "fit the arena\n",
                     format_bytes(cfg.device_budget_bytes).c_str(), format_bytes(cfg.memory_budget_bytes).c_str());
    }
    json = a.has("json");
    if (cfg.output_dir.empty() && cfg.save_steps > 0)
      std::fprintf(stderr,
                   "strata-train: warning: save_steps (--save-steps) without output_dir (--save): no "
                   "checkpoint will be written\n");
    if (cfg.model_dir.empty())
      throw ConfigError("--model DIR (or base_model in the --config file) is required", "command line", "model");
    if (!cfg.datasets.empty() && !cfg.data_path.empty())
      throw ConfigError(fmt::format("--data / data ({}) and datasets in {} both give the training data: keep one",
                                    cfg.data_path, cfg.config_file),
                        "command line", "data");
    if (cfg.data_path.empty() && cfg.datasets.empty())
      throw ConfigError("--data FILE (or data or datasets in the --config file) is required", "command line", "data");
    if (a.has("preview-data")) return preview_data(stdout, cfg, a.str("preview-data")), 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "strata-train: error: %s\nsee strata-train --help\n", e.what());
    return 2;
  }

  std::FILE* info = json ? stderr : stdout;  // with --json, stdout carries only the JSON lines
  // Ranks other than 0 train silently (errors still reach stderr); rank 0 prints and writes files.
  LaunchEnv env;
  try {
    env = read_launch_env();
  } catch (const Error& e) {
    std::fprintf(stderr, "strata-train: error: %s\n", e.what());
    return 2;
  }
  if (env.rank > 0) {
    info = nullptr;
    json = false;
  }
  int stopped_by = 0;  // a signal that stopped the run: the process ends by it once everything is closed
  const int rc = [&]() -> int {
    try {
      JobOptions jo;
      jo.info = info;
      jo.text = json ? nullptr : stdout;
      jo.json = json;
      jo.profile = profile;
      jo.stop_requested = [] { return StopSignals::requested(); };
      Job job(cfg, tools::platform(), jo);
      if (info) print_setup(info, job);
      LoopResult res;
      {
        // SIGINT/SIGTERM: the step in progress finishes, a checkpoint is saved, then the run stops; a
        // second signal ends it at once (model/run/train_loop.h).
        StopSignals signals;
        res = job.run();
      }
      if (res.diverged) {
        std::fprintf(stderr,
                     "strata-train: error: training diverged at step %d (loss %g); lower --lr (%g) or keep "
                     "--max-grad-norm on\n",
                     res.steps_done, res.losses.empty() ? 0.0 : double(res.losses.back()), double(cfg.lr));
        return 1;
      }
      if (res.stopped_by) {
        std::fprintf(stderr, "strata-train: stopped by %s after step %d of %d; %s\n", strsignal(res.stopped_by),
                     res.steps_done, res.total_steps,
                     res.last_checkpoint.empty()
                         ? "no output_dir (--save), so nothing was saved"
                         : fmt::format("checkpoint saved to {}; continue with --resume auto (resume_from_checkpoint: "
                                       "true)",
                                       res.last_checkpoint)
                               .c_str());
        stopped_by = res.stopped_by;
        return 130;
      }
      if (info) print_done(info, job, res);
      if (!job.config().output_dir.empty()) job.save(job.config().output_dir);
      return lost_output(info, res) ? 1 : 0;
    } catch (const Error& e) {  // found building or running the job (a budget nothing fits: exit 1, as documented)
      std::fprintf(stderr, "strata-train: error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-train: unexpected error: %s\n", e.what());
      return 1;
    }
  }();
  if (stopped_by) StopSignals::reraise(stopped_by);
  return rc;
}
