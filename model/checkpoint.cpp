#include "model/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/regular_file.h"
#include "io/safetensors.h"

namespace strata {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kState = "trainer_state.json";
constexpr const char* kConfig = "train_config.json";
constexpr const char* kOptimizer = "optimizer.safetensors";

// One array of a trainable parameter's state: on the device (`dev`) or in the host tier (`host`).
struct Piece {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Tensor dev;
  std::byte* host = nullptr;
  // A second copy of the weights (an fp32 master on the host tier beside its fp32 compute copy on
  // an f32 backend): not saved, filled from the weights' tensor, so a checkpoint does not depend
  // on the tier its state lived in.
  bool mirror = false;
  size_t bytes() const {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    return n * dtype_size(dtype);
  }
};

std::vector<Piece> state_pieces(Backend& be, const LlamaModel& m) {
  const OptimizerState os = m.options().recipe.moments;
  const DType mdt = os == OptimizerState::fp32 ? DType::f32 : os == OptimizerState::bf16 ? DType::bf16 : DType::u8;
  std::vector<Piece> out;
  // ZeRO-1: this rank holds only its share of the state; a checkpoint of it would not resume.
  if (m.options().zero.sharded())
    STRATA_THROW(UnsupportedError,
                 fmt::format("checkpoints with zero_stage {} over {} ranks are not supported yet (each rank holds "
                             "only its share of the optimizer state); use zero_stage: 0 to save or resume "
                             "checkpoints (save_steps, resume_from_checkpoint)",
                             m.options().zero.stage, m.options().zero.world));
  for (const Parameter& p : m.params()) {
    if (!p.trainable) continue;
    const size_t n = size_t(p.shape.numel());
    const std::vector<int64_t> shape(p.shape.d.begin(), p.shape.d.begin() + p.shape.nd);
    const std::vector<int64_t> blocks = {int64_t(quant_blocks(n))};
    out.push_back({p.name, p.value().dtype, shape, p.value(), nullptr});
    // A split master's low half (bf16 compute weights) is state of its own; an fp32 master beside
    // fp32 compute weights holds the same bits.
    const bool f32 = p.value().dtype == DType::f32;
    const std::string master_name = f32 ? p.name : p.name + ".master";
    if (p.host_master != Parameter::kDevice)
      out.push_back({master_name, f32 ? DType::f32 : be.master_dtype(), shape, {}, m.host_state(p.host_master), f32});
    else if (p.master.allocated() && p.compute.allocated())
      out.push_back({master_name, p.master.view().dtype, shape, p.master.view(), nullptr, f32});
    for (auto [off, codes, scales, tag] :
         {std::tuple{p.host_m, &p.m, &p.m_scale, ".m"}, std::tuple{p.host_v, &p.v, &p.v_scale, ".v"}}) {
      const std::string nm = p.name + tag;
      if (off != Parameter::kDevice) {
        std::byte* h = m.host_state(off);
        out.push_back({nm, mdt, shape, {}, h});
        if (mdt == DType::u8)
          out.push_back({nm + "_scale", DType::f32, blocks, {}, h ? h + moment_scale_offset(n) : nullptr});
      } else {
        out.push_back({nm, mdt, shape, codes->view(), nullptr});
        if (mdt == DType::u8) out.push_back({nm + "_scale", DType::f32, blocks, scales->view(), nullptr});
      }
    }
  }
  return out;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

json read_json(const std::string& path) {
  const std::string text = io::read_regular_file(path, "a checkpoint file", size_t(64) << 20);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(fmt::format("{}: not valid JSON: {}", path, e.what()), path, "");
  }
}

// The pid in ".checkpoint-<step>.tmp.<pid>", or 0.
pid_t temp_owner(const std::string& name) {
  if (!name.starts_with(".checkpoint-")) return 0;
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at + 5 >= name.size()) return 0;
  const std::string digits = name.substr(at + 5);
  if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return 0;
  return pid_t(std::stol(digits));
}

}  // namespace

