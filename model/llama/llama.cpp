// LlamaModel's construction (model/llama/llama.h): the parameters of a config, their state tiers
// (ModelOptions::state_plan), the weight pager of layer_weights: page or ZeRO-3, LoRA adapters, and the host and disk
// state laid out.
#include "model/llama/llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/op_params.h"
#include "model/llama/llama_internal.h"
#include "model/llama/rng.h"
#include "model/llama/slot_classes.h"

namespace strata {

using namespace llama_detail;

namespace {
// The activation presets act on the classes this model names: registered wherever the model is linked,
// before main, so before the first preset is made.
[[maybe_unused]] const bool kPresetClassesRegistered = (set_preset_classes(llama_preset_classes()), true);

// The state-class group of a Hugging Face parameter name (LoRA adapters join their layer's).
std::string state_group(const std::string& name) {
  const int layer = LlamaModel::layer_of_param(name);
  if (layer >= 0) return fmt::format("L{}", layer);
  if (name == "model.embed_tokens.weight") return "embed";
  if (name == "lm_head.weight") return "head";
  return "final_norm";
}
}  // namespace

bool plan_moves_grads_off_device(const Plan& plan, const io::LlamaConfig& c) {
  for (const auto& [name, shape] : llama_weight_shapes(c))
    if (plan.decide_state(state_group(name) + ".grad", LlamaModel::layer_of_param(name), c.num_hidden_layers) !=
        Decision::keep)
      return true;
  return false;
}

std::vector<std::pair<std::string, Shape>> llama_weight_shapes(const io::LlamaConfig& c) {
  int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  int64_t Q = c.num_attention_heads * D, KV = c.num_key_value_heads * D;
  std::vector<std::pair<std::string, Shape>> w;
  w.push_back({"model.embed_tokens.weight", Shape{V, C}});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    // A projection's weight [out, in], then its bias [out] where the architecture has one.
    auto proj = [&](const std::string& m, int64_t out, int64_t in, bool bias) {
      w.push_back({layer_name(i, m + ".weight"), Shape{out, in}});
      if (bias) w.push_back({layer_name(i, m + ".bias"), Shape{out}});
    };
    w.push_back({layer_name(i, "input_layernorm.weight"), Shape{C}});
    proj("self_attn.q_proj", Q, C, c.qkv_bias);
    proj("self_attn.k_proj", KV, C, c.qkv_bias);
    proj("self_attn.v_proj", KV, C, c.qkv_bias);
    proj("self_attn.o_proj", C, Q, c.o_bias);
    if (c.qk_norm) {
      w.push_back({layer_name(i, "self_attn.q_norm.weight"), Shape{D}});
      w.push_back({layer_name(i, "self_attn.k_norm.weight"), Shape{D}});
    }
    w.push_back({layer_name(i, "post_attention_layernorm.weight"), Shape{C}});
    proj("mlp.gate_proj", F, C, c.mlp_bias);
    proj("mlp.up_proj", F, C, c.mlp_bias);
    proj("mlp.down_proj", C, F, c.mlp_bias);
  }
  w.push_back({"model.norm.weight", Shape{C}});
  if (!c.tie_word_embeddings) w.push_back({"lm_head.weight", Shape{V, C}});
  return w;
}

int64_t padded_vocab(int64_t vocab, int multiple) {
  if (multiple < 1 || multiple > 65536)
    STRATA_THROW(ConfigError, fmt::format("pad_vocab_multiple must be 1 (no padding) to 65536, got {}", multiple),
                 "model options", "pad_vocab_multiple");
  return (vocab + multiple - 1) / multiple * multiple;
}

int LlamaModel::layer_of_param(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  char* end = nullptr;
  const long l = std::strtol(name.c_str() + prefix.size(), &end, 10);
  return end != name.c_str() + prefix.size() && *end == '.' ? int(l) : -1;
}

