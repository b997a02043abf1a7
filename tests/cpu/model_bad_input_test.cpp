// Bad inputs to the model and the trainer: broken checkpoints and configs throw typed errors that
// name the file and the tensor or field; bad batches and token files are rejected before they
// index anything; and a step that throws (bad batch or out of memory) leaves no slot behind.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/error.h"
#include "io/atomic_file.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "io/tokens.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"
#include "tests/cpu/expect_error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kGolden = std::string(STRATA_TEST_DATA) + "/golden/gqa_untied";

using strata::test_util::catch_as;

bool contains(const std::string& s, const std::string& w) {
  return s.find(w) != std::string::npos;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class model_bad_input : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = ::testing::TempDir() + "strata_bad_XXXXXX";
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    ASSERT_TRUE(fs::exists(kGolden + "/model.safetensors")) << kGolden;
    fs::copy_file(kGolden + "/config.json", dir + "/config.json");
    fs::copy_file(kGolden + "/model.safetensors", dir + "/model.safetensors");
    cfg = io::read_llama_config(kGolden);
  }
  void TearDown() override { fs::remove_all(dir); }

  // Rewrites dir/model.safetensors from the golden file: `drop` is left out, `reshape` (if
  // named) gets `new_shape` with data of the matching size.
  void rewrite_weights(const std::string& drop, const std::string& reshape = "", std::vector<int64_t> new_shape = {}) {
    io::SafetensorsFile src = io::SafetensorsFile::open(kGolden + "/model.safetensors");
    std::vector<io::TensorToWrite> out;
    std::vector<std::vector<float>> hold;
    hold.reserve(src.tensors().size());
    for (const io::TensorInfo& t : src.tensors()) {
      if (t.name == drop) continue;
      if (t.name == reshape) {
        int64_t n = 1;
        for (int64_t d : new_shape) n *= d;
        hold.emplace_back(size_t(n), 0.5f);
        out.push_back({t.name, DType::f32, new_shape, hold.back().data()});
      } else {
        out.push_back({t.name, t.dtype, t.shape, src.data(t)});
      }
    }
    io::save_safetensors(dir + "/model.safetensors", out);
  }

  std::string dir;
  io::LlamaConfig cfg;
};

// ---- checkpoints

TEST_F(model_bad_input, golden_copy_loads) {
  // The unmodified copy is fine: the failures below come from the edits, not the setup.
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, io::read_llama_config(dir), ModelOptions{});
  EXPECT_NO_THROW(m.load(dir));
}

TEST_F(model_bad_input, missing_tensor_names_file_and_tensor) {
  const std::string missing = "model.layers.1.mlp.up_proj.weight";
  rewrite_weights(missing);
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, cfg, ModelOptions{});
  auto e = catch_as<FormatError>([&] { m.load(dir); });
  ASSERT_TRUE(e);
  std::string what = e->what();
  EXPECT_TRUE(contains(what, dir + "/model.safetensors")) << what;
  EXPECT_TRUE(contains(what, missing)) << what;
  EXPECT_EQ(e->field, missing);
  EXPECT_TRUE(contains(e->file, "model.safetensors")) << e->file;
}

TEST_F(model_bad_input, wrong_shape_names_file_tensor_and_both_shapes) {
  const std::string bad = "model.layers.0.self_attn.k_proj.weight";  // [32, 64] in the golden file
  rewrite_weights("", bad, {16, 64});
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, cfg, ModelOptions{});
  auto e = catch_as<FormatError>([&] { m.load(dir); });
  ASSERT_TRUE(e);
  std::string what = e->what();
  EXPECT_TRUE(contains(what, dir + "/model.safetensors")) << what;
  EXPECT_TRUE(contains(what, bad)) << what;
  EXPECT_TRUE(contains(what, "[16, 64]")) << what;
  EXPECT_TRUE(contains(what, "[32, 64]")) << what;
  EXPECT_EQ(e->field, bad);
}

