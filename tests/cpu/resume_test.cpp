// Checkpoints and exact resume on the cpu backend (model/run/checkpoint.h, model/run/train_loop.h): a run
// stopped after step k and resumed gives the same losses, held-out losses and every weight, master
// and moment byte as the run that never stopped, with the state on the device, on the host tier and
// in 8-bit; save_total_limit keeps the newest; a checkpoint of another shape or config, or a
// damaged one, is refused naming the file and field; a save killed between files leaves the
// previous checkpoints intact and no partial checkpoint; strata-train saves on SIGTERM and
// --resume auto continues to the same losses.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/run/checkpoint.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/spawn_util.h"
#include "tests/cpu/tool_runner.h"
#include "tests/cpu/train_loop_util.h"

using namespace strata;
using namespace strata::test_util;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A directory of this process's own (two test runs may share TempDir), removed first and at exit.
std::string fresh_dir(const std::string& name, pid_t pid = ::getpid()) {
  const std::string d = fmt::format("{}strata_resume_{}_{}", ::testing::TempDir(), name, pid);
  fs::remove_all(d);
  struct Cleanup {
    std::vector<std::string> dirs;
    ~Cleanup() {
      std::error_code ec;
      for (const std::string& x : dirs) fs::remove_all(x, ec);
    }
  };
  static Cleanup cleanup;
  cleanup.dirs.push_back(d);
  return d;
}

// 400 tokens of rows of 16: 24 rows, 4 held out, 20 trained on: 5 steps of 2 x 2 rows an epoch,
// so 10 steps are two epochs and a stop after step 7 lands inside the second.
TrainConfig config(const std::string& out) {
  TrainConfig c;
  c.seq = 16;
  c.batch = 2;
  c.grad_accum = 2;
  c.steps = 10;
  c.steps_given = true;
  c.lr = 1e-2f;
  c.lr_scheduler = LrScheduler::cosine;
  c.warmup_steps = 2;
  c.weight_decay = 0.1f;
  c.max_grad_norm = 0.5f;  // clipping active
  c.val_set_size = 0.15f;
  c.eval_steps = 3;
  c.output_dir = out;
  return c;
}

struct Outcome {
  LoopResult res;
  std::vector<std::vector<std::byte>> state;
};

// Trains; stops (as SIGTERM would) after `stop_after` steps of this run when non-zero.
Outcome go(const TrainConfig& cfg, int stop_after = 0, CheckpointWrite w = {}) {
  LoopOptions lo = quiet();
  int steps = 0;
  lo.on_step = [&](const StepStats&) { ++steps; };
  lo.stop_requested = [&] { return stop_after && steps == stop_after ? SIGTERM : 0; };
  lo.checkpoint = std::move(w);
  Rig r = make_rig(cfg, lo);
  Outcome out;
  out.res = r.loop->run();
  out.state = state_bytes(*r.model);
  return out;
}

// One value (the fourth) of the first f32 tensor of `dir`/optimizer.safetensors whose name ends in `suffix`
// made `value`; returns the tensor's name.
std::string poke(const std::string& dir, const std::string& suffix, float value) {
  const std::string path = dir + "/optimizer.safetensors";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), std::streamsize(n));
  const json h = json::parse(header);
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__" || !name.ends_with(suffix) || t["dtype"] != "F32") continue;
    f.seekp(std::streamoff(8 + n + t["data_offsets"][0].get<uint64_t>() + 4 * 3));
    f.write(reinterpret_cast<const char*>(&value), 4);
    return name;
  }
  ADD_FAILURE() << "no F32 tensor *" << suffix << " in " << path;
  return std::string();
}

struct Variant {
  const char* name;
  const char* state_offloading;
  OptimizerState moments;
  int lora_rank;
};

}  // namespace

