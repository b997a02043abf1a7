// The vocabulary padded in memory (ModelOptions::pad_vocab_multiple): the embedding and the LM head
// hold round_up(V, 64) rows, the padded rows zero and outside the softmax. On the cpu backend a
// padded run is the unpadded run bit for bit (losses, held-out losses, saved files), tied or not,
// full or LoRA, clipping on; files hold V rows; a checkpoint resumes; a checkpoint of another
// padding is refused naming the field; the sim's peaks equal the cpu backend's with padding.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/safetensors.h"
#include "kernels/lm_head_ce.h"
#include "model/llama/rng.h"
#include "model/run/checkpoint.h"
#include "tests/cpu/expect_error.h"
#include "tests/cpu/sim_twin.h"
#include "tests/cpu/train_loop_util.h"

using namespace strata;
using namespace strata::test_util;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string d = fmt::format("{}strata_pad_vocab_{}_{}", ::testing::TempDir(), name, ::getpid());
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

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return std::string(std::istreambuf_iterator<char>(f), {});
}

io::LlamaConfig model_config(int vocab, bool tied) {
  io::LlamaConfig c = tiny_config();
  c.vocab_size = vocab;
  c.tie_word_embeddings = tied;
  return c;
}

// 6 steps of 2 x 2 rows of 16 tokens, clipping active, weight decay on, a held-out loss every 3 steps.
TrainConfig config(int pad, int lora_rank) {
  TrainConfig c;
  c.seq = 16;
  c.batch = 2;
  c.grad_accum = 2;
  c.steps = 6;
  c.steps_given = true;
  c.lr = 1e-2f;
  c.warmup_steps = 1;
  c.weight_decay = 0.1f;
  c.max_grad_norm = 0.5f;
  c.val_set_size = 0.15f;
  c.eval_steps = 3;
  c.lora.rank = lora_rank;
  c.pad_vocab_multiple = pad;
  return c;
}

struct Trained {
  LoopResult res;
  std::string saved;  // model.safetensors or adapter_model.safetensors of the final weights
  int64_t padded_vocab = 0;
  bool padding_zero = true;  // every padded row of the embedding and the head is exactly zero
};

Trained train(const TrainConfig& cfg, const io::LlamaConfig& mc, const std::string& dir) {
  Rig r = make_rig(cfg, quiet(), 600, mc);
  Trained out;
  out.res = r.loop->run();
  out.padded_vocab = r.model->padded_vocab();
  for (const Parameter& p : r.model->params()) {
    if (!p.pad_rows) continue;
    const float* w = static_cast<const float*>(p.value().data);
    for (int64_t i = p.file_numel(); i < p.shape.numel(); ++i) out.padding_zero &= w[i] == 0.0f;
  }
  if (cfg.lora.enabled()) {
    r.model->save_lora(dir, "base");
    out.saved = dir + "/adapter_model.safetensors";
  } else {
    r.model->save(dir);
    out.saved = dir + "/model.safetensors";
  }
  return out;
}

}  // namespace

