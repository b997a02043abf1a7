// ZeRO checkpoints resumed on another number of ranks (model/run/checkpoint.h): a checkpoint sharded over N ranks
// (or unsharded) loads on M ranks, sharded or not, each parameter's state taken from the shard of its owner
// among the N. The loaded weights, masters and moments are the saved ones bit for bit (a run that loads and
// saves again writes the same tensors and the same weights file), for every optimizer-state precision; the
// continued run is bit-identical to the unsharded path's on M ranks, bit-identical to the uninterrupted run
// where M == N and equal to it to float rounding otherwise (the gradients' sums over the ranks are another
// summation order, as data_parallel_test claims). A missing or foreign shard, a tensor of another shape and
// a checkpoint of another model are refused naming the file and the field or tensor.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "engine/comm.h"
#include "io/safetensors.h"
#include "model/data/data.h"
#include "model/data/row_data.h"
#include "model/run/checkpoint.h"
#include "model/train/trainer.h"
#include "tests/cpu/rank_threads.h"
#include "tests/cpu/run_result.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;
namespace fs = std::filesystem;

namespace {

// 6 rows a step: one global batch for 1, 2 and 3 ranks alike.
constexpr int kSteps = 5, kSaveAt = 2, kRows = 6, kSeq = 16;

struct RankRun {
  std::vector<float> losses;                // every step this run took
  std::vector<std::vector<float>> weights;  // after the last
  std::string checkpoint;                   // the one it saved, if any
};

enum class Mode {
  straight,  // kSteps steps, no checkpoint
  save,      // kSteps steps, a checkpoint after step kSaveAt into `dir`
  resume,    // from dir's checkpoint to kSteps
  resave,    // loads dir's checkpoint and saves it again at once into `out` (nothing trained)
};

struct Run {
  Run(int world_, int zero_, StateRecipe recipe_, Mode mode_, std::string dir_, std::string out_ = {})
      : world(world_), zero(zero_), recipe(recipe_), mode(mode_), dir(std::move(dir_)), out(std::move(out_)) {}
  int world, zero;
  StateRecipe recipe;
  Mode mode;
  std::string dir, out;
};

// One rank of r.world: rows [rank * per, (rank + 1) * per) of each global batch of kRows rows.
RankRun train(Communicator* comm, int rank, const Run& r) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.zero = {r.zero, rank, r.world};
  mo.recipe = r.recipe;
  LlamaModel model(*be, test_util::tiny_config(), mo);
  model.init_random(7);
  TrainOptions to = test_util::clipped_train_options();
  to.comm = comm;
  Trainer tr(*be, model, to);
  TokenRows rows(synthetic_tokens(2000, test_util::tiny_config().vocab_size, 5), kSeq);
  TrainConfig tc;
  tc.recipe = r.recipe;
  test_util::RankCheckpoints ck(
      *be, model, tr, checkpoint_config_json(tc, model.config(), rows.rows(), mo.zero.sharded() ? r.world : 0));
  RankRun out;
  int first = 0;
  if (r.mode == Mode::resume || r.mode == Mode::resave) {
    first = ck.resume(r.dir, kSaveAt);
    if (r.mode == Mode::resave) {
      out.checkpoint = ck.save(r.out, first);
      return out;
    }
  }
  const int per = kRows / r.world;
  for (int s = first; s < kSteps; ++s) {
    const Batch b = test_util::global_rows(rows, kSeq, kRows, s, rank * per, per);
    out.losses.push_back(tr.step(std::span<const Batch>(&b, 1), 1e-2f).loss);
    if (r.mode == Mode::save && s + 1 == kSaveAt) out.checkpoint = ck.save(r.dir, kSaveAt);
  }
  out.weights = test_util::model_weights(*be, model);
  return out;
}

// r.world ranks as threads; errors: each rank's message, else none may throw.
std::vector<RankRun> ranks(const Run& r, std::vector<std::string>* errors = nullptr) {
  return test_util::run_ranks_reporting<RankRun>(
      r.world, [&](Communicator* c, int k) { return train(c, k, r); }, errors,
      fmt::format("{} ranks, zero {}", r.world, r.zero));
}

std::string fresh_dir(const std::string& name) {
  return test_util::fresh_temp_dir("zero_reshard_" + name);
}