TEST(Resume, StoppedAndResumedRunMatchesTheUninterruptedOneBitForBit) {
  for (const Variant& v : {Variant{"keep-everything", "none", OptimizerState::fp32, 0},
                           Variant{"host-tier state", "all", OptimizerState::fp32, 0},
                           Variant{"8-bit moments", "none", OptimizerState::q8, 0},
                           Variant{"8-bit moments on the host tier", "optimizer", OptimizerState::q8, 0},
                           Variant{"LoRA", "none", OptimizerState::fp32, 4}}) {
    SCOPED_TRACE(v.name);
    TrainConfig cfg = config(fresh_dir("whole"));
    cfg.plan.set_state_offloading(v.state_offloading, "test");
    cfg.recipe.moments = v.moments;
    cfg.lora.rank = v.lora_rank;
    const Outcome whole = go(cfg);
    ASSERT_EQ(whole.res.losses.size(), 10u);
    ASSERT_EQ(whole.res.eval_loss.size(), 4u);  // steps 3, 6, 9 and the end

    cfg.output_dir = fresh_dir("stopped");
    const Outcome stopped = go(cfg, 7);
    EXPECT_EQ(stopped.res.stopped_by, SIGTERM);
    EXPECT_EQ(stopped.res.steps_done, 7);
    EXPECT_EQ(stopped.res.last_checkpoint, cfg.output_dir + "/checkpoint-7");
    cfg.resume_from_checkpoint = "auto";
    const Outcome resumed = go(cfg);
    EXPECT_EQ(resumed.res.resumed_from, cfg.output_dir + "/checkpoint-7");
    EXPECT_EQ(resumed.res.first_step, 8);
    ASSERT_EQ(resumed.res.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.res.losses[i], whole.res.losses[7 + i]) << "step " << 8 + i;
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(stopped.res.losses[i], whole.res.losses[i]) << "step " << 1 + i;
    ASSERT_EQ(resumed.res.eval_loss.size(), 2u);
    EXPECT_EQ(resumed.res.eval_loss[0], whole.res.eval_loss[2]);
    EXPECT_EQ(resumed.res.eval_loss[1], whole.res.eval_loss[3]);
    ASSERT_EQ(resumed.state.size(), whole.state.size());
    for (size_t i = 0; i < whole.state.size(); ++i)
      EXPECT_TRUE(resumed.state[i] == whole.state[i]) << "state array " << i;
    // The metrics file holds each step once: the resumed run dropped nothing and repeated nothing.
    std::ifstream m(cfg.output_dir + "/metrics.jsonl");
    std::vector<int> steps;
    for (std::string line; std::getline(m, line);) {
      const json j = json::parse(line);
      if (j.contains("loss")) steps.push_back(j["step"].get<int>());
    }
    EXPECT_EQ(steps, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  }
}

// The checkpoint holds the state's bytes, not where they lived: saved from the device, resumed
// into the host tier, the run still ends bit-identical. (Level master: moments and masters on the
// host, their update deferred; the gradients stay on the device, where micro-batches accumulate as
// in the device run: host-tier gradients sum micro-batches on the host, in another rounding.)
TEST(Resume, ACheckpointResumesUnderAnotherStateTier) {
  TrainConfig host = config(fresh_dir("tier_whole"));
  host.plan.set_state_offloading("master", "test");
  const Outcome whole = go(host);
  TrainConfig cfg = config(fresh_dir("tier_stopped"));
  go(cfg, 4);
  host.output_dir = cfg.output_dir;
  host.resume_from_checkpoint = cfg.output_dir + "/checkpoint-4";
  const Outcome resumed = go(host);
  ASSERT_EQ(resumed.res.losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(resumed.res.losses[i], whole.res.losses[4 + i]);
  EXPECT_TRUE(resumed.state == whole.state);
}

TEST(Resume, SaveTotalLimitKeepsTheNewestCheckpoints) {
  TrainConfig cfg = config(fresh_dir("limit"));
  cfg.save_steps = 2;
  cfg.save_total_limit = 2;
  go(cfg);
  std::vector<int> steps;
  for (const CheckpointEntry& e : list_checkpoints(cfg.output_dir)) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int>{8, 10}));
  EXPECT_EQ(resolve_checkpoint("auto", cfg.output_dir), cfg.output_dir + "/checkpoint-10");
  for (const char* f :
       {"model.safetensors", "config.json", "optimizer.safetensors", "train_config.json", "trainer_state.json"})
    EXPECT_TRUE(fs::is_regular_file(cfg.output_dir + "/checkpoint-10/" + f)) << f;
  cfg.save_total_limit = 0;  // 0 keeps every one
  cfg.output_dir = fresh_dir("nolimit");
  go(cfg);
  EXPECT_EQ(list_checkpoints(cfg.output_dir).size(), 5u);
}