TEST(PadVocab, PaddedRunIsTheUnpaddedRunBitForBit) {
  struct Case {
    int vocab;
    bool tied;
    int lora_rank;
  };
  for (const Case& k : {Case{1000, false, 0}, Case{1001, false, 0}, Case{1000, true, 0}, Case{1001, true, 0},
                        Case{1001, false, 4}, Case{1001, true, 4}}) {
    const std::string name = fmt::format("vocab {}{}{}", k.vocab, k.tied ? " tied" : "", k.lora_rank ? " lora" : "");
    SCOPED_TRACE(name);
    const io::LlamaConfig mc = model_config(k.vocab, k.tied);
    const Trained off = train(config(1, k.lora_rank), mc, fresh_dir("off"));
    const Trained on = train(config(64, k.lora_rank), mc, fresh_dir("on"));
    EXPECT_EQ(off.padded_vocab, k.vocab);
    EXPECT_EQ(on.padded_vocab, 1024);
    EXPECT_TRUE(on.padding_zero) << "AdamW must keep the padded rows at zero";
    ASSERT_EQ(on.res.losses.size(), 6u);
    ASSERT_EQ(on.res.losses.size(), off.res.losses.size());
    for (size_t i = 0; i < on.res.losses.size(); ++i) {
      EXPECT_TRUE(std::isfinite(on.res.losses[i]));
      EXPECT_EQ(on.res.losses[i], off.res.losses[i]) << "step " << i + 1;
    }
    EXPECT_NE(on.res.losses.front(), on.res.losses.back()) << "the model trained";
    ASSERT_EQ(on.res.eval_loss.size(), 2u);
    EXPECT_EQ(on.res.eval_loss, off.res.eval_loss);
    // The files are the unpadded run's, byte for byte.
    const std::string a = read_bytes(on.saved), b = read_bytes(off.saved);
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << on.saved << " differs from " << off.saved;
    if (!k.lora_rank) {
      io::SafetensorsFile f = io::SafetensorsFile::open(on.saved);
      const io::TensorInfo* e = f.find("model.embed_tokens.weight");
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->shape, (std::vector<int64_t>{k.vocab, mc.hidden_size}));
      const io::TensorInfo* h = f.find("lm_head.weight");
      EXPECT_EQ(h != nullptr, !k.tied);
      if (h) {
        EXPECT_EQ(h->shape, (std::vector<int64_t>{k.vocab, mc.hidden_size}));
      }
    }
  }
}

TEST(PadVocab, SavedWeightsLoadBackIntoAPaddedModel) {
  const io::LlamaConfig mc = model_config(1001, false);
  const std::string dir = fresh_dir("roundtrip");
  const Trained on = train(config(64, 0), mc, dir);
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, mc, model_options(config(64, 0)));
  for (Parameter& p : m.params())  // garbage first: load must replace every row, padding included
    if (p.pad_rows) std::fill_n(static_cast<float*>(p.value().data), p.shape.numel(), 7.0f);
  m.load(dir);
  const Parameter* e = m.find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (Shape{1024, mc.hidden_size}));
  EXPECT_EQ(e->pad_rows, 1024 - 1001);
  for (const Parameter& p : m.params())
    if (p.pad_rows) {
      const float* w = static_cast<const float*>(p.value().data);
      for (int64_t i = p.file_numel(); i < p.shape.numel(); ++i) ASSERT_EQ(w[i], 0.0f) << p.name << " element " << i;
    }
  EXPECT_EQ(m.param_count(), LlamaModel(*be, mc, model_options(config(1, 0))).param_count())
      << "counts are the files' (padding excluded)";
  const std::string again = fresh_dir("roundtrip_again");
  m.save(again);
  EXPECT_TRUE(read_bytes(again + "/model.safetensors") == read_bytes(dir + "/model.safetensors"));
}

