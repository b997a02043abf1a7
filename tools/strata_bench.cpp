// strata-bench: training-step throughput and memory on a built-in shape or a checkpoint, with
// random weights and random tokens. Prints one JSON line (and a human summary on stderr).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/uring_file.h"
#include "io/hf_config.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/llama/shapes.h"
#include "model/run/job.h"
#include "model/run/settings.h"
#include "model/run/train_config.h"
#include "model/train/trainer.h"
#include "tools/backend_select.h"
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
    "                    [--pack N]\n"
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
    "positions restarting), against the default of one sequence a row.\n";

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
    io::LlamaConfig c = a.has("model") ? io::read_llama_config(a.str("model")) : builtin_shape(a.str("shape", "tiny"));
    // Integers are range-checked (4294967312 is refused, not read as 16), as strata-train's are.
    auto int_flag = [&](const char* k, int def, int lo) { return check_int(a.integer(k, def), lo, Origin::flag(k)); };
    const int seq = int_flag("seq", 4096, 1), batch = int_flag("batch", 1, 1);
    const int steps = int_flag("steps", 4, 0), warmup = int_flag("warmup", 2, 0);
    const double peak_tflops =
        check_number(a.number("peak-tflops", 989.0), NumberRule::positive, Origin::flag("peak-tflops"));
    const std::string mode = a.str("mode", "full");
    std::string plan_name = a.str("plan", "keep");
    TrainConfig tc;
    tc.loss_chunk_tokens = 1024;
    if (a.has("config")) {
      if (a.has("plan")) throw ConfigError("--plan and --config exclude each other", "command line", "config");
      apply_yaml(tc, a.str("config"));
      plan_name = "config:" + a.str("config") + " (" + tc.plan.preset + ")";
      // The config's plan runs as written (strata-plan --write-config wrote it): no planning here.
      tc.memory_budget_bytes = tc.host_budget_bytes = tc.disk_budget_bytes = 0;
    }
    apply_flags(tc, {a.values().begin(), a.values().end()}, Tool::bench);
    tc.backend = a.str("backend", "auto");
    tc.seq = seq;
    tc.batch = batch;
    tc.lr = 1e-5f;
    if (mode == "frozen") {
      tc.freeze_base = true;
    } else if (mode == "lora") {
      tc.lora.rank = int_flag("lora-rank", 16, 1);
      tc.lora.alpha = 2.0f * float(tc.lora.rank);
    } else if (mode != "full") {
      throw ConfigError("--mode must be full, frozen or lora", "command line", "mode");
    }
    if (!a.has("config")) {  // the preset's activation rules; the state flags' placement stays
      Plan preset = preset_plan(plan_name, 1, "--plan", "command line", "plan");
      preset.take_state(tc.plan);
      tc.plan = preset;
    }
    if (a.has("state-offloading-tier") && !a.has("state-offloading"))
      throw ConfigError("--state-offloading-tier needs --state-offloading (the level whose classes it places)",
                        "command line", "state-offloading-tier");

    using Clock = std::chrono::steady_clock;
    auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    const Clock::time_point t_model = Clock::now();
    JobOptions jo;
    jo.random_shape = c;  // random weights, random tokens: no data
    jo.needs_data = false;
    const bool eager = a.has("eager-update"), loss_recompute = a.has("loss-recompute");
    jo.tune = [&](ModelOptions& mo, TrainOptions& to) {
      mo.loss_grad_in_forward = !loss_recompute;
      to.optimizer.defer_update = !eager;
      to.optimizer.update_in_backward = !eager;
    };
    Job job(tc, tools::platform(), jo);
    Backend* be = &job.backend();
    const std::string be_name = job.backend_name();
    LlamaModel& model = job.model();
    Trainer& tr = job.trainer();
    const ModelOptions& mo = model.options();
    const Clock::time_point t_ready = Clock::now();
    Rng rng(1);
    Batch b;
    b.B = batch;
    b.T = seq;
    for (long i = 0; i < long(batch) * seq; ++i) {
      b.inputs.push_back(rng.below(c.vocab_size));
      b.targets.push_back(rng.below(c.vocab_size));
    }
    // --pack N: each row as N packed examples of seq / N tokens (sample packing's attention and rope).
    const int pack = int_flag("pack", 1, 1);
    if (pack > 1) {
      if (seq % pack)
        throw ConfigError(fmt::format("--pack {} must divide --seq {}", pack, seq), "command line", "pack");
      for (long i = 0; i < long(batch) * seq; ++i) b.positions.push_back(int32_t(i % (seq / pack)));
    }
    std::vector<double> times;
    size_t peak = 0, used = 0, host_peak = 0, disk_peak = 0, offloaded = 0;
    float loss = 0;
    // STRATA_KERNEL_TRACE=1: GPU time per kernel over the timed steps (CUPTI), beside hf_bench --profile.
    std::unique_ptr<tools::KernelTrace> trace;
    const bool want_trace =
        std::getenv("STRATA_KERNEL_TRACE") && std::string(std::getenv("STRATA_KERNEL_TRACE")) == "1";
    for (int s = 0; s < warmup + steps; ++s) {
      if (want_trace && s == warmup) {
        std::string why;
        trace = tools::KernelTrace::start(&why);
        if (!trace) std::fprintf(stderr, "strata-bench: no kernel trace: %s\n", why.c_str());
      }
      StepStats st = tr.step(b);
      if (s == 0)  // the first step tunes the GEMM and attention plans of every new shape
        std::fprintf(stderr, "strata-bench: setup %.1f s (model and random weights %.1f s, first step %.1f s)\n",
                     secs(t_model, Clock::now()), secs(t_model, t_ready), st.seconds);
      if (s >= warmup) times.push_back(st.seconds);
      peak = std::max(peak, st.peak_device_bytes);
      used = std::max(used, be->device_used_bytes());
      host_peak = st.peak_host_bytes + st.state_host_bytes;
      disk_peak = st.peak_disk_bytes + st.state_disk_bytes;
      loss = st.loss;
    }
    if (trace) {
      const std::string table = tools::format_kernel_table(trace->stop(), steps, 40);
      std::fprintf(stderr, "strata-bench: kernel trace through %s (the timed steps include its overhead)\n%s%s",
                   trace->library().c_str(), table.c_str(), tools::format_timeline(trace->timeline(), steps).c_str());
      trace.reset();
    }
    offloaded = tr.store().stats().offloaded_bytes / size_t(warmup + steps);
    std::sort(times.begin(), times.end());
    const double med = times.empty() ? 0 : times[times.size() / 2];
    const long tokens = long(batch) * seq;
    const double flops = step_flops(c, tokens, seq, mode == "full");
    const double mfu = med > 0 ? flops / med / (peak_tflops * 1e12) : 0;
    auto round_to = [](double v, double scale) { return std::round(v * scale) / scale; };
    nlohmann::ordered_json j;  // strings escaped (a --model or --config path may hold anything)
    j["engine"] = "strata";
    j["backend"] = be_name;
    j["device"] = be->device_name();
    j["shape"] = a.has("model") ? a.str("model") : a.str("shape", "tiny");
    j["seq"] = seq;
    j["batch"] = batch;
    j["mode"] = mode;
    j["plan"] = plan_name;
    j["layer_offloading"] = mo.page_layers;
    j["loss_grad_in_forward"] = mo.loss_grad_in_forward;
    j["mlp_tiles"] = mo.mlp_tiles;
    j["vocab"] = c.vocab_size;
    j["padded_vocab"] = model.padded_vocab();
    j["pack"] = pack;
    j["max_grad_norm"] = double(tc.max_grad_norm);
    j["step_s"] = round_to(med, 1e5);
    j["tokens_per_s"] = round_to(med > 0 ? tokens / med : 0.0, 10);
    j["peak_arena_bytes"] = peak;
    j["peak_host_bytes"] = host_peak;
    j["peak_disk_bytes"] = disk_peak;
    j["state_offloading"] = job.config().plan.state_label();
    j["master_weights"] = master_weights_name(mo.recipe.master);
    j["optimizer_state"] = optimizer_state_name(mo.recipe.moments);
    j["gradients"] = gradients_name(mo.recipe.gradients);
    j["state_host_bytes"] = model.state_host_bytes();
    j["state_host_pinned"] = model.state_host_pinned();
    j["state_disk_bytes"] = model.state_disk_bytes();
    j["offloaded_bytes_per_step"] = offloaded;
    j["device_used_bytes"] = used;
    j["mfu"] = round_to(mfu, 1e4);
    j["loss"] = round_to(double(loss), 1e4);
    j["params"] = model.param_count();
    j["trainable"] = model.trainable_count();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    std::fprintf(stderr, "strata-bench: %.0f tok/s, step %.3f s, arena peak %s, device used %s, MFU %.1f%%\n",
                 med > 0 ? tokens / med : 0.0, med, format_bytes(peak).c_str(), format_bytes(used).c_str(), 100 * mfu);
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "strata-bench: error: %s\nsee strata-bench --help\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench: error: %s\n", e.what());
    return 1;
  }
}
