#include "model/run/forecast_request.h"

#include <cstdio>

#include "model/llama/llama.h"

namespace strata {

ForecastRequest train_forecast_request(const TrainConfig& cfg, const io::LlamaConfig& mc, SimMirror mirror,
                                       const DeviceProfile& profile) {
  ForecastRequest req;
  req.model = mc;
  req.seq = longest_batch_len(cfg);  // rows sized to the data: the longest batch; the others are checked by the caller
  req.batch = cfg.batch;
  // The micro-batches a step sums, when their gradients stay on the device. A placement that sends gradients to the
  // host tier sums them there (model/train/grad_accum.h), which a forecast does not price: its forecast is one
  // micro-batch's step (the same device peak; strata-train notes the host sum's memory and time).
  req.grad_accum = plan_moves_grads_off_device(cfg.plan, mc) ? 1 : cfg.grad_accum;
  if (!cfg.batch_lengths.empty()) req.batch_tokens = int64_t(cfg.batch) * req.seq;
  req.mode = cfg.lora.enabled() ? TrainMode::lora : cfg.freeze_base ? TrainMode::frozen : TrainMode::full;
  req.lora_rank = cfg.lora.rank;
  req.lora_alpha = cfg.lora.alpha;
  req.lora_targets = cfg.lora.target_modules;
  req.loss_chunk_tokens = cfg.loss_chunk_tokens;
  req.pad_vocab_multiple = cfg.pad_vocab_multiple;
  req.mlp_tiles = cfg.plan.mlp_tiles;
  req.recipe = cfg.recipe;
  req.fp8 = cfg.fp8;
  req.max_grad_norm = cfg.max_grad_norm;
  req.plan = cfg.plan;
  req.tiers.offload_dir = cfg.offload_dir;
  req.mirror = mirror;
  req.profile = profile;
  // Data parallel (the caller sets req.gpus to the world size): the rank's bf16 gradient copies and
  // ZeRO-1's share of the state are in its peak.
  check_grad_reduce(cfg);
  req.grad_reduce = effective_grad_reduce(cfg);
  req.zero_stage = cfg.zero_stage;
  req.sequence_parallel = cfg.sequence_parallel;  // the caller's req.gpus must be a multiple
  req.plan_time_limit_s = cfg.plan_time_limit_s;
  req.plan_progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  return req;
}

}  // namespace strata
