// A plan and its forecast as a strata-train YAML config (strata-plan --write-config, strata-train's
// printout): the keys model/train_config.cpp reads back to the same plan.
#include <fmt/format.h>

#include "engine/dtype.h"
#include "model/plan/planner.h"

namespace strata {

std::string plan_yaml(const ForecastRequest& r, const Plan& plan, const Forecast& f, size_t budget) {
  std::string y;
  y +=
      fmt::format("# strata-plan: {} layers, hidden {}, seq {} x batch {}, {} training, sim mirroring the {} backend\n",
                  r.model.num_hidden_layers, r.model.hidden_size, r.seq, r.batch, train_mode_name(r.mode),
                  sim_mirror_name(r.mirror));
  y +=
      fmt::format("# profile: {} ({})\n", r.profile.name,
                  r.profile.source.rfind("datasheet", 0) == 0 ? "datasheet/anchors, not calibrated" : r.profile.source);
  y += fmt::format("# forecast: arena peak {} (high-water {}) under a budget of {}; step {:.4f} s, {:.0f} tokens/s\n",
                   format_bytes(f.peak_bytes), format_bytes(f.high_water_bytes), format_bytes(budget), f.step_s,
                   f.tokens_per_s);
  y += fmt::format("# plan: {}\n", plan.preset);
  y += fmt::format("sequence_len: {}\nmicro_batch_size: {}\nloss_chunk_tokens: {}\n", r.seq, r.batch,
                   r.loss_chunk_tokens);
  if (r.grad_accum > 1) y += fmt::format("gradient_accumulation_steps: {}\n", r.grad_accum);
  if (budget) y += fmt::format("device_memory: {}  # {}\n", budget, format_bytes(budget));
  if (r.mode == TrainMode::frozen) y += "freeze_base: true\n";
  if (r.mode == TrainMode::lora) y += fmt::format("lora_r: {}\nlora_alpha: {}\n", r.lora_rank, r.lora_alpha);
  if (r.mlp_tiles > 1) y += fmt::format("mlp_tiles: {}\n", r.mlp_tiles);
  if (r.sequence_parallel > 1)
    y += fmt::format("sequence_parallel: {}  # of the {} GPUs (--gpus): each rank holds {} tokens of a row\n",
                     r.sequence_parallel, r.gpus, r.seq / r.sequence_parallel);
  if (r.pad_vocab_multiple != kDefaultPadVocabMultiple)
    y += fmt::format("pad_vocab_multiple: {}\n", r.pad_vocab_multiple);
  if (r.recipe != StateRecipe{})
    y += fmt::format("master_weights: {}\noptimizer_state: {}\ngradients: {}\n", master_weights_name(r.recipe.master),
                     optimizer_state_name(r.recipe.moments), gradients_name(r.recipe.gradients));
  if (!plan.state.empty()) {
    y += "state_plan:  # persistent state off the device (host or disk tier; disk: its file in offload_dir)\n";
    for (auto& [pat, d] : plan.state) y += fmt::format("  \"{}\": {}\n", pat, decision_name(d));
  }
  if (plan.state_layers > 0)
    y += fmt::format("state_offloading_layers: {{level: {}, layers: {}}}  # of the {} layers, spread evenly\n",
                     plan.state_layers_level, plan.state_layers, r.model.num_hidden_layers);
  if (plan.pages_layer_weights())
    y += fmt::format("layer_weights: page  # the layers' {} weight matrices in host memory, paged in\n",
                     r.mode == TrainMode::full ? "trainable" : "frozen");
  // The activation preset, written as the YAML key the one preset table (engine/plan.h) reads it from;
  // the rest of the table (the explicit overrides, or rules no preset makes) as `plan:`.
  std::vector<std::pair<std::string, Decision>> table = plan.overrides;
  const PresetInfo* preset = preset_of(plan);
  if (preset && !preset->yaml_key.empty())
    y += preset_yaml(*preset, plan.checkpoint_every) + "\n";
  else if (!preset)
    table.insert(table.end(), plan.rules.begin(), plan.rules.end());
  if (table.empty()) {
    y += preset && !preset->yaml_key.empty() ? "" : "plan: {}  # keep everything\n";
    return y;
  }
  y += "plan:\n";
  for (auto& [pat, d] : table) y += fmt::format("  \"{}\": {}\n", pat, decision_name(d));
  return y;
}

}  // namespace strata
