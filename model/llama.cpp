#include "model/llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/master_split.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "engine/switches.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "kernels/rope.h"
#include "model/rng.h"

namespace strata {

namespace {
std::vector<int64_t> dims(const Shape& s) {
  return std::vector<int64_t>(s.d.begin(), s.d.begin() + s.nd);
}
std::string layer_name(int i, const std::string& rest) {
  return fmt::format("model.layers.{}.{}", i, rest);
}
// The state-class group of a Hugging Face parameter name (LoRA adapters join their layer's).
std::string state_group(const std::string& name) {
  const int layer = LlamaModel::layer_of_param(name);
  if (layer >= 0) return fmt::format("L{}", layer);
  if (name == "model.embed_tokens.weight") return "embed";
  if (name == "lm_head.weight") return "head";
  return "final_norm";
}
size_t host_align(size_t b) {
  return (b + 4095) / 4096 * 4096;
}
std::string module_path(const std::string& m) {
  return (m == "gate_proj" || m == "up_proj" || m == "down_proj") ? "mlp." + m : "self_attn." + m;
}
// RMSNorm weights by their Hugging Face names: "...layernorm.weight", "model.norm.weight", "...q_norm.weight".
bool is_norm(const std::string& name) {
  return name.find("norm.weight") != std::string::npos;
}
}  // namespace

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
  // ZeRO's owners (model/zero.h): every rank computes the same; stage 3's pager needs them.
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
      if (p.name.find("lora_A") != std::string::npos) {
        double bound = 1.0 / std::sqrt(double(p.shape[1]));
        for (auto& x : h) x = float((2.0 * rng.uniform() - 1.0) * bound);
      }
      set_weights(p, h.data());
    }
  }
  std::vector<float> inv(size_t(cfg_.head_dim / 2));
  cpu::rope_inv_freq(inv.data(), cfg_.head_dim, cfg_.rope_theta, cfg_.rope_scaling);
  inv_freq_ = Buffer(be_.arena(), DType::f32, Shape{int64_t(inv.size())}, "rope.inv_freq");
  be_.upload_f32(inv_freq_.view(), inv.data());
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
    // model/optimizer.h).
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
  // of them with O_DIRECT requests (model/optimizer.h).
  const size_t disk_moment = opt_.recipe.moments == OptimizerState::q8
                                 ? Parameter::disk_scale_offset(n) + host_align(quant_blocks(n) * sizeof(float))
                                 : moment_bytes(opt_.recipe.moments, n);
  place(p.disk_master, master_bytes, disk_bytes);
  place(p.disk_m, disk_moment, disk_bytes);
  place(p.disk_v, disk_moment, disk_bytes);
}

void LlamaModel::open_state_disk(size_t bytes) {
  std::string dir = opt_.state_dir;
  if (dir.empty()) dir = switches().temp_dir;
  try {
    state_disk_ = be_.open_disk_file(dir, bytes);
  } catch (const Error& e) {
    // Which classes wanted the room: the first few, and how many in all.
    std::vector<std::string> cls;
    for (const Parameter& p : params_)
      for (auto [off, kind] :
           {std::pair{p.disk_master, ".w.master"}, std::pair{p.disk_m, ".adam.m"}, std::pair{p.disk_v, ".adam.v"}})
        if (off != Parameter::kDevice && std::find(cls.begin(), cls.end(), p.group + kind) == cls.end())
          cls.push_back(p.group + kind);
    std::string names;
    for (size_t i = 0; i < std::min<size_t>(cls.size(), 4); ++i) names += (i ? ", " : "") + cls[i];
    if (cls.size() > 4) names += fmt::format(" and {} more", cls.size() - 4);
    STRATA_THROW(IoError,
                 fmt::format("disk tier: cannot create the persistent state file in {} for state classes {}: it needs "
                             "{} bytes ({:.2f} GiB) of free space: {}",
                             dir, names, bytes, double(bytes) / double(size_t(1) << 30), e.what()),
                 dir);
  }
  state_disk_bytes_ = bytes;
}

void LlamaModel::throw_state_disk_error(const std::string& what, bool write, const std::string& err) const {
  const std::string path = state_disk_ ? state_disk_->path() : std::string("(no state file)");
  STRATA_THROW(IoError,
               fmt::format("disk tier: {} persistent state class {} {} the state file {} failed: {}",
                           write ? "writing" : "reading", what, write ? "to" : "from", path, err),
               path);
}

