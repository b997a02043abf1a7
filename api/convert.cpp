#include "api/convert.h"

#include "model/run/forecast_request.h"

namespace strata::api {

namespace {

std::vector<std::pair<std::string, Decision>> to_rules(const std::vector<PlanRule>& rs, const std::string& where) {
  std::vector<std::pair<std::string, Decision>> out;
  for (const PlanRule& r : rs) out.emplace_back(r.pattern, parse_decision(r.decision, where + ": " + r.pattern));
  return out;
}

std::vector<PlanRule> from_rules(const std::vector<std::pair<std::string, Decision>>& rs) {
  std::vector<PlanRule> out;
  for (const auto& [pattern, d] : rs) out.push_back({pattern, decision_name(d)});
  return out;
}

}  // namespace

Plan to_plan(const MemoryPlan& p, const std::string& where) {
  Plan q;
  q.overrides = to_rules(p.overrides, where + " overrides");
  q.rules = to_rules(p.rules, where + " rules");
  q.preset = p.preset;
  q.checkpoint_every = p.checkpoint_every;
  q.sync_transfers = p.sync_transfers;
  q.state = to_rules(p.state, where + " state");
  q.state_preset = p.state_preset;
  q.set_state_offloading_layers(p.state_layers_level, p.state_layers, where + ".state_layers");
  q.set_layer_weights(parse_layer_weights(p.layer_weights, where + ".layer_weights"), where + ".layer_weights");
  return q;
}

MemoryPlan from_plan(const Plan& p) {
  MemoryPlan q;
  q.overrides = from_rules(p.overrides);
  q.rules = from_rules(p.rules);
  q.preset = p.preset;
  q.checkpoint_every = p.checkpoint_every;
  q.sync_transfers = p.sync_transfers;
  q.state = from_rules(p.state);
  q.state_preset = p.state_preset;
  q.state_layers_level = p.state_layers_level;
  q.state_layers = p.state_layers;
  q.layer_weights = decision_name(p.layer_weights);
  return q;
}

namespace {

// One list of fields for both directions: f(the engine struct's field, the api struct's), which kOnto
// copies onto the engine struct and kFrom back.
constexpr auto kOnto = [](auto& inner, const auto& api) { inner = api; };
constexpr auto kFrom = [](const auto& inner, auto& api) { api = inner; };

// The fields SessionConfig and ForecastSpec share that a TrainConfig holds as they are.
template <class T, class C, class F>
void shared_fields(T& t, C& c, F&& f) {
  f(t.seq, c.seq);
  f(t.batch, c.batch);
  f(t.lora.alpha, c.lora_alpha);
  f(t.lora.target_modules, c.lora_target_modules);
  f(t.loss_chunk_tokens, c.loss_chunk_tokens);
}

// SessionConfig's own fields that a TrainConfig holds as they are.
template <class T, class C, class F>
void session_fields(T& t, C& c, F&& f) {
  f(t.model_dir, c.model_dir);
  f(t.data_path, c.data_path);
  f(t.backend, c.backend);
  f(t.steps, c.steps);
  f(t.lr, c.lr);
  f(t.weight_decay, c.weight_decay);
  f(t.beta1, c.beta1);
  f(t.beta2, c.beta2);
  f(t.adam_eps, c.adam_eps);
  f(t.max_grad_norm, c.max_grad_norm);
  f(t.warmup_steps, c.warmup_steps);
  f(t.freeze_base, c.freeze_base);
  f(t.lora.rank, c.lora_rank);
  f(t.device_budget_bytes, c.device_budget_bytes);
  f(t.memory_budget_bytes, c.memory_budget_bytes);
  f(t.host_budget_bytes, c.host_budget_bytes);
  f(t.disk_budget_bytes, c.disk_budget_bytes);
  f(t.seed, c.seed);
  f(t.offload_dir, c.offload_dir);
  f(t.output_dir, c.output_dir);
}

// The typed fields SessionConfig and ForecastSpec share (the same settings under the same names), onto
// a TrainConfig; `who` names the struct in errors.
template <class C>
void shared_onto(TrainConfig& t, const C& c, const std::string& who) {
  shared_fields(t, c, kOnto);
  t.plan = to_plan(c.plan, who + "::plan");
  t.pad_vocab_multiple =
      check_pad_vocab(c.pad_vocab_multiple, {who + "::pad_vocab_multiple", who, "pad_vocab_multiple"});
  // The older spelling of plan.layer_weights = "page" (either one pages the layers).
  if (c.layer_offloading) t.plan.set_layer_weights(Decision::page, who + "::layer_offloading");
  t.recipe.master = parse_master_weights(c.master_weights, who + "::master_weights");
  t.recipe.moments = parse_optimizer_state(c.optimizer_state, who + "::optimizer_state");
  t.recipe.gradients = parse_gradients(c.gradients, who + "::gradients");
}

template <class C>
void shared_from(C& c, const TrainConfig& t) {
  shared_fields(t, c, kFrom);
  c.plan = from_plan(t.plan);
  c.pad_vocab_multiple = t.pad_vocab_multiple;
  c.layer_offloading = t.plan.pages_layer_weights();  // mirrors c.plan.layer_weights
  c.master_weights = master_weights_name(t.recipe.master);
  c.optimizer_state = optimizer_state_name(t.recipe.moments);
  c.gradients = gradients_name(t.recipe.gradients);
}

// The settings of `t` the typed fields of `c` leave out (its `more`), found by the table's getters
// rather than listed by hand; `typed` is `c` without them.
std::vector<std::pair<std::string, std::string>> untyped_settings(const TrainConfig& t, const TrainConfig& typed) {
  std::vector<std::pair<std::string, std::string>> more;
  for (const Setting& s : settings())
    if (const std::string v = s.get(t); v != s.get(typed)) more.emplace_back(std::string(s.key), v);
  return more;
}

}  // namespace

TrainConfig to_train_config(const SessionConfig& c) {
  TrainConfig t;
  shared_onto(t, c, "SessionConfig");
  session_fields(t, c, kOnto);
  t.lora.seed = c.seed;
  apply_settings(t, c.more, "SessionConfig");
  return t;
}

SessionConfig from_train_config(const TrainConfig& t) {
  SessionConfig c;
  shared_from(c, t);
  session_fields(t, c, kFrom);
  c.more = untyped_settings(t, to_train_config(c));
  return c;
}

TrainConfig to_train_config(const ForecastSpec& s) {
  TrainConfig t;
  shared_onto(t, s, "ForecastSpec");
  const TrainMode mode = parse_train_mode(s.mode);
  if (mode == TrainMode::lora && s.lora_rank < 1)
    throw ConfigError("ForecastSpec::lora_rank must be 1 or more for mode lora, got " + std::to_string(s.lora_rank),
                      "ForecastSpec", "lora_rank");
  t.lora.rank = mode == TrainMode::lora ? s.lora_rank : 0;
  t.freeze_base = mode == TrainMode::frozen;
  apply_settings(t, s.more, "ForecastSpec");
  return t;
}

void set_forecast_spec(ForecastSpec& s, const TrainConfig& t) {
  shared_from(s, t);
  if (t.lora.enabled()) s.lora_rank = t.lora.rank;  // otherwise kept for a later mode lora
  s.mode = t.lora.enabled() ? "lora" : t.freeze_base ? "frozen" : "full";
  s.more.clear();
  s.more = untyped_settings(t, to_train_config(s));
}

StepMetrics from_step_stats(const StepStats& s) {
  StepMetrics m;
  m.step = s.step;
  m.loss = s.loss;
  m.grad_norm = s.grad_norm;
  m.lr = s.lr;
  m.seconds = s.seconds;
  m.tokens = s.tokens;
  m.tokens_per_s = s.seconds > 0 ? double(s.tokens) / s.seconds : 0.0;
  m.peak_device_bytes = s.peak_device_bytes;
  m.saved_bytes = s.saved_bytes;
  m.peak_host_bytes = s.peak_host_bytes;
  m.peak_disk_bytes = s.peak_disk_bytes;
  m.recomputed_nodes = s.recomputed_nodes;
  m.paged_bytes_uploaded = s.paged_bytes_uploaded;
  m.state_host_bytes = s.state_host_bytes;
  m.state_bytes_moved = s.state_bytes_moved;
  return m;
}

ModelShape from_llama_config(const io::LlamaConfig& c) {
  ModelShape s;
  s.layers = c.num_hidden_layers;
  s.hidden = c.hidden_size;
  s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.intermediate = c.intermediate_size;
  s.vocab = c.vocab_size;
  s.max_positions = c.max_position_embeddings;
  s.tied_embeddings = c.tie_word_embeddings;
  s.rms_norm_eps = c.rms_norm_eps;
  s.rope_theta = c.rope_theta;
  s.parameters = io::llama_parameter_count(c);
  return s;
}

io::LlamaConfig to_llama_config(const ModelShape& s) {
  io::LlamaConfig c;
  c.num_hidden_layers = s.layers;
  c.hidden_size = s.hidden;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.intermediate_size = s.intermediate;
  c.vocab_size = s.vocab;
  c.max_position_embeddings = s.max_positions;
  c.tie_word_embeddings = s.tied_embeddings;
  c.rms_norm_eps = s.rms_norm_eps;
  c.rope_theta = s.rope_theta;
  c.torch_dtype = "float32";
  if (s.heads <= 0 || s.hidden % s.heads != 0)
    throw ConfigError("ModelShape: hidden " + std::to_string(s.hidden) + " must be a positive multiple of heads " +
                          std::to_string(s.heads),
                      "ModelShape", "hidden");
  c.head_dim = s.hidden / s.heads;
  // Round-trip through the reader so the same validation applies as for any checkpoint.
  return io::parse_llama_config(io::llama_config_to_json(c), "ModelShape");
}

ForecastRequest to_request(const ForecastSpec& s) {
  const io::LlamaConfig mc = resolve_model(s.model);
  const TrainConfig t = to_train_config(s);
  const DeviceProfile profile = find_profile(s.profile);
  const std::optional<SimMirror> mirror = parse_name(kSimMirrors, s.mirror);
  if (!mirror)
    throw ConfigError("ForecastSpec::mirror must be " + name_choices(kSimMirrors) + ", got '" + s.mirror + "'",
                      "ForecastSpec", "mirror");
  // The run builder's request from the settings (strata-plan's too), then what is not a setting.
  ForecastRequest r = train_forecast_request(t, mc, *mirror, profile);
  if (!t.lora.enabled()) r.lora_rank = s.lora_rank;
  r.budget = s.budget_bytes;
  r.gpus = s.gpus > 1 ? s.gpus : r.sequence_parallel;  // sequence_parallel alone: that many GPUs
  if (r.gpus % r.sequence_parallel != 0)
    throw ConfigError("ForecastSpec::gpus " + std::to_string(r.gpus) + " must be a multiple of sequence_parallel " +
                          std::to_string(r.sequence_parallel),
                      "ForecastSpec", "gpus");
  return r;
}

namespace {

// The fields of a Forecast that a ForecastReport holds as they are.
template <class F, class R, class Fn>
void forecast_fields(F& f, R& r, Fn&& fn) {
  fn(f.fits, r.fits);
  fn(f.oom, r.oom);
  fn(f.peak_bytes, r.peak_bytes);
  fn(f.high_water_bytes, r.high_water_bytes);
  fn(f.persistent_bytes, r.persistent_bytes);
  fn(f.saved_bytes, r.saved_bytes);
  fn(f.peak_phase, r.peak_phase);
  fn(f.peak_host_bytes, r.peak_host_bytes);
  fn(f.peak_disk_bytes, r.peak_disk_bytes);
  fn(f.step_s, r.step_s);
  fn(f.forward_s, r.forward_s);
  fn(f.backward_s, r.backward_s);
  fn(f.optimizer_s, r.optimizer_s);
  fn(f.recompute_s, r.recompute_s);
  fn(f.tokens_per_s, r.tokens_per_s);
  fn(f.params, r.parameters);
  fn(f.trainable, r.trainable);
  fn(f.device, r.device);
}

}  // namespace

ForecastReport from_forecast(const Forecast& f) {
  ForecastReport r;
  forecast_fields(f, r, kFrom);
  for (const MemoryItem& m : f.breakdown) r.breakdown.push_back({m.name, m.bytes, m.count});
  for (const MemoryItem& m : f.activations) r.activations.push_back({m.name, m.bytes, m.count});
  for (const PlanRow& p : f.plan_rows) r.plan_rows.push_back({p.cls, p.decision, p.bytes, p.count});
  return r;
}

Forecast to_forecast(const ForecastReport& r) {
  Forecast f;
  forecast_fields(f, r, kOnto);
  return f;
}

}  // namespace strata::api

namespace strata {

void SessionConfig::set(const std::string& key, const std::string& value) {
  TrainConfig t = api::to_train_config(*this);
  apply_setting(t, key, value, "SessionConfig");
  *this = api::from_train_config(t);
}

std::string SessionConfig::get(const std::string& key) const {
  return get_setting(api::to_train_config(*this), key);
}

void ForecastSpec::set(const std::string& key, const std::string& value) {
  TrainConfig t = api::to_train_config(*this);
  apply_setting(t, key, value, "ForecastSpec");
  api::set_forecast_spec(*this, t);
}

std::string ForecastSpec::get(const std::string& key) const {
  return get_setting(api::to_train_config(*this), key);
}

std::vector<std::string> SessionConfig::keys() {
  std::vector<std::string> out;
  for (const Setting& s : settings()) out.emplace_back(s.key);
  return out;
}

}  // namespace strata
