// strata-train on several ranks in its parallel modes: ZeRO stages 1 to 3 against stage 0 (and resumed from
// sharded checkpoints, on another rank count), sequence parallelism against one rank, and ZeRO-3 under
// sequence parallelism with recompute against ZeRO-2.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "tests/cpu/launch_helpers.h"
#include "tests/cpu/tool_runner.h"

using namespace strata;
using namespace strata::launch_util;

TEST(Launcher, StrataTrainZeroStagesOneToThreeMatchStageZeroBitForBit) {
  using namespace tool_test;
  Scratch dir;
  ASSERT_TRUE(scratch_with_tiny(dir, "strata_dp_zero"));
  const std::string common = " --gpus 2 --batch 2 --model " + quote(dir.path("tiny")) + " --data " +
                             quote(dir.path("tiny/tokens.bin")) + " --seq 32 --steps 3 --lr 3e-3 --backend cpu --json";
  const Proc z0 = dir.run(kTrain + " --save " + quote(dir.path("model_z0")) + common);
  ASSERT_EQ(z0.code, 0) << z0.err;
  const Proc z1 = dir.run(kTrain + " --zero-stage 1 --save " + quote(dir.path("model_z1")) + common);
  ASSERT_EQ(z1.code, 0) << z1.err;
  const std::vector<double> a = json_losses(z0.out), b = json_losses(z1.out);
  ASSERT_EQ(a.size(), 3u) << z0.out;
  EXPECT_EQ(a, b) << z1.out;
  const std::string m0 = slurp(dir.path("model_z0/model.safetensors")),
                    m1 = slurp(dir.path("model_z1/model.safetensors"));
  ASSERT_GT(m0.size(), 1000u);
  EXPECT_TRUE(m0 == m1) << "the saved models differ";
  // Sharded checkpoints: a run resumed from step 2's continues to the uninterrupted run's step 3 bit for bit,
  // and another rank count is refused naming zero_shards.
  const Proc ckpt = dir.run(kTrain + " --zero-stage 1 --save-steps 2 --save " + quote(dir.path("model_ckpt")) + common);
  ASSERT_EQ(ckpt.code, 0) << ckpt.err;
  EXPECT_EQ(json_losses(ckpt.out), a);
  EXPECT_FALSE(slurp(dir.path("model_ckpt/checkpoint-2/optimizer.rank-1-of-2.safetensors")).empty());
  const Proc resumed = dir.run(kTrain + " --zero-stage 1 --save " + quote(dir.path("model_resumed")) + " --resume " +
                               quote(dir.path("model_ckpt/checkpoint-2")) + common);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  const std::vector<double> c = json_losses(resumed.out);
  ASSERT_EQ(c.size(), 1u) << resumed.out;
  EXPECT_EQ(c[0], a[2]);
  EXPECT_TRUE(slurp(dir.path("model_resumed/model.safetensors")) == m0) << "the resumed run's saved model differs";
  // On 4 ranks with the same global batch (--batch 1) the checkpoint reshards: step 3 is the uninterrupted run's
  // to float rounding (the gradients summed over 4 ranks, not 2). Another global batch is refused naming
  // micro_batch_size and the rows a micro-step (4 ranks of 3 rows).
  auto on = [&](const char* ranks_batch) {
    return std::string(common).replace(common.find("--gpus 2 --batch 2"), 18, ranks_batch);
  };
  const Proc four = dir.run(kTrain + " --zero-stage 1 --resume " + quote(dir.path("model_ckpt/checkpoint-2")) +
                            on("--gpus 4 --batch 1"));
  ASSERT_EQ(four.code, 0) << four.err;
  const std::vector<double> f = json_losses(four.out);
  ASSERT_EQ(f.size(), 1u) << four.out;
  EXPECT_NEAR(f[0], a[2], 1e-5 * a[2]);
  const Proc wider = dir.run(kTrain + " --zero-stage 1 --resume " + quote(dir.path("model_ckpt/checkpoint-2")) +
                             on("--gpus 4 --batch 3"));
  EXPECT_NE(wider.code, 0);
  EXPECT_TRUE(has(wider.err, "field micro_batch_size is 2 in the checkpoint but 3")) << wider.err;
  EXPECT_TRUE(has(wider.err, "at its 4 rows (12 here)")) << wider.err;
  // ZeRO-2 (gradients reduced to their owners, the norm from per-parameter parts): the same losses and saved
  // model bit for bit; it resumes ZeRO-1's checkpoint (the same shards) to the same step 3.
  const Proc z2 = dir.run(kTrain + " --zero-stage 2 --save " + quote(dir.path("model_z2")) + common);
  ASSERT_EQ(z2.code, 0) << z2.err;
  EXPECT_EQ(json_losses(z2.out), a) << z2.out;
  EXPECT_TRUE(slurp(dir.path("model_z2/model.safetensors")) == m0) << "zero 2's saved model differs";
  const Proc z2_resumed =
      dir.run(kTrain + " --zero-stage 2 --resume " + quote(dir.path("model_ckpt/checkpoint-2")) + common);
  ASSERT_EQ(z2_resumed.code, 0) << z2_resumed.err;
  const std::vector<double> d = json_losses(z2_resumed.out);
  ASSERT_EQ(d.size(), 1u) << z2_resumed.out;
  EXPECT_EQ(d[0], a[2]);
  // ZeRO-3 (the layers' matrices on their owners, gathered per layer): stage 2's arithmetic, so the same losses and
  // saved model (every rank gathers, rank 0 writes) bit for bit; it resumes ZeRO-1's checkpoint to the same step 3.
  const Proc z3 = dir.run(kTrain + " --zero-stage 3 --save " + quote(dir.path("model_z3")) + common);
  ASSERT_EQ(z3.code, 0) << z3.err;
  EXPECT_EQ(json_losses(z3.out), a) << z3.out;
  EXPECT_TRUE(slurp(dir.path("model_z3/model.safetensors")) == m0) << "zero 3's saved model differs";
  const Proc z3_resumed =
      dir.run(kTrain + " --zero-stage 3 --resume " + quote(dir.path("model_ckpt/checkpoint-2")) + common);
  ASSERT_EQ(z3_resumed.code, 0) << z3_resumed.err;
  const std::vector<double> e = json_losses(z3_resumed.out);
  ASSERT_EQ(e.size(), 1u) << z3_resumed.out;
  EXPECT_EQ(e[0], a[2]);
  // strata-plan --gpus 2: ZeRO-2's rank peaks below ZeRO-1's, rank by rank (--rank).
  auto plan_peak = [&](int stage, int rank) {
    const Proc p = dir.run(kPlan + " --model " + quote(dir.path("tiny")) + " --seq 32 --batch 2 --gpus 2 --json" +
                           fmt::format(" --zero-stage {} --rank {}", stage, rank));
    EXPECT_EQ(p.code, 0) << p.err;
    const size_t at = p.out.find("\"peak_bytes\": ");
    return at == std::string::npos ? 0.0 : std::atof(p.out.c_str() + at + 14);
  };
  for (int rank : {0, 1}) {
    const double p1 = plan_peak(1, rank), p2 = plan_peak(2, rank), p3 = plan_peak(3, rank);
    EXPECT_GT(p2, 0.0);
    EXPECT_LT(p2, p1) << "rank " << rank;
    EXPECT_GT(p3, 0.0);
    EXPECT_NE(p3, p2) << "rank " << rank;
  }
  dir.remove();
}

