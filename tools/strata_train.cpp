// strata-train: trains a Hugging Face Llama checkpoint (full finetune, frozen base or LoRA) on a
// token file through the tape, with the memory plan from the YAML config.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include "engine/comm.h"
#include "engine/rendezvous.h"
#include "io/atomic_file.h"
#include "io/hf_config.h"
#include "io/tokens.h"
#include "model/data/data.h"
#include "model/data/datasets.h"
#include "model/llama/llama.h"
#include "model/plan/arena_sizing.h"
#include "model/plan/forecast.h"
#include "model/plan/planner.h"
#include "model/run/checkpoint.h"
#include "model/run/forecast_request.h"
#include "model/run/launch.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "model/run/train_loop.h"
#include "model/train/trainer.h"
#include "tools/backend_select.h"
#include "tools/cli.h"
#ifdef STRATA_HAVE_NCCL
#include <cuda_runtime.h>

#include "kernels/comm_nccl.h"
#endif

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
    "--master-weights none: no fp32 master, the bf16 weights are updated in place; --optimizer-state\n"
    "bf16|8bit: AdamW's moments rounded to bf16, or block-wise 8-bit (YAML master_weights, optimizer_state).\n"
    "--gradients bf16: every trainable parameter's gradient kept in bf16, 2 bytes instead of 4, each write rounded\n"
    "once (YAML gradients; with --gpus they are summed in bf16, so --grad-reduce fp32 is refused).\n"
    "--mlp-tiles N: each layer's MLP over N row tiles (YAML mlp_tiles); auto: untiled, or as the budget planner\n"
    "chooses under --budget.\n"
    "--pad-vocab N: the embedding and LM head hold the vocabulary rounded up to a multiple of N in memory (zero\n"
    "rows, outside the softmax, never saved; YAML pad_vocab_multiple, default 64; 1: no padding).\n";

