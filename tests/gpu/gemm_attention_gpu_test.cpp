// cuBLASLt GEMMs and cuDNN / fallback attention against the cpu references (kernels/linear.h,
// kernels/attention.h), fed the same bf16-rounded inputs. Outputs are poisoned (NaN) before each
// run so an unwritten element fails the NaN check.
#include "tests/gpu/gpu_test_util.h"

#ifdef STRATA_HAVE_CUDA
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/attention.h"
#include "kernels/attention_cuda.h"
#include "kernels/attention_workspace.h"
#include "kernels/gemm_cuda.h"
#include "kernels/linear.h"

using namespace gpu_test;
using strata::cuda::Attention;
using strata::cuda::AttnShape;
using strata::cuda::bf16;
using strata::cuda::Gemm;

namespace {

template <class T>
void poison(DevBuf<T>& b) {
  cudaMemset(b.p, 0xff, b.n * sizeof(T));  // all-ones: NaN in bf16 and fp32
}

std::vector<float> add(std::vector<float> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); i++) a[i] += b[i];
  return a;
}

struct GemmFixture {
  DevBuf<char> ws{Gemm::kWorkspaceBytes};
  Gemm gemm{ws.p, Gemm::kWorkspaceBytes};
};

struct LinShape {
  int N, I, O;
};
const LinShape kLinShapes[] = {{37, 129, 250}, {64, 256, 512}, {1, 8, 3}};

}  // namespace

