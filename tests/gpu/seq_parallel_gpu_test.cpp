// Sequence parallelism on GPUs (model/llama/seq_parallel.h): the block-copy kernel against the cpu reference, and N
// ranks (one process per GPU, NCCL all-to-alls; the test re-executes itself as the ranks, as comm_gpu_test does)
// against one GPU on the same rows: each rank's logits are one GPU's logits of its tokens, and 6 training steps
// (clipping on) give one GPU's losses. Tolerances (bf16): the GEMMs run on T/N rows instead of T (cuBLASLt may pick
// other algorithms) and attention on H/N heads, so activations differ by bf16 rounding: logits within 0.03 + 1% of the
// logit's magnitude; losses within 5e-3 relative. Fewer than 2 GPUs, or a build without NCCL: those cases skip.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "gpu_test_util.h"
#include "model/run/launch.h"
#include "nccl_ranks.h"

#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/backend.h"
#include "engine/backend_cuda.h"
#include "model/train/trainer.h"
#endif
#ifdef STRATA_HAVE_NCCL
#include "engine/rendezvous.h"
#include "kernels/comm_nccl.h"
#endif

using namespace strata;

#ifdef STRATA_HAVE_CUDA
namespace {

// One copy through the cuda backend (bf16) and the cpu one (f32 of the same bf16 values).
void check_block_copy(const BlockCopy& c, int64_t n_in, int64_t n_out, bool accumulate) {
  auto gpu = make_cuda_backend(size_t(64) << 20);
  auto cpu = make_cpu_backend(size_t(64) << 20);
  const std::vector<float> in = gpu_test::round_bf16(gpu_test::randn(size_t(n_in), 7));
  const std::vector<float> out0 = gpu_test::round_bf16(gpu_test::randn(size_t(n_out), 8));
  Buffer gi(gpu->arena(), DType::bf16, Shape{n_in}, "in"), go(gpu->arena(), DType::bf16, Shape{n_out}, "out");
  Buffer ci(cpu->arena(), DType::f32, Shape{n_in}, "in"), co(cpu->arena(), DType::f32, Shape{n_out}, "out");
  gpu->upload_f32(gi.view(), in.data());
  gpu->upload_f32(go.view(), out0.data());
  cpu->upload_f32(ci.view(), in.data());
  cpu->upload_f32(co.view(), out0.data());
  gpu->block_copy(go.view(), gi.view(), c, accumulate);
  cpu->block_copy(co.view(), ci.view(), c, accumulate);
  std::vector<float> got(static_cast<size_t>(n_out)), want(static_cast<size_t>(n_out));
  gpu->download_f32(got.data(), go.view());
  cpu->download_f32(want.data(), co.view());
  // A copy moves bf16 values exactly; an add rounds the fp32 sum to bf16 once.
  EXPECT_TRUE(gpu_test::close(
      got, accumulate ? gpu_test::round_bf16(want) : want, accumulate ? 1e-7 : 0.0,
      fmt::format("block_copy {} x {} blocks of {}{}", c.outer, c.inner, c.e, accumulate ? " (+=)" : "")));
}

}  // namespace

TEST(SeqParallelGpu, BlockCopyMatchesTheCpuReference) {
  STRATA_REQUIRE_GPU();
  for (bool acc : {false, true}) {
    check_block_copy(BlockCopy::swap_axes(37, 4, 64), 37 * 4 * 64, 37 * 4 * 64, acc);  // 16-byte packs
    check_block_copy(BlockCopy::swap_axes(4, 3, 8 * 129), 4 * 3 * 8 * 129, 4 * 3 * 8 * 129, acc);
    check_block_copy(BlockCopy::swap_axes(5, 3, 12), 5 * 3 * 12, 5 * 3 * 12, acc);  // element by element
    // GQA replication: 2 heads of 24 to copy 1 of 3 (stride 3 heads) in 7 rows.
    check_block_copy({7, 2, 24, 48, 24, 144, 72}, 7 * 48, 7 * 144, acc);
  }
}
#endif

namespace {

int gpu_count() {
  return gpu_test::nccl_gpu_count();
}

bool is_child() {
  return gpu_test::is_rank_child("STRATA_SP_GPU_CHILD");
}

}  // namespace