// strata-train --sequence-parallel (ranks as processes): --gpus N --sequence-parallel N gives one rank's losses on
// the same rows to float rounding; --gpus 4 --sequence-parallel 2 (two data-parallel groups, each group's
// all-to-alls on a processes-mode communicator of its own) gives --gpus 2's. A length that does not split over the
// group and ranks the groups do not divide are refused, naming them.
TEST(Launcher, StrataTrainSequenceParallelMatchesOneRank) {
  using namespace tool_test;
  Scratch dir;
  ASSERT_TRUE(scratch_with_tiny(dir, "strata_sp_train"));
  const std::string common = " --model " + quote(dir.path("tiny")) + " --data " + quote(dir.path("tiny/tokens.bin")) +
                             " --steps 3 --lr 3e-3 --backend cpu --json";
  auto losses = [&](const std::string& flags) {
    const Proc p = dir.run(kTrain + flags + common);
    EXPECT_EQ(p.code, 0) << flags << ": " << p.err;
    return json_losses(p.out);
  };
  const std::vector<double> one = losses(" --seq 32 --batch 2");
  ASSERT_EQ(one.size(), 3u);
  for (const char* flags :
       {" --seq 32 --batch 2 --gpus 2 --sequence-parallel 2", " --seq 32 --batch 2 --gpus 4 --sequence-parallel 4"}) {
    const std::vector<double> sp = losses(flags);
    ASSERT_EQ(sp.size(), one.size()) << flags;
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(sp[i], one[i], 1e-5 * one[i]) << flags << ", step " << i + 1;
  }
  const std::vector<double> dp = losses(" --seq 32 --batch 1 --gpus 2");
  const std::vector<double> dpsp = losses(" --seq 32 --batch 1 --gpus 4 --sequence-parallel 2");
  ASSERT_EQ(dp.size(), 3u);
  ASSERT_EQ(dpsp.size(), dp.size());
  for (size_t i = 0; i < dp.size(); ++i) EXPECT_NEAR(dpsp[i], dp[i], 1e-5 * dp[i]) << "step " << i + 1;
  const Proc odd = dir.run(kTrain + " --seq 33 --gpus 2 --sequence-parallel 2" + common);
  EXPECT_NE(odd.code, 0);
  EXPECT_TRUE(has(odd.err, "sequence length 33 is not a multiple of 2")) << odd.err;
  const Proc three = dir.run(kTrain + " --seq 32 --gpus 3 --sequence-parallel 2" + common);
  EXPECT_NE(three.code, 0);
  EXPECT_TRUE(has(three.err, "sequence_parallel 2 does not divide the 3 ranks")) << three.err;
  dir.remove();
}