TEST_F(model_bad_input, transposed_shape_with_the_same_size_is_still_rejected) {
  const std::string bad = "model.layers.1.mlp.down_proj.weight";  // [64, 96]
  rewrite_weights("", bad, {96, 64});
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, cfg, ModelOptions{});
  auto e = catch_as<FormatError>([&] { m.load(dir); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, bad);
  EXPECT_TRUE(contains(e->what(), "[96, 64]")) << e->what();
}

TEST_F(model_bad_input, config_that_disagrees_with_the_weights) {
  io::LlamaConfig wrong = cfg;
  wrong.intermediate_size = 128;  // the checkpoint has 96
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, wrong, ModelOptions{});
  auto e = catch_as<FormatError>([&] { m.load(dir); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(e->what(), "mlp.gate_proj.weight")) << e->what();
  EXPECT_TRUE(contains(e->what(), "[128, 64]")) << e->what();
}

TEST_F(model_bad_input, tied_config_against_untied_weights_loads_without_lm_head) {
  // A tied config needs no lm_head.weight; an untied one does.
  rewrite_weights("lm_head.weight");
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel untied(*be, cfg, ModelOptions{});
  auto e = catch_as<FormatError>([&] { untied.load(dir); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "lm_head.weight");
  io::LlamaConfig tied = cfg;
  tied.tie_word_embeddings = true;
  LlamaModel t(*be, tied, ModelOptions{});
  EXPECT_NO_THROW(t.load(dir));
}

TEST_F(model_bad_input, truncated_weights_file) {
  std::string bytes = slurp(dir + "/model.safetensors");
  io::write_file_atomic(dir + "/model.safetensors", std::string_view(bytes).substr(0, bytes.size() - 100));
  auto e = catch_as<FormatError>([&] { io::Checkpoint::open_dir(dir); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(e->what(), dir + "/model.safetensors")) << e->what();
}

TEST_F(model_bad_input, missing_weights_file_is_an_io_error_naming_the_dir) {
  fs::remove(dir + "/model.safetensors");
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, cfg, ModelOptions{});
  auto e = catch_as<IoError>([&] { m.load(dir); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(e->what(), dir)) << e->what();
}

// ---- config.json

void edit_config(const std::string& path, const std::function<void(json&)>& f) {
  json j = json::parse(slurp(path));
  f(j);
  io::write_file_atomic(path, j.dump(2));
}

TEST_F(model_bad_input, config_missing_a_required_field) {
  edit_config(dir + "/config.json", [](json& j) { j.erase("num_hidden_layers"); });
  auto e = catch_as<ConfigError>([&] { io::read_llama_config(dir); });
  ASSERT_TRUE(e);
  std::string what = e->what();
  EXPECT_TRUE(contains(what, dir + "/config.json")) << what;
  EXPECT_TRUE(contains(what, "num_hidden_layers")) << what;
  EXPECT_EQ(e->field, "num_hidden_layers");
  EXPECT_EQ(e->file, dir + "/config.json");
}

TEST_F(model_bad_input, config_fields_with_bad_values) {
  struct Case {
    const char* field;
    json value;
  };
  for (const Case& c : std::vector<Case>{{"hidden_size", "64"},
                                         {"vocab_size", 0},
                                         {"num_key_value_heads", 3},
                                         {"intermediate_size", -96},
                                         {"num_attention_heads", 4.5}}) {
    fs::copy_file(kGolden + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
    edit_config(dir + "/config.json", [&](json& j) { j[c.field] = c.value; });
    auto e = catch_as<ConfigError>([&] { io::read_llama_config(dir); });
    if (!e) {
      ADD_FAILURE() << c.field << " = " << c.value.dump() << " was accepted";
      continue;
    }
    EXPECT_EQ(e->field, c.field) << e->what();
    EXPECT_TRUE(contains(e->what(), dir + "/config.json")) << e->what();
  }
}

TEST_F(model_bad_input, config_that_is_not_json) {
  io::write_file_atomic(dir + "/config.json", "{\"hidden_size\": 64,");
  auto e = catch_as<ConfigError>([&] { io::read_llama_config(dir); });
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(e->what(), dir + "/config.json")) << e->what();
}

// ---- token files

TEST_F(model_bad_input, token_file_with_an_id_at_or_above_vocab) {
  const std::string path = dir + "/tokens.bin";
  std::vector<int32_t> toks(200, 7);
  toks[123] = cfg.vocab_size;  // 101: one past the last id
  io::write_tokens(path, toks);
  auto e = catch_as<FormatError>([&] { io::read_tokens(path, cfg.vocab_size, 17); });
  ASSERT_TRUE(e);
  std::string what = e->what();
  EXPECT_TRUE(contains(what, path)) << what;
  EXPECT_TRUE(contains(what, "vocab_size")) << what;
  EXPECT_TRUE(contains(what, "123")) << what;
  EXPECT_EQ(e->file, path);
  // The same file is fine for a larger vocabulary.
  EXPECT_EQ(io::read_tokens(path, cfg.vocab_size + 1, 17).size(), 200u);
}

TEST_F(model_bad_input, token_file_shorter_than_one_sequence) {
  const std::string path = dir + "/short.bin";
  io::write_tokens(path, std::vector<int32_t>(16, 1));
  const long seq = 16;
  auto e = catch_as<FormatError>([&] { io::read_tokens(path, cfg.vocab_size, seq + 1); });
  ASSERT_TRUE(e);
  std::string what = e->what();
  EXPECT_TRUE(contains(what, path)) << what;
  EXPECT_TRUE(contains(what, "16 tokens")) << what;
  EXPECT_TRUE(contains(what, "17")) << what;
  EXPECT_EQ(io::read_tokens(path, cfg.vocab_size, seq).size(), 16u);  // exactly enough for seq - 1
}

// ---- the trainer

Batch make_batch(int B, int T, int V, uint32_t seed = 1) {
  Batch b;
  b.B = B;
  b.T = T;
  for (int i = 0; i < B * T; ++i) {
    b.inputs.push_back(int32_t((i * 7 + seed) % uint32_t(V)));
    b.targets.push_back(int32_t((i * 7 + seed + 1) % uint32_t(V)));
  }
  return b;
}

TEST_F(model_bad_input, batch_token_out_of_vocab_throws_and_leaks_nothing) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, cfg, ModelOptions{});
  m.load(kGolden);
  Trainer tr(*be, m, TrainOptions{});
  const int B = 2, T = 8, V = cfg.vocab_size;
  // A good step first, so the batch buffers exist and in_use is the steady state.
  StepStats ok = tr.step(make_batch(B, T, V));
  EXPECT_TRUE(std::isfinite(ok.loss));
  const size_t before = be->arena().in_use();
  const size_t blocks = be->arena().live_blocks();

  struct Case {
    const char* what;
    Batch b;
  };
  std::vector<Case> cases;
  cases.push_back({"input == vocab", make_batch(B, T, V)});
  cases.back().b.inputs[5] = V;
  cases.push_back({"input far above vocab", make_batch(B, T, V)});
  cases.back().b.inputs[B * T - 1] = 1 << 30;
  cases.push_back({"negative input", make_batch(B, T, V)});
  cases.back().b.inputs[0] = -1;
  cases.push_back({"target == vocab", make_batch(B, T, V)});
  cases.back().b.targets[3] = V;
  for (auto& c : cases) {
    for (bool full_step : {true, false}) {
      auto e = catch_as<ConfigError>([&] {
        if (full_step) {
          tr.step(c.b);
        } else {
          tr.compute_gradients(c.b);
        }
      });
      if (!e) {
        ADD_FAILURE() << c.what;
        continue;
      }
      EXPECT_TRUE(contains(e->what(), "vocab_size")) << c.what << ": " << e->what();
      EXPECT_TRUE(contains(e->what(), std::to_string(V))) << c.what << ": " << e->what();
      EXPECT_EQ(be->arena().in_use(), before) << c.what;
      EXPECT_EQ(be->arena().live_blocks(), blocks) << c.what;
    }
  }
  // A rejected batch is not an optimizer step, and the trainer still works.
  EXPECT_EQ(tr.steps_done(), 1);
  StepStats again = tr.step(make_batch(B, T, V, 5));
  EXPECT_EQ(again.step, 2);
  EXPECT_TRUE(std::isfinite(again.loss));
  EXPECT_EQ(be->arena().in_use(), before);
}

