// Weight paging for frozen layers on the cpu backend (copies are memcpy, so everything is exact):
// frozen-base and LoRA training under every plan give losses and trainable gradients
// bit-identical to the same run without paging, the device peak drops by the frozen layer
// weights less two layers, the upload count is the double buffer's, and an exception mid-step
// leaves the slots EMPTY with the next step training on exactly.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "engine/backend.h"
#include "engine/weight_pager.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/train/trainer.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

constexpr int kLayers = 4;

io::LlamaConfig cfg() {
  io::LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = kLayers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 61;
  c.rms_norm_eps = 1e-5f;
  return c;
}

ModelOptions options(bool lora, bool page) {
  ModelOptions mo;
  mo.train_base = false;
  mo.train_norms = !lora;  // frozen base: the norms train; LoRA: only the adapters
  if (lora) {
    mo.lora.rank = 4;
    mo.lora.seed = 5;
    mo.lora.target_modules = {"q_proj", "v_proj", "o_proj", "down_proj"};
  }
  mo.page_layers = page;
  return mo;
}

TrainOptions train_options(const Plan& plan, const std::string& dir) {
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.plan = plan;
  to.tiers.offload_dir = dir;
  return to;
}

struct Result {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads, params;  // trainable ones, after the last step
  size_t peak = 0;
  std::vector<long> uploads;
  std::vector<size_t> bytes;
  size_t frozen_layer_bytes = 0;  // paged weights in the compute dtype (what paging takes off the device)
  size_t layer_bytes = 0;         // one layer's paged weights
};

void collect(LlamaModel& model, Result& r) {
  for (auto& p : model.params()) {
    if (!p.trainable) continue;
    std::vector<float> h(size_t(p.shape.numel()));
    std::memcpy(h.data(), p.value().data, h.size() * 4);
    r.params.push_back(h);
    std::memcpy(h.data(), p.grad_view().data, h.size() * 4);
    r.grads.push_back(h);
  }
}

Result run(bool lora, bool page, const Plan& plan, int steps = 3) {
  const std::string dir = fs::temp_directory_path().string();
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg(), options(lora, page));
  model.init_random(11);
  Trainer tr(*be, model, train_options(plan, dir));
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  Result r;
  for (auto& p : model.params())
    if (!p.trainable && p.shape.nd == 2 && LlamaModel::layer_of_param(p.name) >= 0)
      r.frozen_layer_bytes += size_t(p.shape.numel()) * 4;
  r.layer_bytes = r.frozen_layer_bytes / kLayers;
  for (int s = 0; s < steps; ++s) {
    StepStats st = tr.step(data.next());
    r.losses.push_back(st.loss);
    r.peak = std::max(r.peak, st.peak_device_bytes);
    r.uploads.push_back(st.paged_uploads);
    r.bytes.push_back(st.paged_bytes_uploaded);
    if (WeightPager* pg = model.pager()) {
      for (int sl = 0; sl < pg->slot_count(); ++sl)
        EXPECT_EQ(pg->slot_state(sl), WeightPager::SlotState::EMPTY) << "slot " << sl << " after step " << s;
    }
  }
  collect(model, r);
  return r;
}

void expect_identical(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], 4), 0) << what << ": loss of step " << i;
  ASSERT_EQ(a.grads.size(), b.grads.size()) << what;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_EQ(std::memcmp(a.grads[i].data(), b.grads[i].data(), a.grads[i].size() * 4), 0) << what << ": grad " << i;
    EXPECT_EQ(std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * 4), 0)
        << what << ": param " << i;
  }
}

struct Mode {
  bool lora;
  const char* name;
};
const Mode kModes[] = {{false, "frozen base"}, {true, "lora"}};