std::string ckpt(const std::string& dir) {
  return fmt::format("{}/checkpoint-{}", dir, kSaveAt);
}

using test_util::slurp;

// Every optimizer-state tensor of a checkpoint, whatever its layout: name -> dtype, shape and bytes.
std::map<std::string, std::string> state_tensors(const std::string& dir, int* files = nullptr) {
  std::map<std::string, std::string> out;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("optimizer")) continue;
    ++n;
    const io::SafetensorsFile f = io::SafetensorsFile::open(e.path().string());
    for (const io::TensorInfo& t : f.tensors()) {
      const std::string v = fmt::format("{} {} ", dtype_name(t.dtype), io::shape_str(t.shape)) +
                            std::string(reinterpret_cast<const char*>(f.data(t)), t.bytes);
      EXPECT_TRUE(out.emplace(t.name, v).second) << dir << ": " << t.name << " in two files";
    }
  }
  if (files) *files = n;
  return out;
}

// The state `b` holds is `a`'s bit for bit (names, dtypes, shapes, bytes), and so is its weights file.
void expect_same_state(const std::string& a, const std::string& b, const std::string& what) {
  const std::map<std::string, std::string> sa = state_tensors(a), sb = state_tensors(b);
  ASSERT_GT(sa.size(), 10u) << what;
  ASSERT_EQ(sa.size(), sb.size()) << what;
  int differ = 0;
  for (const auto& [name, v] : sa) {
    auto it = sb.find(name);
    ASSERT_NE(it, sb.end()) << what << ": " << name << " missing";
    if (it->second != v && differ++ < 5) ADD_FAILURE() << what << ": " << name << " differs";
  }
  EXPECT_EQ(differ, 0) << what;
  const std::string wa = slurp(a + "/model.safetensors"), wb = slurp(b + "/model.safetensors");
  EXPECT_GT(wa.size(), 1000u) << what;
  EXPECT_TRUE(wa == wb) << what << ": model.safetensors differs";
}

std::string recipe_name(const StateRecipe& r) {
  return fmt::format("{} master, {} moments", master_weights_name(r.master), optimizer_state_name(r.moments));
}

}  // namespace

// Sharded over 2 or 3 ranks (stage 1 or 2), or unsharded: loaded on 1, 2 and 3 ranks (stages 0, 1, 2) and
// saved again at once, the checkpoint holds the same tensors bit for bit in the new layout, and the same
// weights file, for every optimizer-state precision.
TEST(ZeroReshard, TheLoadedStateIsTheSavedStateBitForBitOnAnyRankCount) {
  const StateRecipe fp32{}, no_master{MasterWeights::none, OptimizerState::fp32},
      bf16m{MasterWeights::fp32, OptimizerState::bf16}, q8{MasterWeights::fp32, OptimizerState::q8};
  struct Saved {
    int world, zero;
    StateRecipe recipe;
  };
  for (const Saved s :
       {Saved{2, 1, fp32}, Saved{3, 2, q8}, Saved{2, 2, bf16m}, Saved{3, 1, no_master}, Saved{2, 0, q8}}) {
    const std::string name = fmt::format("{}r_z{}_{}", s.world, s.zero, optimizer_state_name(s.recipe.moments));
    const std::string dir = fresh_dir(name);
    ranks({s.world, s.zero, s.recipe, Mode::save, dir});
    int files = 0;
    state_tensors(ckpt(dir), &files);
    EXPECT_EQ(files, s.zero ? s.world : 1) << name;
    for (const auto& [world, zero] : {std::pair{1, 0}, std::pair{2, 1}, std::pair{3, 1}, std::pair{3, 2}}) {
      const std::string what = fmt::format("{} ranks at zero {} ({}) loaded on {} ranks at zero {}", s.world, s.zero,
                                           recipe_name(s.recipe), world, zero);
      const std::string out = fresh_dir(fmt::format("{}_on_{}r_z{}", name, world, zero));
      const std::vector<RankRun> rs = ranks({world, zero, s.recipe, Mode::resave, dir, out});
      ASSERT_EQ(rs[0].checkpoint, ckpt(out)) << what;
      int out_files = 0;
      state_tensors(ckpt(out), &out_files);
      EXPECT_EQ(out_files, zero && world > 1 ? world : 1) << what;
      expect_same_state(ckpt(dir), ckpt(out), what);
    }
  }
}

