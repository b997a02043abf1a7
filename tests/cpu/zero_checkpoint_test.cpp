// ZeRO-1 and ZeRO-2 checkpoints (model/run/checkpoint.h): every rank writes its shard of the optimizer state, rank 0
// the rest. A run stopped and resumed from such a checkpoint is bit-identical to the uninterrupted one on cpu; its
// weights file equals an unsharded run's; a failure on one rank makes every rank fail and leaves no checkpoint and no
// temp behind. Another number of ranks resumes them: tests/cpu/zero_reshard_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <span>

#include "engine/comm.h"
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

constexpr int kSteps = 5, kSaveAt = 2, kRows = 4, kSeq = 16;

struct RankRun {
  std::vector<float> losses;                // every step this run took
  std::vector<std::vector<float>> weights;  // after the last
  std::string checkpoint;                   // the one it saved, if any
};

enum class Mode { straight, save, resume };

// One rank of `world` with ZeRO stage `zero`: kSteps steps of rows [rank * per, (rank + 1) * per) of each
// global batch. save: a checkpoint after step kSaveAt into `dir`. resume: starts from dir's checkpoint.
RankRun train(Communicator* comm, int world, int rank, int zero, Mode mode, const std::string& dir,
              const std::function<void(const std::string&)>& after_file = {}) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.zero = {zero, rank, world};
  LlamaModel model(*be, test_util::tiny_config(), mo);
  model.init_random(7);
  TrainOptions to = test_util::clipped_train_options();
  to.comm = comm;
  Trainer tr(*be, model, to);
  TokenRows rows(synthetic_tokens(2000, test_util::tiny_config().vocab_size, 5), kSeq);
  test_util::RankCheckpoints ck(
      *be, model, tr,
      checkpoint_config_json(TrainConfig{}, model.config(), rows.rows(), mo.zero.sharded() ? world : 0));
  RankRun out;
  int first = 0;
  if (mode == Mode::resume) first = ck.resume(dir, kSaveAt);
  const int per = kRows / world;
  for (int s = first; s < kSteps; ++s) {
    const Batch b = test_util::global_rows(rows, kSeq, kRows, s, rank * per, per);
    out.losses.push_back(tr.step(std::span<const Batch>(&b, 1), 1e-2f).loss);
    if (mode == Mode::save && s + 1 == kSaveAt && ck.saves()) {
      out.checkpoint = ck.save(dir, kSaveAt, after_file);
      if (after_file) return out;
    }
  }
  out.weights = test_util::model_weights(*be, model);
  return out;
}

// `world` ranks as threads; errors: each rank's message (the ranks are meant to fail together), else
// none may throw.
std::vector<RankRun> ranks(int world, const std::function<RankRun(Communicator*, int)>& f,
                           std::vector<std::string>* errors = nullptr) {
  return test_util::run_ranks_reporting<RankRun>(world, f, errors);
}

std::string fresh_dir(const std::string& name) {
  return test_util::fresh_temp_dir("zero_ckpt_" + name);
}

}  // namespace

TEST(ZeroCheckpoint, ResumedRunIsBitIdenticalAndItsWeightsFileIsTheUnshardedOne) {
  for (int world : {2, 4}) {
    const std::string dir = fresh_dir(fmt::format("w{}", world)), dir0 = fresh_dir(fmt::format("w{}_zero0", world));
    const std::vector<RankRun> straight =
        ranks(world, [&](Communicator* c, int r) { return train(c, world, r, 1, Mode::save, dir); });
    const std::vector<RankRun> resumed =
        ranks(world, [&](Communicator* c, int r) { return train(c, world, r, 1, Mode::resume, dir); });
    const std::string ck = straight[0].checkpoint;
    ASSERT_EQ(ck, fmt::format("{}/checkpoint-{}", dir, kSaveAt));
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(fs::exists(fmt::format("{}/optimizer.rank-{}-of-{}.safetensors", ck, r, world))) << r;
      EXPECT_EQ(straight[size_t(r)].checkpoint, ck) << "every rank returns the checkpoint's path";
      ASSERT_EQ(resumed[size_t(r)].losses.size(), size_t(kSteps - kSaveAt));
      test_util::expect_resumed_bit_identical(straight[size_t(r)], kSaveAt, resumed[size_t(r)],
                                              fmt::format("{} ranks, rank {} after the resume", world, r));
    }
    EXPECT_FALSE(fs::exists(ck + "/optimizer.safetensors"));
    // Stage 0 gives bit-identical weights on cpu, so rank 0's weights file equals an unsharded run's.
    const std::vector<RankRun> zero0 =
        ranks(world, [&](Communicator* c, int r) { return train(c, world, r, 0, Mode::save, dir0); });
    const std::string w1 = test_util::slurp(ck + "/model.safetensors"),
                      w0 = test_util::slurp(zero0[0].checkpoint + "/model.safetensors");
    EXPECT_GT(w1.size(), 1000u);
    EXPECT_TRUE(w1 == w0) << world
                          << " ranks: the sharded checkpoint's model.safetensors differs from the unsharded one's ("
                          << w1.size() << " and " << w0.size() << " bytes)";
    int left = 0;
    for (const auto& e : fs::directory_iterator(dir)) left += e.path().filename().string().starts_with(".");
    EXPECT_EQ(left, 0) << "no temp left in " << dir;
  }
}

