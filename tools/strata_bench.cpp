// strata-bench: training-step throughput and memory on a built-in shape or a checkpoint, with
// random weights and random tokens. Prints one JSON line (and a human summary on stderr).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/switches.h"
#include "engine/uring_file.h"
#include "model/run/bench.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "tools/cli.h"
#include "tools/kernel_trace.h"
#include "tools/platform.h"

using namespace strata;

static const char* kUsage =
    "usage: strata-bench (--shape NAME | --model DIR) --seq N [--batch 1] [--mode full|frozen|lora]\n"
    "                    [--plan keep|gc|selective|offload|legacy|hidden_states|disk] [--steps 4] [--warmup 2] "
    "[--backend auto]\n"
    "                    [--lora-rank 16] [--device-memory BYTES] [--loss-chunk 1024] [--peak-tflops 989]\n"
    "                    [--max-grad-norm 1.0] [--layer-offloading] [--offload-dir DIR] [--config PLAN.yaml] "
    "[--loss-recompute]\n"
    "                    [--state-offloading none|optimizer|master|all] [--state-offloading-tier host|disk]\n"
    "                    [--master-weights fp32|none]\n"
    "                    [--state-offloading-layers optimizer|master|all:K]\n"
    "                    [--optimizer-state fp32|bf16|8bit] [--gradients fp32|bf16] [--mlp-tiles N] [--pad-vocab 64]\n"
    "                    [--eager-update]\n"
    "                    [--pack N] [--grad-accum 1]\n"
    "                    | --measure-disk DIR\n"
    "--config: a strata-train YAML (e.g. strata-plan --budget --write-config): its plan (layer_weights too),\n"
    "loss_chunk_tokens and device_memory apply unless the command line gives them.\n"
    "--max-grad-norm: global-norm gradient clipping (--config's max_grad_norm, else strata-train's and Hugging Face\n"
    "Trainer's default 1.0; 0 = off).\n"
    "--state-offloading-layers LEVEL:K: also LEVEL's classes in K layers spread evenly, as strata-train's\n"
    "state_offloading_layers.\n"
    "--state-offloading: persistent state on the host tier (Adam moments; + fp32 masters; + gradients), as\n"
    "strata-train's state_offloading key; --state-offloading-tier disk puts those classes (gradients excepted)\n"
    "in a state file in --offload-dir instead (state_offloading_tier). --master-weights / --optimizer-state: the "
    "state's precision, as\n"
    "strata-train's master_weights / optimizer_state keys (--config's apply unless these are given).\n"
    "--gradients fp32|bf16: the trainable parameters' gradient precision, as strata-train's gradients key.\n"
    "--mlp-tiles N: each layer's MLP over N row tiles (strata-train's mlp_tiles; --config's applies unless given;\n"
    "auto or absent: untiled).\n"
    "--pad-vocab N: the vocabulary rows padded to a multiple of N in memory (strata-train's pad_vocab_multiple;\n"
    "--config's applies unless given; default 64, 1: unpadded), for A/B runs of the LM head's shape.\n"
    "--loss-recompute: the LM head's backward recomputes the logits (no gradients formed in forward), for A/B runs.\n"
    "--eager-update: host-tier state is updated right after backward instead of in the next forward (or, with\n"
    "--max-grad-norm 0, during backward), for A/B runs.\n"
    "--pack N: each row holds N packed examples of seq/N tokens (sample packing: attention within each example,\n"
    "positions restarting), against the default of one sequence a row.\n"
    "--grad-accum K: K micro-batches of --batch rows a step, their gradients summed on the device before one update\n"
    "(strata-train's gradient_accumulation_steps); tokens/s and MFU count all K.\n";