// ZeRO-3 under sequence parallelism (4 ranks in one group, each holding a quarter of every row), with
// every layer recomputed in backward (the gathered slots refilled for the replays): the same losses
// and saved model as ZeRO-2 on the same ranks, bit for bit (the same owners, reduces and norm parts).
TEST(Launcher, StrataTrainZeroThreeUnderSequenceParallelWithRecomputeMatchesStageTwo) {
  using namespace tool_test;
  Scratch dir;
  ASSERT_TRUE(scratch_with_tiny(dir, "strata_sp_zero3", " --layers 3"));
  {
    std::FILE* f = std::fopen(dir.path("gc.yaml").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("plan:\n  \"L*.input\": keep\n  \"L*\": recompute\n", f);
    std::fclose(f);
  }
  const std::string common = " --gpus 4 --sequence-parallel 4 --model " + quote(dir.path("tiny")) + " --data " +
                             quote(dir.path("tiny/tokens.bin")) + " --seq 64 --steps 3 --lr 3e-3 --backend cpu --json" +
                             " --config " + quote(dir.path("gc.yaml"));
  const Proc z2 = dir.run(kTrain + " --zero-stage 2 --save " + quote(dir.path("model_z2")) + common);
  ASSERT_EQ(z2.code, 0) << z2.err;
  const Proc z3 = dir.run(kTrain + " --zero-stage 3 --save " + quote(dir.path("model_z3")) + common);
  ASSERT_EQ(z3.code, 0) << z3.err;
  const std::vector<double> a = json_losses(z2.out), b = json_losses(z3.out);
  ASSERT_EQ(a.size(), 3u) << z2.out;
  EXPECT_EQ(a, b) << z3.out;
  EXPECT_NE(z3.err.find("recompute"), std::string::npos) << "the plan must recompute: " << z3.err;
  const std::string m2 = slurp(dir.path("model_z2/model.safetensors")),
                    m3 = slurp(dir.path("model_z3/model.safetensors"));
  ASSERT_GT(m2.size(), 1000u);
  EXPECT_TRUE(m2 == m3) << "the saved models differ";
}