TEST(Resume, AnotherShapeOrConfigOrADamagedCheckpointIsRefusedNamingTheFile) {
  TrainConfig cfg = config(fresh_dir("refused"));
  go(cfg, 3);
  const std::string ck = cfg.output_dir + "/checkpoint-3";
  const std::string tc = ck + "/train_config.json", opt = ck + "/optimizer.safetensors";
  cfg.resume_from_checkpoint = ck;
  auto refused = [&](const TrainConfig& c, io::LlamaConfig mc = tiny_config()) {
    return catch_as<FormatError>([&] {
      LoopOptions lo = quiet();
      Rig r = make_rig(c, lo, 400, mc);
      r.loop->run();
    });
  };
  {
    TrainConfig c = cfg;
    c.seq = 8;
    auto e = refused(c);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->file, tc);
    EXPECT_EQ(e->field, "sequence_len");
    EXPECT_NE(std::string(e->what()).find(tc), std::string::npos) << e->what();
  }
  {
    io::LlamaConfig other = tiny_config();
    other.intermediate_size = 64;
    auto e = refused(cfg, other);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->field, "model.intermediate_size") << e->what();
  }
  {
    TrainConfig c = cfg;
    c.recipe.moments = OptimizerState::q8;
    auto e = refused(c);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->field, "optimizer_state") << e->what();
  }
  {
    // A config that claims 8-bit moments over fp32 ones: the tensors' dtypes give it away.
    json j = json::parse(std::ifstream(tc));
    j["must_match"]["optimizer_state"] = "8bit";
    std::ofstream(tc) << j.dump(2);
    TrainConfig c = cfg;
    c.recipe.moments = OptimizerState::q8;
    auto e = refused(c);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->file, opt);
    EXPECT_TRUE(e->field.ends_with(".m")) << e->field;
    j["must_match"]["optimizer_state"] = "fp32";
    std::ofstream(tc) << j.dump(2);
  }
  {
    // A truncated optimizer.safetensors.
    const auto full = fs::file_size(opt);
    fs::resize_file(opt, full / 2);
    try {
      LoopOptions lo = quiet();
      Rig r = make_rig(cfg, lo);
      r.loop->run();
      ADD_FAILURE() << "a truncated optimizer.safetensors was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(opt), std::string::npos) << e.what();
    }
  }
  {
    TrainConfig c = cfg;
    c.resume_from_checkpoint = cfg.output_dir;  // the output dir, not a checkpoint
    auto e = catch_as<ConfigError>([&] {
      Rig r = make_rig(c);
      r.loop->run();
    });
    ASSERT_TRUE(e);
    EXPECT_NE(std::string(e->what()).find("trainer_state.json"), std::string::npos) << e->what();
  }
  EXPECT_TRUE(fs::is_regular_file(ck + "/trainer_state.json")) << "a refused resume must not touch the checkpoint";
}

// A corrupt value is refused before anything is copied in, and the refused resume leaves the loop unbegun: a
// second try refuses it again instead of training from step 0 as if no checkpoint had been asked for.
TEST(Resume, ACheckpointRefusedForAValueIsRefusedAgainNotTrainedFrom) {
  TrainConfig cfg = config(fresh_dir("value_refused"));
  go(cfg, 3);
  const std::string ck = cfg.output_dir + "/checkpoint-3", opt = ck + "/optimizer.safetensors";
  const std::string poked = poke(ck, ".v", -1.0f);  // a negative second moment
  ASSERT_FALSE(poked.empty()) << "no F32 second moment in " << opt;
  cfg.resume_from_checkpoint = ck;
  LoopOptions lo = quiet();
  int steps = 0;
  lo.on_step = [&](const StepStats&) { ++steps; };
  Rig r = make_rig(cfg, lo);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto e = catch_as<FormatError>([&] { r.loop->run(); });
    ASSERT_TRUE(e) << "attempt " << attempt << " was not refused";
    EXPECT_EQ(e->file, opt);
    EXPECT_EQ(e->field, poked);
    EXPECT_NE(std::string(e->what()).find("a negative Adam second moment"), std::string::npos) << e->what();
  }
  EXPECT_EQ(steps, 0) << "trained from a refused checkpoint";
}