TEST(PadVocab, ACheckpointResumesAndAnotherPaddingIsRefused) {
  const io::LlamaConfig mc = model_config(1001, false);
  TrainConfig cfg = config(64, 0);
  const LoopResult whole = make_rig(cfg, quiet(), 600, mc).loop->run();
  cfg.output_dir = fresh_dir("resume");
  {
    LoopOptions lo = quiet();
    int steps = 0;
    lo.on_step = [&](const StepStats&) { ++steps; };
    lo.stop_requested = [&] { return steps == 4 ? SIGTERM : 0; };
    EXPECT_EQ(make_rig(cfg, lo, 600, mc).loop->run().steps_done, 4);
  }
  const std::string ck = cfg.output_dir + "/checkpoint-4";
  // The checkpoint's model file has the real rows; its optimizer state keeps the padded ones.
  io::SafetensorsFile model = io::SafetensorsFile::open(ck + "/model.safetensors");
  EXPECT_EQ(model.find("lm_head.weight")->shape, (std::vector<int64_t>{1001, mc.hidden_size}));
  io::SafetensorsFile state = io::SafetensorsFile::open(ck + "/optimizer.safetensors");
  EXPECT_EQ(state.find("lm_head.weight.m")->shape, (std::vector<int64_t>{1024, mc.hidden_size}));

  cfg.resume_from_checkpoint = ck;
  const LoopResult resumed = make_rig(cfg, quiet(), 600, mc).loop->run();
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses[0], whole.losses[4]);
  EXPECT_EQ(resumed.losses[1], whole.losses[5]);

  for (int other : {1, 128 + 64}) {  // 1001 and 1152 rows: not the checkpoint's 1024
    TrainConfig c = cfg;
    c.pad_vocab_multiple = other;
    auto e = catch_as<FormatError>([&] { make_rig(c, quiet(), 600, mc).loop->run(); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->field, "padded_vocab_size");
    const std::string what = e->what();
    EXPECT_NE(what.find("pad_vocab_multiple"), std::string::npos) << what;
    EXPECT_NE(what.find("1024"), std::string::npos) << what;
  }
  // Another multiple that pads to the same rows holds the same state: it resumes.
  TrainConfig same = cfg;
  same.pad_vocab_multiple = 256;
  EXPECT_EQ(make_rig(same, quiet(), 600, mc).loop->run().losses, resumed.losses);
}

TEST(PadVocab, SimPeaksEqualTheCpuBackendsWithPadding) {
  for (int pad : {64, 1}) {
    for (Plan plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1)}) {
      for (bool tied : {false, true}) {
        const std::string name = fmt::format("pad {} {}{}", pad, plan.preset, tied ? " tied" : "");
        ForecastRequest r = sim_twin::tiny_request(plan);
        r.model.vocab_size = 1001;
        r.model.tie_word_embeddings = tied;
        r.pad_vocab_multiple = pad;
        const Forecast f = forecast(r);
        ASSERT_TRUE(f.fits) << name << ": " << f.oom;
        const sim_twin::CpuStep cpu = sim_twin::cpu_step(r, sim_twin::kBudget, plan);
        ASSERT_TRUE(cpu.fits) << name;
        EXPECT_EQ(f.peak_bytes, cpu.peak) << name;
        EXPECT_EQ(f.high_water_bytes, cpu.high_water) << name;
        EXPECT_EQ(f.params,
                  LlamaModel(*make_cpu_backend(size_t(64) << 20), r.model, forecast_model_options(r)).param_count())
            << name;
      }
    }
  }
  // The forecast runs the padded shape: the vocabulary's weights, gradients and moments grow.
  ForecastRequest r = sim_twin::tiny_request(Plan::keep_everything());
  r.model.vocab_size = 1001;
  r.pad_vocab_multiple = 1;
  const Forecast unpadded = forecast(r);
  r.pad_vocab_multiple = 64;
  const Forecast padded = forecast(r);
  EXPECT_GT(padded.persistent_bytes, unpadded.persistent_bytes);
  EXPECT_EQ(padded.params, unpadded.params);
}

TEST(PadVocab, TokenIdsFromTheVocabularyToThePaddingAreRefused) {
  const io::LlamaConfig mc = model_config(1001, false);
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, mc, ModelOptions{});
  ASSERT_EQ(m.padded_vocab(), 1024);
  m.init_random(1);
  Trainer tr(*be, m, TrainOptions{});
  Batch b;
  b.B = 1;
  b.T = 4;
  b.inputs = {1, 2, 3, 4};
  b.targets = {2, 3, 4, 1000};
  EXPECT_TRUE(std::isfinite(tr.step(b).loss)) << "the last real id is fine";
  for (int bad : {1001, 1023}) {  // inside the padded rows, outside the vocabulary
    Batch t = b;
    t.targets[3] = bad;
    EXPECT_THROW(tr.step(t), ConfigError) << bad;
    Batch i = b;
    i.inputs[0] = bad;
    EXPECT_THROW(tr.step(i), ConfigError) << bad;
  }
}