namespace {

void print_plan(std::FILE* out, const std::string& preset, const std::vector<PlanRow>& rows) {
  std::fprintf(out, "plan (%s):\n  %-24s %-10s %8s %14s\n", preset.c_str(), "class", "decision", "count", "bytes");
  for (auto& r : rows)
    std::fprintf(out, "  %-24s %-10s %8d %14s\n", r.cls.c_str(), r.decision.c_str(), r.count,
                 format_bytes(r.bytes).c_str());
}

// The built-in profile whose `match` is in the device name (cuda), else strata-plan's default.
DeviceProfile profile_for_device(const std::string& device) {
  auto lower = [](std::string x) {
    for (auto& c : x) c = char(std::tolower(static_cast<unsigned char>(c)));
    return x;
  };
  for (auto& [name, p] : builtin_profiles())
    if (!p.match.empty() && lower(device).find(lower(p.match)) != std::string::npos) return p;
  return find_profile("h100_80gb");
}

// --budget / memory_budget: runs strata-plan's budget planner on the sim backend mirroring this
// run's backend, with the model built as main() builds it, and sets cfg.plan to the fastest plan
// that fits. False (the reason printed) when nothing fits.
bool plan_to_budget(TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& be_name, const std::string& device,
                    const std::string& profile, int world, std::FILE* info) {
  ForecastRequest req = train_forecast_request(cfg, mc, be_name == "cuda" ? SimMirror::cuda : SimMirror::cpu,
                                               profile.empty() ? profile_for_device(device) : find_profile(profile));
  req.gpus = world;  // one rank's plan
  // The planner chooses the plan, the paging (plan.layer_weights) included; a state placement the config
  // gives (state_offloading, state_offloading_layers, state_plan) stays, and the planner plans around it.
  req.plan = Plan::keep_everything();
  req.plan.take_state(cfg.plan);
  req.plan.set_layer_weights(Decision::keep, "budget planner");
  const size_t budget = cfg.memory_budget_bytes;
  PlanResult pr = plan_for_budget(req, TierBudgets{budget, cfg.host_budget_bytes, cfg.disk_budget_bytes});
  if (!pr.found) {
    std::fprintf(stderr,
                 "strata-train: nothing fits a device budget of %s (host budget %s, disk budget %s): the minimum is "
                 "%s, %s more, with the lowest-memory plan (%s; %d sim runs)\n",
                 format_bytes(budget).c_str(), format_bytes(cfg.host_budget_bytes).c_str(),
                 format_bytes(cfg.disk_budget_bytes).c_str(), format_bytes(pr.minimum_bytes).c_str(),
                 format_bytes(pr.minimum_bytes - budget).c_str(), pr.label.c_str(), pr.sim_runs);
    if (!pr.short_tier.empty())
      std::fprintf(stderr, "strata-train: '%s' fits the device budget with %s of %s memory (--%s-budget)\n",
                   pr.short_tier_label.c_str(), format_bytes(pr.short_tier_needs).c_str(), pr.short_tier.c_str(),
                   pr.short_tier.c_str());
    if (pr.persistent_bytes >= budget)
      std::fprintf(stderr,
                   "strata-train: the weights, gradients and optimizer state alone take %s (no activation plan "
                   "lowers them; frozen or LoRA training does)\n",
                   format_bytes(pr.persistent_bytes).c_str());
    return false;
  }
  const Forecast& f = pr.forecast;
  std::fprintf(info, "planner: %s fits a budget of %s (sim mirroring the %s backend, profile %s; %d sim runs)\n",
               pr.label.c_str(), format_bytes(budget).c_str(), sim_mirror_name(req.mirror), req.profile.name.c_str(),
               pr.sim_runs);
  std::fprintf(info,
               "forecast: peak %s (high-water %s) in %s | step %.4f s (forward %.4f, backward %.4f of which "
               "recompute %.4f, optimizer %.4f) on the %s profile\n",
               format_bytes(f.peak_bytes).c_str(), format_bytes(f.high_water_bytes).c_str(), f.peak_phase.c_str(),
               f.step_s, f.forward_s, f.backward_s, f.recompute_s, f.optimizer_s, req.profile.name.c_str());
  cfg.plan = pr.plan;
  cfg.mlp_tiles = pr.mlp_tiles;
  return true;
}

}  // namespace

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
    std::set<std::string> valued = {"config", "profile", "write-config"},
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
  } catch (const Error& e) {
    std::fprintf(stderr, "strata-train: error: %s\nsee strata-train --help\n", e.what());
    return 2;
  }

  std::FILE* info = json ? stderr : stdout;  // with --json, stdout carries only the JSON lines
  LaunchEnv env;
  try {
    env = read_launch_env();
    if (env.world % cfg.sequence_parallel != 0)
      throw ConfigError(fmt::format("sequence_parallel {} does not divide the {} rank{} (--gpus {}): each group of {} "
                                    "ranks shares its rows; use --gpus a multiple of {}",
                                    cfg.sequence_parallel, env.world, env.world == 1 ? "" : "s", env.world,
                                    cfg.sequence_parallel, cfg.sequence_parallel),
                        cfg.config_file.empty() ? "command line" : cfg.config_file, "sequence_parallel");
    check_seq_parallel_len(cfg.seq, cfg.sequence_parallel);
  } catch (const Error& e) {
    std::fprintf(stderr, "strata-train: error: %s\n", e.what());
    return 2;
  }
  // Ranks other than 0 train silently (errors still reach stderr); rank 0 prints and writes files.
  std::FILE* quiet = env.rank > 0 ? std::fopen("/dev/null", "w") : nullptr;
  if (quiet) {
    info = quiet;
    json = false;
  }
  struct CloseQuiet {
    std::FILE* f;
    ~CloseQuiet() {
      if (f) std::fclose(f);
    }
  } close_quiet{quiet};
  int stopped_by = 0;  // a signal that stopped the run: the process ends by it once everything is closed
  const int rc = [&]() -> int {
    try {
      io::LlamaConfig mc = io::read_llama_config(cfg.model_dir);
      if (cfg.seq > mc.max_position_embeddings)
        std::fprintf(stderr, "strata-train: warning: --seq %d exceeds max_position_embeddings %d of %s/config.json\n",
                     cfg.seq, mc.max_position_embeddings, cfg.model_dir.c_str());
      // The training rows: a token file's stream, or the datasets rendered, tokenised and masked.
      const std::string tokenizer_dir = cfg.tokenizer_dir.empty() ? cfg.model_dir : cfg.tokenizer_dir;
      std::optional<TokenRows> rows;
      size_t n_tokens = 0;
      if (cfg.datasets.empty()) {
        if (cfg.sample_packing)
          throw ConfigError(
              "sample_packing packs the examples of `datasets`; a token file (--data) has no examples "
              "to pack (its rows are full windows already)",
              cfg.config_file.empty() ? "command line" : cfg.config_file, "sample_packing");
        std::vector<int32_t> tokens = io::read_tokens(cfg.data_path, mc.vocab_size, long(cfg.seq) + 1);
        n_tokens = tokens.size();
        rows.emplace(std::move(tokens), cfg.seq);
      } else {
        DatasetRows dr = build_dataset_rows(dataset_options(cfg), tokenizer_dir, info);
        if (dr.max_id >= mc.vocab_size)
          throw ConfigError(
              fmt::format("{}: the tokenizer gives id {}, outside the model's vocab_size {} ({}/config.json)",
                          tokenizer_dir, dr.max_id, mc.vocab_size, cfg.model_dir),
              tokenizer_dir, "vocab_size");
        n_tokens = dr.inputs.size();
        if (cfg.sample_packing)
          rows.emplace(std::move(dr.inputs), std::move(dr.targets), std::move(dr.positions), cfg.seq, dr.examples);
        else
          rows.emplace(std::move(dr.inputs), std::move(dr.targets), cfg.seq);
      }
      const std::string be_name = resolve_backend_name(cfg.backend);
      if (be_name == "cuda" && !cfg.device_budget_bytes && !cfg.memory_budget_bytes) {
        // The arena takes what the plan needs, not the card: other processes can share the GPU.
        ForecastRequest req = train_forecast_request(cfg, mc, SimMirror::cuda, find_profile("h100_80gb"));
        req.gpus = env.world;  // this rank's peak (its bf16 gradient copies, its ZeRO share: ranks differ)
        req.rank = env.rank;
        const ArenaSizing a = arena_for_plan(req);
        cfg.device_budget_bytes = a.bytes;
        std::fprintf(info,
                     "arena: %s from the plan's forecast (high-water %s + headroom %s); --device-memory / "
                     "device_memory sets it\n",
                     format_bytes(a.bytes).c_str(), format_bytes(a.high_water).c_str(),
                     format_bytes(a.headroom).c_str());
      }
      std::unique_ptr<Rendezvous> rdv;  // before the backend and the communicator: they outlive neither
      if (env.world > 1) {
        rdv = Rendezvous::join(env.rendezvous());
        std::fprintf(info, "data parallel: %d ranks (%s), %d on this node; rank 0 of %s:%d\n", env.world,
                     env.launcher.c_str(), env.local_world, env.master_addr.c_str(), env.master_port);
        if (cfg.sequence_parallel > 1)
          std::fprintf(info,
                       "sequence parallel: groups of %d ranks share each row (%d tokens a rank, all-to-alls around "
                       "attention); %d data-parallel group%s\n",
                       cfg.sequence_parallel, cfg.seq / cfg.sequence_parallel, env.world / cfg.sequence_parallel,
                       env.world / cfg.sequence_parallel == 1 ? "" : "s");
        if (be_name == "cuda") {
#ifdef STRATA_HAVE_NCCL
          if (cudaSetDevice(env.local_rank) != cudaSuccess)
            throw UnsupportedError(fmt::format("rank {} cannot use GPU {} (LOCAL_RANK): {}", env.rank, env.local_rank,
                                               cudaGetErrorString(cudaGetLastError())));
#else
          throw UnsupportedError(
              "several ranks on the cuda backend need NCCL, which this build does not have (built without nccl.h)");
#endif
        }
      }
      auto be = make_backend(be_name, cfg.device_budget_bytes);
      std::unique_ptr<Communicator> comm;
      if (env.world > 1) {
#ifdef STRATA_HAVE_NCCL
        if (be_name == "cuda")
          comm = make_nccl_communicator(*rdv, NcclOptions{env.local_rank, be->native_stream(), env.timeout_s});
#endif
        if (!comm) comm = make_cpu_communicator(*rdv);
      }
      // Sequence parallel: the group's own communicator beside the world's, unless the group is the world.
      std::unique_ptr<Communicator> group;
      if (cfg.sequence_parallel > 1 && cfg.sequence_parallel < env.world) {
#ifdef STRATA_HAVE_NCCL
        if (be_name == "cuda")
          group = make_nccl_communicator(
              *rdv, NcclOptions{env.local_rank, be->native_stream(), env.timeout_s, cfg.sequence_parallel});
#endif
        if (!group) group = make_cpu_communicator(*rdv, cfg.sequence_parallel);
      }
      if (cfg.memory_budget_bytes && !plan_to_budget(cfg, mc, be_name, be->device_name(), profile, env.world, info))
        return 1;

      ModelOptions mo = model_options(cfg);
      mo.zero.rank = env.rank;
      mo.zero.world = env.world;
      LlamaModel model(*be, mc, mo);
      if (!cfg.output_dir.empty() && env.rank == 0) {
        // Before loading and training: a save that cannot succeed must not cost the run. fp32
        // tensors (the adapters alone with LoRA) plus the header and config.json.
        const size_t saved = cfg.lora.enabled() ? model.trainable_count() : model.param_count();
        const std::vector<std::string> files =
            cfg.lora.enabled() ? std::vector<std::string>{"adapter_model.safetensors", "adapter_config.json"}
                               : std::vector<std::string>{"model.safetensors", "config.json"};
        check_save_dir(cfg.output_dir, saved * sizeof(float) + (size_t(1) << 20), files);
      }
      model.load(cfg.model_dir);

      TrainOptions to = train_options(cfg);
      to.comm = comm.get();
      if (cfg.sequence_parallel > 1) to.seq_comm = group ? group.get() : comm.get();
      Trainer trainer(*be, model, to);
      LoopOptions lo;
      lo.info = info;
      lo.text = json || env.rank > 0 ? nullptr : stdout;  // rank 0 alone reports progress
      lo.json = json;
      lo.stop_requested = [] { return StopSignals::requested(); };
      TrainLoop loop(cfg, *be, model, trainer, std::move(*rows), lo);

      std::fprintf(info, "device: %s | arena budget %s\n", be->device_name().c_str(),
                   format_bytes(be->arena().budget()).c_str());
      std::fprintf(info,
                   "strata-train: %s on %s backend | %d layers, hidden %d, heads %d/%d, vocab %d%s | %.2fM params, "
                   "%.2fM trainable%s\n",
                   cfg.model_dir.c_str(), be_name.c_str(), mc.num_hidden_layers, mc.hidden_size, mc.num_attention_heads,
                   mc.num_key_value_heads, mc.vocab_size,
                   model.padded_vocab() != mc.vocab_size
                       ? fmt::format(" (padded to {} in memory)", model.padded_vocab()).c_str()
                       : "",
                   model.param_count() / 1e6, model.trainable_count() / 1e6,
                   cfg.lora.enabled() ? fmt::format(" (LoRA r={})", cfg.lora.rank).c_str() : "");
      std::fprintf(info, "data: %s, %zu tokens | batch %d x seq %d | %d steps, lr %g\n",
                   cfg.datasets.empty()
                       ? cfg.data_path.c_str()
                       : fmt::format("{} dataset{}", cfg.datasets.size(), cfg.datasets.size() == 1 ? "" : "s").c_str(),
                   n_tokens, cfg.batch, cfg.seq, loop.total_steps(), double(cfg.lr));
      if (cfg.grad_accum > 1 && be_name == "cuda" && model.grads_on_host())
        std::fprintf(stderr,
                     "strata-train: note: gradient_accumulation_steps %d with the gradients on the host tier sums "
                     "them in host memory (%s) and moves %s of gradients each way per micro-batch\n",
                     cfg.grad_accum, format_bytes(model.trainable_count() * sizeof(float)).c_str(),
                     format_bytes(model.trainable_count() * sizeof(float)).c_str());
      std::fprintf(info, "state precision: master_weights %s, optimizer_state %s, gradients %s\n",
                   master_weights_name(cfg.recipe.master), optimizer_state_name(cfg.recipe.moments),
                   gradients_name(cfg.recipe.gradients));
      print_plan(info, cfg.plan.preset, trainer.plan_table(cfg.batch, cfg.seq));
      if (const WeightPager* pg = model.pager())
        std::fprintf(info, "weight paging: %d %s layers in a %s %s host block%s%s, %d device slots of %s\n",
                     pg->n_layers(), model.pages_trainable() ? "trainable" : "frozen",
                     format_bytes(pg->host_bytes()).c_str(), pg->host_pinned() ? "pinned" : "pageable",
                     pg->host_note().empty() ? "" : " — ", pg->host_note().c_str(), pg->slot_count(),
                     format_bytes(pg->slot_bytes()).c_str());
      if (model.state_host_bytes())
        std::fprintf(info, "state on the host tier (%s): %s %s%s%s\n", cfg.plan.state_label().c_str(),
                     format_bytes(model.state_host_bytes()).c_str(), model.state_host_pinned() ? "pinned" : "pageable",
                     model.state_host_note().empty() ? "" : " — ", model.state_host_note().c_str());
      if (const DiskFile* f = model.state_disk())
        std::fprintf(info, "state on the disk tier (%s): %s in %s\n", cfg.plan.state_label().c_str(),
                     format_bytes(model.state_disk_bytes()).c_str(), f->path().c_str());
      std::fflush(info);

      LoopResult res;
      {
        // SIGINT/SIGTERM: the step in progress finishes, a checkpoint is saved, then the run stops; a
        // second signal ends it at once (model/run/train_loop.h).
        StopSignals signals;
        res = loop.run();
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
      const double total_s = res.seconds;
      const size_t total_tokens = res.tokens, peak = res.peak_device_bytes;
      const float first_loss = res.losses.empty() ? 0.0f : res.losses.front();
      const float last_loss = res.losses.empty() ? 0.0f : res.losses.back();
      const Arena& ar = be->arena();
      std::fprintf(info,
                   "done: %d steps, loss %.4f -> %.4f | %.0f tok/s | device arena peak %s (high-water %s, "
                   "fragmentation %.1f%%, budget %s)\n",
                   res.steps_done, double(first_loss), double(last_loss), total_s > 0 ? total_tokens / total_s : 0.0,
                   format_bytes(peak).c_str(), format_bytes(ar.high_water()).c_str(), 100.0 * ar.fragmentation(),
                   format_bytes(ar.budget()).c_str());
      const TierStats& ts = trainer.store().stats();
      if (ts.host_reserved_bytes)
        std::fprintf(info, "host tier: peak %s of a %s %s pool%s%s | disk tier: peak %s\n",
                     format_bytes(ts.peak_host_bytes).c_str(), format_bytes(ts.host_reserved_bytes).c_str(),
                     ts.host_pinned ? "pinned" : "pageable", ts.host_note.empty() ? "" : " — ", ts.host_note.c_str(),
                     format_bytes(ts.peak_disk_bytes).c_str());
      if (size_t used = be->device_used_bytes())
        std::fprintf(info, "device memory in use (cudaMemGetInfo, whole process incl. the arena reservation): %s\n",
                     format_bytes(used).c_str());
      // ZeRO-1 on a split master: rank 0 needs every owner's low halves for the fp32 save (every rank joins).
      if (!cfg.output_dir.empty() && !cfg.lora.enabled()) trainer.optimizer().gather_masters();
      if (!cfg.output_dir.empty() && env.rank == 0) {  // every rank holds the same weights
        if (cfg.lora.enabled()) {
          model.save_lora(cfg.output_dir, cfg.model_dir);
          std::fprintf(info, "saved LoRA adapter (PEFT layout) to %s\n", cfg.output_dir.c_str());
        } else {
          model.save(cfg.output_dir);
          std::fprintf(info, "saved model to %s\n", cfg.output_dir.c_str());
        }
        if (int n = copy_tokenizer_files(tokenizer_dir, cfg.output_dir))
          std::fprintf(info, "copied %d tokenizer file%s from %s\n", n, n == 1 ? "" : "s", tokenizer_dir.c_str());
      }
      return 0;
    } catch (const Error& e) {
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