TEST(ZeroCheckpoint, AFailureOnOneRankFailsEveryRankAndLeavesNothing) {
  const std::string dir = fresh_dir("fail");
  std::vector<std::string> errs;
  ranks(
      2,
      [&](Communicator* c, int r) {
        return train(c, 2, r, 1, Mode::save, dir, [r](const std::string& f) {
          if (r == 1 && f.starts_with("optimizer.rank-1")) throw IoError("disk full (test)", f);
        });
      },
      &errs);
  ASSERT_EQ(errs.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errs[size_t(r)].find("1 of 2 ranks could not write their shard"), std::string::npos) << errs[size_t(r)];
    EXPECT_NE(errs[size_t(r)].find(fmt::format("checkpoint-{}", kSaveAt)), std::string::npos) << errs[size_t(r)];
  }
  EXPECT_NE(errs[1].find("disk full (test)"), std::string::npos) << errs[1];
  EXPECT_TRUE(list_checkpoints(dir).empty());
  int left = 0;
  for (const auto& e : fs::directory_iterator(dir)) left += e.path().filename().string().starts_with(".");
  EXPECT_EQ(left, 0) << "no temp left in " << dir;
}

TEST(ZeroCheckpoint, ASaveWithoutTheRanksIsRefused) {
  auto be = make_cpu_backend(size_t(64) << 20);
  ModelOptions mo;
  mo.zero = {1, 0, 2};
  LlamaModel model(*be, test_util::tiny_config(), mo);
  try {
    save_checkpoint(fresh_dir("alone"), *be, model, CheckpointState{}, {});
    FAIL() << "no error";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("every rank"), std::string::npos) << e.what();
  }
}

// ZeRO-2 saves and loads ZeRO-1's shards (the same owners; gradients are never saved): a stage-2 run
// stopped and resumed is bit-identical to the uninterrupted one, and so is a stage-1 checkpoint resumed as
// stage 2 and a stage-2 one resumed as stage 1 on the same ranks (one micro-batch a step: the stages train
// the same bits on cpu, so their checkpoints are the same files byte for byte).
TEST(ZeroCheckpoint, StageTwoSavesStageOnesShardsAndEitherStageResumesTheOther) {
  for (int world : {2, 4}) {
    const std::string d1 = fresh_dir(fmt::format("s1_w{}", world)), d2 = fresh_dir(fmt::format("s2_w{}", world));
    const std::vector<RankRun> one =
        ranks(world, [&](Communicator* c, int r) { return train(c, world, r, 1, Mode::save, d1); });
    const std::vector<RankRun> two =
        ranks(world, [&](Communicator* c, int r) { return train(c, world, r, 2, Mode::save, d2); });
    const std::string ck1 = one[0].checkpoint, ck2 = two[0].checkpoint;
    ASSERT_EQ(ck2, fmt::format("{}/checkpoint-{}", d2, kSaveAt));
    std::vector<std::string> files{"model.safetensors"};
    for (int r = 0; r < world; ++r) files.push_back(fmt::format("optimizer.rank-{}-of-{}.safetensors", r, world));
    for (const std::string& f : files) {
      const std::string a = test_util::slurp(ck1 + "/" + f), b = test_util::slurp(ck2 + "/" + f);
      EXPECT_GT(b.size(), 100u) << f;
      EXPECT_TRUE(a == b) << world << " ranks: " << f << " of stage 2 differs from stage 1's";
    }
    EXPECT_FALSE(fs::exists(ck2 + "/optimizer.safetensors"));
    struct Resume {
      int stage;
      const std::string& dir;
      const std::vector<RankRun>& straight;
      const char* what;
    };
    for (const Resume& c : {Resume{2, d2, two, "stage 2 from stage 2"}, Resume{2, d1, one, "stage 2 from stage 1"},
                            Resume{1, d2, two, "stage 1 from stage 2"}}) {
      const std::vector<RankRun> resumed =
          ranks(world, [&](Communicator* k, int r) { return train(k, world, r, c.stage, Mode::resume, c.dir); });
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(resumed[size_t(r)].losses.size(), size_t(kSteps - kSaveAt)) << c.what;
        test_util::expect_resumed_bit_identical(
            c.straight[size_t(r)], kSaveAt, resumed[size_t(r)],
            fmt::format("{} ranks, rank {}, {} after the resume", world, r, c.what));
      }
    }
  }
}