LlamaModel::LlamaModel(Backend& be, const io::LlamaConfig& cfg, ModelOptions opt) : be_(be), cfg_(cfg), opt_(opt) {
  padded_vocab_ = strata::padded_vocab(cfg_.vocab_size, opt_.pad_vocab_multiple);
  auto shapes = llama_weight_shapes(cfg_);
  // The vocabulary's rows in memory: padded (zero rows after vocab_size, never saved).
  auto vocab_rows = [](const std::string& name) {
    return name == "model.embed_tokens.weight" || name == "lm_head.weight";
  };
  for (auto& [name, shape] : shapes)
    if (vocab_rows(name)) shape.d[0] = padded_vocab_;
  // train_norms trains the RMSNorm weights (q_norm/k_norm included), not biases: PEFT's bias "none".
  auto trainable = [&](const std::string& name) { return opt_.train_base || (opt_.train_norms && is_norm(name)); };
  // Paged: the layers' matrices, frozen or trainable (full fine-tune). Norms, biases, adapters, embeddings
  // and the head stay resident.
  check_zero_stage(opt_.zero.stage, "zero_stage");
  // ZeRO's owners (model/llama/zero.h): every rank computes the same; stage 3's pager needs them.
  std::vector<int> owners(shapes.size(), -1);
  if (opt_.zero.sharded() && opt_.zero.world >= 1) {
    std::vector<size_t> numel;
    for (auto& [name, shape] : shapes) numel.push_back(trainable(name) ? size_t(shape.numel()) : 0);
    owners = zero_owner(numel, opt_.zero.world);
  }
  // ZeRO-3: the same matrices as layer_offloading pages, gathered from their owners instead of uploaded from host.
  const bool zero3 = opt_.zero.shards_weights();
  if (zero3) {
    if (opt_.page_layers)
      STRATA_THROW(UnsupportedError,
                   "layer_weights: page (layer_offloading: true) with zero_stage 3 is not supported: ZeRO-3 fills the "
                   "layers' device slots by gathering their weights from the ranks, paging from host memory; use "
                   "layer_weights: keep (ZeRO-3 already keeps only this rank's share of the weights), or "
                   "zero_stage: 2");
    if (!opt_.train_base)
      STRATA_THROW(UnsupportedError,
                   "zero_stage 3 shards the trainable layer weights, but train_base is false (LoRA or a frozen base: "
                   "the layer weights are frozen and have no owner); use zero_stage: 2 or less, or a full fine-tune");
    std::vector<PagedWeight> pw;
    for (size_t k = 0; k < shapes.size(); ++k)
      if (shapes[k].second.nd == 2 && layer_of_param(shapes[k].first) >= 0)
        pw.push_back({shapes[k].first, layer_of_param(shapes[k].first), shapes[k].second, owners[k]});
    pager_ = std::make_shared<WeightPager>(be_, cfg_.num_hidden_layers, pw, opt_.zero.rank);
  }
  auto paged = [&](const std::string& name, const Shape& s) {
    return (opt_.page_layers || zero3) && s.nd == 2 && layer_of_param(name) >= 0;
  };
  if (opt_.page_layers) {
    // ZeRO-1/2 broadcasts each owner's updated weights into every rank's device copy, which a paged
    // weight does not have (its copy is the host block).
    if (opt_.train_base && opt_.zero.sharded())
      STRATA_THROW(UnsupportedError,
                   fmt::format("layer_weights: page (layer_offloading: true) with trainable layer weights (a full "
                               "fine-tune) and zero_stage {} is not supported: ZeRO updates the weights on the device, "
                               "a paged weight lives in host memory; use layer_weights: keep, or zero_stage: 0",
                               opt_.zero.stage));
    std::vector<PagedWeight> pw;
    for (auto& [name, shape] : shapes)
      if (paged(name, shape)) pw.push_back({name, layer_of_param(name), shape});
    pager_ = std::make_shared<WeightPager>(be_, cfg_.num_hidden_layers, pw);
  }
  if (opt_.mlp_tiles < 1)
    STRATA_THROW(ConfigError, fmt::format("mlp_tiles must be 1 (untiled) or more, got {}", opt_.mlp_tiles),
                 "model options", "mlp_tiles");
  if (opt_.mlp_tiles > 1 && opt_.lora.enabled())
    for (const std::string& m : opt_.lora.target_modules)
      if (m == "gate_proj" || m == "up_proj" || m == "down_proj")
        STRATA_THROW(ConfigError,
                     fmt::format("mlp_tiles {} runs the MLP as one tiled op, which has no LoRA adapters: lora "
                                 "target_modules has '{}'; use mlp_tiles: 1, or attention targets only",
                                 opt_.mlp_tiles, m),
                     "model options", "mlp_tiles");
  if (opt_.zero.sharded()) {
    if (opt_.zero.rank < 0 || opt_.zero.rank >= opt_.zero.world)
      STRATA_THROW(ConfigError, fmt::format("zero: rank {} of world size {}", opt_.zero.rank, opt_.zero.world),
                   "model options", "zero_stage");
    if (opt_.lora.enabled())
      STRATA_THROW(UnsupportedError,
                   fmt::format("zero_stage {} with LoRA (lora_r > 0) is not supported yet: the adapters' state is "
                               "small; use zero_stage: 0",
                               opt_.zero.stage));
  }
  // Every parameter at once: a Parameter moved on each growth of the vector was a planner sim run's cost.
  params_.reserve(shapes.size() +
                  (opt_.lora.enabled() ? 2 * size_t(cfg_.num_hidden_layers) * opt_.lora.target_modules.size() : 0));
  int next_page = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto& [name, shape] = shapes[k];
    const int i = add_param(name, shape, trainable(name), false, paged(name, shape) ? next_page++ : -1, owners[k]);
    if (vocab_rows(name)) params_[size_t(i)].pad_rows = padded_vocab_ - cfg_.vocab_size;
  }
  if (opt_.lora.enabled()) {
    const int64_t r = opt_.lora.rank;
    for (int i = 0; i < cfg_.num_hidden_layers; ++i)
      for (auto& m : opt_.lora.target_modules) {
        Parameter* base = find(layer_name(i, module_path(m) + ".weight"));
        if (!base)
          STRATA_THROW(ConfigError,
                       fmt::format("lora: unknown target module '{}' (expected q_proj, k_proj, v_proj, "
                                   "o_proj, gate_proj, up_proj or down_proj)",
                                   m),
                       "lora", "target_modules");
        Shape ws = base->shape;
        add_param(layer_name(i, module_path(m) + ".lora_A.weight"), Shape{r, ws[1]}, true, true);
        add_param(layer_name(i, module_path(m) + ".lora_B.weight"), Shape{ws[0], r}, true, true);
      }
  }
  // Host-tier state: one reservation for every parameter's host arrays, moments zeroed. Disk-tier
  // state: one file, its moments written as zeros (the masters are written by init_random or load).
  size_t host_bytes = 0, disk_bytes = 0;
  for (auto& p : params_) place_state(p, host_bytes, disk_bytes);
  if (host_bytes) {
    state_host_ = be_.reserve_host(host_bytes);
    for (auto& p : params_)
      for (size_t off : {p.host_m, p.host_v})
        if (off != Parameter::kDevice && host_state(off))
          std::memset(host_state(off), 0, moment_bytes(opt_.recipe.moments, size_t(p.shape.numel())));
  }
  if (disk_bytes) {
    open_state_disk(disk_bytes);
    for (auto& p : params_)
      for (auto [off, kind] : {std::pair{p.disk_m, ".adam.m"}, std::pair{p.disk_v, ".adam.v"}})
        if (off != Parameter::kDevice) {
          const size_t n = size_t(p.shape.numel());
          const size_t bytes = opt_.recipe.moments == OptimizerState::q8
                                   ? Parameter::disk_scale_offset(n) + quant_blocks(n) * sizeof(float)
                                   : moment_bytes(opt_.recipe.moments, n);
          write_state_disk(off, nullptr, bytes, p.group + kind);  // null: zeros
        }
  }
  if (opt_.lora.enabled()) {
    // PEFT's init: A ~ kaiming-uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), B = 0.
    Rng rng(opt_.lora.seed + 7);
    for (auto& p : params_) {
      if (!p.is_lora) continue;
      std::vector<float> h(size_t(p.shape.numel()), 0.0f);
      if (p.name.find("lora_A") != std::string::npos && be_.holds_values()) {  // the sim: zeros, moved alike
        double bound = 1.0 / std::sqrt(double(p.shape[1]));
        for (auto& x : h) x = float((2.0 * rng.uniform() - 1.0) * bound);
      }
      set_weights(p, h.data());
    }
  }
  inv_freq_ = Buffer(be_.arena(), DType::f32, Shape{int64_t(cfg_.head_dim / 2)}, "rope.inv_freq");
  rope_attention_ = cpu::rope_attention_factor(cfg_.rope_scaling, cfg_.max_position_embeddings);
  rope_len_ = 0;  // no batch yet: transformers' table at init
  upload_rope_table();
}

