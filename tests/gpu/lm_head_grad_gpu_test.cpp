// The LM head's training variant on the cuda backend (lm_head_ce_fwd_grad: one logits GEMM per
// chunk, ce_chunk_fwd_bwd, then the dx and dw GEMMs; backward only ce_dx_from_saved) against the
// recomputing path (lm_head_ce_fwd, then lm_head_ce_bwd): the same kernels in the same order on
// the same inputs, so the loss, dx and dw must be the same bits, on odd shapes with ignored
// targets, a ragged last chunk, a frozen head and an accumulating dw. Then whole training steps
// with and without the variant on one backend: the same loss, and gradients equal up to the
// order of fp32 atomic adds (embedding, norm weights), which the variant does not change.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"
#include "small_llama.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/backend_cuda.h"

using namespace strata;

namespace {

std::vector<float> download(Backend& be, Tensor t) {
  std::vector<float> h(size_t(t.numel()));
  be.download_f32(h.data(), t);
  return h;
}

// Same bits, or both NaN (bf16 and fp32 downloads are exact in fp32).
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b,
                                     const std::string& what) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  size_t bad = 0, first = a.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) bad++, first = std::min(first, i);
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << a.size() << " differ, first at " << first
                                       << " (" << a[first] << " vs " << b[first] << ")";
}

struct Shape3 {
  int N, C, V, chunk;
};

TEST(LmHeadGradGpu, VariantIsForwardThenBackwardBitForBit) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(size_t(2) << 30);
  for (Shape3 s :
       {Shape3{37, 64, 1001, 16}, Shape3{300, 128, 4096, 128}, Shape3{64, 256, 32000, 64}, Shape3{5, 64, 128256, 4}})
    for (bool frozen : {false, true})
      for (bool acc_dw : {false, true}) {
        if (frozen && acc_dw) continue;
        const std::string tag = "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " V=" + std::to_string(s.V) +
                                " chunk=" + std::to_string(s.chunk) +
                                (frozen   ? " frozen"
                                 : acc_dw ? " acc"
                                          : "");
        Arena& a = be->arena();
        Buffer x(a, DType::bf16, Shape{s.N, s.C}, "x"), w(a, DType::bf16, Shape{s.V, s.C}, "w"),
            t(a, DType::i32, Shape{s.N}, "t");
        be->upload_f32(x.view(), gpu_test::randn(size_t(s.N) * s.C, 1, 1.0f).data());
        be->upload_f32(w.view(), gpu_test::randn(size_t(s.V) * s.C, 2, 0.05f).data());
        std::vector<int32_t> th(size_t(s.N));
        for (int i = 0; i < s.N; ++i) th[size_t(i)] = i % 7 == 3 ? -100 : int32_t((i * 7919) % s.V);
        th[size_t(s.N - 1)] = s.V - 1;
        be->upload_i32(t.view(), th.data());
        const std::vector<float> dw0 = gpu_test::randn(size_t(s.V) * s.C, 3, 0.01f);
        // The recomputing path.
        Buffer loss_ref(a, DType::f32, Shape{1}, "l"), lse(a, DType::f32, Shape{s.N}, "lse"),
            dloss(a, DType::f32, Shape{1}, "dl"), dx_ref(a, DType::bf16, Shape{s.N, s.C}, "dx"),
            dw_ref(a, DType::f32, Shape{s.V, s.C}, "dw");
        be->upload_f32(dw_ref.view(), dw0.data());
        be->fill(dloss.view(), 1.0f);
        be->lm_head_ce_fwd(loss_ref.view(), lse.view(), x.view(), w.view(), t.view(), s.chunk, s.V);
        be->lm_head_ce_bwd(dx_ref.view(), frozen ? Tensor() : dw_ref.view(), dloss.view(), x.view(), w.view(), t.view(),
                           lse.view(), s.chunk, s.V, false, acc_dw);
        // The variant, then its backward into a poisoned gradient.
        Buffer loss(a, DType::f32, Shape{1}, "l"), saved(a, DType::bf16, Shape{s.N, s.C}, "loss.dx"),
            dw(a, DType::f32, Shape{s.V, s.C}, "dw"), dx(a, DType::bf16, Shape{s.N, s.C}, "dx");
        be->upload_f32(dw.view(), dw0.data());
        be->fill(dx.view(), NAN);
        be->lm_head_ce_fwd_grad(loss.view(), saved.view(), frozen ? Tensor() : dw.view(), x.view(), w.view(), t.view(),
                                s.chunk, s.V, 1.0f, acc_dw);
        be->lm_head_ce_bwd_saved(dx.view(), dloss.view(), saved.view(), 1.0f, !frozen, false);
        EXPECT_TRUE(same_bits(download(*be, loss.view()), download(*be, loss_ref.view()), "loss " + tag));
        EXPECT_TRUE(same_bits(download(*be, dx.view()), download(*be, dx_ref.view()), "dx " + tag));
        EXPECT_TRUE(same_bits(download(*be, dw.view()), download(*be, dw_ref.view()), "dw " + tag));
        const std::vector<float> loss_h = download(*be, loss.view());
        EXPECT_TRUE(std::isfinite(loss_h[0])) << tag;
      }
}