TEST(Paging, EveryPlanIsBitIdenticalWithTheDoubleBuffersUploadCountAndALowerPeak) {
  for (const Mode& m : kModes) {
    for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::hidden_states(),
                             Plan::activation_offloading(Decision::host)}) {
      const std::string what = std::string(m.name) + " / " + plan.preset;
      Result ref = run(m.lora, false, plan);
      Result pg = run(m.lora, true, plan);
      expect_identical(ref, pg, what);
      EXPECT_EQ(ref.uploads, std::vector<long>(3, 0)) << what;
      // Forward uploads every layer once (layer 0, then L+1 while L computes); backward starts
      // with the last two layers still in their slots and uploads the n-2 below them. Recompute
      // (checkpointing, hidden_states) replays layer L inside layer L's backward: no extra upload.
      EXPECT_EQ(pg.uploads, std::vector<long>(3, 2 * kLayers - 2)) << what;
      EXPECT_EQ(pg.bytes, std::vector<size_t>(3, (2 * kLayers - 2) * pg.layer_bytes)) << what;
      // The device holds two layers' frozen weights instead of all of them (slack: arena alignment).
      const size_t saved = pg.frozen_layer_bytes - 2 * pg.layer_bytes, slack = 4096;
      EXPECT_LT(pg.peak + saved, ref.peak + slack) << what << ": peak " << pg.peak << " vs " << ref.peak;
      EXPECT_LT(pg.peak, ref.peak) << what;
      std::printf("[ paging ] %s: peak %zu -> %zu bytes (frozen layer weights %zu, one layer %zu)\n", what.c_str(),
                  ref.peak, pg.peak, pg.frozen_layer_bytes, pg.layer_bytes);
    }
  }
}

TEST(Paging, EveryNCheckpointingReplaysEarlierLayersAndStaysExact) {
  // Every 2 / every 3 layers: backward of layer L replays layers below it, which page in and out
  // of the slot L shares (L-2): correct, at the price of extra uploads.
  for (const Mode& m : kModes)
    for (int every : {2, 3}) {
      const Plan plan = Plan::gradient_checkpointing(every);
      const std::string what = std::string(m.name) + " / " + plan.preset;
      Result ref = run(m.lora, false, plan, 2);
      Result pg = run(m.lora, true, plan, 2);
      expect_identical(ref, pg, what);
      EXPECT_GE(pg.uploads[0], 2 * kLayers - 2) << what;
      std::printf("[ paging ] %s: %ld uploads per step\n", what.c_str(), pg.uploads[0]);
    }
}

TEST(Paging, RandomPlansMixingDecisionsAreBitIdentical) {
  // Random per-class plans make backward replay chains that start layers below the node asking
  // for them: the pager must page the right layer in before every op, whatever the order.
  const char* classes[] = {"input",         "attn_norm.out", "attn_norm.rstd", "attn.q", "attn.k",
                           "attn.v",        "attn.out",      "attn.lse",       "mid",    "mlp_norm.out",
                           "mlp_norm.rstd", "mlp.gate",      "mlp.up",         "mlp.act"};
  const Decision all[] = {Decision::keep, Decision::recompute, Decision::recompute, Decision::host};
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Rng rng(seed);
    Plan p;
    for (int l = 0; l < kLayers; ++l)
      for (const char* c : classes) p.add(fmt::format("L{}.{}", l, c), all[rng.below(4)]);
    const Mode& m = kModes[seed % 2];
    expect_identical(run(m.lora, false, p, 2), run(m.lora, true, p, 2),
                     std::string(m.name) + " / random plan " + std::to_string(seed));
  }
  // A chain across layers: layer 3's attention-norm backward needs L3.input, rebuilt through
  // layer 2 (slot 0) from layer 1's down_proj, which pages layer 1 into layer 3's slot.
  Plan p;
  for (const char* c : {"L3.attn_norm.out", "L3.input", "L2.mid", "L2.input"}) p.add(c, Decision::recompute);
  for (const Mode& m : kModes)
    expect_identical(run(m.lora, false, p, 2), run(m.lora, true, p, 2), std::string(m.name) + " / cross-layer chain");
}

TEST(Paging, EvaluationUploadsEachLayerOnceAndMatches) {
  Batch b = TokenBatcher(synthetic_tokens(4000, 61, 9), 2, 19).next();
  float loss[2];
  for (int page = 0; page < 2; ++page) {
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel model(*be, cfg(), options(true, page));
    model.init_random(3);
    Trainer tr(*be, model, TrainOptions{});
    loss[page] = tr.evaluate(b);
    if (page) {
      EXPECT_EQ(model.pager()->stats().uploads, kLayers);
      for (int s = 0; s < 2; ++s) EXPECT_EQ(model.pager()->slot_state(s), WeightPager::SlotState::EMPTY);
    }
  }
  EXPECT_EQ(std::memcmp(&loss[0], &loss[1], 4), 0) << loss[0] << " vs " << loss[1];
}

