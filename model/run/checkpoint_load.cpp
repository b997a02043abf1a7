// Loading a training checkpoint (model/run/checkpoint.h): train_config.json checked against this run, then
// every trainable parameter's state restored bit for bit from whichever file of the saved layout holds it.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/json_limits.h"
#include "io/regular_file.h"
#include "io/safetensors.h"
#include "model/llama/zero.h"
#include "model/run/checkpoint.h"
#include "model/run/checkpoint_pieces.h"

namespace strata {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_detail;

namespace {

json read_json(const std::string& path) {
  const std::string text = io::read_regular_file(path, "a checkpoint file", size_t(64) << 20);
  if (const auto deep = json_nesting_error(text)) throw FormatError(fmt::format("{}: {}", path, *deep), path, "");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(fmt::format("{}: not valid JSON: {}", path, e.what()), path, "");
  }
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

// A state tensor's values, as a resumed run would train from them: every float finite, and a second moment
// (`.v`) or a block scale (`_scale`) non-negative. Checked before anything is copied in, like a
// checkpoint's weights; 8-bit codes and split masters' low halves are integers, any value valid.
void check_values(const io::SafetensorsFile& f, const std::string& path, const io::TensorInfo& t) {
  if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16) return;
  const bool second_moment = t.name.ends_with(".v") || t.name.ends_with("_scale");
  const size_t es = dtype_size(t.dtype), n = t.bytes / es;
  constexpr size_t kChunk = size_t(1) << 16;
  std::vector<std::byte> raw;  // the data section has no alignment guarantee: converted from a copy
  std::vector<float> vals;
  for (size_t at = 0; at < n; at += kChunk) {
    const size_t k = std::min(kChunk, n - at);
    raw.assign(f.data(t) + at * es, f.data(t) + (at + k) * es);
    vals.resize(k);
    convert_to_f32(vals.data(), raw.data(), t.dtype, k);
    for (size_t i = 0; i < k; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &vals[i], 4);
      const bool finite = (bits & 0x7f800000u) != 0x7f800000u;  // independent of -ffinite-math-only
      if (finite && !(second_moment && vals[i] < 0)) continue;
      throw FormatError(
          fmt::format("{}: tensor '{}' holds {} at index {} of {}: {} (the optimizer state is corrupt)", path, t.name,
                      vals[i], at + i, n,
                      !finite                      ? "a non-finite value"
                      : t.name.ends_with("_scale") ? "a negative block scale of an 8-bit moment"
                                                   : "a negative Adam second moment (it is a mean of squares, >= 0)"),
          path, t.name);
    }
  }
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
      const io::TensorInfo& t = state_tensor(file, path(f), pc.name, pc.dtype, pc.shape);
      if (!pc.mirror) check_values(file, path(f), t);
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

// The step of a directory named checkpoint-<n>, or -1.
long step_of_name(const std::string& dir) {
  std::string name = fs::path(dir).filename().string();
  if (name.empty()) name = fs::path(dir).parent_path().filename().string();  // "checkpoint-4/"
  if (!name.starts_with("checkpoint-")) return -1;
  const std::string digits = name.substr(11);
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stol(digits);
}

}  // namespace

CheckpointState read_trainer_state(const std::string& dir) {
  const std::string st_path = dir + "/" + kState;
  const json j = read_json(st_path);
  // Each counter is range-checked as JSON before it is converted (2^32 + 2 must not become 2).
  auto integer = [&](const json& v, const char* field, long double hi) -> long double {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() ? (long double)(v.get<uint64_t>()) > hi
                                : v.get<int64_t>() < 0 || (long double)(v.get<int64_t>()) > hi))
      throw FormatError(
          fmt::format("{}: field {} is {}, expected an integer from 0 to {:.0f}", st_path, field, v.dump(), double(hi)),
          st_path, field);
    return v.is_number_unsigned() ? (long double)v.get<uint64_t>() : (long double)v.get<int64_t>();
  };
  auto field = [&](const json& obj, const char* key, const char* name) -> const json& {
    if (!obj.is_object() || !obj.contains(key))
      throw FormatError(fmt::format("{}: field {} is missing", st_path, name), st_path, name);
    return obj[key];
  };
  constexpr long double kIntMax = 2147483647.0L, kRowsMax = 9.0e15L, kU64Max = 18446744073709551615.0L;
  CheckpointState st;
  st.step = int(integer(field(j, "global_step", "global_step"), "global_step", kIntMax));
  st.total_steps = j.contains("total_steps") ? int(integer(j["total_steps"], "total_steps", kIntMax)) : 0;
  if (j.contains("loss")) {
    if (!j["loss"].is_number())
      throw FormatError(fmt::format("{}: field loss is {}, expected a number", st_path, j["loss"].dump()), st_path,
                        "loss");
    st.loss = j["loss"].get<float>();
  }
  const json& data = field(j, "data", "data");
  st.data.epoch = long(integer(field(data, "epoch", "data.epoch"), "data.epoch", kIntMax));
  st.data.index = long(integer(field(data, "index", "data.index"), "data.index", kRowsMax));
  st.data.epoch_rng = uint64_t(integer(field(data, "epoch_rng", "data.epoch_rng"), "data.epoch_rng", kU64Max));
  st.trainer_rng = uint64_t(integer(field(j, "trainer_rng", "trainer_rng"), "trainer_rng", kU64Max));
  if (j["data"]["epoch_rng"].is_number_unsigned()) st.data.epoch_rng = j["data"]["epoch_rng"].get<uint64_t>();
  if (j["trainer_rng"].is_number_unsigned()) st.trainer_rng = j["trainer_rng"].get<uint64_t>();
  if (const long named = step_of_name(dir); named >= 0 && named != st.step)
    throw FormatError(
        fmt::format("{}: field global_step is {}, but the directory is named checkpoint-{}", st_path, st.step, named),
        st_path, "global_step");
  return st;
}

void check_data_position(const std::string& dir, const CheckpointState& st, long train_rows, long rows_per_step) {
  const std::string st_path = dir + "/" + kState;
  if (train_rows <= 0 || rows_per_step <= 0) return;
  if (st.data.index > train_rows)
    throw FormatError(fmt::format("{}: field data.index is {}, past the {} training rows of an epoch", st_path,
                                  st.data.index, train_rows),
                      st_path, "data.index");
  const __int128 drawn = __int128(st.data.epoch) * train_rows + st.data.index;
  const __int128 want = __int128(st.step) * rows_per_step;
  if (drawn != want)
    throw FormatError(
        fmt::format("{}: fields data.epoch {} and data.index {} say {} rows were drawn ({} an epoch), but "
                    "global_step {} at {} rows a step says {}: the trainer state is inconsistent",
                    st_path, st.data.epoch, st.data.index, (long double)drawn, train_rows, st.step, rows_per_step,
                    (long double)want),
        st_path, drawn / train_rows != st.data.epoch ? "data.epoch" : "data.index");
}

CheckpointState load_checkpoint(const std::string& dir, Backend& be, LlamaModel& model, const std::string& config_json,
                                const RankSum& sum, const std::function<void(const CheckpointState&)>& check_state) {
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
  const CheckpointState st = read_trainer_state(dir);
  if (check_state) check_state(st);
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