TEST(GemmGpu, LinearFwd) {
  STRATA_REQUIRE_GPU();
  GemmFixture f;
  for (auto [N, I, O] : kLinShapes) {
    auto x = round_bf16(randn(size_t(N) * I, 1)), w = round_bf16(randn(size_t(O) * I, 2, 0.1f));
    std::vector<float> want(size_t(N) * O);
    strata::cpu::linear_fwd(want.data(), x.data(), w.data(), N, I, O);
    DevBuf<bf16> dx(x.size()), dw(w.size()), dy(want.size());
    dx.upload(to_bf16(x));
    dw.upload(to_bf16(w));
    poison(dy);
    f.gemm.linear_fwd(dy.p, dx.p, dw.p, N, I, O, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(close(from_bf16(dy.download()), want, 2e-5,
                      "linear_fwd " + std::to_string(N) + "x" + std::to_string(I) + "x" + std::to_string(O)));
  }
}

TEST(GemmGpu, LinearBwdDx) {
  STRATA_REQUIRE_GPU();
  GemmFixture f;
  for (auto [N, I, O] : kLinShapes)
    for (bool acc : {false, true}) {
      auto dy = round_bf16(randn(size_t(N) * O, 3)), w = round_bf16(randn(size_t(O) * I, 4, 0.1f));
      auto dx0 = round_bf16(randn(size_t(N) * I, 5));
      std::vector<float> want = acc ? dx0 : std::vector<float>(dx0.size(), 0.0f);
      strata::cpu::linear_bwd(want.data(), nullptr, dy.data(), nullptr, w.data(), N, I, O, true, true);
      DevBuf<bf16> ddy(dy.size()), dw(w.size()), ddx(dx0.size());
      ddy.upload(to_bf16(dy));
      dw.upload(to_bf16(w));
      if (acc)
        ddx.upload(to_bf16(dx0));
      else
        poison(ddx);
      f.gemm.linear_bwd_dx(ddx.p, ddy.p, dw.p, N, I, O, acc, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(close(from_bf16(ddx.download()), want, 2e-5,
                        "linear_bwd_dx N=" + std::to_string(N) + " accumulate=" + std::to_string(acc)));
    }
}

TEST(GemmGpu, LinearBwdDw) {
  STRATA_REQUIRE_GPU();
  GemmFixture f;
  for (auto [N, I, O] : kLinShapes)
    for (bool acc : {false, true}) {
      auto dy = round_bf16(randn(size_t(N) * O, 6)), x = round_bf16(randn(size_t(N) * I, 7));
      auto dw0 = randn(size_t(O) * I, 8);  // fp32 gradient already holding a value
      std::vector<float> want = acc ? dw0 : std::vector<float>(dw0.size(), 0.0f);
      DevBuf<float> ddw(want.size());
      if (acc)
        ddw.upload(dw0);
      else
        poison(ddw);
      strata::cpu::linear_bwd(nullptr, want.data(), dy.data(), x.data(), nullptr, N, I, O, true, true);
      DevBuf<bf16> ddy(dy.size()), dx(x.size());
      ddy.upload(to_bf16(dy));
      dx.upload(to_bf16(x));
      f.gemm.linear_bwd_dw(ddw.p, ddy.p, dx.p, N, I, O, acc, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(close(ddw.download(), want, 1e-6,
                        "linear_bwd_dw N=" + std::to_string(N) + " accumulate=" + std::to_string(acc)));
    }
}

TEST(GemmGpu, LogitsF32) {
  STRATA_REQUIRE_GPU();
  GemmFixture f;
  for (auto [n, C, V] : {LinShape{37, 64, 1001}, LinShape{128, 256, 4096}}) {
    auto x = round_bf16(randn(size_t(n) * C, 9)), w = round_bf16(randn(size_t(V) * C, 10, 0.1f));
    std::vector<float> want(size_t(n) * V);
    strata::cpu::linear_fwd(want.data(), x.data(), w.data(), n, C, V);
    DevBuf<bf16> dx(x.size()), dw(w.size());
    DevBuf<float> dl(want.size());
    dx.upload(to_bf16(x));
    dw.upload(to_bf16(w));
    poison(dl);
    f.gemm.logits_f32(dl.p, dx.p, dw.p, n, C, V, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(close(dl.download(), want, 1e-6, "logits_f32 V=" + std::to_string(V)));
  }
}

namespace {

std::string str(const AttnShape& s) {
  char b[96];
  std::snprintf(b, sizeof b, "B=%d T=%d Hq=%d Hkv=%d D=%d", s.B, s.T, s.Hq, s.Hkv, s.D);
  return b;
}

// Runs fwd, bwd (overwrite) and bwd (accumulate) on the path the Attention object picks and
// compares everything with the cpu reference. Returns the path that ran.
std::string check_attention(Attention& attn, const AttnShape& s) {
  const size_t nq = size_t(s.B) * s.T * s.Hq * s.D, nkv = size_t(s.B) * s.T * s.Hkv * s.D;
  const size_t nl = size_t(s.B) * s.Hq * s.T;
  auto q = round_bf16(randn(nq, 11)), k = round_bf16(randn(nkv, 12)), v = round_bf16(randn(nkv, 13));
  auto dout = round_bf16(randn(nq, 14));
  std::vector<float> out(nq), lse(nl);
  strata::cpu::attention_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), s.B, s.T, s.Hq, s.Hkv, s.D);
  // The backward is checked on the reference forward's outputs as the GPU sees them (bf16 out).
  auto out_b = round_bf16(out);
  std::vector<float> dq(nq, 0.0f), dk(nkv, 0.0f), dv(nkv, 0.0f);
  strata::cpu::attention_bwd(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out_b.data(),
                             lse.data(), s.B, s.T, s.Hq, s.Hkv, s.D, true, true, true);

  const std::string path = attn.path(s);
  std::printf("[attention] %s -> path: %s\n", str(s).c_str(), path.c_str());
  const size_t ws_f = attn.workspace_bytes(s, false), ws_b = attn.workspace_bytes(s, true);
  DevBuf<char> ws(std::max(ws_f, ws_b));
  DevBuf<bf16> dq_(nq), dk_(nkv), dv_(nkv), do_(nq), o_(nq), gq(nq), gk(nkv), gv(nkv);
  DevBuf<float> dlse(nl);
  dq_.upload(to_bf16(q));
  dk_.upload(to_bf16(k));
  dv_.upload(to_bf16(v));
  do_.upload(to_bf16(dout));
  poison(o_);
  poison(dlse);
  attn.fwd(o_.p, dlse.p, dq_.p, dk_.p, dv_.p, s, ws.p, ws_f, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::string tag = str(s) + " [" + path.substr(0, 8) + "]";
  EXPECT_TRUE(close(from_bf16(o_.download()), out, 1e-4, "out " + tag));
  EXPECT_TRUE(close(dlse.download(), lse, 1e-6, "lse " + tag));

  // Backward from the reference out/lse, overwriting poisoned gradients.
  DevBuf<float> rl(nl);
  o_.upload(to_bf16(out));
  rl.upload(lse);
  poison(gq);
  poison(gk);
  poison(gv);
  // An overwrite needs only the smaller workspace (no dq/dk/dv scratch): given exactly that.
  const size_t ws_over = attn.workspace_bytes(s, true, false);
  EXPECT_LE(ws_over, ws_b);
  attn.bwd(gq.p, gk.p, gv.p, do_.p, dq_.p, dk_.p, dv_.p, o_.p, rl.p, s, false, ws.p, ws_over, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(close(from_bf16(gq.download()), dq, 2e-4, "dq " + tag));
  EXPECT_TRUE(close(from_bf16(gk.download()), dk, 2e-4, "dk " + tag));
  EXPECT_TRUE(close(from_bf16(gv.download()), dv, 2e-4, "dv " + tag));

  // Accumulate onto existing gradients.
  auto g0q = round_bf16(randn(nq, 15, 0.1f)), g0k = round_bf16(randn(nkv, 16, 0.1f)),
       g0v = round_bf16(randn(nkv, 17, 0.1f));
  gq.upload(to_bf16(g0q));
  gk.upload(to_bf16(g0k));
  gv.upload(to_bf16(g0v));
  attn.bwd(gq.p, gk.p, gv.p, do_.p, dq_.p, dk_.p, dv_.p, o_.p, rl.p, s, true, ws.p, ws_b, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(close(from_bf16(gq.download()), add(g0q, dq), 2e-4, "dq (accumulate) " + tag));
  EXPECT_TRUE(close(from_bf16(gk.download()), add(g0k, dk), 2e-4, "dk (accumulate) " + tag));
  EXPECT_TRUE(close(from_bf16(gv.download()), add(g0v, dv), 2e-4, "dv (accumulate) " + tag));
  return path;
}

const AttnShape kCudnnShapes[] = {
    {2, 100, 8, 2, 64}, {2, 100, 4, 4, 128}, {1, 256, 8, 2, 128}, {2, 256, 4, 4, 64}, {1, 1, 4, 2, 64},
};

}  // namespace

// cuDNN path (where cuDNN accepts the shape; the path and any reason are printed).
TEST(AttentionGpu, Cudnn) {
  STRATA_REQUIRE_GPU();
  Attention::set_force_fallback(false);
  Attention attn;
  for (const AttnShape& s : kCudnnShapes) {
    const std::string path = check_attention(attn, s);
    // Set STRATA_ALLOW_ATTN_FALLBACK=1 on hosts whose cuDNN is known to decline.
    if (!std::getenv("STRATA_ALLOW_ATTN_FALLBACK")) {
      EXPECT_EQ(path, "cudnn") << str(s);
    }
  }
}

// Every head dim the cuda backend sends to cuDNN (attention_uses_cudnn: D % 8 == 0, up to 256) must take it,
// forward and backward: the sim prices and places cuDNN's workspaces for them, so a shape cuDNN declined at run
// time (the fallback has none) would break the forecast's byte-exact peak. Odd lengths, GQA and MHA.
TEST(AttentionGpu, CudnnTakesEveryHeadDimItIsSent) {
  STRATA_REQUIRE_GPU();
  Attention::set_force_fallback(false);
  Attention attn;
  for (int D : {8, 24, 80, 96, 160, 192, 256})
    for (const AttnShape& s : {AttnShape{1, 131, 4, 2, D}, AttnShape{2, 64, 3, 3, D}}) {
      ASSERT_TRUE(strata::attention_uses_cudnn(D));
      const std::string path = check_attention(attn, s);
      std::printf("[attention] %s: %s\n", str(s).c_str(), path.c_str());
      EXPECT_EQ(path, "cudnn") << str(s);
    }
}

// Every candidate the tuner may pick (each engine config and backward graph variant that fits the
// workspace) against the cpu reference: timing alone chooses among them.
TEST(AttentionGpu, EveryCudnnCandidate) {
  STRATA_REQUIRE_GPU();
  Attention::set_force_fallback(false);
  Attention attn;
  for (const AttnShape& s : {AttnShape{2, 100, 8, 2, 64}, AttnShape{1, 256, 8, 2, 128}}) {
    if (std::string(attn.path(s)) != "cudnn") continue;
    for (bool backward : {false, true}) {
      const size_t n = attn.candidate_count(s, backward);
      EXPECT_GE(n, 1u) << str(s);
      for (size_t i = 0; i < n; i++) {
        Attention::set_force_candidate(backward, int(i));
        std::printf("[attention] %s %s candidate %zu of %zu: %s\n", str(s).c_str(), backward ? "bwd" : "fwd", i, n,
                    attn.plan_label(s, backward).c_str());
        check_attention(attn, s);
      }
      Attention::set_force_candidate(backward, -1);
    }
  }
}

TEST(AttentionGpu, Fallback) {
  STRATA_REQUIRE_GPU();
  Attention::set_force_fallback(true);
  Attention attn;
  for (const AttnShape& s : kCudnnShapes) check_attention(attn, s);
  for (const AttnShape& s : {AttnShape{2, 100, 8, 2, 40}, AttnShape{1, 77, 3, 1, 24}, AttnShape{1, 130, 2, 2, 96}})
    check_attention(attn, s);
  Attention::set_force_fallback(false);
}

// Shapes cuDNN declines (D % 8 != 0) take the fallback on their own.
TEST(AttentionGpu, DeclinedShapeFallsBack) {
  STRATA_REQUIRE_GPU();
  Attention::set_force_fallback(false);
  Attention attn;
  const AttnShape s{1, 50, 4, 2, 36};
  EXPECT_EQ(std::string(attn.path(s)).rfind("fallback", 0), 0u) << attn.path(s);
  EXPECT_EQ(attn.workspace_bytes(s, true), 0u);
  check_attention(attn, s);
}

namespace {

// Runs fwd and bwd of `s` twice on the cuDNN path and on the fallback and checks they agree (the
// fallback's math is fp32); each path's time on its second call is printed for information
// (benchmarks measure speed; this does not judge it).
// One shape's attention operands on the device: q, k, v and dout random (seeds seed .. seed + 3), the outputs
// and gradients unset.
struct AttnBufs {
  size_t nq, nkv;
  DevBuf<bf16> q, k, v, o, d_o, dq, dk, dv;
  DevBuf<float> lse;
  AttnBufs(const AttnShape& s, uint32_t seed)
      : nq(size_t(s.B) * s.T * s.Hq * s.D),
        nkv(size_t(s.B) * s.T * s.Hkv * s.D),
        q(nq),
        k(nkv),
        v(nkv),
        o(nq),
        d_o(nq),
        dq(nq),
        dk(nkv),
        dv(nkv),
        lse(size_t(s.B) * s.Hq * s.T) {
    q.upload(to_bf16(randn(nq, seed)));
    k.upload(to_bf16(randn(nkv, seed + 1)));
    v.upload(to_bf16(randn(nkv, seed + 2)));
    d_o.upload(to_bf16(randn(nq, seed + 3)));
  }
};

void both_paths_agree(const AttnShape& s) {
  AttnBufs b(s, 21);
  auto &q = b.q, &k = b.k, &v = b.v, &o = b.o, &d_o = b.d_o, &dq = b.dq, &dk = b.dk, &dv = b.dv;
  auto& lse = b.lse;
  const double flops_fwd = 2.0 * 2.0 * s.B * s.Hq * double(s.T) * s.T * s.D / 2.0;  // causal half
  std::vector<std::vector<float>> first;                                            // the cuDNN path's results
  for (bool force : {false, true}) {
    Attention::set_force_fallback(force);
    Attention attn;
    const size_t wf = attn.workspace_bytes(s, false), wb = attn.workspace_bytes(s, true);
    DevBuf<char> ws(std::max(wf, wb));
    cudaEvent_t e0, e1, e2;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventCreate(&e2);
    for (int it = 0; it < 2; it++) {  // first iteration warms up (plan build, module load)
      cudaEventRecord(e0);
      attn.fwd(o.p, lse.p, q.p, k.p, v.p, s, ws.p, wf, nullptr);
      cudaEventRecord(e1);
      attn.bwd(dq.p, dk.p, dv.p, d_o.p, q.p, k.p, v.p, o.p, lse.p, s, false, ws.p, wb, nullptr);
      cudaEventRecord(e2);
      CUDA_OK(cudaEventSynchronize(e2));
    }
    float ms_f = 0, ms_b = 0;
    cudaEventElapsedTime(&ms_f, e0, e1);
    cudaEventElapsedTime(&ms_b, e1, e2);
    std::printf("[attention timing] %s %-40.40s fwd %.3f ms (%.1f TFLOP/s)  bwd %.3f ms (%.1f TFLOP/s)  ws %zu MiB\n",
                str(s).c_str(), attn.path(s), ms_f, flops_fwd / ms_f * 1e-9, ms_b, 2.5 * flops_fwd / ms_b * 1e-9,
                std::max(wf, wb) >> 20);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(e2);
    std::vector<std::vector<float>> got{from_bf16(o.download()), lse.download(), from_bf16(dq.download()),
                                        from_bf16(dk.download()), from_bf16(dv.download())};
    if (first.empty()) {
      first = std::move(got);
      continue;
    }
    const char* names[] = {"out", "lse", "dq", "dk", "dv"};
    const double tol[] = {4e-4, 1e-5, 8e-4, 8e-4, 8e-4};
    for (int i = 0; i < 5; i++)
      EXPECT_TRUE(
          close(got[size_t(i)], first[size_t(i)], tol[i], std::string(names[i]) + " fallback vs cudnn " + str(s)));
  }
  Attention::set_force_fallback(false);
}

}  // namespace

// A realistic shape on both paths. STRATA_ATTN_TIMING_SHAPE=B,T,Hq,Hkv,D picks the shape (default
// 1,2048,32,8,128; the 8B benchmark's is 1,8192,32,8,128), e.g. to look at one shape alone under ncu,
// CUPTI or cuDNN's log.
TEST(AttentionGpu, LargeShapeBothPathsAgree) {
  STRATA_REQUIRE_GPU();
  AttnShape s{1, 2048, 32, 8, 128};
  if (const char* env = std::getenv("STRATA_ATTN_TIMING_SHAPE")) {
    ASSERT_EQ(std::sscanf(env, "%d,%d,%d,%d,%d", &s.B, &s.T, &s.Hq, &s.Hkv, &s.D), 5)
        << "STRATA_ATTN_TIMING_SHAPE=" << env << ": expected B,T,Hq,Hkv,D";
  }
  both_paths_agree(s);
}

// Past strata::kAttentionTuneMaxT the plan is tuned on the stand-in {1, strata::kAttentionTuneMaxT, Hq, Hkv, D} on a
// prefix of the call's buffers (B = 2 here, so the prefix is not the whole first row's tensor): the
// results still agree with the fallback, the long shape runs the stand-in's winning engine config and
// graph variant wherever that is one of its own candidates, and the tuned pick is not "not yet tuned".
TEST(AttentionGpu, LongShapeTunedOnItsStandIn) {
  STRATA_REQUIRE_GPU();
  Attention::set_force_fallback(false);
  const AttnShape s{2, strata::kAttentionTuneMaxT + 1000, 4, 2, 64};
  ASSERT_TRUE(strata::attention_tunes_by_stand_in(s.T));
  both_paths_agree(s);
  Attention attn;
  if (std::string(attn.path(s)) != "cudnn") GTEST_SKIP() << "cuDNN declines " << str(s) << ": " << attn.path(s);
  const AttnShape stand_in{1, strata::kAttentionTuneMaxT, s.Hq, s.Hkv, s.D};
  auto run = [&](const AttnShape& sh) {
    AttnBufs b(sh, 31);
    const size_t wf = attn.workspace_bytes(sh, false), wb = attn.workspace_bytes(sh, true);
    DevBuf<char> ws(std::max(wf, wb));
    attn.fwd(b.o.p, b.lse.p, b.q.p, b.k.p, b.v.p, sh, ws.p, wf, nullptr);
    attn.bwd(b.dq.p, b.dk.p, b.dv.p, b.d_o.p, b.q.p, b.k.p, b.v.p, b.o.p, b.lse.p, sh, false, ws.p, wb, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
  };
  run(s);         // tunes on the stand-in
  run(stand_in);  // the stand-in's own pick: the one recorded while tuning s
  for (bool backward : {false, true}) {
    const std::string got = attn.plan_label(s, backward), want = attn.plan_label(stand_in, backward);
    std::printf("[attention] %s %s: %s (stand-in: %s)\n", str(s).c_str(), backward ? "bwd" : "fwd", got.c_str(),
                want.c_str());
    EXPECT_EQ(got.find("not yet tuned"), std::string::npos) << got;
    std::vector<std::string> own;  // the long shape's own candidates
    for (size_t i = 0; i < attn.candidate_count(s, backward); i++) {
      Attention::set_force_candidate(backward, int(i));
      own.push_back(attn.plan_label(s, backward));
    }
    Attention::set_force_candidate(backward, -1);
    if (std::find(own.begin(), own.end(), want) != own.end())
      EXPECT_EQ(got, want) << "the long shape should run the stand-in's pick";
    else
      EXPECT_EQ(got, own.front()) << "no stand-in match: cuDNN's own pick";
  }
}

#else

TEST(GemmAttentionGpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without CUDA";
}

#endif