// Reference for the failure tests: steps on b1 then b2 without paging.
std::vector<float> reference_losses(bool lora, const Plan& plan, const Batch& b1, const Batch& b2) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg(), options(lora, false));
  model.init_random(11);
  Trainer tr(*be, model, train_options(plan, fs::temp_directory_path().string()));
  return {tr.step(b1).loss, tr.step(b2).loss};
}

TEST(Paging, AnExceptionInBackwardLeavesThePagerCleanAndTheNextStepExact) {
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  Batch b1 = data.next(), b2 = data.next();
  const Plan plan = Plan::gradient_checkpointing(1);
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg(), options(false, true));
  model.init_random(11);
  Trainer tr(*be, model, train_options(plan, fs::temp_directory_path().string()));
  WeightPager& pg = *model.pager();
  const float l1 = tr.step(b1).loss;
  const size_t base = be->arena().in_use();
  // Chain a hook that throws in the middle of backward, with layers in the slots.
  int backward_nodes = 0;
  bool busy = false;
  tr.tape().set_node_hook([&](int node, TapePhase phase) {
    pg.on_node(node, phase);
    if (phase == TapePhase::backward && ++backward_nodes == 20) {
      for (int s = 0; s < pg.slot_count(); ++s) busy = busy || pg.slot_state(s) != WeightPager::SlotState::EMPTY;
      throw std::runtime_error("injected failure in backward");
    }
  });
  EXPECT_THROW(tr.step(b2), std::runtime_error);
  EXPECT_TRUE(busy) << "the failure must hit while layers are paged in";
  for (int s = 0; s < pg.slot_count(); ++s) {
    EXPECT_EQ(pg.slot_state(s), WeightPager::SlotState::EMPTY) << "slot " << s;
    EXPECT_EQ(pg.slot_layer(s), -1) << "slot " << s;
  }
  EXPECT_EQ(be->arena().in_use(), base) << "no slot or activation outlives the failed step";
  pg.install(tr.tape());  // the pager's own hook again
  const float l2 = tr.step(b2).loss;
  const std::vector<float> ref = reference_losses(false, plan, b1, b2);
  EXPECT_EQ(std::memcmp(&l1, &ref[0], 4), 0);
  EXPECT_EQ(std::memcmp(&l2, &ref[1], 4), 0) << l2 << " vs " << ref[1];
}

TEST(Paging, AnOutOfMemoryInForwardLeavesThePagerCleanAndTheNextStepExact) {
  TokenBatcher data(synthetic_tokens(20000, 61, 3), 2, 19);
  Batch b1 = data.next(), b2 = data.next();
  Batch big = TokenBatcher(synthetic_tokens(20000, 61, 4), 16, 256).next();
  auto be = make_cpu_backend(size_t(4) << 20);
  LlamaModel model(*be, cfg(), options(true, true));
  model.init_random(11);
  Trainer tr(*be, model, train_options(Plan::keep_everything(), fs::temp_directory_path().string()));
  WeightPager& pg = *model.pager();
  const float l1 = tr.step(b1).loss;
  const long uploads = pg.stats().uploads;
  EXPECT_THROW(tr.step(big), OutOfMemoryError);
  EXPECT_GT(pg.stats().uploads, uploads) << "the failure must come after paging started";
  for (int s = 0; s < pg.slot_count(); ++s) EXPECT_EQ(pg.slot_state(s), WeightPager::SlotState::EMPTY);
  const float l2 = tr.step(b2).loss;
  const std::vector<float> ref = reference_losses(true, Plan::keep_everything(), b1, b2);
  EXPECT_EQ(std::memcmp(&l1, &ref[0], 4), 0);
  EXPECT_EQ(std::memcmp(&l2, &ref[1], 4), 0) << l2 << " vs " << ref[1];
}