// Saved at step 2 by 2 ranks at ZeRO-1 (and by 3 at ZeRO-2), resumed on 1, 2 and 3 ranks to step 5 with the
// same global batch: bit-identical to the same checkpoint unsharded resumed on as many ranks at ZeRO-0 (the path
// that always took another rank count; stages 0, 1 and 2 train the same bits on cpu), bit-identical to the
// uninterrupted run on the same rank count, and equal to it to float rounding on another.
TEST(ZeroReshard, AResumeOnAnotherRankCountContinuesTheRun) {
  struct Saved {
    int world, zero;
  };
  for (const Saved s : {Saved{2, 1}, Saved{3, 2}}) {
    const std::string dir = fresh_dir(fmt::format("cont_{}r_z{}", s.world, s.zero)),
                      dir0 = fresh_dir(fmt::format("cont_{}r_z0", s.world));
    const std::vector<RankRun> straight = ranks({s.world, s.zero, {}, Mode::save, dir});
    const std::vector<RankRun> straight0 = ranks({s.world, 0, {}, Mode::save, dir0});
    test_util::expect_resumed_bit_identical(straight0[0], 0, straight[0], "zero 0 against the sharded run");
    for (const auto& [world, zero] : {std::pair{1, 0}, std::pair{2, 1}, std::pair{2, 2}, std::pair{3, 1}}) {
      const std::string what =
          fmt::format("{} ranks at zero {} resumed on {} ranks at zero {}", s.world, s.zero, world, zero);
      const std::vector<RankRun> resumed = ranks({world, zero, {}, Mode::resume, dir});
      const std::vector<RankRun> unsharded = ranks({world, 0, {}, Mode::resume, dir0});
      for (int r = 0; r < world; ++r) {
        const std::string rk = fmt::format("{}, rank {}", what, r);
        test_util::expect_resumed_bit_identical(unsharded[size_t(r)], 0, resumed[size_t(r)],
                                                rk + " against the unsharded checkpoint");
        ASSERT_EQ(resumed[size_t(r)].losses.size(), size_t(kSteps - kSaveAt)) << rk;
        if (world == s.world) {
          test_util::expect_resumed_bit_identical(straight[size_t(r)], kSaveAt, resumed[size_t(r)],
                                                  rk + " against the uninterrupted run");
          continue;
        }
        for (size_t i = 0; i < resumed[size_t(r)].losses.size(); ++i) {
          const float a = straight[0].losses[kSaveAt + i], b = resumed[size_t(r)].losses[i];
          EXPECT_NEAR(a, b, 2e-6f * std::fabs(a)) << rk << ", step " << kSaveAt + i;
        }
        test_util::expect_weights_close(straight[0].weights, resumed[size_t(r)].weights, rk);
      }
    }
  }
}