TEST_F(model_bad_input, ignored_targets_are_allowed) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, cfg, ModelOptions{});
  m.load(kGolden);
  Trainer tr(*be, m, TrainOptions{});
  Batch b = make_batch(2, 8, cfg.vocab_size);
  b.targets[0] = -100;  // Hugging Face's ignore index
  EXPECT_NO_THROW(tr.compute_gradients(b));
}

TEST_F(model_bad_input, batch_with_the_wrong_size_throws) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, cfg, ModelOptions{});
  Trainer tr(*be, m, TrainOptions{});
  Batch b = make_batch(2, 8, cfg.vocab_size);
  b.targets.pop_back();
  const size_t before = be->arena().in_use();
  EXPECT_THROW(tr.step(b), Error);
  EXPECT_EQ(be->arena().in_use(), before);
  EXPECT_EQ(tr.steps_done(), 0);
}

// Slot classes the tape allocates during a step: activations per layer, the final norm and
// loss, and gradients of those.
const std::regex kSlotClass(R"(^(grad:)?(L[0-9]+\.|final_norm|loss).*)");

struct Sized {
  size_t base = 0;      // weights + optimizer state + trainer buffers + batch buffers
  size_t peak = 0;      // arena peak of one step
  size_t saved = 0;     // slots resident at the end of forward (backward starts from base + saved)
  size_t fwd_peak = 0;  // arena peak before backward (the LM head's forward holds x and its dx at once)
};

