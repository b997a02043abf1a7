// fp8: true on the cuda backend (kernels/fp8_cast.cu, kernels/linear_fp8_cuda.cpp) against the cpu backend's
// emulation (engine/fp8.cpp, kernels/linear_fp8_cpu.cpp) and against the bf16 GEMMs:
//  - the casts write the cpu reference's codes and scale block, code for code, in both layouts and formats, on
//    shapes that are and are not multiples of the kernels' 64 x 64 tile;
//  - the FP8 linear layer's output and gradients (fp32 and bf16 weight gradients, overwritten and accumulated) equal
//    the emulation's up to the order of fp32 sums and one bf16 rounding;
//  - against the bf16 layer its error stays within what the formats' rounding allows: a relative L2 error near
//    u / sqrt(3) per operand (u = 2^-4 E4M3, 2^-3 E5M2: uniform rounding error), bounded here at twice that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/fp8.h"
#include "gpu_test_util.h"

#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/backend_cuda.h"

namespace strata {
namespace {

std::vector<float> random_bf16(size_t n, float scale, uint32_t seed, float outlier = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(d(rng)));
  if (outlier != 0 && n > 7) v[n / 7] = bf16_to_f32(f32_to_bf16(outlier));
  return v;
}

std::vector<uint8_t> bytes(Backend& be, const Tensor& t) {
  std::vector<uint8_t> b(t.bytes());
  if (be.name() == "cpu")
    std::memcpy(b.data(), t.data, b.size());
  else
    EXPECT_EQ(cudaMemcpy(b.data(), t.data, b.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return b;
}

std::vector<float> get(Backend& be, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  be.download_f32(v.data(), t);
  return v;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(Fp8Gpu, CastsWriteTheCpuCodesCodeForCode) {
  STRATA_REQUIRE_GPU();
  auto cpu = make_cpu_backend(size_t(256) << 20);
  auto cuda = make_cuda_backend(size_t(1) << 30);
  struct Shape2 {
    int r, c;
  };
  // Tiles are 128 x 64 on cuda: shapes cut them on either edge, and each layout is also written alone (the
  // backward's dy casts write one).
  for (Shape2 s : {Shape2{16, 16}, {48, 80}, {208, 144}, {1040, 4096}, {4096, 1040}, {144, 2000}})
    for (uint8_t f : {uint8_t(0), uint8_t(1)})
      for (int layouts : {3, 1, 2}) {
        if (layouts != 3 && s.r != 208 && s.r != 1040) continue;
        const std::string what = std::to_string(s.r) + "x" + std::to_string(s.c) + (f ? " e5m2" : " e4m3") +
                                 (layouts == 3   ? ""
                                  : layouts == 1 ? " rows only"
                                                 : " transposed only");
        const std::vector<float> x = random_bf16(size_t(s.r) * s.c, 0.5f, 3 + s.r + layouts, f ? 1e-3f : 17.0f);
        std::vector<std::vector<uint8_t>> out[2];
        int i = 0;
        for (Backend* be : {cpu.get(), cuda.get()}) {
          Buffer bx(be->arena(), be->compute_dtype(), {s.r, s.c}, "x"), q(be->arena(), DType::u8, {s.r, s.c}, "q"),
              qt(be->arena(), DType::u8, {s.c, s.r}, "qt"), sb(be->arena(), DType::f32, {4}, "sb");
          be->upload_f32(bx.view(), x.data());
          be->fp8_cast(layouts & 1 ? q.view() : Tensor(), layouts & 2 ? qt.view() : Tensor(), sb.view(), bx.view(), f);
          if (layouts == 3) {  // a replay's cast from the kept block (fp8::kScaleGiven) writes the same codes again
            Buffer q0(be->arena(), DType::u8, {s.r, s.c}, "q0"), qt0(be->arena(), DType::u8, {s.c, s.r}, "qt0");
            be->fp8_cast(q0.view(), qt0.view(), sb.view(), bx.view(), uint8_t(f | fp8::kScaleGiven));
            be->synchronize();
            EXPECT_EQ(bytes(*be, q0.view()), bytes(*be, q.view())) << what << " " << be->name() << ": given scale";
            EXPECT_EQ(bytes(*be, qt0.view()), bytes(*be, qt.view())) << what << " " << be->name() << ": given scale";
          }
          be->synchronize();
          out[i++] = {layouts & 1 ? bytes(*be, q.view()) : std::vector<uint8_t>(),
                      layouts & 2 ? bytes(*be, qt.view()) : std::vector<uint8_t>(), bytes(*be, sb.view())};
        }
        EXPECT_EQ(out[0][2], out[1][2]) << what << ": scale block";
        for (int k = 0; k < 2; ++k) {
          EXPECT_EQ(out[0][k].empty(), !(layouts & (1 << k))) << what;
          size_t diff = 0, first = SIZE_MAX;
          for (size_t j = 0; j < out[0][k].size(); ++j)
            if (out[0][k][j] != out[1][k][j]) diff++, first = std::min(first, j);
          EXPECT_EQ(diff, 0u) << what << (k ? " transposed" : " rows") << ": first at " << first;
        }
      }
}

struct LinearOut {
  std::vector<float> y, dx, dw;
};

// y = x w^T and its gradients for dy, through FP8 (fp8_cast + linear_fp8) or bf16 (linear); dw bf16 or fp32;
// `acc`: each gradient written once, then added into (a second backward).
LinearOut linear(Backend& be, bool fp8, const std::vector<float>& x, const std::vector<float>& w,
                 const std::vector<float>& dy, int N, int I, int O, bool dw_bf16, bool acc) {
  Arena& a = be.arena();
  const DType dt = be.compute_dtype();
  Buffer bx(a, dt, {N, I}, "x"), bw(a, dt, {O, I}, "w"), bdy(a, dt, {N, O}, "dy"), y(a, dt, {N, O}, "y");
  Buffer dx(a, dt, {N, I}, "dx"), dw(a, dw_bf16 && be.name() != "cpu" ? DType::bf16 : DType::f32, {O, I}, "dw");
  Buffer q(a, DType::u8, {N, I}, "q"), qt(a, DType::u8, {I, N}, "qt"), sb(a, DType::f32, {4}, "sb");
  Buffer w8(a, DType::u8, {O, I}, "w8"), w8t(a, DType::u8, {I, O}, "w8t"), sw(a, DType::f32, {4}, "sw");
  be.upload_f32(bx.view(), x.data());
  be.upload_f32(bw.view(), w.data());
  be.upload_f32(bdy.view(), dy.data());
  for (int pass = 0; pass < (acc ? 2 : 1); ++pass) {
    if (fp8) {
      be.fp8_cast(q.view(), qt.view(), sb.view(), bx.view(), 0);
      be.fp8_cast(w8.view(), w8t.view(), sw.view(), bw.view(), 0);
      be.linear_fp8_fwd(y.view(), q.view(), sb.view(), w8.view(), sw.view());
      be.linear_fp8_bwd(dx.view(), dw.view(), bdy.view(), qt.view(), sb.view(), w8t.view(), sw.view(), pass > 0,
                        pass > 0);
    } else {
      be.linear_fwd(y.view(), bx.view(), bw.view());
      be.linear_bwd(dx.view(), dw.view(), bdy.view(), bx.view(), bw.view(), pass > 0, pass > 0);
    }
  }
  be.synchronize();
  return {get(be, y.view()), get(be, dx.view()), get(be, dw.view())};
}

TEST(Fp8Gpu, LinearEqualsTheCpuEmulation) {
  STRATA_REQUIRE_GPU();
  auto cpu = make_cpu_backend(size_t(512) << 20);
  auto cuda = make_cuda_backend(size_t(2) << 30);
  struct Case {
    int N, I, O;
    bool dw_bf16, acc;
  };
  for (Case c : {Case{48, 80, 112, false, false},
                 {48, 80, 112, true, true},
                 {272, 1024, 336, false, true},
                 {512, 2048, 768, true, false}}) {
    const std::string what = std::to_string(c.N) + "x" + std::to_string(c.I) + "x" + std::to_string(c.O) +
                             (c.dw_bf16 ? " dw bf16" : " dw fp32") + (c.acc ? " accumulated" : "");
    const auto x = random_bf16(size_t(c.N) * c.I, 1.0f, 1, 9.0f), w = random_bf16(size_t(c.O) * c.I, 0.02f, 2);
    const auto dy = random_bf16(size_t(c.N) * c.O, 1e-3f, 3);
    const LinearOut ref = linear(*cpu, true, x, w, dy, c.N, c.I, c.O, c.dw_bf16, c.acc);
    const LinearOut got = linear(*cuda, true, x, w, dy, c.N, c.I, c.O, c.dw_bf16, c.acc);
    // The same codes: only the order of the fp32 sums and the bf16 outputs' rounding (2^-9) differ.
    EXPECT_LE(rel_l2(got.y, ref.y), 4e-3) << what << " y";
    EXPECT_LE(rel_l2(got.dx, ref.dx), 4e-3) << what << " dx";
    EXPECT_LE(rel_l2(got.dw, ref.dw), 4e-3) << what << " dw";
  }
}

TEST(Fp8Gpu, LinearIsWithinTheFormatsErrorOfBf16) {
  STRATA_REQUIRE_GPU();
  auto cuda = make_cuda_backend(size_t(4) << 30);
  const int N = 2048, I = 4096, O = 1024;
  const auto x = random_bf16(size_t(N) * I, 1.0f, 4, 12.0f), w = random_bf16(size_t(O) * I, 0.02f, 5);
  const auto dy = random_bf16(size_t(N) * O, 1e-4f, 6);
  const LinearOut b = linear(*cuda, false, x, w, dy, N, I, O, false, false);
  const LinearOut q = linear(*cuda, true, x, w, dy, N, I, O, false, false);
  // Uniform rounding error of a format with m mantissa bits: u / sqrt(3) relative RMS per element, u = 2^-(m+1);
  // a product of two rounded operands: sqrt(u_a^2 + u_b^2) / sqrt(3). Bounded at twice that.
  const double e4 = 1.0 / 16, e5 = 1.0 / 8;
  const double fwd = 2 * std::sqrt(e4 * e4 + e4 * e4) / std::sqrt(3.0),
               bwd = 2 * std::sqrt(e5 * e5 + e4 * e4) / std::sqrt(3.0);
  const double ey = rel_l2(q.y, b.y), edx = rel_l2(q.dx, b.dx), edw = rel_l2(q.dw, b.dw);
  std::printf("fp8 vs bf16 relative L2: y %.4f (bound %.4f), dx %.4f, dw %.4f (bound %.4f)\n", ey, fwd, edx, edw, bwd);
  EXPECT_LE(ey, fwd);
  EXPECT_LE(edx, bwd);
  EXPECT_LE(edw, bwd);
  EXPECT_GT(ey, 1e-3) << "no FP8 rounding seen: did the FP8 path run?";
}

}  // namespace
}  // namespace strata

#else
TEST(Fp8Gpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without the cuda backend";
}
#endif
