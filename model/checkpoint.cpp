#include "model/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/master_split.h"
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

// One array of a trainable parameter's state: on the device (`dev`), in the host tier (`host`) or in
// the model's state file on the disk tier (`disk`: its offset there, read and written through
// `model`, errors naming the state class `cls`).
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
  size_t disk = Parameter::kDevice;
  const LlamaModel* model = nullptr;
  std::string cls = {};
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
  // ZeRO-1: this rank's shard, the parameters it owns (their weights included, for the other ranks' resume).
  const ZeroOptions& z = m.options().zero;
  for (const Parameter& p : m.params()) {
    if (!p.trainable || (z.sharded() && p.owner != z.rank)) continue;
    const size_t n = size_t(p.shape.numel());
    const std::vector<int64_t> shape(p.shape.d.begin(), p.shape.d.begin() + p.shape.nd);
    const std::vector<int64_t> blocks = {int64_t(quant_blocks(n))};
    if (p.page >= 0)  // a trainable paged weight: its compute copy is the pager's host block
      out.push_back({p.name, p.value().dtype, shape, {}, m.pager()->host_data(size_t(p.page))});
    else
      out.push_back({p.name, p.value().dtype, shape, p.value(), nullptr});
    // A split master's low half (bf16 compute weights) is state of its own; an fp32 master beside
    // fp32 compute weights holds the same bits.
    const bool f32 = p.value().dtype == DType::f32;
    const std::string master_name = f32 ? p.name : p.name + ".master";
    if (p.host_master != Parameter::kDevice)
      out.push_back({master_name, f32 ? DType::f32 : be.master_dtype(), shape, {}, m.host_state(p.host_master), f32});
    else if (p.disk_master != Parameter::kDevice)
      out.push_back({master_name,
                     f32 ? DType::f32 : be.master_dtype(),
                     shape,
                     {},
                     nullptr,
                     f32,
                     p.disk_master,
                     &m,
                     p.group + ".w.master"});
    else if (p.master.allocated() && (p.compute.allocated() || p.page >= 0))
      out.push_back({master_name, p.master.view().dtype, shape, p.master.view(), nullptr, f32});
    for (auto [off, disk, codes, scales, tag] : {std::tuple{p.host_m, p.disk_m, &p.m, &p.m_scale, ".m"},
                                                 std::tuple{p.host_v, p.disk_v, &p.v, &p.v_scale, ".v"}}) {
      const std::string nm = p.name + tag;
      if (disk != Parameter::kDevice) {
        const std::string cls = p.group + (tag == std::string(".m") ? ".adam.m" : ".adam.v");
        out.push_back({nm, mdt, shape, {}, nullptr, false, disk, &m, cls});
        if (mdt == DType::u8)
          out.push_back(
              {nm + "_scale", DType::f32, blocks, {}, nullptr, false, disk + Parameter::disk_scale_offset(n), &m, cls});
      } else if (off != Parameter::kDevice) {
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

std::string shard_name(int rank, int world) {
  return fmt::format("optimizer.rank-{}-of-{}.safetensors", rank, world);
}

// The optimizer-state file of `pieces` at `path` (atomically).
void write_state_file(const std::string& path, Backend& be, const std::vector<Piece>& pieces) {
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
    } else if (pc.disk != Parameter::kDevice) {
      // Read from the disk tier before anything is written: a failing read leaves no file behind.
      host[i].resize(pc.bytes());
      if (pc.bytes()) pc.model->read_state_disk(pc.disk, host[i].data(), pc.bytes(), pc.cls);
      data = host[i].data();
    }
    STRATA_CHECK(data || !pc.bytes(), fmt::format("checkpoint: no bytes for {} (the sim backend keeps none)", pc.name));
    out.push_back({pc.name, pc.dtype, pc.shape, data});
  }
  io::save_safetensors(path, out, {{"strata", "optimizer-state"}});
}

// A tensor of a state file, checked against the dtype and shape this run needs.
const io::TensorInfo& state_tensor(const io::SafetensorsFile& f, const std::string& path, const std::string& name,
                                   DType dtype, const std::vector<int64_t>& shape) {
  const io::TensorInfo* t = f.find(name);
  if (!t)
    throw FormatError(fmt::format("{}: tensor {} is missing (a checkpoint of another model or recipe?)", path, name),
                      path, name);
  if (t->dtype != dtype || t->shape != shape)
    throw FormatError(
        fmt::format("{}: tensor {} is {} {} in the checkpoint, this run needs {} {}", path, name, dtype_name(t->dtype),
                    io::shape_str(t->shape), dtype_name(dtype), io::shape_str(shape)),
        path, name);
  return *t;
}

// Checks every piece against the file (and that it holds nothing else), then copies them in.
void restore_pieces(const io::SafetensorsFile& f, const std::string& path, Backend& be,
                    const std::vector<Piece>& pieces) {
  for (const Piece& pc : pieces) state_tensor(f, path, pc.name, pc.dtype, pc.shape);
  const size_t saved_pieces =
      size_t(std::count_if(pieces.begin(), pieces.end(), [](const Piece& pc) { return !pc.mirror; }));
  if (f.tensors().size() != saved_pieces)
    throw FormatError(fmt::format("{}: {} tensors, this run's state has {} (another model or recipe?)", path,
                                  f.tensors().size(), saved_pieces),
                      path, "tensors");
  be.synchronize();
  for (const Piece& pc : pieces) {
    if (!pc.bytes()) continue;
    const void* src = f.data(*f.find(pc.name));
    if (pc.dev.defined())
      be.copy_wait_host(be.copy_to_device_async(pc.dev, src));
    else if (pc.disk != Parameter::kDevice)
      pc.model->write_state_disk(pc.disk, src, pc.bytes(), pc.cls);
    else if (pc.host)
      std::memcpy(pc.host, src, pc.bytes());
  }
  be.synchronize();
}

// ZeRO-1: each rank's agreement on whether every rank got through a phase. Every rank calls it with
// whether it failed; if any did, every rank throws (an IoError naming the checkpoint and how many ranks
// failed, with this rank's own error where it has one).
void agree(const RankSum& sum, const std::string& err, const std::string& where, const std::string& what, int world) {
  const float failed = sum(err.empty() ? 0.0f : 1.0f);
  if (failed > 0)
    throw IoError(fmt::format("{}: {} of {} ranks could not {}{}", where, int(failed), world, what,
                              err.empty() ? std::string() : "; this rank: " + err),
                  where);
}

}  // namespace

