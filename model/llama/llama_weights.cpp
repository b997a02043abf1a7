// LlamaModel's weights in and out (model/llama/llama.h): set and read on whatever tier they live (device, split
// master, host or disk state, the pager's host block, ZeRO-3's owners), loaded from a Hugging Face checkpoint,
// initialised at random, and saved (model.safetensors, or a PEFT adapter).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/master_split.h"
#include "engine/parallel.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/llama/llama.h"
#include "model/llama/llama_internal.h"
#include "model/llama/rng.h"

namespace strata {

using namespace llama_detail;

namespace {
std::vector<int64_t> dims(const Shape& s) {
  return std::vector<int64_t>(s.d.begin(), s.d.begin() + s.nd);
}
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
    if (be_.compute_dtype() == DType::f32) {
      be_.upload_f32(p.compute.view(), host);
      return write_master_off_device(p, host, n * sizeof(float));
    }
    std::vector<uint16_t> hi(n);
    std::vector<int16_t> low(n);
    if (be_.holds_values()) master_split(host, hi.data(), low.data(), n);       // the sim: zeros, moved alike
    be_.copy_wait_host(be_.copy_to_device_async(p.compute.view(), hi.data()));  // the high half's bits as they are
    return write_master_off_device(p, low.data(), n * sizeof(int16_t));
  }
  if (split_master(p)) return be_.upload_master(p.master.view(), p.compute.view(), host);
  if (p.master.allocated()) be_.upload_f32(p.master.view(), host);
  if (p.compute.allocated()) be_.upload_f32(p.compute.view(), host);
}

void LlamaModel::set_paged_weights(Parameter& p, const float* host) {
  const size_t n = size_t(p.shape.numel());
  if (be_.compute_dtype() == DType::f32 || !split_master_of(p)) {
    // The weights are the master (f32), or there is none (master_weights: none): the block alone.
    pager_->write_host(size_t(p.page), host);
    if (be_.compute_dtype() == DType::f32) write_master_off_device(p, host, n * sizeof(float));
    return;
  }
  // A split master: the high half's bits into the block, the low half onto its tier.
  std::vector<uint16_t> hi(n);
  std::vector<int16_t> low(n);
  if (be_.holds_values()) master_split(host, hi.data(), low.data(), n);
  pager_->write_host_bits(size_t(p.page), hi.data());
  write_master_off_device(p, low.data(), n * sizeof(int16_t));
  if (p.master.allocated()) be_.copy_wait_host(be_.copy_to_device_async(p.master.view(), low.data()));
}

void LlamaModel::write_master_off_device(const Parameter& p, const void* src, size_t bytes) const {
  if (p.host_master != Parameter::kDevice) {
    if (std::byte* lo = host_state(p.host_master)) std::memcpy(lo, src, bytes);
  }
  if (p.disk_master != Parameter::kDevice) write_state_disk(p.disk_master, src, bytes, p.group + ".w.master");
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

void LlamaModel::load(const std::string& dir, bool drop_file_cache) {
  sync_state();  // a pending update must not land on the loaded weights
  io::Checkpoint ck = io::Checkpoint::open_dir(dir);
  std::vector<float> h;
  for (auto& p : params_) {
    if (p.is_lora) continue;
    h.assign(size_t(p.shape.numel()), 0.0f);  // vocabulary padding: zero rows after the file's
    ck.read_f32(p.name, dims(p.file_shape()), h.data());
    set_weights(p, h.data());
  }
  if (drop_file_cache) ck.release();  // the weights are the model's now: the file's pages need not stay cached
}

void LlamaModel::init_random(uint64_t seed) {
  // Each 1M-element chunk of each tensor has its own stream, so threads can fill them in any
  // order and the weights stay the same (an 8B model is 8e9 normals: one core is too slow; they are drawn
  // in pairs, Rng::normal_pair).
  constexpr size_t kChunk = size_t(1) << 20;
  std::vector<float> h;
  for (size_t pi = 0; pi < params_.size(); ++pi) {
    Parameter& p = params_[pi];
    if (p.is_lora) continue;
    h.resize(size_t(p.shape.numel()));
    const bool norm = is_norm(p.name), bias = p.name.ends_with(".bias");
    parallel_chunks(h.size(), kChunk, [&](size_t b, size_t e) {
      if (norm || bias) return std::fill(h.begin() + ptrdiff_t(b), h.begin() + ptrdiff_t(e), norm ? 1.0f : 0.0f);
      Rng rng(seed * 0x100000001B3ull + pi * 0x9E3779B1ull + b / kChunk);
      float x, y;
      for (size_t i = b; i < e; i += 2) {
        rng.normal_pair(x, y);
        h[i] = 0.02f * x;
        if (i + 1 < e) h[i + 1] = 0.02f * y;
      }
    });
    std::fill(h.begin() + p.file_numel(), h.end(), 0.0f);  // vocabulary padding (the real rows as unpadded)
    set_weights(p, h.data());
  }
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