std::byte* LlamaModel::bounce(bool zeroed) const {
  if (bounce_.empty()) {
    bounce_.assign(kBounceBytes + 4096, std::byte{0});  // zero: the first zero write needs no fill
    bounce_zero_ = true;
  }
  std::byte* p = bounce_.data() + (4096 - reinterpret_cast<uintptr_t>(bounce_.data()) % 4096) % 4096;
  if (zeroed && !bounce_zero_) std::memset(p, 0, kBounceBytes);
  bounce_zero_ = zeroed;
  return p;
}

void LlamaModel::read_state_disk(size_t off, void* dst, size_t bytes, const std::string& cls) const {
  STRATA_CHECK(state_disk_ != nullptr, "read_state_disk: no state file");
  std::byte* buf = bounce(true);  // the sim moves no bytes: it reads zeros
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, kBounceBytes), padded = host_align(n);
    bounce_zero_ = false;
    try {
      state_disk_->wait(state_disk_->read_async(off + done, buf, padded));
    } catch (const Error& e) {
      throw_state_disk_error(cls, false, e.what());
    }
    std::memcpy(static_cast<std::byte*>(dst) + done, buf, n);
    done += n;
  }
}

void LlamaModel::write_state_disk(size_t off, const void* src, size_t bytes, const std::string& cls) const {
  STRATA_CHECK(state_disk_ != nullptr, "write_state_disk: no state file");
  std::byte* buf = bounce(src == nullptr);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, kBounceBytes), padded = host_align(n);
    if (src) {
      std::memcpy(buf, static_cast<const std::byte*>(src) + done, n);
      std::memset(buf + n, 0, padded - n);  // the array's last page: its padding
    }
    try {
      state_disk_->wait(state_disk_->write_async(off + done, buf, padded));
    } catch (const Error& e) {
      throw_state_disk_error(cls, true, e.what());
    }
    done += n;
  }
}

namespace {
// A trainable weight on a bf16 backend: its fp32 master is the compute copy plus an i16 low half.
bool split_master(const Parameter& p) {
  return p.master.allocated() && p.compute.allocated() && p.master.view().dtype != DType::f32;
}
}  // namespace

void LlamaModel::set_weights(Parameter& p, const float* host) {
  if (p.gathered()) return;  // ZeRO-3: its owner holds its weights
  if (p.page >= 0 && p.trainable) return set_paged_weights(p, host);
  if (p.page >= 0) return pager_->write_host(size_t(p.page), host);  // converted to the compute dtype
  // ZeRO-1, a parameter another rank owns: its owner's compute copy is the split master's high half
  // (ties round away from zero, not to even), so this rank's must be the same bits.
  const bool owner_splits = p.trainable && !p.state_here && be_.compute_dtype() != DType::f32 &&
                            opt_.recipe.master != MasterWeights::none && !p.master.allocated();
  const bool on_disk = p.disk_master != Parameter::kDevice;
  if (p.host_master != Parameter::kDevice || on_disk ||
      owner_splits) {  // the compute copy on the device, the master elsewhere
    const size_t n = size_t(p.shape.numel());
    std::byte* lo = p.host_master != Parameter::kDevice ? host_state(p.host_master) : nullptr;
    if (be_.compute_dtype() == DType::f32) {
      be_.upload_f32(p.compute.view(), host);
      if (lo) std::memcpy(lo, host, n * sizeof(float));
      if (on_disk) write_state_disk(p.disk_master, host, n * sizeof(float), p.group + ".w.master");
      return;
    }
    std::vector<uint16_t> hi(n);
    std::vector<int16_t> low(n);
    master_split(host, hi.data(), low.data(), n);
    be_.copy_wait_host(be_.copy_to_device_async(p.compute.view(), hi.data()));  // the high half's bits as they are
    if (lo) std::memcpy(lo, low.data(), n * sizeof(int16_t));
    if (on_disk) write_state_disk(p.disk_master, low.data(), n * sizeof(int16_t), p.group + ".w.master");
    return;
  }
  if (split_master(p)) return be_.upload_master(p.master.view(), p.compute.view(), host);
  if (p.master.allocated()) be_.upload_f32(p.master.view(), host);
  if (p.compute.allocated()) be_.upload_f32(p.compute.view(), host);
}