std::string checkpoint_config_json(const TrainConfig& c, const io::LlamaConfig& mc, long data_rows, int zero_shards) {
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
  // ZeRO-1's and ZeRO-2's shards (one layout): one optimizer file a rank, each of the parameters that rank owns (an
  // unsharded run's config has no such field).
  if (zero_shards > 1) must["zero_shards"] = zero_shards;
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
                                {"state_plan", c.plan.state_label()}};
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

namespace {

// Everything after the optimizer state, into `tmp`, then the rename that publishes it as `final_dir`:
// the weights (or the adapter), tokenizer files, train_config.json, trainer_state.json last.
void finish_checkpoint(const std::string& tmp, const std::string& final_dir, const std::string& output_dir,
                       const LlamaModel& model, const CheckpointState& st, const CheckpointWrite& w,
                       const LlamaModel::Fp32Source& fp32_of) {
  auto done = [&](const std::string& f) {
    if (w.after_file) w.after_file(f);
  };
  if (model.options().lora.enabled()) {
    model.save_lora(tmp, w.base_model_dir);
    done("adapter_model.safetensors");
  } else {
    model.save(tmp, fp32_of);
    done("model.safetensors");
  }
  const std::string& tok_dir = w.tokenizer_dir.empty() ? w.base_model_dir : w.tokenizer_dir;
  if (!tok_dir.empty() && copy_tokenizer_files(tok_dir, tmp)) done("tokenizer files");
  io::write_file_atomic(tmp + "/" + kConfig, w.config_json);
  done(kConfig);
  const json state = {{"format", "strata-checkpoint"},
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
  std::error_code ec;
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
}

// The message of the exception in flight (inside a catch).
std::string current_error(const std::string& final_dir) {
  try {
    throw;
  } catch (const fs::filesystem_error& e) {
    return fmt::format("{}: {}", final_dir, e.what());
  } catch (const std::exception& e) {
    return e.what();
  }
}

// ZeRO-1 over several ranks: every rank writes its shard of the optimizer state into rank 0's temp
// directory; once every shard is complete, rank 0 writes the weights (the fp32 masters it does not own
// joined from its bf16 weights and the owners' low halves, read back from their shards) and the rest.
std::string save_sharded(const std::string& output_dir, Backend& be, const LlamaModel& model, const CheckpointState& st,
                         const CheckpointWrite& w, const RankSum& sum) {
  const ZeroOptions& z = model.options().zero;
  const bool lead = z.rank == 0;
  const std::string final_dir = fmt::format("{}/checkpoint-{}", output_dir, st.step);
  std::string err;
  if (lead) {
    try {
      fs::create_directories(output_dir);
      remove_stale_checkpoint_temps(output_dir);  // before any rank writes into a temp of this save
    } catch (...) {
      err = current_error(final_dir);
    }
  }
  // Rank 0's pid names the temp directory (Linux pids are below 2^22, exact in a float).
  const float pid = sum(lead ? float(::getpid()) : 0.0f);
  agree(sum, err, final_dir, "prepare the checkpoint directory", z.world);
  const std::string tmp = fmt::format("{}/.checkpoint-{}.tmp.{}", output_dir, st.step, long(pid));
  std::error_code ec;
  if (lead) {
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) err = fmt::format("{}: cannot create {}: {}", final_dir, tmp, ec.message());
  }
  agree(sum, err, final_dir, "create the checkpoint's temp directory", z.world);
  try {
    model.sync_state();
    be.synchronize();
    write_state_file(tmp + "/" + shard_name(z.rank, z.world), be, state_pieces(be, model));
    if (w.after_file) w.after_file(shard_name(z.rank, z.world));
  } catch (...) {
    err = current_error(final_dir);
  }
  try {
    agree(sum, err, final_dir, "write their shard of the optimizer state", z.world);
  } catch (...) {
    if (lead) fs::remove_all(tmp, ec);
    throw;
  }
  if (lead) {
    try {
      std::vector<std::unique_ptr<io::SafetensorsFile>> shards(size_t(z.world));
      auto fp32_of = [&](const Parameter& p, float* host) {
        if (p.owner <= 0 || !p.trainable || !p.compute.allocated() || p.compute.view().dtype != DType::bf16)
          return false;
        auto& f = shards[size_t(p.owner)];
        const std::string path = tmp + "/" + shard_name(p.owner, z.world);
        if (!f) f = std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(path));
        const io::TensorInfo* lo = f->find(p.name + ".master");
        if (!lo) return false;  // no master (master_weights: none): the weights are the value
        const size_t n = size_t(p.shape.numel());
        std::vector<uint16_t> hi(n);
        be.copy_wait_host(be.copy_to_host_async(hi.data(), p.compute.view()));
        master_join(host, hi.data(), reinterpret_cast<const int16_t*>(f->data(*lo)), n);
        return true;
      };
      finish_checkpoint(tmp, final_dir, output_dir, model, st, w, fp32_of);
    } catch (...) {
      err = current_error(final_dir);
      fs::remove_all(tmp, ec);
    }
  }
  agree(sum, err, final_dir, "complete the checkpoint (rank 0 writes the weights and the trainer state)", z.world);
  return final_dir;
}

}  // namespace