TEST(SeqParallelGpu, RanksMatchOneGpuOnTheSameRows) {
  if (is_child()) GTEST_SKIP() << "child rank: runs SeqParallelGpuChild.*";
  const int n = gpu_count();
  if (n < 2) GTEST_SKIP() << "needs >= 2 GPUs and a build with NCCL; this host has " << n << " usable";
  for (int ranks : {2, 4}) {
    if (ranks > n) break;
    const int rc =
        gpu_test::run_child_ranks("seq_parallel_gpu_test", ranks, "SeqParallelGpuChild.*", "STRATA_SP_GPU_CHILD");
    EXPECT_EQ(rc, 0) << ranks << " ranks";
  }
}

#ifdef STRATA_HAVE_NCCL
namespace {

io::LlamaConfig small_config() {
  io::LlamaConfig c;
  c.hidden_size = 256;
  c.intermediate_size = 640;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;  // replicated on 4 ranks
  c.head_dim = 32;
  c.vocab_size = 509;
  c.max_position_embeddings = 4096;
  return c;
}

Batch rows_of(int step, int B, int T, int V) {
  Batch b{B, T, std::vector<int32_t>(size_t(B) * T), std::vector<int32_t>(size_t(B) * T), {}};
  for (int i = 0; i < B * T; ++i) {
    b.inputs[size_t(i)] = int32_t((i * 7 + step * 13 + (i / 5) * 3) % V);
    b.targets[size_t(i)] = i % 11 == 0 ? -1 : int32_t((i * 7 + 7 + step * 13) % V);
  }
  return b;
}

struct GpuRun {
  std::vector<float> logits, losses;
};

GpuRun run(Backend& be, Communicator* sp, const Plan& plan) {
  ModelOptions mo;
  LlamaModel model(be, small_config(), mo);
  model.init_random(5);
  TrainOptions to;
  to.adam.lr = 1e-3f;
  to.max_grad_norm = 0.5f;
  to.plan = plan;
  to.seq_comm = sp;
  Trainer tr(be, model, to);
  GpuRun r;
  tr.compute_gradients(rows_of(0, 2, 512, small_config().vocab_size), &r.logits);
  for (int s = 0; s < 6; ++s) r.losses.push_back(tr.step(rows_of(s, 2, 512, small_config().vocab_size)).loss);
  return r;
}

}  // namespace

TEST(SeqParallelGpuChild, LogitsAndLosses) {
  if (!is_child()) GTEST_SKIP() << "runs as a rank of SeqParallelGpu.RanksMatchOneGpuOnTheSameRows";
  LaunchEnv env = read_launch_env();
  env.timeout_s = 120;
  auto rdv = Rendezvous::join(env.rendezvous());
  ASSERT_EQ(cudaSetDevice(env.local_rank), cudaSuccess);
  auto be = make_cuda_backend(size_t(4) << 30);
  auto comm = make_nccl_communicator(*rdv, NcclOptions{env.local_rank, be->native_stream(), 120});
  const int n = comm->world(), r = comm->rank(), T = 512, Tl = T / n, V = small_config().vocab_size;
  const GpuRun one = run(*be, nullptr, Plan::keep_everything());
  for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing()}) {
    const GpuRun sp = run(*be, comm.get(), plan);
    ASSERT_EQ(sp.logits.size(), size_t(2) * Tl * V);
    long bad = 0;
    for (int row = 0; row < 2; ++row)
      for (int t = 0; t < Tl; ++t)
        for (int v = 0; v < V; ++v) {
          const float want = one.logits[(size_t(row) * T + size_t(r) * Tl + t) * V + v];
          const float got = sp.logits[(size_t(row) * Tl + t) * V + v];
          if (!(std::fabs(got - want) <= 0.03f + 0.01f * std::fabs(want)) && bad++ < 5)
            ADD_FAILURE() << plan.preset << ": rank " << r << " row " << row << " token " << r * Tl + t << " logit "
                          << v << ": " << got << " vs one GPU's " << want;
        }
    EXPECT_EQ(bad, 0) << plan.preset << ", rank " << r << " of " << n;
    for (size_t s = 0; s < one.losses.size(); ++s)
      EXPECT_NEAR(sp.losses[s], one.losses[s], 5e-3f * std::fabs(one.losses[s]))
          << plan.preset << ", step " << s << ", rank " << r << " of " << n;
  }
}
#endif
