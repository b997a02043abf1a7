// Saving training checkpoints (model/run/checkpoint.h): the optimizer state, then the weights and the rest into a
// hidden temp directory renamed into place when complete (ZeRO-1/2/3: every rank its shard, rank 0 the rest),
// train_config.json, and the output directory's checkpoints (listing, pruning, stale temps, resume_from_checkpoint).
#include "model/run/checkpoint.h"

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
#include "engine/json_limits.h"
#include "engine/master_split.h"
#include "engine/switches.h"
#include "io/atomic_file.h"
#include "io/regular_file.h"
#include "io/safetensors.h"
#include "model/data/chat_dataset.h"
#include "model/data/chat_template.h"
#include "model/llama/zero.h"
#include "model/run/checkpoint_pieces.h"

namespace strata {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace checkpoint_detail;

namespace {

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

// Removes a checkpoint directory strata wrote (a temp, or an older copy): trainer_state.json first, so a
// removal killed half-way leaves a directory that no longer looks complete (and is never restored).
void remove_copy(const fs::path& dir) noexcept {
  std::error_code ec;
  fs::remove(dir / kState, ec);
  fs::remove_all(dir, ec);
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
  for (const DatasetSpec& d : c.datasets) {
    nlohmann::ordered_json e = {{"path", d.path}, {"type", d.type}, {"field", d.field}};
    if (d.type == "chat_template") {  // the keys that decide the rows' targets
      const ChatTemplateOptions& o = d.chat;
      nlohmann::ordered_json roles = nlohmann::ordered_json::object();
      for (const auto& [to, from] : o.roles) roles[to] = from;
      e["chat"] = {{"chat_template", o.chat_template},
                   {"field_messages", o.field_messages},
                   {"message_property_mappings", {{"role", o.role_key}, {"content", o.content_key}}},
                   {"roles", roles},
                   {"roles_to_train", o.roles_to_train},
                   {"train_on_eos", o.train_on_eos}};
    }
    datasets.push_back(std::move(e));
  }
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

std::string trained_chat_template(const TrainConfig& c, const std::string& tokenizer_dir) {
  for (const DatasetSpec& d : c.datasets)
    if (d.type == "chat_template") return load_chat_format(d.chat, tokenizer_dir).source;
  for (const DatasetSpec& d : c.datasets)
    if (d.type == "chat") {  // strata's own chat format: saved as a template, not the tokenizer's (which it is not)
      const text::Tokenizer tok = text::Tokenizer::load(tokenizer_dir);
      const std::vector<int32_t> special = tok.encode("", true);
      const bool bos = !special.empty() && special.front() == tok.bos_id();
      const std::string eos = tok.eos_id() >= 0 ? std::string(tok.id_to_token(tok.eos_id())) : "";
      return chat_jinja(chat_template_for(tok), bos, !eos.empty(), eos);
    }
  return {};
}

int copy_tokenizer_files(const std::string& from, const std::string& to, const std::string& chat_template) {
  int n = 0;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                        "chat_template.jinja"}) {
    const std::string src = from + "/" + f;
    std::error_code ec;
    if (!fs::is_regular_file(src, ec)) continue;
    io::write_file_atomic(to + "/" + f, io::read_regular_file(src, "a tokenizer file", size_t(1) << 30));
    ++n;
  }
  if (!chat_template.empty()) {
    // The template the model was trained with, where transformers reads it: chat_template.jinja
    // (transformers >= 4.43 prefers it) and tokenizer_config.json's chat_template (older ones).
    io::write_file_atomic(to + "/chat_template.jinja", chat_template);
    const std::string cfg_path = to + "/tokenizer_config.json";
    nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
    std::error_code ec;
    if (fs::is_regular_file(cfg_path, ec))
      cfg = nlohmann::ordered_json::parse(io::read_regular_file(cfg_path, "a tokenizer file", size_t(1) << 30));
    cfg["chat_template"] = chat_template;
    io::write_file_atomic(cfg_path, cfg.dump(2, ' ', false) + "\n");
  }
  return n;
}

bool is_strata_checkpoint(const std::string& dir) noexcept {
  std::error_code ec;
  if (fs::is_symlink(dir, ec) || !fs::is_directory(dir, ec) || !fs::is_regular_file(dir + "/" + kState, ec))
    return false;
  try {
    const std::string text = io::read_regular_file(dir + "/" + kState, "trainer_state.json", size_t(1) << 20);
    if (json_nesting_error(text)) return false;
    const json j = json::parse(text);
    return j.is_object() && j.value("format", "") == "strata-checkpoint";
  } catch (...) {
    return false;
  }
}

void check_checkpoint_path_free(const std::string& final_dir) {
  std::error_code ec;
  const fs::file_status s = fs::symlink_status(final_dir, ec);
  if (!fs::exists(s) || is_strata_checkpoint(final_dir)) return;
  throw IoError(fmt::format("{}: the checkpoint's path is taken by a {} that strata did not write (no "
                            "trainer_state.json of format strata-checkpoint in it); strata never replaces it: move "
                            "it away or choose another output_dir",
                            final_dir,
                            fs::is_symlink(s)        ? "symbolic link"
                            : fs::is_directory(s)    ? "directory"
                            : fs::is_regular_file(s) ? "regular file"
                                                     : "special file"),
                final_dir);
}

namespace {

// The step in ".checkpoint-<step>.tmp.<pid>" or ".checkpoint-<step>.old.tmp.<pid>", or -1.
int temp_step(const std::string& name) {
  if (!name.starts_with(".checkpoint-")) return -1;
  const size_t dot = name.find('.', 12);
  const std::string digits = name.substr(12, dot == std::string::npos ? std::string::npos : dot - 12);
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoi(digits);
}

// The dead writers' temp directories in `output_dir`, the new copies (".tmp.") before the old (".old.tmp.").
std::vector<fs::path> dead_temps(const std::string& output_dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(output_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t pid = temp_owner(name);
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    out.push_back(it->path());
  }
  std::stable_partition(out.begin(), out.end(),
                        [](const fs::path& p) { return p.filename().string().find(".old.tmp.") == std::string::npos; });
  return out;
}

}  // namespace

size_t restore_killed_checkpoints(const std::string& output_dir) noexcept {
  size_t restored = 0;
  for (const fs::path& t : dead_temps(output_dir)) {
    const int step = temp_step(t.filename().string());
    if (step < 0 || !is_strata_checkpoint(t.string())) continue;
    const std::string final_dir = fmt::format("{}/checkpoint-{}", output_dir, step);
    std::error_code ec;
    if (fs::exists(fs::symlink_status(final_dir, ec))) continue;
    io::kill_point();
    fs::rename(t, final_dir, ec);
    if (ec) continue;  // another rank restored it first, or the directory is read-only: leave it
    fsync_dir(output_dir);
    ++restored;
    fmt::print(stderr, "strata: restored {} from {}, a complete copy a killed save left\n", final_dir, t.string());
  }
  return restored;
}

size_t remove_stale_checkpoint_temps(const std::string& output_dir) noexcept {
  restore_killed_checkpoints(output_dir);
  size_t removed = 0;
  for (const fs::path& t : dead_temps(output_dir)) {
    const int step = temp_step(t.filename().string());
    const std::string final_dir = fmt::format("{}/checkpoint-{}", output_dir, step);
    const bool complete = is_strata_checkpoint(t.string());
    // A complete copy goes only when checkpoint-<step> is one too (it is then an older copy of that step).
    if (complete && (step < 0 || !is_strata_checkpoint(final_dir))) continue;
    std::error_code rm;
    io::kill_point();
    fs::remove(t / kState, rm);
    fs::remove_all(t, rm);
    if (!rm) {
      ++removed;
      fmt::print(stderr, "strata: removed {}, {} left by process {} (no longer running)\n", t.string(),
                 complete ? fmt::format("an older copy of {}", final_dir) : "a partial checkpoint",
                 temp_owner(t.filename().string()));
    }
  }
  return removed;
}

namespace {

// Publishes the complete temp directory `tmp` as `final_dir`. A checkpoint of the same step already there
// (a run resumed from an earlier one saves it again) is exchanged with it in one atomic rename
// (renameat2 RENAME_EXCHANGE), so checkpoint-<step> is a complete copy at every instant; the old copy,
// now at the temp's name, is then removed. Where the file system cannot exchange, the old copy moves
// aside first, and a kill between the two renames leaves both copies complete under temp names, which
// restore_killed_checkpoints puts back.
void publish_checkpoint(const std::string& tmp, const std::string& final_dir, const std::string& output_dir, int step) {
  check_checkpoint_path_free(final_dir);
  io::kill_point();
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) == 0) {
    fsync_dir(output_dir);
    return;
  }
  int e = errno;
  const bool exchange = !switches().test_rename_fallback;  // tests the path of other file systems
  if (e == EEXIST && exchange) {
    io::kill_point();
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      fsync_dir(output_dir);
      io::kill_point();
      remove_copy(tmp);  // the old copy
      return;
    }
    e = errno;
  }
  if (e != EEXIST && e != EINVAL && e != ENOSYS && e != ENOTSUP)
    throw IoError(fmt::format("{}: cannot rename {} into place: {}", final_dir, tmp, std::strerror(e)), final_dir);
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    const std::string old = fmt::format("{}/.checkpoint-{}.old.tmp.{}", output_dir, step, ::getpid());
    fs::remove_all(old, ec);
    io::kill_point();
    fs::rename(final_dir, old);
    io::kill_point();
    fs::rename(tmp, final_dir);
    fsync_dir(output_dir);
    io::kill_point();
    remove_copy(old);
  } else {
    io::kill_point();
    fs::rename(tmp, final_dir);
  }
  fsync_dir(output_dir);
}

}  // namespace

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
  if (!tok_dir.empty() && copy_tokenizer_files(tok_dir, tmp, w.chat_template)) done("tokenizer files");
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
  publish_checkpoint(tmp, final_dir, output_dir, st.step);
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
      check_checkpoint_path_free(final_dir);
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
    if (lead) remove_copy(tmp);
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
      remove_copy(tmp);
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
  check_checkpoint_path_free(final_dir);
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
    remove_copy(tmp);
    throw IoError(fmt::format("{}: cannot write the checkpoint: {}", final_dir, e.what()), final_dir);
  } catch (...) {
    remove_copy(tmp);
    throw;
  }
  return final_dir;
}

namespace {
std::vector<CheckpointEntry> checkpoint_entries(const std::string& output_dir, bool directories_only) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (fs::directory_iterator it(output_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e2;
    if (!name.starts_with("checkpoint-") || (directories_only && !it->is_directory(e2))) continue;
    const std::string digits = name.substr(11);
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    out.push_back({std::stoi(digits), it->path().string()});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}
}  // namespace

std::vector<CheckpointEntry> list_checkpoints(const std::string& output_dir) {
  return checkpoint_entries(output_dir, true);
}

std::vector<CheckpointEntry> list_checkpoint_names(const std::string& output_dir) {
  return checkpoint_entries(output_dir, false);
}

std::vector<std::string> prune_checkpoints(const std::string& output_dir, int keep) {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  std::vector<CheckpointEntry> all = list_checkpoints(output_dir);
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) {
    if (!is_strata_checkpoint(all[i].path)) continue;  // not ours: never removed
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
    restore_killed_checkpoints(output_dir);  // a save killed between its renames left the newest aside
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

}  // namespace strata