// A save killed (SIGKILL) between two files of checkpoint-4: checkpoint-2 stays whole and is the
// one `auto` finds; no checkpoint-4 appears; the hidden temp is removed by the next save.
TEST(Resume, ASaveKilledBetweenFilesLeavesThePreviousCheckpointsAndNoPartialOne) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child re-runs this test alone
  // The child (re-executed) writes where its parent looks: the parent's pid names the directory.
  const bool child = ::testing::internal::InDeathTestChild();
  const std::string out = fresh_dir("killed", child ? ::getppid() : ::getpid());
  TrainConfig cfg = config(out);
  cfg.save_steps = 2;
  EXPECT_EXIT(
      {
        int files = 0;
        CheckpointWrite w;
        w.after_file = [&](const std::string&) {
          if (++files == 6) ::raise(SIGKILL);  // checkpoint-2 has 4 files; this is checkpoint-4's second
        };
        go(cfg, 0, w);
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "");
  std::vector<int> steps;
  for (const CheckpointEntry& e : list_checkpoints(out)) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int>{2}));
  int temps = 0;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().starts_with(".checkpoint-4.tmp.")) ++temps;
  EXPECT_EQ(temps, 1) << "the killed save's temp directory";
  EXPECT_EQ(resolve_checkpoint("auto", out), out + "/checkpoint-2");
  // It resumes, and its first save removes the dead writer's temp.
  cfg.resume_from_checkpoint = "auto";
  const Outcome resumed = go(cfg);
  EXPECT_EQ(resumed.res.first_step, 3);
  for (const auto& e : fs::directory_iterator(out))
    EXPECT_FALSE(e.path().filename().string().starts_with(".checkpoint-")) << e.path();
  EXPECT_EQ(list_checkpoints(out).size(), 5u);
}