void LlamaModel::set_paged_weights(Parameter& p, const float* host) {
  const size_t n = size_t(p.shape.numel());
  const bool on_disk = p.disk_master != Parameter::kDevice;
  std::byte* lo = p.host_master != Parameter::kDevice ? host_state(p.host_master) : nullptr;
  if (be_.compute_dtype() == DType::f32 || !split_master_of(p)) {
    // The weights are the master (f32), or there is none (master_weights: none): the block alone.
    pager_->write_host(size_t(p.page), host);
    if (be_.compute_dtype() != DType::f32) return;
    if (lo) std::memcpy(lo, host, n * sizeof(float));
    if (on_disk) write_state_disk(p.disk_master, host, n * sizeof(float), p.group + ".w.master");
    return;
  }
  // A split master: the high half's bits into the block, the low half onto its tier.
  std::vector<uint16_t> hi(n);
  std::vector<int16_t> low(n);
  master_split(host, hi.data(), low.data(), n);
  pager_->write_host_bits(size_t(p.page), hi.data());
  if (lo) std::memcpy(lo, low.data(), n * sizeof(int16_t));
  if (on_disk) write_state_disk(p.disk_master, low.data(), n * sizeof(int16_t), p.group + ".w.master");
  if (p.master.allocated()) be_.copy_wait_host(be_.copy_to_device_async(p.master.view(), low.data()));
}

bool LlamaModel::split_master_of(const Parameter& p) const {
  return p.trainable && be_.compute_dtype() != DType::f32 && opt_.recipe.master != MasterWeights::none;
}

void LlamaModel::download_master(const Parameter& p, float* host) const {
  if (p.gathered()) {
    const size_t i = size_t(&p - params_.data());
    if (i >= gathered_fp32_.size() || gathered_fp32_[i].size() != size_t(p.shape.numel()))
      STRATA_THROW(Error, fmt::format("'{}' has no weights on rank {} (zero_stage 3: rank {} holds them); gather them "
                                      "on every rank first (Optimizer::gather_masters)",
                                      p.name, opt_.zero.rank, p.owner));
    std::copy(gathered_fp32_[i].begin(), gathered_fp32_[i].end(), host);
    return;
  }
  if (p.page >= 0) {
    const size_t n = size_t(p.shape.numel());
    if (!split_master_of(p)) return pager_->read_host(size_t(p.page), host);  // the weights are all there is
    std::vector<int16_t> low(n);
    if (p.host_master != Parameter::kDevice) {
      const std::byte* lo = host_state(p.host_master);
      if (!lo) return std::fill(host, host + n, 0.0f);  // the sim backend: no data
      std::memcpy(low.data(), lo, n * sizeof(int16_t));
    } else if (p.disk_master != Parameter::kDevice) {
      read_state_disk(p.disk_master, low.data(), n * sizeof(int16_t), p.group + ".w.master");
    } else {
      be_.copy_wait_host(be_.copy_to_host_async(low.data(), p.master.view()));
    }
    const std::byte* hi = pager_->host_data(size_t(p.page));
    if (!hi) return std::fill(host, host + n, 0.0f);
    return master_join(host, reinterpret_cast<const uint16_t*>(hi), low.data(), n);
  }
  if (p.host_master != Parameter::kDevice || p.disk_master != Parameter::kDevice) {
    const size_t n = size_t(p.shape.numel());
    const std::byte* lo = p.host_master != Parameter::kDevice ? host_state(p.host_master) : nullptr;
    std::vector<std::byte> from_disk;
    if (p.disk_master != Parameter::kDevice) {
      from_disk.resize(n * (be_.compute_dtype() == DType::f32 ? sizeof(float) : dtype_size(be_.master_dtype())));
      read_state_disk(p.disk_master, from_disk.data(), from_disk.size(), p.group + ".w.master");
      lo = from_disk.data();
    }
    if (be_.compute_dtype() == DType::f32) {
      if (lo)
        std::memcpy(host, lo, n * sizeof(float));
      else
        std::fill(host, host + n, 0.0f);  // the sim backend: no data
      return;
    }
    std::vector<uint16_t> hi(n);
    be_.copy_wait_host(be_.copy_to_host_async(hi.data(), p.compute.view()));
    if (!lo) return std::fill(host, host + n, 0.0f);
    return master_join(host, hi.data(), reinterpret_cast<const int16_t*>(lo), n);
  }
  if (split_master(p)) return be_.download_master(host, p.master.view(), p.compute.view());
  be_.download_f32(host, p.master.allocated() ? p.master.view() : p.value());
}