// One JSON line: what ran and what it measured.
static std::string result_json(const BenchResult& r, const std::string& shape) {
  auto round_to = [](double v, double scale) { return std::round(v * scale) / scale; };
  const ModelOptions& mo = r.options;
  nlohmann::ordered_json j;  // strings escaped (a --model or --config path may hold anything)
  j["engine"] = "strata";
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["shape"] = shape;
  j["seq"] = r.seq;
  j["batch"] = r.batch;
  j["grad_accum"] = r.grad_accum;
  j["mode"] = r.mode;
  j["plan"] = r.plan;
  j["layer_offloading"] = mo.page_layers;
  j["loss_grad_in_forward"] = mo.loss_grad_in_forward;
  j["mlp_tiles"] = mo.mlp_tiles;
  j["vocab"] = r.shape.vocab_size;
  j["padded_vocab"] = r.padded_vocab;
  j["pack"] = r.pack;
  j["max_grad_norm"] = double(r.max_grad_norm);
  j["step_s"] = round_to(r.step_s, 1e5);
  j["tokens_per_s"] = round_to(r.tokens_per_s, 10);
  j["peak_arena_bytes"] = r.peak_arena_bytes;
  j["peak_host_bytes"] = r.peak_host_bytes;
  j["peak_disk_bytes"] = r.peak_disk_bytes;
  j["state_offloading"] = r.state_offloading;
  j["master_weights"] = master_weights_name(mo.recipe.master);
  j["optimizer_state"] = optimizer_state_name(mo.recipe.moments);
  j["gradients"] = gradients_name(mo.recipe.gradients);
  j["fp8"] = mo.fp8;
  j["state_host_bytes"] = r.state_host_bytes;
  j["state_host_pinned"] = r.state_host_pinned;
  j["state_disk_bytes"] = r.state_disk_bytes;
  j["offloaded_bytes_per_step"] = r.offloaded_bytes_per_step;
  j["device_used_bytes"] = r.device_used_bytes;
  j["mfu"] = round_to(r.mfu, 1e4);
  j["loss"] = round_to(double(r.loss), 1e4);
  j["params"] = r.params;
  j["trainable"] = r.trainable;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

int main(int argc, char** argv) {
  try {
    // The tool's own flags; the settings' flags (--loss-chunk, --gradients, ...) come from the settings table.
    std::set<std::string> options = {"shape",  "model",   "seq",       "batch",       "mode",         "plan",   "steps",
                                     "warmup", "backend", "lora-rank", "peak-tflops", "measure-disk", "config", "pack"},
                          switches = {"help", "loss-recompute", "eager-update"};
    for (const std::string& f : setting_flags(Tool::bench, false)) options.insert(f);
    for (const std::string& f : setting_flags(Tool::bench, true)) switches.insert(f);
    cli::Args a(argc, argv, options, switches);
    if (a.has("help")) {
      std::fputs((kUsage + std::string("settings (YAML key; default; range):\n") + settings_usage(Tool::bench)).c_str(),
                 stdout);
      return 0;
    }
    if (a.has("measure-disk")) {
      // The O_DIRECT bandwidth of a directory, for the disk tier's "same disk, same run" baseline.
      auto [w, r] = measure_direct_bandwidth(a.str("measure-disk"), size_t(4) << 30);
      std::printf("{\"engine\": \"odirect\", \"dir\": \"%s\", \"write_GBps\": %.3f, \"read_GBps\": %.3f}\n",
                  a.str("measure-disk").c_str(), w, r);
      return 0;
    }
    if (a.has("state-offloading-tier") && !a.has("state-offloading"))
      throw ConfigError("--state-offloading-tier needs --state-offloading (the level whose classes it places)",
                        "command line", "state-offloading-tier");
    BenchQuestion q;
    q.model = a.str("model");
    q.shape = a.str("shape", "tiny");
    q.config = a.str("config");
    q.flags = {a.values().begin(), a.values().end()};
    auto integer = [&](const char* k) { return a.has(k) ? std::optional<long long>(a.integer(k, 0)) : std::nullopt; };
    q.seq = integer("seq"), q.batch = integer("batch"), q.steps = integer("steps"), q.warmup = integer("warmup");
    q.lora_rank = integer("lora-rank"), q.pack = integer("pack");
    if (a.has("peak-tflops")) q.peak_tflops = a.number("peak-tflops", 0);
    q.mode = a.str("mode", "full");
    if (a.has("plan")) q.plan = a.str("plan");
    q.backend = a.str("backend", "auto");
    q.loss_recompute = a.has("loss-recompute");
    q.eager_update = a.has("eager-update");

    // STRATA_KERNEL_TRACE=1: GPU time per kernel over the timed steps (CUPTI), beside hf_bench --profile.
    std::unique_ptr<tools::KernelTrace> trace;
    BenchHooks hooks;
    hooks.info = stderr;
    if (strata::switches().kernel_trace)
      hooks.before_timed_steps = [&] {
        std::string why;
        trace = tools::KernelTrace::start(&why);
        if (!trace) std::fprintf(stderr, "strata-bench: no kernel trace: %s\n", why.c_str());
      };
    hooks.after_steps = [&](int steps) {
      if (!trace) return;
      const std::string table = tools::format_kernel_table(trace->stop(), steps, 40);
      std::fprintf(stderr, "strata-bench: kernel trace through %s (the timed steps include its overhead)\n%s%s",
                   trace->library().c_str(), table.c_str(), tools::format_timeline(trace->timeline(), steps).c_str());
      trace.reset();
    };
    const BenchResult r = run_bench(q, tools::platform(), hooks);
    std::printf("%s\n", result_json(r, a.has("model") ? a.str("model") : q.shape).c_str());
    std::fprintf(stderr, "strata-bench: %.0f tok/s, step %.3f s, arena peak %s, device used %s, MFU %.1f%%\n",
                 r.tokens_per_s, r.step_s, format_bytes(r.peak_arena_bytes).c_str(),
                 format_bytes(r.device_used_bytes).c_str(), 100 * r.mfu);
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "strata-bench: error: %s\nsee strata-bench --help\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench: error: %s\n", e.what());
    return 1;
  }
}