// strata-train end to end: SIGTERM mid-run finishes the step, saves a checkpoint and ends by the
// signal; --resume auto continues to the losses of a run that was never stopped.
TEST(Resume, StrataTrainSavesOnSigtermAndResumesToTheSameLosses) {
  using namespace strata::tool_test;
  ASSERT_TRUE(tools_built());
  Scratch s;
  s.create("strata_resume_tool");
  ASSERT_TRUE(s.ok());
  const std::string model = s.path("tiny"), data = model + "/tokens.bin";
  Proc mk = s.run(kMakeTiny + " " + quote(model) +
                  " --layers 2 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 64 --tokens 20000");
  ASSERT_EQ(mk.code, 0) << mk.err;
  std::ofstream(model + "/tokenizer.json") << "{\"model\": {}}\n";  // copied into every saved directory
  const std::vector<std::string> args = {
      kTrain,    "--model", model,     "--data", data,     "--backend",    "cpu", "--seq",          "16",
      "--batch", "2",       "--steps", "400",    "--json", "--grad-accum", "2",   "--lr-scheduler", "linear"};
  auto losses = [](const std::string& out) {
    std::map<int, double> m;
    for (const std::string& l : lines(out)) {
      const json j = json::parse(l);
      if (j.contains("loss")) m[j["step"].get<int>()] = j["loss"].get<double>();
    }
    return m;
  };
  std::string cmd;
  for (const std::string& a : args) cmd += quote(a) + " ";
  Proc whole = s.run(cmd);
  ASSERT_EQ(whole.code, 0) << whole.err;
  const std::map<int, double> want = losses(whole.out);
  ASSERT_EQ(want.size(), 400u);

  const std::string out = s.path("ck_stopped");
  std::vector<std::string> stop_args = args;
  stop_args.insert(stop_args.end(), {"--save", out});
  Child c(stop_args);
  ASSERT_TRUE(c.ok());
  std::string line;
  int seen = 0;
  while (seen < 3 && c.read_line(line, std::chrono::seconds(60))) seen = json::parse(line)["step"].get<int>();
  ASSERT_GE(seen, 3) << "strata-train did not reach step 3";
  ASSERT_EQ(::kill(c.pid(), SIGTERM), 0);
  const int status = c.wait(std::chrono::seconds(60));
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "wait status " << status;
  const std::vector<CheckpointEntry> cks = list_checkpoints(out);
  ASSERT_EQ(cks.size(), 1u);
  EXPECT_GE(cks[0].step, 3);
  EXPECT_LT(cks[0].step, 400) << "the run should have stopped early";
  EXPECT_TRUE(fs::is_regular_file(cks[0].path + "/tokenizer.json"));
  for (const auto& e : fs::directory_iterator(out)) EXPECT_FALSE(e.path().filename().string().starts_with("."));

  Proc resumed = s.run(cmd + "--save " + quote(out) + " --resume auto");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const std::map<int, double> got = losses(resumed.out);
  ASSERT_EQ(got.size(), size_t(400 - cks[0].step));
  EXPECT_EQ(got.begin()->first, cks[0].step + 1);
  for (const auto& [step, loss] : got) EXPECT_EQ(loss, want.at(step)) << "step " << step;
  EXPECT_NE(resumed.err.find("resumed from " + cks[0].path), std::string::npos) << resumed.err;
  EXPECT_TRUE(fs::is_regular_file(out + "/model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(out + "/tokenizer.json"));

  // Two signals at once: the second ends the run by the signal without waiting for a save, and
  // whatever checkpoint is there is complete.
  const std::string out2 = s.path("ck_twice");
  std::vector<std::string> twice = args;
  twice.insert(twice.end(), {"--save", out2, "--save-steps", "1"});
  Child c2(twice);
  ASSERT_TRUE(c2.ok());
  seen = 0;
  while (seen < 2 && c2.read_line(line, std::chrono::seconds(60))) seen = json::parse(line)["step"].get<int>();
  ASSERT_GE(seen, 2);
  ASSERT_EQ(::kill(c2.pid(), SIGTERM), 0);
  ASSERT_EQ(::kill(c2.pid(), SIGTERM), 0);
  const int status2 = c2.wait(std::chrono::seconds(60));
  ASSERT_TRUE(WIFSIGNALED(status2) && WTERMSIG(status2) == SIGTERM) << "wait status " << status2;
  for (const CheckpointEntry& e : list_checkpoints(out2))
    EXPECT_TRUE(fs::is_regular_file(e.path + "/trainer_state.json")) << e.path;
  s.remove();
}

// A checkpoint directory is a Hugging Face model directory: its config.json and model.safetensors
// load into a model whose weights are the run's at that step, bit for bit (fp32 on cpu); with LoRA
// it holds the adapter in PEFT's layout.
TEST(Resume, ACheckpointLoadsAsAHuggingFaceModelOrAPeftAdapter) {
  TrainConfig cfg = config(fresh_dir("hf"));
  const Outcome stopped = go(cfg, 5);
  const std::string ck = cfg.output_dir + "/checkpoint-5";
  const io::LlamaConfig mc = io::read_llama_config(ck);
  EXPECT_EQ(mc.hidden_size, tiny_config().hidden_size);
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel loaded(*be, mc, model_options(cfg));
  loaded.load(ck);
  const std::vector<std::vector<std::byte>> state = state_bytes(loaded);
  // The weights are each parameter's first array (the rest are moments, zero in a fresh model).
  size_t i = 0, checked = 0;
  for (const Parameter& p : loaded.params()) {
    if (!p.trainable) continue;
    EXPECT_TRUE(state[i] == stopped.state[i]) << p.name;
    ++checked;
    i += 3;  // weights, m, v (fp32 moments on the device)
  }
  EXPECT_GT(checked, 0u);

  TrainConfig lora = config(fresh_dir("hf_lora"));
  lora.lora.rank = 4;
  go(lora, 2);
  EXPECT_TRUE(fs::is_regular_file(lora.output_dir + "/checkpoint-2/adapter_model.safetensors"));
  const json ac = json::parse(std::ifstream(lora.output_dir + "/checkpoint-2/adapter_config.json"));
  EXPECT_EQ(ac["peft_type"], "LORA");
  EXPECT_EQ(ac["r"].get<int>(), 4);
  EXPECT_FALSE(fs::exists(lora.output_dir + "/checkpoint-2/model.safetensors"));
}

// Crash safety at every instant (issue 33): a run resumed from checkpoint-4 saves checkpoint-6 again over
// the one already there, then the final model. STRATA_TEST_KILL_AT=N kills it (SIGKILL) at its Nth
// file-system mutation, for every N until the run completes. After each kill a complete checkpoint-6 is
// there or restorable, --resume auto's choice is it, and the next save's cleanup removes no complete copy.
// Twice: with the atomic exchange of the two copies (no instant without checkpoint-6), and with the
// fallback of file systems without it (two renames; the copy set aside is put back).
TEST(Resume, ASaveKilledAtEveryFileSystemStepLeavesACompleteNewestCheckpoint) {
  using namespace strata::tool_test;
  ASSERT_TRUE(tools_built());
  Scratch s;
  s.create("strata_kill_every_step");
  ASSERT_TRUE(s.ok());
  const std::string model = s.path("tiny"), data = model + "/tokens.bin";
  ASSERT_EQ(s.run(kMakeTiny + " " + quote(model) +
                  " --layers 1 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 --vocab 64 --tokens 4000")
                .code,
            0);
  const std::string base = fmt::format("{} --model {} --data {} --backend cpu --seq 16 --batch 2 --steps 6 --json",
                                       kTrain, quote(model), quote(data));
  const std::string pristine = s.path("pristine");
  Proc first = s.run(base + " --save-steps 2 --save " + quote(pristine));
  ASSERT_EQ(first.code, 0) << first.err;
  ASSERT_TRUE(is_strata_checkpoint(pristine + "/checkpoint-6"));
  auto complete = [](const std::string& dir) {
    if (!is_strata_checkpoint(dir)) return false;
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json"})
      if (!fs::is_regular_file(dir + "/" + f)) return false;
    std::ifstream in(dir + "/trainer_state.json");
    return json::parse(in)["global_step"].get<int>() == 6;
  };
  for (const bool fallback : {false, true}) {
    SCOPED_TRACE(fallback ? "two renames (no RENAME_EXCHANGE)" : "atomic exchange");
    int n = 1, window = 0;
    for (; n < 1000; ++n) {
      const std::string w = s.path(fmt::format("w{}_{}", int(fallback), n));
      fs::copy(pristine, w, fs::copy_options::recursive);
      const Proc p = s.run(fmt::format("env STRATA_TEST_KILL_AT={} {} {} --save-steps 2 --save {} --resume {}", n,
                                       fallback ? "STRATA_TEST_RENAME_FALLBACK=1" : "", base, quote(w),
                                       quote(w + "/checkpoint-4")));
      if (p.code == 0) break;
      ASSERT_EQ(p.code, 128 + SIGKILL) << "kill point " << n << ": " << p.err;
      const bool there = complete(w + "/checkpoint-6");
      if (!fallback) {
        EXPECT_TRUE(there) << "kill point " << n << ": no complete checkpoint-6 at once";
      }
      if (!there) ++window;
      EXPECT_EQ(resolve_checkpoint("auto", w), w + "/checkpoint-6") << "kill point " << n;
      EXPECT_TRUE(complete(w + "/checkpoint-6")) << "kill point " << n;
      remove_stale_checkpoint_temps(w);  // what the next save does first
      EXPECT_TRUE(complete(w + "/checkpoint-6")) << "kill point " << n;
      for (int step : {2, 4}) EXPECT_TRUE(is_strata_checkpoint(fmt::format("{}/checkpoint-{}", w, step)));
      for (const auto& e : fs::directory_iterator(w))
        EXPECT_FALSE(e.path().filename().string().starts_with(".checkpoint-"))
            << "kill point " << n << ": " << e.path();
      fs::remove_all(w);
    }
    EXPECT_GT(n, 20) << "the save should have many steps";
    EXPECT_LT(n, 1000) << "the run never completed";
    if (fallback) {
      EXPECT_GE(window, 1) << "no kill point fell between the two renames";
    }
  }
  // End to end: killed between the fallback's renames, `--resume auto` restores checkpoint-6 and resumes from it.
  const std::string w = s.path("e2e");
  for (int n = 1; n < 1000; ++n) {
    fs::remove_all(w);
    fs::copy(pristine, w, fs::copy_options::recursive);
    const Proc p =
        s.run(fmt::format("env STRATA_TEST_KILL_AT={} STRATA_TEST_RENAME_FALLBACK=1 {} --save-steps 2 "
                          "--save {} --resume {}",
                          n, base, quote(w), quote(w + "/checkpoint-4")));
    ASSERT_NE(p.code, 0) << "no kill point left checkpoint-6 aside";
    if (fs::exists(w + "/checkpoint-6")) continue;
    const Proc r = s.run(fmt::format("{} --steps 7 --save {} --resume auto", base, quote(w)));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("restored " + w + "/checkpoint-6"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("resumed from " + w + "/checkpoint-6"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("partial"), std::string::npos) << r.err;
    break;
  }
  s.remove();
}

// Nothing strata did not write is deleted or replaced: a file, a link or a foreign directory at a
// checkpoint's path stops strata-train before its first step, naming the path; pruning skips it.
TEST(Resume, APathInTheWayOfACheckpointIsAnErrorNamingIt) {
  using namespace strata::tool_test;
  ASSERT_TRUE(tools_built());
  Scratch s;
  s.create("strata_in_the_way");
  ASSERT_TRUE(s.ok());
  const std::string model = s.path("tiny");
  ASSERT_EQ(s.run(kMakeTiny + " " + quote(model) +
                  " --layers 1 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 "
                  "--vocab 64 --tokens 4000")
                .code,
            0);
  for (const char* kind : {"file", "dir", "link"}) {
    const std::string out = s.path(std::string("out_") + kind);
    fs::create_directories(out);
    const std::string in_the_way = out + "/checkpoint-2";
    if (std::string(kind) == "file") std::ofstream(in_the_way) << "mine\n";
    if (std::string(kind) == "dir") {
      fs::create_directories(in_the_way);
      std::ofstream(in_the_way + "/notes.txt") << "mine\n";
    }
    if (std::string(kind) == "link") fs::create_directory_symlink(model, in_the_way);
    const Proc p =
        s.run(fmt::format("{} --model {} --data {} --backend cpu --seq 16 --batch 2 --steps 4 "
                          "--save-steps 2 --save {} --json",
                          kTrain, quote(model), quote(model + "/tokens.bin"), quote(out)));
    EXPECT_GE(p.code, 1) << kind;
    EXPECT_LE(p.code, 127) << kind;
    EXPECT_NE(p.err.find(in_the_way + ": the checkpoint's path is taken by"), std::string::npos) << p.err;
    EXPECT_EQ(p.out.find("\"step\""), std::string::npos) << "trained before failing: " << p.out;
    EXPECT_TRUE(fs::exists(fs::symlink_status(in_the_way))) << kind;
    if (std::string(kind) == "file") {
      EXPECT_EQ(slurp(in_the_way), "mine\n");
    } else if (std::string(kind) == "dir") {
      EXPECT_EQ(slurp(in_the_way + "/notes.txt"), "mine\n");
    }
    EXPECT_EQ(list_checkpoints(out).size(), std::string(kind) == "file" ? 0u : 1u);  // a link to a directory lists
  }
  // Pruning keeps a foreign directory named like a checkpoint.
  const std::string dir_out = s.path("out_dir");
  EXPECT_TRUE(prune_checkpoints(dir_out, 0).empty());
  fs::create_directories(dir_out + "/checkpoint-3");
  EXPECT_TRUE(prune_checkpoints(dir_out, 1).empty());
  EXPECT_TRUE(fs::exists(dir_out + "/checkpoint-2/notes.txt"));
  s.remove();
}

// Everything read back on resume is checked like a checkpoint's weights, before any step: a NaN or negative
// Adam second moment, a NaN first moment, a global_step of 2^32 + 2 (it resumed as step 2), an epoch of 2^40,
// a step that is not the directory's name, a data position that disagrees with the step. Each is an error
// naming the file and the field (exit 1), and nothing is trained.
TEST(Resume, CorruptOptimizerStateOrCountersAreRefusedBeforeAnyStep) {
  using namespace strata::tool_test;
  ASSERT_TRUE(tools_built());
  Scratch s;
  s.create("strata_corrupt_state");
  ASSERT_TRUE(s.ok());
  const std::string model = s.path("tiny");
  ASSERT_EQ(s.run(kMakeTiny + " " + quote(model) +
                  " --layers 1 --hidden 32 --heads 4 --kv-heads 2 --intermediate 64 "
                  "--vocab 64 --tokens 4000")
                .code,
            0);
  const std::string base = fmt::format("{} --model {} --data {} --backend cpu --seq 16 --batch 2 --json", kTrain,
                                       quote(model), quote(model + "/tokens.bin"));
  const std::string pristine = s.path("pristine");
  ASSERT_EQ(s.run(base + " --steps 4 --save-steps 2 --save " + quote(pristine)).code, 0);
  int case_n = 0;
  // Copies the run, applies `damage` to its checkpoint-2, resumes from it: must fail naming `file` and `what`.
  auto refused = [&](const std::function<void(const std::string&)>& damage, const std::string& file,
                     const std::string& what) {
    const std::string w = s.path(fmt::format("case{}", case_n++));
    fs::copy(pristine, w, fs::copy_options::recursive);
    damage(w + "/checkpoint-2");
    const Proc p = s.run(fmt::format("{} --steps 4 --save {} --resume {}", base, quote(w), quote(w + "/checkpoint-2")));
    EXPECT_GE(p.code, 1) << what;
    EXPECT_LE(p.code, 127) << what;
    EXPECT_NE(p.err.find(w + "/checkpoint-2/" + file), std::string::npos) << p.err;
    EXPECT_NE(p.err.find(what), std::string::npos) << p.err;
    EXPECT_EQ(p.out.find("\"step\""), std::string::npos) << "trained: " << p.out;
  };
  auto state = [](const std::string& dir, const std::function<void(json&)>& edit) {
    json j = json::parse(slurp(dir + "/trainer_state.json"));
    edit(j);
    std::ofstream(dir + "/trainer_state.json") << j.dump(2);
  };
  refused([&](const std::string& d) { poke(d, ".v", -1.0f); }, "optimizer.safetensors",
          "a negative Adam second moment");
  refused([&](const std::string& d) { poke(d, ".v", std::nanf("")); }, "optimizer.safetensors", "a non-finite value");
  refused([&](const std::string& d) { poke(d, ".m", std::numeric_limits<float>::infinity()); }, "optimizer.safetensors",
          ".m' holds inf at index 3");
  refused([&](const std::string& d) { state(d, [](json& j) { j["global_step"] = (uint64_t(1) << 32) + 2; }); },
          "trainer_state.json", "field global_step is 4294967298, expected an integer from 0 to 2147483647");
  refused([&](const std::string& d) { state(d, [](json& j) { j["global_step"] = -1; }); }, "trainer_state.json",
          "field global_step is -1");
  refused([&](const std::string& d) { state(d, [](json& j) { j["global_step"] = 3; }); }, "trainer_state.json",
          "field global_step is 3, but the directory is named checkpoint-2");
  refused([&](const std::string& d) { state(d, [](json& j) { j["data"]["epoch"] = uint64_t(1) << 40; }); },
          "trainer_state.json", "field data.epoch is 1099511627776");
  refused([&](const std::string& d) { state(d, [](json& j) { j["data"]["epoch"] = 1; }); }, "trainer_state.json",
          "the trainer state is inconsistent");
  refused([&](const std::string& d) { state(d, [](json& j) { j["data"]["index"] = 1; }); }, "trainer_state.json",
          "the trainer state is inconsistent");
  refused([&](const std::string& d) { state(d, [](json& j) { j["trainer_rng"] = -5; }); }, "trainer_state.json",
          "field trainer_rng is -5");
  refused([&](const std::string& d) { state(d, [](json& j) { j["data"]["index"] = "7"; }); }, "trainer_state.json",
          "field data.index is \"7\"");
  // Nested 100k deep: a clean error naming the file, no crash (saved elsewhere: in its own output_dir an
  // unreadable checkpoint is a path strata did not write, refused as such).
  {
    const std::string w = s.path("case_deep");
    fs::copy(pristine, w, fs::copy_options::recursive);
    std::ofstream(w + "/checkpoint-2/trainer_state.json") << std::string(100000, '[') << std::string(100000, ']');
    const Proc p = s.run(fmt::format("{} --steps 4 --save {} --resume {}", base, quote(s.path("case_deep_out")),
                                     quote(w + "/checkpoint-2")));
    EXPECT_EQ(p.code, 1) << p.err;
    EXPECT_NE(p.err.find(w + "/checkpoint-2/trainer_state.json"), std::string::npos) << p.err;
    EXPECT_EQ(p.out.find("\"step\""), std::string::npos) << "trained: " << p.out;
  }
  // The untouched copy resumes.
  const Proc ok = s.run(
      fmt::format("{} --steps 4 --save {} --resume {}", base, quote(pristine), quote(pristine + "/checkpoint-2")));
  EXPECT_EQ(ok.code, 0) << ok.err;
  s.remove();
}