std::string save_checkpoint(const std::string& output_dir, Backend& be, const LlamaModel& model,
                            const CheckpointState& st, const CheckpointWrite& w, const RankSum& sum) {
  if (model.options().zero.sharded()) {
    if (!sum)
      STRATA_THROW(UnsupportedError,
                   fmt::format("a checkpoint with zero_stage {} over {} ranks needs every rank to save it together "
                               "(save_checkpoint's RankSum, e.g. Trainer::sum_over_ranks)",
                               model.options().zero.stage, model.options().zero.world));
    return save_sharded(output_dir, be, model, st, w, sum);
  }
  fs::create_directories(output_dir);
  remove_stale_checkpoint_temps(output_dir);
  const std::string final_dir = fmt::format("{}/checkpoint-{}", output_dir, st.step);
  const std::string tmp = fmt::format("{}/.checkpoint-{}.tmp.{}", output_dir, st.step, ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  try {
    model.sync_state();  // updates the optimizer left for the next forward land first
    be.synchronize();
    // The optimizer state first: the largest file, and nothing else reads the model meanwhile.
    write_state_file(tmp + "/" + kOptimizer, be, state_pieces(be, model));
    if (w.after_file) w.after_file(kOptimizer);
    finish_checkpoint(tmp, final_dir, output_dir, model, st, w, {});
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

CheckpointState load_checkpoint(const std::string& dir, Backend& be, LlamaModel& model, const std::string& config_json,
                                const RankSum& sum) {
  // The run must be the one that saved it, in every field the state's layout or the data order
  // depends on; the learning rate, the step count and the schedule may change.
  model.sync_state();  // a pending update must not land on the restored state
  // Paged weights are restored into the pager's host block: no slot may keep (or be loading) the old ones.
  if (WeightPager* pg = model.pager()) pg->reset();
  const std::string cfg_path = dir + "/" + kConfig;
  const json saved = read_json(cfg_path);
  const nlohmann::ordered_json now = nlohmann::ordered_json::parse(config_json);  // fields in the order written
  if (!saved.contains("must_match") || !saved["must_match"].is_object())
    throw FormatError(fmt::format("{}: no must_match object: not a strata checkpoint config", cfg_path), cfg_path,
                      "must_match");
  {
    // The optimizer state's layout: one file, or one a rank (ZeRO-1 and ZeRO-2 alike: the same owners, the same
    // shards; gradients are never saved); either way round is refused by name.
    const json& sm = saved["must_match"];
    const int saved_shards = sm.contains("zero_shards") ? sm["zero_shards"].get<int>() : 0;
    const int now_shards = now["must_match"].contains("zero_shards") ? now["must_match"]["zero_shards"].get<int>() : 0;
    if (saved_shards != now_shards)
      throw FormatError(
          fmt::format(
              "{}: field zero_shards: the checkpoint's optimizer state is {} but this run {}; resume with "
              "{} (or start a new run)",
              cfg_path,
              saved_shards > 1 ? fmt::format("sharded over {} ranks (zero_stage 1 or 2)", saved_shards)
                               : std::string("whole (zero_stage 0 or one rank)"),
              now_shards > 1 ? fmt::format("shards it over {} ranks", now_shards) : std::string("does not shard it"),
              saved_shards > 1 ? fmt::format("zero_stage: 1 or 2 on {} ranks", saved_shards)
                               : std::string("zero_stage: 0")),
          cfg_path, "zero_shards");
  }
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

  const ZeroOptions& z = model.options().zero;
  if (!z.sharded()) {
    const std::string opt_path = dir + "/" + kOptimizer;
    restore_pieces(io::SafetensorsFile::open(opt_path), opt_path, be, state_pieces(be, model));
    return st;
  }
  // ZeRO-1: this rank's own shard, then the weights of the parameters other ranks own from theirs.
  auto load = [&] {
    const std::string own = dir + "/" + shard_name(z.rank, z.world);
    restore_pieces(io::SafetensorsFile::open(own), own, be, state_pieces(be, model));
    std::vector<std::unique_ptr<io::SafetensorsFile>> shards(size_t(z.world));
    for (Parameter& p : model.params()) {
      if (!p.trainable || p.owner == z.rank || p.owner < 0) continue;
      const std::string path = dir + "/" + shard_name(p.owner, z.world);
      auto& f = shards[size_t(p.owner)];
      if (!f) f = std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(path));
      const Tensor v = p.value();
      const io::TensorInfo& t = state_tensor(*f, path, p.name, v.dtype,
                                             std::vector<int64_t>(p.shape.d.begin(), p.shape.d.begin() + p.shape.nd));
      if (v.bytes()) be.copy_wait_host(be.copy_to_device_async(v, f->data(t)));
    }
    be.synchronize();
  };
  if (!sum) return load(), st;
  std::string err;
  try {
    load();
  } catch (...) {
    err = current_error(dir);
  }
  agree(sum, err, dir, "load their shard of the checkpoint", z.world);
  return st;
}

}  // namespace strata