// Measures with a roomy arena what a step of this model needs.
Sized measure(const io::LlamaConfig& cfg, int B, int T, const Plan& plan) {
  auto be = make_cpu_backend(size_t(64) << 20);
  LlamaModel m(*be, cfg, ModelOptions{});
  m.load(kGolden);
  TrainOptions to;
  to.plan = plan;
  Trainer tr(*be, m, to);
  tr.plan_table(B, T);  // allocates the batch buffers, records nothing that outlives it
  Sized s;
  s.base = be->arena().in_use();
  be->arena().set_logging(true);
  StepStats st = tr.step(make_batch(B, T, cfg.vocab_size));
  s.peak = st.peak_device_bytes;
  s.saved = st.saved_bytes;
  for (auto& e : be->arena().events()) {
    if (e.tag == "grad:loss") break;  // backward's first allocation
    s.fwd_peak = std::max(s.fwd_peak, e.in_use);
  }
  EXPECT_EQ(be->arena().in_use(), s.base);
  return s;
}

// Builds a model + trainer on a cpu backend of `budget` bytes, runs one step that must run out
// of memory, and checks the error and that the arena is back where it was. Returns the tag.
std::string oom_step(const io::LlamaConfig& cfg, size_t budget, const Plan& plan, int B, int T) {
  auto be = make_cpu_backend(budget);
  LlamaModel m(*be, cfg, ModelOptions{});
  m.load(kGolden);
  TrainOptions to;
  to.plan = plan;
  Trainer tr(*be, m, to);
  tr.plan_table(B, T);  // the batch buffers: allocated once, kept across steps by design
  const size_t before = be->arena().in_use();
  const size_t blocks = be->arena().live_blocks();
  // Weights, grads and both moments per parameter; rope.inv_freq, two grad_norm scalars (this
  // step's and a deferred update's, model/train/optimizer.h), 3 batch buffers.
  EXPECT_EQ(blocks, m.params().size() * 4 + 3 + 3);
  auto e = catch_as<OutOfMemoryError>([&] { tr.step(make_batch(B, T, cfg.vocab_size)); });
  if (!e) {
    ADD_FAILURE() << "budget " << budget << " did not run out";
    return "";
  }
  EXPECT_EQ(e->tier, "device");
  EXPECT_EQ(e->budget_bytes, budget / Arena::kAlign * Arena::kAlign);  // the arena rounds down
  EXPECT_TRUE(std::regex_match(e->tag, kSlotClass)) << "tag '" << e->tag << "'";
  EXPECT_TRUE(contains(e->what(), "'" + e->tag + "'")) << e->what();
  EXPECT_TRUE(contains(e->what(), "device")) << e->what();
  EXPECT_EQ(be->arena().in_use(), before) << "slots leaked after OOM at '" << e->tag << "'";
  EXPECT_EQ(be->arena().live_blocks(), blocks) << "after OOM at '" << e->tag << "'";
  EXPECT_EQ(tr.steps_done(), 0);
  EXPECT_TRUE(tr.tape().values().empty());
  return e->tag;
}