TEST(PadVocab, OptionIsCheckedInYamlAndModel) {
  TrainConfig c;
  EXPECT_EQ(c.pad_vocab_multiple, 64);
  apply_yaml_text(c, "pad_vocab_multiple: 128\n", "run.yaml");
  EXPECT_EQ(c.pad_vocab_multiple, 128);
  EXPECT_EQ(model_options(c).pad_vocab_multiple, 128);
  for (const char* bad : {"pad_vocab_multiple: 0\n", "pad_vocab_multiple: 100000\n", "pad_vocab_multiple: x\n"}) {
    auto e = catch_as<ConfigError>([&] { apply_yaml_text(c, bad, "run.yaml"); });
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(e->field, "pad_vocab_multiple") << bad;
  }
  EXPECT_EQ(padded_vocab(32001, 64), 32064);
  EXPECT_EQ(padded_vocab(50257, 64), 50304);
  EXPECT_EQ(padded_vocab(128256, 64), 128256);
  EXPECT_EQ(padded_vocab(128257, 1), 128257);
  auto be = make_cpu_backend(size_t(16) << 20);
  ModelOptions mo;
  mo.pad_vocab_multiple = 0;
  EXPECT_THROW(LlamaModel(*be, tiny_config(), mo), ConfigError);
}

// The kernel alone: padded rows of w, whatever they hold, take no part in the loss or the gradients;
// dw's padded rows are exact zeros and the rest are the unpadded kernel's bits.
TEST(PadVocab, LmHeadCeKernelIgnoresThePaddedColumns) {
  const int N = 13, C = 8, V = 37, Vp = 64, chunk = 5;
  Rng rng(3);
  std::vector<float> x(size_t(N) * C), w(size_t(Vp) * C);
  for (float& v : x) v = float(rng.normal());
  for (float& v : w) v = float(rng.normal());  // padded rows too: garbage must not leak in
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[size_t(i)] = i == 4 ? -100 : int32_t(rng.below(V));
  t[7] = V - 1;
  std::vector<float> lse(N), lse_p(N);
  const float loss = cpu::lm_head_ce_fwd(lse.data(), x.data(), w.data(), t.data(), N, C, V, chunk, nullptr);
  const float loss_p = cpu::lm_head_ce_fwd(lse_p.data(), x.data(), w.data(), t.data(), N, C, Vp, chunk, nullptr, V);
  EXPECT_EQ(loss, loss_p);
  EXPECT_EQ(lse, lse_p);
  for (bool fused : {false, true}) {
    std::vector<float> dx(size_t(N) * C), dw(size_t(V) * C), dx_p(size_t(N) * C), dw_p(size_t(Vp) * C, 5.0f);
    if (fused) {
      cpu::lm_head_ce_fwd_grad(dx.data(), dw.data(), 1.0f, x.data(), w.data(), t.data(), N, C, V, chunk, false,
                               nullptr);
      cpu::lm_head_ce_fwd_grad(dx_p.data(), dw_p.data(), 1.0f, x.data(), w.data(), t.data(), N, C, Vp, chunk, false,
                               nullptr, V);
    } else {
      cpu::lm_head_ce_bwd(dx.data(), dw.data(), 1.0f, x.data(), w.data(), t.data(), lse.data(), N, C, V, chunk, false,
                          false);
      cpu::lm_head_ce_bwd(dx_p.data(), dw_p.data(), 1.0f, x.data(), w.data(), t.data(), lse.data(), N, C, Vp, chunk,
                          false, false, V);
    }
    EXPECT_EQ(dx, dx_p) << "fused " << fused;
    EXPECT_TRUE(std::equal(dw.begin(), dw.end(), dw_p.begin())) << "fused " << fused;
    for (size_t i = dw.size(); i < dw_p.size(); ++i) ASSERT_EQ(dw_p[i], 0.0f) << "fused " << fused << " at " << i;
  }
  int32_t bad[1] = {V};  // a padded column is no valid target
  EXPECT_THROW(cpu::lm_head_ce_fwd(nullptr, x.data(), w.data(), bad, 1, C, Vp, chunk, nullptr, V), Error);
}