TEST(LmHeadGradGpu, BackwardScalesTheSavedDxOrPoisonsIt) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(size_t(1) << 30);
  Arena& a = be->arena();
  const int64_t n = 1003;  // not a multiple of the vector width: the tail path too
  Buffer saved(a, DType::bf16, Shape{n}, "s"), dx(a, DType::bf16, Shape{n}, "dx"), dloss(a, DType::f32, Shape{1}, "d");
  be->upload_f32(saved.view(), gpu_test::randn(size_t(n), 4).data());
  const std::vector<float> s = download(*be, saved.view());
  be->fill(dloss.view(), 1.0f);
  be->fill(dx.view(), NAN);
  be->lm_head_ce_bwd_saved(dx.view(), dloss.view(), saved.view(), 1.0f, true, false);
  EXPECT_TRUE(same_bits(download(*be, dx.view()), s, "a copy at the seed"));
  be->lm_head_ce_bwd_saved(dx.view(), dloss.view(), saved.view(), 1.0f, true, true);
  std::vector<float> twice = download(*be, dx.view());
  for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(twice[i], 2.0f * s[i]) << i;  // x + x is exact in bf16
  be->fill(dloss.view(), 4.0f);
  be->lm_head_ce_bwd_saved(dx.view(), dloss.view(), saved.view(), 1.0f, false, false);
  std::vector<float> four = download(*be, dx.view());
  for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(four[i], 4.0f * s[i]) << i;
  be->lm_head_ce_bwd_saved(dx.view(), dloss.view(), saved.view(), 1.0f, true, false);
  for (float v : download(*be, dx.view())) ASSERT_TRUE(std::isnan(v)) << "dw was written for a loss gradient of 1";
}

TEST(LmHeadGradGpu, TrainingStepsMatchTheRecomputingPath) {
  STRATA_REQUIRE_GPU();
  ModelOptions frozen;
  frozen.train_base = false;
  frozen.train_norms = true;
  ModelOptions lora;
  lora.train_base = false;
  lora.lora.rank = 8;
  for (bool tied : {false, true})
    for (const auto& [name, base] :
         {std::pair{"full", ModelOptions{}}, std::pair{"frozen", frozen}, std::pair{"lora", lora}})
      for (const Plan& plan : {Plan::keep_everything(), Plan::gradient_checkpointing(1)}) {
        const std::string what = std::string(tied ? "tied " : "untied ") + name + " " + plan.preset;
        float losses[2];
        std::vector<float> grads[2];
        size_t peaks[2];
        // One backend for both: its GEMM and attention algorithms are tuned by timing at first use
        // and cached, so a second backend could pick others and round differently.
        auto be = make_cuda_backend(size_t(2) << 30);
        for (int variant = 0; variant < 2; ++variant) {
          io::LlamaConfig c = gpu_test::small_llama_config(3);
          c.tie_word_embeddings = tied;
          ModelOptions mo = base;
          mo.loss_chunk_tokens = 100;  // 512 tokens: five chunks of 100 and a ragged 12
          mo.loss_grad_in_forward = variant == 1;
          LlamaModel model(*be, c, mo);
          model.init_random(4);
          TrainOptions to;
          to.plan = plan;
          Trainer tr(*be, model, to);
          TokenBatcher data(synthetic_tokens(20000, c.vocab_size, 2), 2, 256);
          Batch b = data.next();
          for (int i = 0; i < 512; i += 9) b.targets[size_t(i)] = -100;
          be->arena().reset_peak();
          losses[variant] = tr.compute_gradients(b);
          peaks[variant] = be->arena().peak();
          for (auto& p : model.params()) {
            if (!p.trainable) continue;
            std::vector<float> g = download(*be, p.grad.view());
            grads[variant].insert(grads[variant].end(), g.begin(), g.end());
          }
        }
        EXPECT_EQ(losses[1], losses[0]) << what;
        EXPECT_TRUE(gpu_test::close(grads[1], grads[0], 1e-10, what));
        std::printf("[ lm head ] %-40s loss %.6f, peak %zu -> %zu bytes\n", what.c_str(), losses[0], peaks[0],
                    peaks[1]);
      }
}

}  // namespace

#else
TEST(LmHeadGradGpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without CUDA";
}
#endif