// A shard file gone: every rank of a sharded resume fails together, the ranks that need it naming the file,
// the field zero_shards and its value; an unsharded resume names them too.
TEST(ZeroReshard, AMissingShardIsNamedWithZeroShards) {
  const std::string dir = fresh_dir("missing");
  ranks({2, 1, {}, Mode::save, dir});
  const std::string gone = ckpt(dir) + "/optimizer.rank-1-of-2.safetensors";
  ASSERT_TRUE(fs::remove(gone));
  std::vector<std::string> errs;
  ranks({3, 1, {}, Mode::resume, dir}, &errs);
  ASSERT_EQ(errs.size(), 3u);
  int naming = 0;
  for (const std::string& e : errs) {
    EXPECT_NE(e.find("ranks could not load their shard of the checkpoint"), std::string::npos) << e;
    if (e.find(gone + ": missing") == std::string::npos) continue;
    ++naming;
    EXPECT_NE(e.find("zero_shards 2"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1's"), std::string::npos) << e;
  }
  EXPECT_EQ(naming, 3) << "every rank reads the weights of rank 1's parameters from it";
  std::string one;
  try {
    train(nullptr, 0, {1, 0, {}, Mode::resume, dir});
  } catch (const FormatError& e) {
    one = e.what();
  }
  EXPECT_NE(one.find(gone + ": missing"), std::string::npos) << one;
  EXPECT_NE(one.find("train_config.json has zero_shards 2"), std::string::npos) << one;
}

// A shard with a tensor of another shape, shards swapped between ranks, a zero_shards that is no rank count
// and a checkpoint of another model: each refused naming the file and the tensor or field.
TEST(ZeroReshard, ForeignOrCorruptedShardsAreRefusedNamingTheFileAndTensor) {
  const std::string dir = fresh_dir("corrupt");
  ranks({2, 1, {}, Mode::save, dir});
  const std::string s0 = ckpt(dir) + "/optimizer.rank-0-of-2.safetensors",
                    s1 = ckpt(dir) + "/optimizer.rank-1-of-2.safetensors";
  // One unsharded rank loads it; a refused checkpoint leaves the model's weights as they were (every check
  // runs before anything is copied in).
  auto load_one = [&](const io::LlamaConfig& cfg = test_util::tiny_config()) -> std::string {
    auto be = make_cpu_backend(size_t(64) << 20);
    LlamaModel model(*be, cfg, ModelOptions{});
    model.init_random(11);
    auto weights = [&] {
      std::vector<float> all;
      for (const Parameter& p : model.params()) {
        std::vector<float> h(size_t(p.shape.numel()));
        be->download_f32(h.data(), p.value());
        all.insert(all.end(), h.begin(), h.end());
      }
      return all;
    };
    const std::vector<float> before = weights();
    TokenRows rows(synthetic_tokens(2000, test_util::tiny_config().vocab_size, 5), kSeq);
    try {
      load_checkpoint(ckpt(dir), *be, model, checkpoint_config_json(TrainConfig{}, cfg, rows.rows()));
    } catch (const FormatError& e) {
      EXPECT_TRUE(weights() == before) << "a refused checkpoint changed the weights: " << e.what();
      return e.what();
    }
    EXPECT_FALSE(weights() == before) << "the checkpoint's weights were not loaded";
    return "no error";
  };
  EXPECT_EQ(load_one(), "no error");
  // Rank 1's shard rewritten with its first tensor one row short.
  const std::string saved1 = slurp(s1);
  {
    const io::SafetensorsFile f = io::SafetensorsFile::open(s1);
    std::vector<io::TensorToWrite> t;
    for (const io::TensorInfo& i : f.tensors()) t.push_back({i.name, i.dtype, i.shape, f.data(i)});
    ASSERT_GT(t[0].shape[0], 1);
    t[0].shape[0] -= 1;
    const std::string bad = t[0].name;
    const std::string tmp = s1 + ".new";
    io::save_safetensors(tmp, t);
    fs::rename(tmp, s1);
    const std::string m = load_one();
    EXPECT_NE(m.find(s1 + ": tensor " + bad + " is"), std::string::npos) << m;
    EXPECT_NE(m.find("this run needs"), std::string::npos) << m;
  }
  // The shards swapped: rank 0's parameters are in rank 1's file.
  fs::rename(s0, s1);
  { std::ofstream(s0, std::ios::binary) << saved1; }
  std::string m = load_one();
  EXPECT_NE(m.find("which a run over 2 ranks keeps in " + ckpt(dir) + "/optimizer.rank-"), std::string::npos) << m;
  EXPECT_NE(m.find("the shards are not this model's"), std::string::npos) << m;
  // zero_shards that is no rank count.
  const std::string cfg_path = ckpt(dir) + "/train_config.json";
  nlohmann::json j = nlohmann::json::parse(slurp(cfg_path));
  j["must_match"]["zero_shards"] = 1;
  std::ofstream(cfg_path) << j.dump(2);
  m = load_one();
  EXPECT_NE(m.find(cfg_path + ": field must_match.zero_shards is 1"), std::string::npos) << m;
  // Another model's shape is refused before any shard is read, naming the field.
  j["must_match"]["zero_shards"] = 2;
  std::ofstream(cfg_path) << j.dump(2);
  io::LlamaConfig other = test_util::tiny_config();
  other.intermediate_size += 8;
  m = load_one(other);
  EXPECT_NE(m.find(cfg_path + ": field model.intermediate_size is"), std::string::npos) << m;
}
