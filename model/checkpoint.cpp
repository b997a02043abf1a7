#include "model/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/master_split.h"
#include "io/atomic_file.h"
#include "io/regular_file.h"
#include "io/safetensors.h"
#include "model/zero.h"

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

// The state of one trainable parameter (its weights first), appended to `out`. The names depend on the
// parameter and the recipe only, never on the rank count: that is what lets a checkpoint reshard.
void param_pieces(Backend& be, const LlamaModel& m, const Parameter& p, std::vector<Piece>& out) {
  const OptimizerState os = m.options().recipe.moments;
  const DType mdt = os == OptimizerState::fp32 ? DType::f32 : os == OptimizerState::bf16 ? DType::bf16 : DType::u8;
  {
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
}

// What this rank saves: every trainable parameter's state, or with ZeRO-1/2 over several ranks the
// parameters it owns (their weights included, for the other ranks' resume).
std::vector<Piece> state_pieces(Backend& be, const LlamaModel& m) {
  std::vector<Piece> out;
  const ZeroOptions& z = m.options().zero;
  for (const Parameter& p : m.params())
    if (p.trainable && (!z.sharded() || p.owner == z.rank)) param_pieces(be, m, p, out);
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

// Copies a checked piece in from the bytes of its tensor in a state file.
void copy_piece(Backend& be, const Piece& pc, const void* src) {
  if (!pc.bytes()) return;
  if (pc.dev.defined())
    be.copy_wait_host(be.copy_to_device_async(pc.dev, src));
  else if (pc.disk != Parameter::kDevice)
    pc.model->write_state_disk(pc.disk, src, pc.bytes(), pc.cls);
  else if (pc.host)
    std::memcpy(pc.host, src, pc.bytes());
}

// A checkpoint's optimizer state as it was saved: optimizer.safetensors, or with ZeRO-1/2 over `shards`
// ranks one file a rank, each holding the whole state of the parameters that rank owned (zero_owner over
// the saved rank count). Ownership is by whole parameter and the tensors' names do not depend on the rank
// count, so any rank count can read any layout: each parameter's state is taken from the one file that
// holds it (resharding is redistribution, never arithmetic, so the state is restored bit for bit).
// Files are mapped on first use and checked to hold their owner's parameters' state only.
class SavedState {
 public:
  SavedState(const std::string& dir, int shards, const std::string& cfg_path, const LlamaModel& m)
      : dir_(dir), cfg_path_(cfg_path), shards_(std::max(1, shards)), model_(m) {
    const std::vector<Parameter>& ps = m.params();
    std::vector<size_t> numel;
    for (size_t i = 0; i < ps.size(); ++i) {
      numel.push_back(ps[i].trainable ? size_t(ps[i].shape.numel()) : 0);
      index_.emplace(ps[i].name, i);
    }
    // The saving run's owners (every trainable parameter in the one file when unsharded; sharded, one
    // without elements has no owner and was saved nowhere).
    owner_ = zero_owner(numel, shards_);
    if (shards_ == 1)
      for (size_t i = 0; i < ps.size(); ++i) owner_[i] = ps[i].trainable ? 0 : -1;
    files_.resize(size_t(shards_));
    restored_.resize(size_t(shards_), 0);
    whole_.assign(ps.size(), false);
  }

  // Checks parameter i's `pieces` against the file that holds them (present, dtype, shape). `whole`: every
  // piece of its state (else its weights only, for a rank that does not own it).
  void check(size_t i, const std::vector<Piece>& pieces, bool whole) {
    const int f = owner_[i];
    whole_[i] = whole;
    if (f < 0) return;  // no elements: nothing saved, nothing to restore
    const io::SafetensorsFile& file = open(f);
    for (const Piece& pc : pieces) {
      state_tensor(file, path(f), pc.name, pc.dtype, pc.shape);
      restored_[size_t(f)] += !pc.mirror;
    }
  }

  // Copies checked pieces in.
  void restore(size_t i, Backend& be, const std::vector<Piece>& pieces) const {
    if (owner_[i] < 0) return;
    const io::SafetensorsFile& file = *files_[size_t(owner_[i])];
    for (const Piece& pc : pieces) copy_piece(be, pc, file.data(*file.find(pc.name)));
  }

  // Each file whose parameters are all restored whole here holds nothing but their state (a tensor
  // count: its tensors were each matched to a parameter of that file when it was opened).
  void check_complete() const {
    for (int f = 0; f < shards_; ++f) {
      if (!files_[size_t(f)]) continue;
      bool all = true;
      for (size_t i = 0; i < owner_.size(); ++i) all = all && (owner_[i] != f || whole_[i]);
      const size_t have = files_[size_t(f)]->tensors().size();
      if (all && have != restored_[size_t(f)])
        throw FormatError(
            fmt::format("{}: {} tensors, this run's state {}has {} (another model or recipe?)", path(f), have,
                        shards_ > 1 ? fmt::format("of rank {}'s parameters ", f) : "", restored_[size_t(f)]),
            path(f), "tensors");
    }
  }

 private:
  std::string path(int f) const { return dir_ + "/" + (shards_ > 1 ? shard_name(f, shards_) : kOptimizer); }

  const io::SafetensorsFile& open(int f) {
    auto& file = files_[size_t(f)];
    if (file) return *file;
    const std::string p = path(f);
    std::error_code ec;
    if (shards_ > 1 && !fs::exists(p, ec)) {
      std::string names;
      int k = 0;
      for (size_t i = 0; i < owner_.size(); ++i)
        if (owner_[i] == f && k++ < 3) names += (names.empty() ? "" : ", ") + model_.params()[i].name;
      throw FormatError(fmt::format("{}: missing: {} has zero_shards {}, so the optimizer state is in {} files "
                                    "optimizer.rank-<r>-of-{}.safetensors, and this one holds rank {}'s {} "
                                    "parameters ({}{})",
                                    p, cfg_path_, shards_, shards_, shards_, f, k, names, k > 3 ? ", ..." : ""),
                        p, "zero_shards");
    }
    file = std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(p));
    // Every tensor is the state of a trainable parameter this file's rank owned.
    for (const io::TensorInfo& t : file->tensors()) {
      const size_t i = param_of(t.name);
      if (i == SIZE_MAX)
        throw FormatError(fmt::format("{}: tensor {} is no trainable parameter's state in this model (a checkpoint "
                                      "of another model or recipe?)",
                                      p, t.name),
                          p, t.name);
      if (owner_[i] != f)
        throw FormatError(fmt::format("{}: tensor {} is the state of {}, which a run over {} ranks keeps in {} (the "
                                      "shards are not this model's)",
                                      p, t.name, model_.params()[i].name, shards_, path(owner_[i])),
                          p, t.name);
    }
    return *file;
  }

  // The trainable parameter a state tensor belongs to (`<name>`, `<name>.master`, `.m`, `.v`, `.m_scale`,
  // `.v_scale`), or SIZE_MAX.
  size_t param_of(const std::string& t) const {
    for (const char* tail : {"", ".master", ".m", ".v", ".m_scale", ".v_scale"}) {
      const size_t n = std::strlen(tail);
      if (t.size() <= n || t.compare(t.size() - n, n, tail) != 0) continue;
      auto it = index_.find(t.substr(0, t.size() - n));
      if (it != index_.end() && model_.params()[it->second].trainable) return it->second;
    }
    return SIZE_MAX;
  }

  std::string dir_, cfg_path_;
  int shards_;
  const LlamaModel& model_;
  std::map<std::string, size_t> index_;  // parameter name -> index
  std::vector<int> owner_;               // by parameter: the file (saved rank) holding its state; -1 none
  std::vector<std::unique_ptr<io::SafetensorsFile>> files_;
  std::vector<size_t> restored_;  // by file: saved tensors restored from it
  std::vector<bool> whole_;       // by parameter: its whole state was restored here
};

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

std::string checkpoint_config_json(const TrainConfig& c, const io::LlamaConfig& mc, long data_rows, int zero_shards,
                                   int data_parallel_ranks) {
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
                                // With micro_batch_size, the rows every rank draws together each micro-step.
                                {"data_parallel_ranks", data_parallel_ranks},
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

// ZeRO-3: the fp32 weights of a layer matrix rank 0 does not hold, from its owner's shard (`<name>`: fp32, or bf16
// with its low half `<name>.master` where there is one); `f` is that shard, opened at the first use.
bool sharded_fp32(const Parameter& p, float* host, const std::string& path, std::unique_ptr<io::SafetensorsFile>& f) {
  if (!f) f = std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(path));
  const size_t n = size_t(p.shape.numel());
  const io::TensorInfo* w = f->find(p.name);
  if (!w || w->bytes != n * dtype_size(w->dtype))
    throw FormatError(
        fmt::format("{}: no weights {} of {} elements (zero_stage 3: its owner's shard)", path, p.name, n), path,
        p.name);
  const io::TensorInfo* lo = f->find(p.name + ".master");
  if (lo && w->dtype == DType::bf16)
    master_join(host, reinterpret_cast<const uint16_t*>(f->data(*w)), reinterpret_cast<const int16_t*>(f->data(*lo)),
                n);
  else
    convert_to_f32(host, f->data(*w), w->dtype, n);
  return true;
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
        if (p.gathered())
          return sharded_fp32(p, host, tmp + "/" + shard_name(p.owner, z.world), shards[size_t(p.owner)]);
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

namespace {
// The rows every data-parallel rank draws together each micro-step, from a train_config.json (0: not recorded,
// a checkpoint from before data_parallel_ranks was).
template <class J>
long micro_step_rows(const J& j) {
  if (!j.contains("config") || !j["config"].contains("data_parallel_ranks") ||
      !j["must_match"].contains("micro_batch_size"))
    return 0;
  const auto& ranks = j["config"]["data_parallel_ranks"];
  const auto& batch = j["must_match"]["micro_batch_size"];
  if (!ranks.is_number_integer() || !batch.is_number_integer()) return 0;
  return ranks.template get<long>() * batch.template get<long>();
}
}  // namespace

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
  // The optimizer state's layout: one file, or one a rank (ZeRO-1 and ZeRO-2 alike: the same owners, the same
  // shards; gradients are never saved). Any layout resumes on any rank count and stage (SavedState).
  int saved_shards = 0;
  if (const json& sm = saved["must_match"]; sm.contains("zero_shards")) {
    if (!sm["zero_shards"].is_number_integer() || sm["zero_shards"].get<int>() < 2)
      throw FormatError(fmt::format("{}: field must_match.zero_shards is {}, expected a rank count of 2 or more "
                                    "(an unsharded checkpoint has no such field)",
                                    cfg_path, sm["zero_shards"].dump()),
                        cfg_path, "zero_shards");
    saved_shards = sm["zero_shards"].get<int>();
  }
  for (const auto& [k, v] : now["must_match"].items()) {
    if (k == "zero_shards") continue;  // the layout, not the training: any is read (above)
    json s = saved["must_match"];
    // Checkpoints from before vocabulary padding held the unpadded rows.
    if (k == "padded_vocab_size" && !s.contains(k) && s.contains("model.vocab_size")) s[k] = s["model.vocab_size"];
    if (!s.contains(k)) throw FormatError(fmt::format("{}: field must_match.{} is missing", cfg_path, k), cfg_path, k);
    if (s[k] != json::parse(v.dump())) {  // compared as plain JSON: key order inside a value does not matter
      // Another rank count with the same rows a micro-step (micro_batch_size x data-parallel ranks): every rank
      // draws the same rows, so the data order and the global batch are the checkpoint's.
      const long saved_rows = micro_step_rows(saved), now_rows = micro_step_rows(now);
      if (k == "micro_batch_size" && saved_rows > 0 && saved_rows == now_rows) continue;
      const std::string how = k == "micro_batch_size" && saved_rows > 0
                                  ? fmt::format(
                                        "; resume with the checkpoint's setting, or on another number of "
                                        "ranks with a micro_batch_size that keeps micro_batch_size x "
                                        "data-parallel ranks at its {} rows ({} here)",
                                        saved_rows, now_rows)
                              : k == "padded_vocab_size"
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

  // Every parameter this rank holds the state of (all of them, unsharded) gets its whole state; with ZeRO-1/2
  // the others (owned by other ranks now) their weights only. Each from the file that holds it.
  const ZeroOptions& z = model.options().zero;
  auto load = [&] {
    SavedState saved_state(dir, saved_shards, cfg_path, model);
    be.synchronize();  // nothing in flight writes the state it replaces
    const std::vector<Parameter>& ps = model.params();
    std::vector<std::vector<Piece>> pieces(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      const Parameter& p = ps[i];
      if (!p.trainable) continue;
      const bool whole = !z.sharded() || p.owner == z.rank;
      if (whole)
        param_pieces(be, model, p, pieces[i]);
      else if (!p.gathered())  // ZeRO-3: another rank's layer matrix has nothing here
        pieces[i].push_back({p.name, p.value().dtype,
                             std::vector<int64_t>(p.shape.d.begin(), p.shape.d.begin() + p.shape.nd), p.value(),
                             nullptr});
      saved_state.check(i, pieces[i], whole);
    }
    saved_state.check_complete();  // every check before any copy: a refused checkpoint changes nothing
    for (size_t i = 0; i < ps.size(); ++i) saved_state.restore(i, be, pieces[i]);
    be.synchronize();
  };
  if (!z.sharded() || !sum) return load(), st;  // unsharded, every rank reads the same files alike
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