void LlamaModel::upload_rope_table() {
  std::vector<float> inv(size_t(cfg_.head_dim / 2));
  cpu::rope_inv_freq(inv.data(), cfg_.head_dim, cfg_.rope_theta, cfg_.rope_scaling,
                     RopeTableKey{cfg_.max_position_embeddings, rope_len_});
  be_.upload_f32(inv_freq_.view(), inv.data());
}

bool LlamaModel::rope_follows_length() const {
  return cfg_.rope_scaling.type == RopeType::dynamic || cfg_.rope_scaling.type == RopeType::longrope;
}

void LlamaModel::set_rope_length(int seq_len) {
  const int len = rope_table_length(cfg_.rope_scaling, cfg_.max_position_embeddings, rope_len_, seq_len);
  if (len == rope_len_) return;
  rope_len_ = len;
  upload_rope_table();
}

int LlamaModel::add_param(std::string name, Shape shape, bool trainable, bool is_lora, int page, int owner) {
  Parameter p;
  p.name = std::move(name);
  p.shape = shape;
  p.trainable = trainable;
  p.is_lora = is_lora;
  p.owner = owner;
  p.state_here = owner < 0 || owner == opt_.zero.rank;
  // ZeRO-3: a layer matrix; its owner keeps it resident (allocated below as an unpaged weight), the others page it.
  p.weights_sharded = page >= 0 && opt_.zero.shards_weights();
  const int pager_index = page;
  if (p.weights_sharded && p.state_here) page = -1;
  if (page >= 0) {  // paged: its weights live in the pager's host block and slots
    p.page = page;
    p.paged = pager_->view(size_t(page));
    if (!trainable) {
      param_index_.emplace(p.name, int(params_.size()));
      params_.push_back(std::move(p));
      return int(params_.size() - 1);
    }
  }
  p.group = state_group(p.name);
  const int layer = layer_of_param(p.name);
  // ZeRO: the plan places this rank's own share of the state. A parameter another rank owns has no master or
  // moments here, and its gradient stays on the device (ZeRO-1: every rank sums it for the norm) or is transient
  // (ZeRO-2 and 3).
  auto tier = [&](const char* kind) {
    return trainable && p.state_here ? opt_.state_plan.decide_state(p.group + "." + kind, layer, cfg_.num_hidden_layers)
                                     : Decision::keep;
  };
  // master_weights: none leaves a bf16 backend no master at all (the compute weights are updated in
  // place); on an f32 backend the weights are fp32 anyway, so `none` changes nothing there.
  const bool low_precision = be_.compute_dtype() != DType::f32;
  const bool no_master = low_precision && opt_.recipe.master == MasterWeights::none;
  const Decision master_t = no_master ? Decision::keep : tier("w.master"), m_t = tier("adam.m"), v_t = tier("adam.v"),
                 grad_t = tier("grad");  // decide_state refuses disk for grad
  // "Off": on the host or the disk tier (the device holds no buffer for it).
  const bool master_off = master_t != Decision::keep, m_off = m_t != Decision::keep, v_off = v_t != Decision::keep,
             grad_host = grad_t == Decision::host;
  // place_state lays the host arrays and the disk arrays out once all are known.
  (master_t == Decision::disk ? p.disk_master : p.host_master) = master_off ? 0 : Parameter::kDevice;
  (m_t == Decision::disk ? p.disk_m : p.host_m) = m_off ? 0 : Parameter::kDevice;
  (v_t == Decision::disk ? p.disk_v : p.host_v) = v_off ? 0 : Parameter::kDevice;
  if (grad_host) p.host_grad = 0;
  // A frozen weight on a bf16 backend needs no fp32 master: only its compute copy exists. A
  // trainable one there keeps its master split: the compute copy is its high half, `master` the
  // low half (Backend::master_dtype, engine/master_split.h). A master on the host or disk tier leaves
  // only the compute copy on the device (f32 where that is the compute dtype).
  // A paged weight's compute copy is the pager's host block; where the compute dtype is f32 that block
  // is its fp32 master too (a host- or disk-tier master then mirrors it, as it mirrors a device copy).
  if (trainable && low_precision && !master_off && !no_master && p.state_here)
    p.master = Buffer(be_.arena(), be_.master_dtype(), shape, "weights.master_lo");
  else if (!low_precision && !master_off && page < 0)
    p.master = Buffer(be_.arena(), DType::f32, shape, "weights");
  if ((low_precision || master_off) && page < 0)
    p.compute = Buffer(be_.arena(), be_.compute_dtype(), shape, low_precision ? "weights.compute" : "weights");
  if (trainable) {
    // ZeRO-2: a parameter another rank owns has no persistent gradient here (a transient block each backward,
    // model/train/optimizer.h).
    if (!grad_host && !grad_transient(p)) {
      p.grad = Buffer(be_.arena(), grad_dtype(), shape, "grads");  // gradients: fp32 or bf16 (the recipe's)
      be_.zero(p.grad.view());
    }
    const DType mdt = opt_.recipe.moments == OptimizerState::fp32   ? DType::f32
                      : opt_.recipe.moments == OptimizerState::bf16 ? DType::bf16
                                                                    : DType::u8;
    auto moment = [&](Buffer& codes, Buffer& scales, const char* tag) {
      codes = Buffer(be_.arena(), mdt, shape, tag);
      be_.zero(codes.view());
      if (mdt != DType::u8) return;
      scales = Buffer(be_.arena(), DType::f32, Shape{int64_t(quant_blocks(size_t(shape.numel())))}, tag);
      be_.zero(scales.view());
    };
    if (!m_off && p.state_here) moment(p.m, p.m_scale, "adam.m");
    if (!v_off && p.state_here) moment(p.v, p.v_scale, "adam.v");
  }
  if (p.weights_sharded && p.state_here) pager_->set_resident(size_t(pager_index), p.value());
  param_index_.emplace(p.name, int(params_.size()));
  params_.push_back(std::move(p));
  return int(params_.size() - 1);
}

