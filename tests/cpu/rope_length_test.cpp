// The rope table follows each batch's length through the Trainer, as transformers' dynamic_rope_update: on the
// dynamic_llama golden checkpoint (max_position_embeddings 8), a batch whose longest example stays within 8
// positions runs the unscaled table, a longer one the NTK-scaled table of its length, and a shorter batch still
// past 8 keeps the longest table seen until a batch within 8 resets it.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "engine/backend.h"
#include "io/hf_config.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"
#include "tests/golden_reference.h"

namespace strata {
namespace {

// The golden rows with their positions restarting at `starts` (packing): the longest example sets the length.
Batch packed(Batch b, std::initializer_list<int> starts) {
  b.positions.clear();
  for (int r = 0; r < b.B; ++r)
    for (int t = 0; t < b.T; ++t) {
      const bool start = t == 0 || std::find(starts.begin(), starts.end(), t) != starts.end();
      b.positions.push_back(start ? 0 : b.positions.back() + 1);
    }
  return b;
}

// A model loaded from `dir` with `cfg` and its Trainer on the cpu backend.
struct Loaded {
  std::unique_ptr<Backend> be = make_cpu_backend(size_t(256) << 20);
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Trainer> trainer;
  Loaded(const io::LlamaConfig& cfg, const std::string& dir) {
    model = std::make_unique<LlamaModel>(*be, cfg, ModelOptions{});
    model->load(dir);
    trainer = std::make_unique<Trainer>(*be, *model, TrainOptions{});
  }
  float loss(const Batch& b) { return trainer->evaluate(b); }
};

TEST(RopeLength, DynamicTableFollowsTheBatches) {
  const std::string dir = golden::dir("dynamic_llama");
  const io::LlamaConfig cfg = io::read_llama_config(dir + "/config.json");
  ASSERT_EQ(cfg.rope_scaling.type, RopeType::dynamic);
  ASSERT_EQ(cfg.max_position_embeddings, 8);
  io::LlamaConfig plain_cfg = cfg;
  plain_cfg.rope_scaling = RopeScaling{};
  auto ref = io::SafetensorsFile::open(dir + "/reference.safetensors");
  const Batch whole = golden::batch(ref);  // 13 tokens a row: length 13
  ASSERT_EQ(whole.T, 13);
  const Batch within = packed(whole, {7});  // examples of 7 and 6: length 7
  const Batch past = packed(whole, {10});   // examples of 10 and 3: length 10

  Loaded plain(plain_cfg, dir);
  const float plain_within = plain.loss(within), plain_past = plain.loss(past);

  Loaded fresh(cfg, dir);
  EXPECT_EQ(fresh.loss(within), plain_within) << "within max_position_embeddings: the unscaled table";
  const float past_own = fresh.loss(past);  // scaled for length 10
  EXPECT_NE(past_own, plain_past);

  Loaded grown(cfg, dir);
  grown.loss(whole);  // grows the table to length 13
  const float past_after_whole = grown.loss(past);
  EXPECT_NE(past_after_whole, past_own) << "a batch of 10 after one of 13 keeps the table of 13";
  EXPECT_EQ(grown.loss(within), plain_within) << "a batch within 8 resets the table";
  EXPECT_EQ(grown.loss(past), past_own) << "then a batch of 10 scales for 10 again";
}

}  // namespace
}  // namespace strata