TEST_F(model_bad_input, out_of_memory_mid_step_names_the_slot_and_releases_everything) {
  const int B = 2, T = 8;
  for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1)}) {
    SCOPED_TRACE(plan.preset);
    Sized need = measure(cfg, B, T, plan);
    ASSERT_GT(need.peak, need.base + need.saved) << "the peak should lie in backward";
    // Budgets from "weights only" up to just under the step's peak: every one must fail inside
    // the step, at a different point, and leave the arena as it found it.
    const int kSteps = 12;
    std::vector<std::string> tags;
    for (int k = 0; k < kSteps; ++k) {
      const size_t budget = need.base + (need.peak - need.base) * size_t(k) / kSteps;
      SCOPED_TRACE("budget " + std::to_string(budget));
      tags.push_back(oom_step(cfg, budget, plan, B, T));
    }
    EXPECT_EQ(tags.front(), "L0.input");  // no room at all: the very first activation fails
    // Forward fits, backward does not: the failure comes from a gradient (or a replay) slot.
    ASSERT_GT(need.peak, need.fwd_peak) << "the peak should lie in backward";
    const size_t bwd = need.fwd_peak + (need.peak - need.fwd_peak) / 2;
    std::string tag = oom_step(cfg, bwd, plan, B, T);
    if (plan.checkpoint_every == 0) {
      EXPECT_EQ(tag.rfind("grad:", 0), 0u) << tag;
    }
  }
}

TEST_F(model_bad_input, tape_is_empty_after_oom_in_compute_gradients) {
  const int B = 2, T = 8;
  Sized need = measure(cfg, B, T, Plan::keep_everything());
  auto be = make_cpu_backend(need.base + (need.peak - need.base) / 2);
  LlamaModel m(*be, cfg, ModelOptions{});
  m.load(kGolden);
  Trainer tr(*be, m, TrainOptions{});
  tr.plan_table(B, T);
  const size_t before = be->arena().in_use();
  EXPECT_THROW(tr.compute_gradients(make_batch(B, T, cfg.vocab_size)), OutOfMemoryError);
  EXPECT_TRUE(tr.tape().values().empty());
  EXPECT_TRUE(tr.tape().nodes().empty());
  EXPECT_EQ(be->arena().in_use(), before);
  // The same failure again: still nothing leaks (no state carried over from the first attempt).
  EXPECT_THROW(tr.compute_gradients(make_batch(B, T, cfg.vocab_size)), OutOfMemoryError);
  EXPECT_EQ(be->arena().in_use(), before);
}

}  // namespace
}  // namespace strata
