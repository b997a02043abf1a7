// The settings table: every setting of a run, declared once (model/run/settings.h).
#include <fmt/format.h>

#include <limits>

#include "model/plan/forecast.h"
#include "model/run/settings_structured.h"
#include "model/run/settings_value.h"

namespace strata {

namespace {

using C = TrainConfig;
using V = SettingValue;
using R = SettingsReader;

constexpr double kIntMax = std::numeric_limits<int>::max();
constexpr Range kAtLeast1{1, kIntMax};
constexpr Range kAtLeast0{0, kIntMax};
constexpr Range kUnitOpen{0, 1, false, true};
constexpr Range kBytesAbove0{1, 18446744073709551615.0};
// Finite bounds where nothing else bounds a value: far past any sensible setting, and every value within
// converts to its field without overflow (a double holds whole numbers exactly up to 2^53).
constexpr Range kSeqLen{1, 1 << 24};              // tokens: config.json's positions are at most 2^24
constexpr Range kRowsAtOnce{1, 1 << 20};          // rows of a micro-batch, micro-batches of a step
constexpr Range kRate{0, 1e3, true, false};       // learning rate
constexpr Range kFactor{0, 1e6, false, false};    // weight decay, gradient norm
constexpr Range kEpsilon{0, 1, true, false};      // Adam epsilon
constexpr Range kEpochs{1e-6, 1e6};               // passes over the rows: a millionth of the rows at least
constexpr Range kHeldOut{0, 9007199254740992.0};  // a fraction below 1 or a whole count <= 2^53
constexpr Range kLoraRank{1, 1 << 16};
constexpr Range kLoraAlpha{0, 1e6, true, false};
constexpr Range kRanksAtOnce{1, 1 << 20};  // as WORLD_SIZE

constexpr unsigned T = unsigned(Tool::train), P = unsigned(Tool::plan), B = unsigned(Tool::bench);

// Field accessors by member pointer: one template instance per field, a plain function pointer.
template <auto M>
void set_int(C& c, const V& v, R&) {
  c.*M = int(v.integer());
}
template <auto M>
std::string get_int(const C& c) {
  return std::to_string(c.*M);
}
template <auto M>
void set_num(C& c, const V& v, R&) {
  c.*M = v.number();
}
template <auto M>
std::string get_num(const C& c) {
  return fmt::format("{}", c.*M);
}
template <auto M>
void set_text(C& c, const V& v, R&) {
  std::string s = v.text();
  // `--save ''` would save nothing, `data: ""` read the current directory: an empty path means no value.
  if (s.empty()) v.fail("is empty; leave it out for the default");
  c.*M = std::move(s);
}
template <auto M>
std::string get_text(const C& c) {
  return c.*M;
}
template <auto M>
void set_bool(C& c, const V& v, R&) {
  c.*M = v.boolean();
}
template <auto M>
std::string get_bool(const C& c) {
  return c.*M ? "true" : "false";
}
template <auto M>
std::string get_bytes(const C& c) {
  return c.*M ? format_bytes_exact(c.*M) : "";
}

template <auto M>
void set_bytes(C& c, const V& v, R&) {
  c.*M = v.bytes();  // 0, the default's "none", is refused with the default named (range [1, ...])
}

// The activation preset `key: value` selects (engine/plan.h's one preset table).
const PresetInfo* preset_for(std::string_view key, std::string_view value) {
  for (const PresetInfo& p : plan_presets())
    if (p.yaml_key == key && p.yaml_value == value) return &p;
  return nullptr;
}

// The value of the preset key `key` that made `c.plan`'s rules, else "".
std::string preset_value(const C& c, std::string_view key) {
  const PresetInfo* p = preset_of(c.plan);
  if (!p || p->yaml_key != key) return "";
  const std::string line = preset_yaml(*p, c.plan.checkpoint_every);
  return line.substr(line.find(": ") + 2);
}

void set_checkpointing(C& c, const V& v, R&) {
  if (v.node().IsMap()) {
    if (v.node().size() != 1 ||
        yaml_key_of(v.node().begin()->first, v.origin().file, std::string(v.row().key)) != "every")
      v.fail("expects true, false or {every: N}");
    const V every = v.child(v.node().begin()->second, "gradient_checkpointing.every");
    const int n = int(every.integer_in(kAtLeast1));
    c.plan = preset_for("gradient_checkpointing", "true")->make(n);
    return;
  }
  if (v.node().IsSequence()) v.fail("expects true, false or {every: N}");
  if (v.boolean()) c.plan = preset_for("gradient_checkpointing", "true")->make(1);
}

void set_activation_offloading(C& c, const V& v, R&) {
  // A YAML boolean: true is the host preset's value, false no preset.
  std::string mode = v.scalar("true, false or a tier");
  bool b = false;
  if (v.source() == ValueSource::yaml && v.node().Tag() == "?" && yaml11_bool(mode, &b)) mode = b ? "true" : "false";
  std::string expected;
  for (const PresetInfo& p : plan_presets()) {
    if (p.yaml_key != "activation_offloading") continue;
    expected += std::string(p.yaml_value) + ", ";
    if (p.yaml_value == mode) {
      c.plan = p.make(1);
      return;
    }
  }
  if (mode != "false") v.fail(fmt::format("'{}' is unknown (expected {}or false)", mode, expected));
}

// layer_weights: keep|page and its older spelling layer_offloading: false|true, one decision.
void set_weights(const V& v, R& r, Decision d, const std::string& shown) {
  const std::string key(v.origin().field);
  if (r.weights_key.empty() || r.weights == d) {
    r.weights = d;
    r.weights_key = key;
    r.weights_shown = shown;
    return;
  }
  const bool alias = key == "layer_offloading" || key == "layer-offloading";
  const std::string agree = alias ? (r.weights == Decision::page ? "true" : "false") : decision_name(r.weights);
  v.fail(fmt::format(
      "{} contradicts {}: {} (layer_offloading: true is layer_weights: page, false is keep); expected {}: {}, or "
      "one of the two keys",
      shown, r.weights_key, r.weights_shown, key, agree));
}

}  // namespace

const std::vector<Setting>& settings() {
  // clang-format off
  static const std::vector<Setting> table = {
    // ---- model and data
    {"base_model", {"model"}, "model", "DIR", SettingType::text, {}, "", "(required)",
     "Hugging Face Llama checkpoint directory", set_text<&C::model_dir>, get_text<&C::model_dir>, T},
    {"data", {"dataset"}, "data", "FILE", SettingType::text, {}, "", "(required unless datasets)",
     "token file (docs/FORMATS.md)", set_text<&C::data_path>, get_text<&C::data_path>, T},
    {"datasets", {}, "", "", SettingType::structured, {}, "", "-",
     "text or jsonl datasets instead of data: a list of {path, type: completion|alpaca|chat|chat_template, field; "
     "chat_template's keys: chat_template, field_messages, message_property_mappings, roles, roles_to_train, "
     "train_on_eos}",
     set_datasets, get_datasets},
    {"tokenizer", {}, "", "", SettingType::text, {}, "", "base_model",
     "directory with the tokenizer.json that tokenises datasets", set_text<&C::tokenizer_dir>,
     get_text<&C::tokenizer_dir>},
    {"train_on_inputs", {}, "", "", SettingType::boolean, {}, "", "false",
     "with datasets: the prompt tokens count in the loss too", set_bool<&C::train_on_inputs>,
     get_bool<&C::train_on_inputs>},
    {"excess_length_strategy", {}, "", "", SettingType::choice, {}, "truncate, drop", "truncate",
     "an example longer than sequence_len: truncate it or drop it",
     [](C& c, const V& v, R&) { c.drop_excess = v.choice() == "drop"; },
     [](const C& c) -> std::string { return c.drop_excess ? "drop" : "truncate"; }},
    {"sample_packing", {}, "sample-packing", "", SettingType::boolean, {}, "", "false",
     "with datasets: whole examples packed into each row, each attending only to itself",
     set_bool<&C::sample_packing>, get_bool<&C::sample_packing>, T},
    {"pad_to_sequence_len", {}, "pad-to-sequence-len", "", SettingType::boolean, {}, "", "false",
     "with datasets: every batch padded to sequence_len (one shape every step), not sized to its longest row",
     set_bool<&C::pad_to_sequence_len>, get_bool<&C::pad_to_sequence_len>, T},
    {"backend", {}, "backend", "NAME", SettingType::choice, {}, "auto, cpu, cuda, sim", "auto",
     "the backend (auto: cuda where built and a GPU is present, else cpu)",
     [](C& c, const V& v, R&) { c.backend = v.choice(); },
     get_text<&C::backend>, T},
    // ---- shape and loop
    {"sequence_len", {"seq"}, "seq", "N", SettingType::integer, kSeqLen, "", "128", "tokens a row at most (longer examples are truncated or dropped); a batch of datasets is as long as its longest row, rounded up to 128",
     set_int<&C::seq>, get_int<&C::seq>, T},
    {"micro_batch_size", {"batch"}, "batch", "B", SettingType::integer, kRowsAtOnce, "", "1", "rows per micro-batch",
     set_int<&C::batch>, get_int<&C::batch>, T},
    {"max_steps", {"steps"}, "steps", "S", SettingType::integer, kAtLeast0, "", "10",
     "optimizer steps (when given, it wins over num_epochs)",
     [](C& c, const V& v, R&) { c.steps = int(v.integer()), c.steps_given = true; },
     [](const C& c) { return c.steps_given || c.steps != C{}.steps ? std::to_string(c.steps) : std::string(); }, T},
    {"num_epochs", {}, "epochs", "N", SettingType::number, kEpochs, "", "-",
     "without max_steps: passes over the training rows (fractions allowed)", set_num<&C::num_epochs>,
     [](const C& c) { return c.num_epochs > 0 ? fmt::format("{}", c.num_epochs) : std::string(); }, T},
    {"gradient_accumulation_steps", {}, "grad-accum", "K", SettingType::integer, kRowsAtOnce, "", "1",
     "micro-batches summed into each optimizer step", set_int<&C::grad_accum>, get_int<&C::grad_accum>, T | P | B},
    {"learning_rate", {"lr"}, "lr", "X", SettingType::number, kRate, "", "1e-3", "AdamW learning rate",
     set_num<&C::lr>, get_num<&C::lr>, T},
    {"lr_scheduler", {}, "lr-scheduler", "NAME", SettingType::choice, {}, "constant, linear, cosine", "constant",
     "the learning rate after the warmup",
     [](C& c, const V& v, R&) { c.lr_scheduler = parse_lr_scheduler(v.text(), v.origin()); },
     [](const C& c) -> std::string { return lr_scheduler_name(c.lr_scheduler); }, T},
    {"warmup_steps", {}, "warmup-steps", "N", SettingType::integer, kAtLeast0, "", "0",
     "linear warmup steps (wins over warmup_ratio)", set_int<&C::warmup_steps>, get_int<&C::warmup_steps>, T},
    {"warmup_ratio", {}, "", "", SettingType::number, kUnitOpen, "", "0",
     "warmup as a fraction of the steps, rounded up", set_num<&C::warmup_ratio>, get_num<&C::warmup_ratio>},
    {"weight_decay", {}, "weight-decay", "X", SettingType::number, kFactor, "", "0",
     "decoupled weight decay (torch AdamW semantics)", set_num<&C::weight_decay>, get_num<&C::weight_decay>, T},
    {"adam_beta1", {}, "", "", SettingType::number, kUnitOpen, "", "0.9", "AdamW beta1", set_num<&C::beta1>,
     get_num<&C::beta1>},
    {"adam_beta2", {}, "", "", SettingType::number, kUnitOpen, "", "0.999", "AdamW beta2", set_num<&C::beta2>,
     get_num<&C::beta2>},
    {"adam_epsilon", {}, "", "", SettingType::number, kEpsilon, "", "1e-8", "AdamW epsilon", set_num<&C::adam_eps>,
     get_num<&C::adam_eps>},
    {"max_grad_norm", {}, "max-grad-norm", "X", SettingType::number, kFactor, "", "1.0",
     "global-norm gradient clipping; 0 disables", set_num<&C::max_grad_norm>, get_num<&C::max_grad_norm>, T | P | B},
    {"seed", {}, "seed", "N", SettingType::integer, {0, 18446744073709551615.0}, "", "0", "LoRA init seed",
     [](C& c, const V& v, R&) { c.seed = v.uint64(); }, [](const C& c) { return std::to_string(c.seed); }, T},
    {"val_set_size", {}, "", "", SettingType::number, kHeldOut, "", "0",
     "held-out rows: a fraction below 1 (rounded up) or a whole count", set_num<&C::val_set_size>,
     get_num<&C::val_set_size>},
    {"eval_steps", {}, "", "", SettingType::integer, kAtLeast0, "", "0",
     "the held-out loss every N steps and at the end (0: at the end only)", set_int<&C::eval_steps>,
     get_int<&C::eval_steps>},
    {"logging_steps", {}, "", "", SettingType::integer, kAtLeast1, "", "1",
     "a progress line and a metrics line every N steps", set_int<&C::logging_steps>, get_int<&C::logging_steps>},
    {"metrics_file", {}, "", "", SettingType::text, {}, "", "output_dir/metrics.jsonl when saving",
     "JSON lines of the logged steps and evaluations", set_text<&C::metrics_file>, get_text<&C::metrics_file>},
    // ---- saving
    {"output_dir", {}, "save", "DIR", SettingType::text, {}, "", "-",
     "where the model or adapter (and checkpoints) are saved", set_text<&C::output_dir>, get_text<&C::output_dir>, T},
    {"save_steps", {}, "save-steps", "N", SettingType::integer, kAtLeast0, "", "0",
     "a checkpoint output_dir/checkpoint-<step>/ every N steps (0: only on a signal)", set_int<&C::save_steps>,
     get_int<&C::save_steps>, T},
    {"save_total_limit", {}, "", "", SettingType::integer, kAtLeast0, "", "0", "checkpoints kept, the newest (0: all)",
     set_int<&C::save_total_limit>, get_int<&C::save_total_limit>},
    {"resume_from_checkpoint", {}, "resume", "auto|DIR", SettingType::text, {}, "", "-",
     "continue a checkpoint exactly: a directory, or true/auto for the newest in output_dir",
     set_resume, get_text<&C::resume_from_checkpoint>, T},
    // ---- what trains
    {"freeze_base", {}, "freeze-base", "", SettingType::boolean, {}, "", "false",
     "frozen base: only the RMSNorm weights (or the adapters) train", set_bool<&C::freeze_base>,
     get_bool<&C::freeze_base>, T},
    {"adapter", {}, "", "", SettingType::choice, {}, "lora", "-", "lora: LoRA adapters, rank 8 unless lora_r is given",
     [](C&, const V& v, R& r) { v.choice(), r.adapter_lora = true; },
     [](const C& c) { return c.lora.enabled() ? std::string("lora") : std::string(); }},
    {"lora_r", {}, "lora-rank", "R", SettingType::integer, kLoraRank, "", "0 (8 with adapter: lora)",
     "LoRA rank; the base is frozen (--lora-rank 0 turns a config's LoRA off)", set_lora_rank,
     [](const C& c) { return std::to_string(c.lora.rank); }, T},
    {"lora_alpha", {}, "lora-alpha", "A", SettingType::number, kLoraAlpha, "", "16", "LoRA scale alpha / r",
     [](C& c, const V& v, R&) { c.lora.alpha = v.number(); }, [](const C& c) { return fmt::format("{}", c.lora.alpha); },
     T | P},
    {"lora_target_modules", {}, "", "", SettingType::structured, {}, "", "[q_proj, k_proj, v_proj, o_proj]",
     "a list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, none twice", set_lora_targets,
     get_lora_targets},
    // ---- memory: sizes, budgets, tiles
    {"device_memory", {"arena_bytes"}, "device-memory", "BYTES", SettingType::bytes, kBytesAbove0, "",
     "cuda: free memory less 2 GiB; cpu: 16GiB; the budget when one is given", "the device arena's budget",
     set_bytes<&C::device_budget_bytes>, get_bytes<&C::device_budget_bytes>, T | B},
    {"memory_budget", {}, "budget", "BYTES", SettingType::bytes, kBytesAbove0, "",
     "none: the config's own plan",
     "the budget planner chooses the fastest plan whose step fits this many device bytes",
     set_bytes<&C::memory_budget_bytes>, get_bytes<&C::memory_budget_bytes>, T},
    {"host_memory_budget", {}, "host-budget", "BYTES", SettingType::bytes, kBytesAbove0, "",
     "0: no host tier", "with memory_budget: pinned host memory the planner may use",
     set_bytes<&C::host_budget_bytes>, get_bytes<&C::host_budget_bytes>, T | P},
    {"disk_memory_budget", {}, "disk-budget", "BYTES", SettingType::bytes, kBytesAbove0, "",
     "0: no disk tier", "with memory_budget: disk bytes the planner may use under offload_dir",
     set_bytes<&C::disk_budget_bytes>, get_bytes<&C::disk_budget_bytes>, T | P},
    {"offload_dir", {}, "offload-dir", "DIR", SettingType::text, {}, "", "$TMPDIR, else /tmp",
     "where the disk tier's file goes", set_text<&C::offload_dir>, get_text<&C::offload_dir>, T | B},
    {"loss_chunk_tokens", {}, "loss-chunk", "N", SettingType::integer, kAtLeast1, "", "512",
     "rows of logits alive at once in the fused loss", set_int<&C::loss_chunk_tokens>,
     get_int<&C::loss_chunk_tokens>, T | P | B},
    {"mlp_tiles", {}, "mlp-tiles", "auto|N", SettingType::integer, {1, 1 << 20}, "auto", "auto",
     "each layer's MLP over N row tiles; auto: untiled, or as the budget planner chooses",
     [](C&, const V& v, R& r) { r.mlp_tiles = parse_mlp_tiles(v.scalar("auto or N"), v.origin()); },
     [](const C& c) { return c.plan.mlp_tiles ? std::to_string(c.plan.mlp_tiles) : std::string("auto"); }, T | P | B},
    {"pad_vocab_multiple", {}, "pad-vocab", "N", SettingType::integer, {1, 65536}, "", "64",
     "the vocabulary rows held padded to a multiple of N in memory (never saved); 1: none",
     set_int<&C::pad_vocab_multiple>, get_int<&C::pad_vocab_multiple>, T | P | B},
    // ---- state precision
    {"master_weights", {}, "master-weights", "NAME", SettingType::choice, {}, "fp32, none", "fp32",
     "an fp32 master of the bf16 weights, or none (updated in place)",
     [](C& c, const V& v, R&) { c.recipe.master = relocated(v, [&] { return parse_master_weights(v.text(), ""); }); },
     [](const C& c) -> std::string { return master_weights_name(c.recipe.master); }, T | P | B},
    {"optimizer_state", {}, "optimizer-state", "NAME", SettingType::choice, {}, "fp32, bf16, 8bit", "fp32",
     "AdamW's moments in fp32, bf16 or block-wise 8-bit",
     [](C& c, const V& v, R&) {
       c.recipe.moments = relocated(v, [&] { return parse_optimizer_state(v.text(), ""); });
     },
     [](const C& c) -> std::string { return optimizer_state_name(c.recipe.moments); }, T | P | B},
    {"gradients", {}, "gradients", "NAME", SettingType::choice, {}, "fp32, bf16", "fp32",
     "the trainable parameters' gradients, 4 or 2 bytes each",
     [](C& c, const V& v, R&) { c.recipe.gradients = relocated(v, [&] { return parse_gradients(v.text(), ""); }); },
     [](const C& c) -> std::string { return gradients_name(c.recipe.gradients); }, T | P | B},
    {"fp8", {}, "fp8", "", SettingType::boolean, {}, "", "false",
     "the projections' GEMMs in FP8: E4M3 weights and activations, E5M2 gradients, each tensor scaled by its current "
     "amax (Hopper; docs/USER_GUIDE.md)",
     set_bool<&C::fp8>, get_bool<&C::fp8>, T | P | B},
    // ---- several GPUs
    {"grad_reduce_dtype", {}, "grad-reduce", "NAME", SettingType::choice, {}, "fp32, bf16", "fp32",
     "the dtype data-parallel ranks sum gradients in (bf16 with gradients: bf16)",
     [](C& c, const V& v, R&) {
       c.grad_reduce = parse_grad_reduce(v.text(), v.origin());
       c.grad_reduce_origin = v.origin();
     },
     [](const C& c) -> std::string {
       return !c.grad_reduce_origin.where.empty() || c.grad_reduce != DType::f32
                  ? name_of(kGradReduceNames, c.grad_reduce)
                  : "";
     },
     T | P},
    {"zero_stage", {}, "zero-stage", "N", SettingType::integer, {0, 3}, "", "0",
     "ZeRO: 1 shards the optimizer state over the ranks, 2 the gradients too, 3 the layers' weights too",
     [](C& c, const V& v, R&) {
       // Read wide, so the refusal says what each stage does.
       c.zero_stage = parse_zero_stage(v.integer_in(Range{-kIntMax, kIntMax}), v.origin());
       c.zero_stage_given = true;
     }, get_int<&C::zero_stage>,
     T | P},
    {"plan_time_limit", {}, "plan-time-limit", "SECONDS", SettingType::number, {0, 86400}, "", "60",
     "the budget planner stops after this long with the fastest plan found by then, and says so; 0: no limit",
     set_num<&C::plan_time_limit_s>, get_num<&C::plan_time_limit_s>, T | P},
    {"sequence_parallel", {}, "sequence-parallel", "N", SettingType::integer, kRanksAtOnce, "", "1",
     "groups of N ranks share each row, seq/N tokens each (DeepSpeed-Ulysses); 1: off",
     [](C& c, const V& v, R& r) {
       set_int<&C::sequence_parallel>(c, v, r);
       c.sequence_parallel_given = true;
     },
     get_int<&C::sequence_parallel>, T | P},
    // ---- memory plan: activations
    {"gradient_checkpointing", {}, "", "", SettingType::structured, {}, "", "false",
     "true: keep each layer's input, recompute the rest; {every: N}: every N-th layer's input", set_checkpointing,
     [](const C& c) { return preset_value(c, "gradient_checkpointing"); }},
    {"selective_recompute", {}, "", "", SettingType::boolean, {}, "", "false",
     "recompute the norm outputs and the SwiGLU activation only",
     [](C& c, const V& v, R&) {
       if (v.boolean()) c.plan = preset_for("selective_recompute", "true")->make(1);
     },
     [](const C& c) { return preset_value(c, "selective_recompute"); }},
    {"activation_offloading", {}, "", "", SettingType::choice, {}, "true, legacy, disk, hidden_states, false", "false",
     "saved activations to the host (true, legacy: synchronous), to disk, or only each layer's input (hidden_states)",
     set_activation_offloading, [](const C& c) { return preset_value(c, "activation_offloading"); }},
    {"plan", {}, "", "", SettingType::structured, {}, "", "{}",
     "explicit rules {class pattern: keep|recompute|host|disk}, checked before a preset's", set_plan_table,
     get_plan_table},
    {"layer_weights", {}, "", "", SettingType::choice, {}, "keep, page", "keep",
     "the layers' weight matrices on the device, or paged in from pinned host memory",
     [](C&, const V& v, R& r) {
       const std::string s = v.text();
       set_weights(v, r, relocated(v, [&] { return parse_layer_weights(s, ""); }), s);
     },
     [](const C& c) -> std::string { return decision_name(c.plan.layer_weights); }},
    {"layer_offloading", {}, "layer-offloading", "", SettingType::boolean, {}, "", "false",
     "the older spelling of layer_weights: page (false: keep)",
     [](C&, const V& v, R& r) {
       const bool b = v.boolean();
       set_weights(v, r, b ? Decision::page : Decision::keep, b ? "true" : "false");
     },
     [](const C& c) -> std::string { return c.plan.pages_layer_weights() ? "true" : "false"; }, T | P | B, false},
    // ---- memory plan: persistent state
    {"state_offloading", {}, "state-offloading", "LEVEL", SettingType::choice, {}, "none, optimizer, master, all",
     "none", "persistent state off the device: AdamW's moments, + fp32 masters, + gradients", set_state_level,
     [](const C& c) { return state_parts(c.plan).level; }, T | P | B},
    {"state_offloading_tier", {}, "state-offloading-tier", "TIER", SettingType::choice, {}, "host, disk", "host",
     "where state_offloading's classes go (gradients stay on the host)", set_state_tier,
     [](const C& c) -> std::string { return decision_name(state_parts(c.plan).tier); }, T | P | B},
    {"state_offloading_layers", {}, "state-offloading-layers", "LEVEL:K", SettingType::structured, {}, "", "-",
     "{level: optimizer|master|all, layers: K}: also that level's classes in K layers, spread evenly",
     set_state_layers, get_state_layers, T | P | B},
    {"state_plan", {}, "", "", SettingType::structured, {}, "", "{}",
     "explicit state rules {class pattern: keep|host|disk}, checked before the level's", set_state_table,
     get_state_table},
  };
  // clang-format on
  return table;
}

}  // namespace strata