TEST(Paging, LayoutIsOneHostBlockAndTwoFixedSlots) {
  auto be = make_cpu_backend(size_t(64) << 20);
  be->arena().set_logging(true);
  LlamaModel model(*be, cfg(), options(false, true));
  WeightPager& pg = *model.pager();
  EXPECT_EQ(pg.slot_count(), 2);
  size_t paged = 0;
  for (auto& p : model.params()) {
    const int layer = LlamaModel::layer_of_param(p.name);
    if (p.page < 0) {
      EXPECT_TRUE(p.trainable || p.shape.nd == 1 || layer < 0) << p.name << " should be paged";
      continue;
    }
    ++paged;
    EXPECT_FALSE(p.trainable) << p.name;
    EXPECT_FALSE(p.master.allocated() || p.compute.allocated()) << p.name << " has a device buffer";
    // Layers L and L+2 share a slot: the same fixed address.
    Parameter* twin = model.find("model.layers." + std::to_string(layer ^ 2) + p.name.substr(p.name.find('.', 13)));
    ASSERT_NE(twin, nullptr) << p.name;
    EXPECT_EQ(twin->value().data, p.value().data) << p.name;
    Parameter* next = model.find("model.layers." + std::to_string(layer ^ 1) + p.name.substr(p.name.find('.', 13)));
    EXPECT_NE(next->value().data, p.value().data) << p.name;
  }
  EXPECT_EQ(paged, size_t(7 * kLayers));
  EXPECT_EQ(pg.host_bytes(), kLayers * pg.layer_bytes(0)) << "exact host size (these shapes need no padding)";
  EXPECT_EQ(pg.slot_bytes(), pg.layer_bytes(0));
  int slots = 0;
  for (auto& e : be->arena().events()) slots += e.tag.rfind("weights.page", 0) == 0;
  EXPECT_EQ(slots, 2);
  EXPECT_EQ(LlamaModel::layer_of_param("model.layers.12.mlp.up_proj.weight"), 12);
  EXPECT_EQ(LlamaModel::layer_of_param("model.norm.weight"), -1);
}

TEST(Paging, SavedWeightsRoundTripFromTheHostBlock) {
  const std::string dir = (fs::temp_directory_path() / ("strata-paging-" + std::to_string(::getpid()))).string();
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel paged(*be, cfg(), options(false, true)), plain(*be, cfg(), options(false, false));
  paged.init_random(21);
  plain.init_random(21);
  paged.save(dir);
  LlamaModel loaded(*be, cfg(), options(false, false));
  loaded.load(dir);
  for (size_t i = 0; i < plain.params().size(); ++i) {
    const Parameter &a = plain.params()[i], &b = loaded.params()[i];
    EXPECT_EQ(std::memcmp(a.value().data, b.value().data, a.value().bytes()), 0) << a.name;
  }
  fs::remove_all(dir);
}

TEST(Paging, IsRefusedOutsideATrainer) {
  // (Paging trainable weights, a full fine-tune: paging_ft_test.cpp.)
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel model(*be, cfg(), options(true, true));
  Tape tape(*be);  // no pager hook on it: the slots would hold nothing
  Buffer tok(be->arena(), DType::i32, Shape{4}, "t");
  EXPECT_THROW(model.build(tape, tok.view(), tok.view(), tok.view(), 1, 4), UnsupportedError);
}

}  // namespace

// A Trainer may outlive its model (the model's pager then detached itself from the trainer's
// tape): destroying the trainer reads nothing of the model. Under ASan this was a heap
// use-after-free in Trainer::~Trainer.
TEST(Paging, ATrainerOutlivingItsPagedModelIsDestroyedSafely) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.train_base = false;
  mo.train_norms = true;
  mo.page_layers = true;
  auto model = std::make_unique<LlamaModel>(*be, test_util::tiny_config(), mo);
  model->init_random(1);
  auto tr = std::make_unique<Trainer>(*be, *model, TrainOptions{});
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  EXPECT_TRUE(std::isfinite(tr->step(data.next()).loss));
  std::weak_ptr<WeightPager> pager = model->pager_handle();
  model.reset();
  EXPECT_TRUE(pager.expired());
  tr.reset();  // must not touch the deleted model
  SUCCEED();
}
