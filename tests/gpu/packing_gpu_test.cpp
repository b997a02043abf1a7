// Sample packing on the GPU: the flash kernel's packed attention (segments from positions that
// restart per example, attention_flash.cu) against the cpu reference with the same positions,
// forward and both backward modes, on segments that cross the kernel's 32-row tiles; then a packed
// batch through the whole cuda model against the cpu model and against the same examples in rows
// of their own. Tolerances as gemm_attention_gpu_test (NMSE out 1e-4, lse 1e-6, gradients 2e-4)
// and model_gpu_test (bf16 activations: loss 1e-2 relative, parameter gradients NMSE 5e-3).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/backend_cuda.h"
#include "kernels/attention_cuda.h"

using namespace strata;
using namespace gpu_test;
using strata::cuda::AttnShape;
using bf16 = __nv_bfloat16;

namespace {

std::vector<int32_t> positions_of(const std::vector<std::vector<int>>& rows) {
  std::vector<int32_t> pos;
  for (const auto& row : rows)
    for (int len : row)
      for (int i = 0; i < len; ++i) pos.push_back(i);
  return pos;
}

std::vector<float> add(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  return c;
}

struct Case {
  AttnShape s;
  std::vector<std::vector<int>> rows;  // segment lengths per row, each summing to T
};

class PackedFlash : public ::testing::TestWithParam<int> {};

TEST_P(PackedFlash, MatchesCpuReferenceWithSegments) {
  STRATA_REQUIRE_GPU();
  const int D = GetParam();
  // Segments of 1 token, ones ending mid-tile and across several 32-row tiles, a full row.
  const Case c{{2, 200, 8, 2, D}, {{1, 37, 64, 5, 90, 3}, {200}}};
  const AttnShape& s = c.s;
  const std::vector<int32_t> pos = positions_of(c.rows);
  ASSERT_EQ(pos.size(), size_t(s.B) * s.T);
  const size_t nq = size_t(s.B) * s.T * s.Hq * s.D, nkv = size_t(s.B) * s.T * s.Hkv * s.D;
  const size_t nl = size_t(s.B) * s.Hq * s.T;
  auto q = round_bf16(randn(nq, 21)), k = round_bf16(randn(nkv, 22)), v = round_bf16(randn(nkv, 23));
  auto dout = round_bf16(randn(nq, 24));
  std::vector<float> out(nq), lse(nl);
  strata::cpu::attention_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.T, s.Hq, s.Hkv, s.D,
                             pos.data());
  auto out_b = round_bf16(out);
  std::vector<float> dq(nq, 0.0f), dk(nkv, 0.0f), dv(nkv, 0.0f);
  strata::cpu::attention_bwd(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out_b.data(),
                             lse.data(), s.B, s.T, s.Hq, s.Hkv, s.D, true, true, true, pos.data());

  DevBuf<bf16> gq_in(nq), gk_in(nkv), gv_in(nkv), gdo(nq), go(nq), gq(nq), gk(nkv), gv(nkv);
  DevBuf<float> glse(nl);
  DevBuf<int32_t> gpos(pos.size());
  gq_in.upload(to_bf16(q));
  gk_in.upload(to_bf16(k));
  gv_in.upload(to_bf16(v));
  gdo.upload(to_bf16(dout));
  gpos.upload(pos);
  strata::cuda::flash_attention_fwd(go.p, glse.p, gq_in.p, gk_in.p, gv_in.p, s, nullptr, gpos.p);
  CUDA_OK(cudaDeviceSynchronize());
  const std::string tag = "D=" + std::to_string(D);
  EXPECT_TRUE(close(from_bf16(go.download()), out, 1e-4, "packed out " + tag));
  EXPECT_TRUE(close(glse.download(), lse, 1e-6, "packed lse " + tag));

  go.upload(to_bf16(out));
  glse.upload(lse);
  strata::cuda::flash_attention_bwd(gq.p, gk.p, gv.p, gdo.p, gq_in.p, gk_in.p, gv_in.p, go.p, glse.p, s, false, nullptr,
                                    gpos.p);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(close(from_bf16(gq.download()), dq, 2e-4, "packed dq " + tag));
  EXPECT_TRUE(close(from_bf16(gk.download()), dk, 2e-4, "packed dk " + tag));
  EXPECT_TRUE(close(from_bf16(gv.download()), dv, 2e-4, "packed dv " + tag));

  auto g0q = round_bf16(randn(nq, 25, 0.1f)), g0k = round_bf16(randn(nkv, 26, 0.1f)),
       g0v = round_bf16(randn(nkv, 27, 0.1f));
  gq.upload(to_bf16(g0q));
  gk.upload(to_bf16(g0k));
  gv.upload(to_bf16(g0v));
  strata::cuda::flash_attention_bwd(gq.p, gk.p, gv.p, gdo.p, gq_in.p, gk_in.p, gv_in.p, go.p, glse.p, s, true, nullptr,
                                    gpos.p);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(close(from_bf16(gq.download()), add(g0q, dq), 2e-4, "packed dq (accumulate) " + tag));
  EXPECT_TRUE(close(from_bf16(gk.download()), add(g0k, dk), 2e-4, "packed dk (accumulate) " + tag));
  EXPECT_TRUE(close(from_bf16(gv.download()), add(g0v, dv), 2e-4, "packed dv (accumulate) " + tag));