Parameter* LlamaModel::find(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
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

void LlamaModel::load(const std::string& dir) {
  sync_state();  // a pending update must not land on the loaded weights
  io::Checkpoint ck = io::Checkpoint::open_dir(dir);
  std::vector<float> h;
  for (auto& p : params_) {
    if (p.is_lora) continue;
    h.assign(size_t(p.shape.numel()), 0.0f);  // vocabulary padding: zero rows after the file's
    ck.read_f32(p.name, dims(p.file_shape()), h.data());
    set_weights(p, h.data());
  }
}

void LlamaModel::init_random(uint64_t seed) {
  // Each 1M-element chunk of each tensor has its own stream, so threads can fill them in any
  // order and the weights stay the same (an 8B model is 8e9 normals: one core is too slow).
  constexpr size_t kChunk = size_t(1) << 20;
  std::vector<float> h;
  for (size_t pi = 0; pi < params_.size(); ++pi) {
    Parameter& p = params_[pi];
    if (p.is_lora) continue;
    h.resize(size_t(p.shape.numel()));
    const bool norm = is_norm(p.name), bias = p.name.ends_with(".bias");
    parallel_chunks(h.size(), kChunk, [&](size_t b, size_t e) {
      Rng rng(seed * 0x100000001B3ull + pi * 0x9E3779B1ull + b / kChunk);
      for (size_t i = b; i < e; ++i) h[i] = norm ? 1.0f : bias ? 0.0f : float(0.02 * rng.normal());
    });
    std::fill(h.begin() + p.file_numel(), h.end(), 0.0f);  // vocabulary padding (the real rows as unpadded)
    set_weights(p, h.data());
  }
}

VId LlamaModel::pid(Tape& t, const std::string& name) {
  Parameter* p = find(name);
  STRATA_CHECK(p != nullptr, "no parameter " + name);
  // A gradient on the host tier, or one another rank owns (ZeRO-2), has no device block until the step writes it
  // (Tape::GradHooks).
  const LazyGrad lazy = !p->trainable                        ? LazyGrad::none
                        : p->host_grad != Parameter::kDevice ? LazyGrad::host
                        : grad_transient(*p)                 ? LazyGrad::transient
                                                             : LazyGrad::none;
  return t.param(name, p->value(), p->trainable && lazy == LazyGrad::none ? p->grad_view() : Tensor(),
                 int(p - params_.data()), lazy);
}

VId LlamaModel::proj(Tape& t, VId x, int layer, const std::string& module, const std::string& cls) {
  bool lora = opt_.lora.enabled() && std::find(opt_.lora.target_modules.begin(), opt_.lora.target_modules.end(),
                                               module) != opt_.lora.target_modules.end();
  const std::string base = layer_name(layer, module_path(module));
  const std::string bias_name = base + ".bias";
  const VId bias = find(bias_name) ? pid(t, bias_name) : VId(-1);
  if (!lora) return ops::linear(t, x, pid(t, base + ".weight"), bias, cls);
  VId y = ops::linear(t, x, pid(t, base + ".weight"), bias, cls + ".base");
  VId a = ops::linear(t, x, pid(t, base + ".lora_A.weight"), cls + ".lora_a");
  VId b = ops::linear(t, a, pid(t, base + ".lora_B.weight"), cls + ".lora_b");
  return ops::add(t, y, b, opt_.lora.scale(), cls);
}

ForwardIds LlamaModel::build(Tape& t, Tensor tokens, Tensor targets, Tensor pos, int B, int T, bool training,
                             double packed_pairs, const SeqShard& sp) {
  const int Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, D = cfg_.head_dim;
  // Sequence parallelism: this rank's T/n tokens of each row; attention over all T on its heads (model/seq_parallel.h).
  const int n = sp.size();
  const int Hkv_sp = seq_parallel_kv_heads(cfg_, n);  // KV heads after replication (Hkv without sp)
  check_seq_parallel_len(T, n);
  STRATA_CHECK(tokens.numel() == int64_t(B) * (T / n), "build: the tokens are not B x T/n");
  const float eps = cfg_.rms_norm_eps;
  if (cfg_.sliding_window > 0 && T > cfg_.sliding_window)
    STRATA_THROW(UnsupportedError,
                 fmt::format("config.json: sliding_window is {} and the sequence is {} tokens: strata runs full "
                             "causal attention, which differs from {}'s windowed attention beyond the window; "
                             "train at sequence_len <= {}",
                             cfg_.sliding_window, T, io::arch_model_type(cfg_.arch), cfg_.sliding_window));
  if (pager_ && !pager_->installed_on(t))
    STRATA_THROW(UnsupportedError,
                 "this model pages its layers (layer_offloading): record it on a tape the "
                 "weight pager is installed on (the Trainer's)");
  VId tok = t.input("tokens", tokens), tgt = t.input("targets", targets), ps = t.input("positions", pos);
  // Packed rows' attention segments: the positions of the tokens attention sees (all T of each row under sp).
  const VId seg_ps = packed_pairs <= 0 ? VId(-1) : n > 1 ? t.input("positions.rows", sp.packed_pos) : ps;
  VId inv = t.input("rope.inv_freq", inv_freq_.view());
  VId x = ops::embedding(t, tok, pid(t, "model.embed_tokens.weight"), "L0.input");
  t.mark_layer_input(x, 0);
  const int L = cfg_.num_hidden_layers;
  for (int i = 0; i < L; ++i) {
    std::string P = fmt::format("L{}", i);
    auto w = [&](const std::string& rest) { return layer_name(i, rest); };
    auto [n1, r1] = ops::rmsnorm(t, x, pid(t, w("input_layernorm.weight")), eps, P + ".attn_norm");
    // Under sp, q, k and v (the classes attention saves) are the head-sharded ones; "_seq": this rank's tokens.
    const std::string seq = n > 1 ? "_seq" : "";
    VId q = proj(t, n1, i, "q_proj", P + ".attn.q_proj");
    VId k = proj(t, n1, i, "k_proj", P + ".attn.k_proj");
    VId v = proj(t, n1, i, "v_proj", P + ".attn.v" + seq);
    if (cfg_.qk_norm) {  // Qwen3: each head of q and k normalised on its own, before rope
      q = ops::rmsnorm_heads(t, q, pid(t, w("self_attn.q_norm.weight")), Hq, eps, P + ".attn.q_norm").first;
      k = ops::rmsnorm_heads(t, k, pid(t, w("self_attn.k_norm.weight")), Hkv, eps, P + ".attn.k_norm").first;
    }
    q = ops::rope(t, q, ps, inv, Hq, P + ".attn.q" + seq);  // global positions: ps holds this rank's tokens' own
    k = ops::rope(t, k, ps, inv, Hkv, P + ".attn.k" + seq);
    if (n > 1) {
      if (Hkv_sp != Hkv) {  // GQA with fewer KV heads than ranks: each repeated, as Ulysses does
        k = ops::repeat_heads(t, k, Hkv, Hkv_sp / Hkv, P + ".attn.k_rep");
        v = ops::repeat_heads(t, v, Hkv, Hkv_sp / Hkv, P + ".attn.v_rep");
      }
      q = ops::seq_to_heads(t, q, B, Hq, *sp.comm, P + ".attn.q");
      k = ops::seq_to_heads(t, k, B, Hkv_sp, *sp.comm, P + ".attn.k");
      v = ops::seq_to_heads(t, v, B, Hkv_sp, *sp.comm, P + ".attn.v");
    }
    auto [o, lse] = ops::attention(t, q, k, v, B, T, Hq / n, Hkv_sp / n, D, P + ".attn", seg_ps, packed_pairs);
    if (n > 1) o = ops::heads_to_seq(t, o, B, Hq, *sp.comm, P + ".attn.out_seq");
    VId a = proj(t, o, i, "o_proj", P + ".attn.o_proj");
    VId h = ops::add(t, x, a, 1.0f, P + ".mid");
    auto [n2, r2] = ops::rmsnorm(t, h, pid(t, w("post_attention_layernorm.weight")), eps, P + ".mlp_norm");
    VId d;
    if (opt_.mlp_tiles > 1) {  // one fused op over row tiles: no [B*T, F] tensor exists whole
      auto bias = [&](const char* m) {
        const std::string name = w(std::string("mlp.") + m + ".bias");
        return find(name) ? pid(t, name) : VId(-1);
      };
      d = ops::mlp_tiled(t, n2, pid(t, w("mlp.gate_proj.weight")), pid(t, w("mlp.up_proj.weight")),
                         pid(t, w("mlp.down_proj.weight")), bias("gate_proj"), bias("up_proj"), bias("down_proj"),
                         opt_.mlp_tiles, P + ".mlp", P + ".mlp.down");
    } else {
      VId g = proj(t, n2, i, "gate_proj", P + ".mlp.gate");
      VId u = proj(t, n2, i, "up_proj", P + ".mlp.up");
      VId s = ops::swiglu(t, g, u, P + ".mlp.act");
      d = proj(t, s, i, "down_proj", P + ".mlp.down");
    }
    // The last layer's output is the loss path's input: named outside the L* classes.
    x = ops::add(t, h, d, 1.0f, i + 1 < L ? fmt::format("L{}.input", i + 1) : std::string("final_norm.input"));
    if (i + 1 < L)
      t.mark_layer_input(x, i + 1);
    else
      t.mark_head(x);
  }
  t.begin_head();  // the final norm and the loss: backward reads them first
  auto [nf, rf] = ops::rmsnorm(t, x, pid(t, "model.norm.weight"), eps, "final_norm");
  VId head = pid(t, cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  ForwardIds ids;
  ids.loss =
      ops::lm_head_ce(t, nf, head, tgt, opt_.loss_chunk_tokens, training && opt_.loss_grad_in_forward, cfg_.vocab_size);
  ids.final_hidden = nf;
  return ids;
}

void LlamaModel::logits(Tape& t, VId final_hidden, Tensor out) {
  Parameter* head = find(cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  const Tensor w = head->value();  // [padded_vocab, C]: its first vocab_size rows give the logits
  be_.lm_head_logits(out, t.tensor(final_hidden), Tensor(w.data, w.dtype, head->file_shape()));
}

void LlamaModel::save(const std::string& dir, const Fp32Source& fp32_of) const {
  sync_state();
  std::filesystem::create_directories(dir);
  std::vector<std::vector<float>> host;
  std::vector<io::TensorToWrite> out;
  host.reserve(params_.size());
  for (auto& p : params_) {
    if (p.is_lora) continue;
    host.emplace_back(size_t(p.shape.numel()));
    if (p.page >= 0 && !p.trainable)
      pager_->read_host(size_t(p.page), host.back().data());
    else if (!fp32_of || !fp32_of(p, host.back().data()))
      download_master(p, host.back().data());
    out.push_back({p.name, DType::f32, dims(p.file_shape()), host.back().data()});  // the real rows only
  }
  io::save_safetensors(dir + "/model.safetensors", out);
  io::LlamaConfig c = cfg_;
  c.torch_dtype = "float32";
  io::write_file_atomic(dir + "/config.json", io::llama_config_to_json(c));
}

void LlamaModel::save_lora(const std::string& dir, const std::string& base_model_path) const {
  STRATA_CHECK(opt_.lora.enabled(), "save_lora without adapters");
  sync_state();
  std::filesystem::create_directories(dir);
  std::vector<std::vector<float>> host;
  std::vector<io::TensorToWrite> out;
  host.reserve(params_.size());
  for (auto& p : params_) {
    if (!p.is_lora) continue;
    host.emplace_back(size_t(p.shape.numel()));
    download_master(p, host.back().data());
    out.push_back({"base_model.model." + p.name, DType::f32, dims(p.shape), host.back().data()});
  }
  io::save_safetensors(dir + "/adapter_model.safetensors", out);
  nlohmann::json j = {{"peft_type", "LORA"},
                      {"task_type", "CAUSAL_LM"},
                      {"base_model_name_or_path", base_model_path},
                      {"r", opt_.lora.rank},
                      {"lora_alpha", opt_.lora.alpha},
                      {"lora_dropout", 0.0},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"inference_mode", true},
                      {"target_modules", opt_.lora.target_modules}};
  io::write_file_atomic(dir + "/adapter_config.json", j.dump(2) + "\n");
}

}  // namespace strata