std::string checkpoint_config_json(const TrainConfig& c, const io::LlamaConfig& mc, long data_rows) {
  nlohmann::ordered_json must = {
      {"model.hidden_size", mc.hidden_size},
      {"model.intermediate_size", mc.intermediate_size},
      {"model.num_hidden_layers", mc.num_hidden_layers},
      {"model.num_attention_heads", mc.num_attention_heads},
      {"model.num_key_value_heads", mc.num_key_value_heads},
      {"model.head_dim", mc.head_dim},
      {"model.vocab_size", mc.vocab_size},
      {"model.tie_word_embeddings", mc.tie_word_embeddings},
      // The optimizer state holds the embedding's and the LM head's padded rows (pad_vocab_multiple).
      {"padded_vocab_size", padded_vocab(mc.vocab_size, c.pad_vocab_multiple)},
      {"lora_r", c.lora.enabled() ? c.lora.rank : 0},
      {"lora_alpha", c.lora.enabled() ? c.lora.alpha : 0.0f},
      {"lora_target_modules", c.lora.enabled() ? c.lora.target_modules : std::vector<std::string>{}},
      {"freeze_base", c.freeze_base},
      {"master_weights", master_weights_name(c.recipe.master)},
      {"optimizer_state", optimizer_state_name(c.recipe.moments)},
      {"sequence_len", c.seq},
      {"micro_batch_size", c.batch},
      {"gradient_accumulation_steps", c.grad_accum},
      {"val_set_size", c.val_set_size},
      {"seed", c.seed},
      {"data_rows", data_rows}};
  nlohmann::ordered_json datasets = nlohmann::ordered_json::array();
  for (const DatasetSpec& d : c.datasets) datasets.push_back({{"path", d.path}, {"type", d.type}, {"field", d.field}});
  if (!c.datasets.empty()) {
    // The rows' targets depend on these (a token file's run has none of them, as before).
    must["datasets"] = datasets;
    must["train_on_inputs"] = c.train_on_inputs;
    must["excess_length_strategy"] = c.drop_excess ? "drop" : "truncate";
    if (c.sample_packing) must["sample_packing"] = true;  // the rows' layout (an unpacked run's config lacks it)
  }
  nlohmann::ordered_json all = {{"base_model", c.model_dir},
                                {"data", c.data_path},
                                {"datasets", datasets},
                                {"tokenizer", c.tokenizer_dir},
                                {"train_on_inputs", c.train_on_inputs},
                                {"excess_length_strategy", c.drop_excess ? "drop" : "truncate"},
                                {"sample_packing", c.sample_packing},
                                {"backend", c.backend},
                                {"learning_rate", c.lr},
                                {"max_steps", c.steps_given ? json(c.steps) : json(nullptr)},
                                {"num_epochs", c.num_epochs},
                                {"lr_scheduler", lr_scheduler_name(c.lr_scheduler)},
                                {"warmup_steps", c.warmup_steps},
                                {"warmup_ratio", c.warmup_ratio},
                                {"weight_decay", c.weight_decay},
                                {"adam_beta1", c.beta1},
                                {"adam_beta2", c.beta2},
                                {"adam_epsilon", c.adam_eps},
                                {"max_grad_norm", c.max_grad_norm},
                                // Gradients are never saved: a resume may change their precision.
                                {"gradients", gradients_name(c.recipe.gradients)},
                                {"loss_chunk_tokens", c.loss_chunk_tokens},
                                {"pad_vocab_multiple", c.pad_vocab_multiple},
                                {"eval_steps", c.eval_steps},
                                {"logging_steps", c.logging_steps},
                                {"save_steps", c.save_steps},
                                {"save_total_limit", c.save_total_limit},
                                {"output_dir", c.output_dir},
                                {"plan", c.plan.preset},
                                {"state_plan", c.plan.state_preset}};
  return nlohmann::ordered_json{
             {"format", "strata-train-config"}, {"version", 1}, {"must_match", must}, {"config", all}}
             .dump(2) +
         "\n";
}

int copy_tokenizer_files(const std::string& from, const std::string& to) {
  int n = 0;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"}) {
    const std::string src = from + "/" + f;
    std::error_code ec;
    if (!fs::is_regular_file(src, ec)) continue;
    io::write_file_atomic(to + "/" + f, io::read_regular_file(src, "a tokenizer file", size_t(1) << 30));
    ++n;
  }
  return n;
}

size_t remove_stale_checkpoint_temps(const std::string& output_dir) noexcept {
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(output_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t pid = temp_owner(name);
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (!rm) {
      ++removed;
      fmt::print(stderr, "strata: removed {}, a partial checkpoint left by process {} (no longer running)\n",
                 it->path().string(), pid);
    }
  }
  return removed;
}