  // Packing changes the answer: plain causal attention over the row is far from it.
  strata::cuda::flash_attention_fwd(go.p, glse.p, gq_in.p, gk_in.p, gv_in.p, s, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_FALSE(close(from_bf16(go.download()), out, 1e-2, "causal out " + tag));
}

// Head dims of the kernel's three instantiations (32, 64, 128), odd ones included.
INSTANTIATE_TEST_SUITE_P(HeadDims, PackedFlash, ::testing::Values(7, 40, 64, 128));

io::LlamaConfig packed_config() {
  io::LlamaConfig c;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_hidden_layers = 2;
  c.vocab_size = 1000;
  c.rms_norm_eps = 1e-5f;
  return c;
}

// Examples of lengths `lens` (random ids, the first third of each a masked prompt) in rows of T:
// `rows[r]` lists row r's examples; packed rows carry positions restarting per example.
Batch lay(const std::vector<int>& lens, const std::vector<std::vector<int>>& rows, int T, bool packed) {
  std::vector<std::vector<int32_t>> ids;
  uint32_t st = 5;
  for (int n : lens) {
    ids.emplace_back();
    for (int i = 0; i < n; ++i) ids.back().push_back(int32_t(((st = st * 1103515245u + 12345u) >> 8) % 1000));
  }
  Batch b;
  b.B = int(rows.size());
  b.T = T;
  for (const auto& row : rows) {
    int used = 0;
    for (int e : row) {
      const auto& x = ids[size_t(e)];
      const int n = int(x.size());
      for (int i = 0; i < n; ++i) {
        b.inputs.push_back(x[size_t(i)]);
        b.targets.push_back(i + 1 < n && i >= n / 3 ? x[size_t(i) + 1] : -1);
        b.positions.push_back(i);
      }
      used += n;
    }
    for (int p = 0; used < T; ++used, ++p) {
      b.inputs.push_back(0);
      b.targets.push_back(-1);
      b.positions.push_back(p);
    }
  }
  if (!packed) b.positions.clear();
  return b;
}

struct Grads {
  float loss = 0;
  std::vector<float> g;  // every parameter gradient, concatenated
};

Grads run(Backend& be, const Batch& b) {
  LlamaModel model(be, packed_config(), {});
  model.init_random(9);
  Trainer tr(be, model, TrainOptions{});
  Grads out;
  out.loss = tr.compute_gradients(b);
  for (auto& p : model.params()) {
    std::vector<float> g(size_t(p.shape.numel()));
    be.download_f32(g.data(), p.grad_view());
    out.g.insert(out.g.end(), g.begin(), g.end());
  }
  return out;
}

TEST(PackedModelGpu, PackedBatchMatchesCpuAndRowsOfTheirOwn) {
  STRATA_REQUIRE_GPU();
  const std::vector<int> lens = {40, 150, 7, 33, 64, 1, 90};
  const int T = 256;
  const Batch packed = lay(lens, {{0, 1, 2, 3}, {4, 5, 6}}, T, true);  // 230 + pad, 155 + pad
  const Batch alone = lay(lens, {{0}, {1}, {2}, {3}, {4}, {5}, {6}}, T, false);
  auto gpu = make_cuda_backend(size_t(1) << 30);
  const Grads g_packed = run(*gpu, packed);
  const Grads g_alone = run(*gpu, alone);
  auto cpu_be = make_cpu_backend(size_t(1) << 30);
  const Grads c_packed = run(*cpu_be, packed);
  std::printf("[packing gpu] loss: cuda packed %.6f, cuda rows of their own %.6f, cpu packed %.6f\n", g_packed.loss,
              g_alone.loss, c_packed.loss);
  EXPECT_NEAR(g_packed.loss, c_packed.loss, 1e-2 * std::fabs(c_packed.loss));
  EXPECT_TRUE(close(g_packed.g, c_packed.g, 5e-3, "cuda packed vs cpu packed gradients"));
  // Unpacked rows take cuDNN, packed ones the flash kernel: equal up to bf16 rounding.
  EXPECT_NEAR(g_packed.loss, g_alone.loss, 1e-2 * std::fabs(g_alone.loss));
  EXPECT_TRUE(close(g_packed.g, g_alone.g, 5e-3, "cuda packed vs rows of their own"));
  // The same rows without positions (examples attending to each other) are another step.
  Batch mixed = packed;
  mixed.positions.clear();
  EXPECT_GT(std::fabs(run(*gpu, mixed).loss - c_packed.loss), 1e-3);
}

}  // namespace

#else
TEST(PackingGpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without CUDA";
}
#endif