void LlamaModel::place_state(Parameter& p, size_t& host_bytes, size_t& disk_bytes) {
  const size_t n = size_t(p.shape.numel());
  const size_t master_bytes = n * (be_.compute_dtype() == DType::f32 ? sizeof(float) : dtype_size(be_.master_dtype()));
  auto place = [&](size_t& off, size_t bytes, size_t& total) {
    if (off == Parameter::kDevice) return;
    off = total;
    total += host_align(bytes);
  };
  place(p.host_master, master_bytes, host_bytes);
  place(p.host_m, moment_bytes(opt_.recipe.moments, n), host_bytes);
  place(p.host_v, moment_bytes(opt_.recipe.moments, n), host_bytes);
  place(p.host_grad, n * dtype_size(grad_dtype()), host_bytes);
  // On disk every array (and an 8-bit moment's scales) starts on a page: the optimizer streams pieces
  // of them with O_DIRECT requests (model/train/optimizer.h).
  const size_t disk_moment = opt_.recipe.moments == OptimizerState::q8
                                 ? Parameter::disk_scale_offset(n) + host_align(quant_blocks(n) * sizeof(float))
                                 : moment_bytes(opt_.recipe.moments, n);
  place(p.disk_master, master_bytes, disk_bytes);
  place(p.disk_m, disk_moment, disk_bytes);
  place(p.disk_v, disk_moment, disk_bytes);
}

Parameter* LlamaModel::find(const std::string& name) {
  const auto it = param_index_.find(name);
  return it == param_index_.end() ? nullptr : &params_[size_t(it->second)];
}

size_t LlamaModel::trainable_count() const {
  size_t n = 0;
  for (auto& p : params_) n += p.trainable ? size_t(p.file_numel()) : 0;
  return n;
}

size_t LlamaModel::param_count() const {
  size_t n = 0;
  for (auto& p : params_) n += size_t(p.file_numel());
  return n;
}

}  // namespace strata