std::string save_checkpoint(const std::string& output_dir, Backend& be, const LlamaModel& model,
                            const CheckpointState& st, const CheckpointWrite& w) {
  fs::create_directories(output_dir);
  remove_stale_checkpoint_temps(output_dir);
  const std::string final_dir = fmt::format("{}/checkpoint-{}", output_dir, st.step);
  const std::string tmp = fmt::format("{}/.checkpoint-{}.tmp.{}", output_dir, st.step, ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  auto done = [&](const std::string& f) {
    if (w.after_file) w.after_file(f);
  };
  try {
    model.sync_state();  // updates the optimizer left for the next forward land first
    be.synchronize();
    // The optimizer state first: the largest file, and nothing else reads the model meanwhile.
    std::vector<Piece> pieces = state_pieces(be, model);
    std::vector<std::vector<std::byte>> host(pieces.size());
    std::vector<io::TensorToWrite> out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& pc = pieces[i];
      if (pc.mirror) continue;
      const void* data = pc.host;
      if (pc.dev.defined()) {
        host[i].resize(pc.bytes());
        if (pc.bytes()) be.copy_wait_host(be.copy_to_host_async(host[i].data(), pc.dev));
        data = host[i].data();
      }
      STRATA_CHECK(data || !pc.bytes(),
                   fmt::format("checkpoint: no bytes for {} (the sim backend keeps none)", pc.name));
      out.push_back({pc.name, pc.dtype, pc.shape, data});
    }
    io::save_safetensors(tmp + "/" + kOptimizer, out, {{"strata", "optimizer-state"}});
    done(kOptimizer);
    host.clear();
    if (model.options().lora.enabled()) {
      model.save_lora(tmp, w.base_model_dir);
      done("adapter_model.safetensors");
    } else {
      model.save(tmp);
      done("model.safetensors");
    }
    const std::string& tok_dir = w.tokenizer_dir.empty() ? w.base_model_dir : w.tokenizer_dir;
    if (!tok_dir.empty() && copy_tokenizer_files(tok_dir, tmp)) done("tokenizer files");
    io::write_file_atomic(tmp + "/" + kConfig, w.config_json);
    done(kConfig);
    const json state = {
        {"format", "strata-checkpoint"},
        {"version", 1},
        {"global_step", st.step},
        {"total_steps", st.total_steps},
        {"loss", st.loss},
        {"data", {{"epoch", st.data.epoch}, {"index", st.data.index}, {"epoch_rng", st.data.epoch_rng}}},
        {"trainer_rng", st.trainer_rng}};
    io::write_file_atomic(tmp + "/" + kState, state.dump(2) + "\n");
    done(kState);
    fsync_dir(tmp);
    // Complete: the temp takes the checkpoint's name (a checkpoint of the same step moves aside first).
    if (fs::exists(final_dir)) {
      const std::string old = fmt::format("{}/.checkpoint-{}.old.tmp.{}", output_dir, st.step, ::getpid());
      fs::remove_all(old, ec);
      fs::rename(final_dir, old);
      fs::rename(tmp, final_dir);
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, final_dir);
    }
    fsync_dir(output_dir);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw IoError(fmt::format("{}: cannot write the checkpoint: {}", final_dir, e.what()), final_dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return final_dir;
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& output_dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (fs::directory_iterator it(output_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with("checkpoint-") || !it->is_directory()) continue;
    const std::string digits = name.substr(11);
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    out.push_back({std::stoi(digits), it->path().string()});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

std::vector<std::string> prune_checkpoints(const std::string& output_dir, int keep) {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  std::vector<CheckpointEntry> all = list_checkpoints(output_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i].path, ec);
    if (ec)
      throw IoError(fmt::format("{}: cannot remove an old checkpoint: {}", all[i].path, ec.message()), all[i].path);
    removed.push_back(all[i].path);
  }
  return removed;
}

std::string resolve_checkpoint(const std::string& spec, const std::string& output_dir) {
  if (spec == "auto") {
    if (output_dir.empty())
      throw ConfigError(
          "resume_from_checkpoint: true/auto resumes from the newest checkpoint in output_dir, and "
          "no output_dir (--save) is given",
          "config", "resume_from_checkpoint");
    std::vector<CheckpointEntry> all = list_checkpoints(output_dir);
    if (all.empty())
      throw ConfigError(fmt::format("resume_from_checkpoint: no checkpoint-<step> directory in {}", output_dir),
                        output_dir, "resume_from_checkpoint");
    return all.back().path;
  }
  std::error_code ec;
  if (!fs::is_regular_file(spec + "/" + kState, ec))
    throw ConfigError(fmt::format("resume_from_checkpoint: {} is not a checkpoint (no {} in it)", spec, kState), spec,
                      "resume_from_checkpoint");
  return spec;
}

CheckpointState load_checkpoint(const std::string& dir, Backend& be, LlamaModel& model,
                                const std::string& config_json) {
  // The run must be the one that saved it, in every field the state's layout or the data order
  // depends on; the learning rate, the step count and the schedule may change.
  model.sync_state();  // a pending update must not land on the restored state
  const std::string cfg_path = dir + "/" + kConfig;
  const json saved = read_json(cfg_path);
  const nlohmann::ordered_json now = nlohmann::ordered_json::parse(config_json);  // fields in the order written
  if (!saved.contains("must_match") || !saved["must_match"].is_object())
    throw FormatError(fmt::format("{}: no must_match object: not a strata checkpoint config", cfg_path), cfg_path,
                      "must_match");
  for (const auto& [k, v] : now["must_match"].items()) {
    json s = saved["must_match"];
    // Checkpoints from before vocabulary padding held the unpadded rows.
    if (k == "padded_vocab_size" && !s.contains(k) && s.contains("model.vocab_size")) s[k] = s["model.vocab_size"];
    if (!s.contains(k)) throw FormatError(fmt::format("{}: field must_match.{} is missing", cfg_path, k), cfg_path, k);
    if (s[k] != json::parse(v.dump())) {  // compared as plain JSON: key order inside a value does not matter
      const std::string how = k == "padded_vocab_size"
                                  ? "; the embedding and LM head state is padded to it: resume with the checkpoint's "
                                    "pad_vocab_multiple (--pad-vocab; config.pad_vocab_multiple in its "
                                    "train_config.json, 1 before padding existed)"
                                  : "; resume with the checkpoint's setting";
      throw FormatError(fmt::format("{}: field {} is {} in the checkpoint but {} in this run{} (or start a new run)",
                                    cfg_path, k, s[k].dump(), v.dump(), how),
                        cfg_path, k);
    }
  }
  const std::string st_path = dir + "/" + kState;
  const json j = read_json(st_path);
  CheckpointState st;
  try {
    st.step = j.at("global_step").get<int>();
    st.total_steps = j.value("total_steps", 0);
    st.loss = j.value("loss", 0.0f);
    st.data.epoch = j.at("data").at("epoch").get<long>();
    st.data.index = j.at("data").at("index").get<long>();
    st.data.epoch_rng = j.at("data").at("epoch_rng").get<uint64_t>();
    st.trainer_rng = j.at("trainer_rng").get<uint64_t>();
  } catch (const json::exception& e) {
    throw FormatError(fmt::format("{}: {}", st_path, e.what()), st_path, "");
  }
  if (st.step < 0) throw FormatError(fmt::format("{}: global_step {} < 0", st_path, st.step), st_path, "global_step");

  const std::string opt_path = dir + "/" + kOptimizer;
  io::SafetensorsFile f = io::SafetensorsFile::open(opt_path);
  std::vector<Piece> pieces = state_pieces(be, model);
  for (const Piece& pc : pieces) {
    const io::TensorInfo* t = f.find(pc.name);
    if (!t)
      throw FormatError(
          fmt::format("{}: tensor {} is missing (a checkpoint of another model or recipe?)", opt_path, pc.name),
          opt_path, pc.name);
    if (t->dtype != pc.dtype || t->shape != pc.shape)
      throw FormatError(
          fmt::format("{}: tensor {} is {} {} in the checkpoint, this run needs {} {}", opt_path, pc.name,
                      dtype_name(t->dtype), io::shape_str(t->shape), dtype_name(pc.dtype), io::shape_str(pc.shape)),
          opt_path, pc.name);
  }
  const size_t saved_pieces =
      size_t(std::count_if(pieces.begin(), pieces.end(), [](const Piece& pc) { return !pc.mirror; }));
  if (f.tensors().size() != saved_pieces)
    throw FormatError(fmt::format("{}: {} tensors, this run's state has {} (another model or recipe?)", opt_path,
                                  f.tensors().size(), saved_pieces),
                      opt_path, "tensors");
  be.synchronize();
  for (const Piece& pc : pieces) {
    const io::TensorInfo* t = f.find(pc.name);
    if (!pc.bytes()) continue;
    if (pc.dev.defined()) {
      be.copy_wait_host(be.copy_to_device_async(pc.dev, f.data(*t)));
    } else if (pc.host) {
      std::memcpy(pc.host, f.data(*t), pc.bytes());
    }
  }
  be.synchronize();
  return st;
}

}  // namespace strata
