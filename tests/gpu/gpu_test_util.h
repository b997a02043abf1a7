// Shared helpers for GPU tests: device detection with a visible skip, bf16-aware comparison
// (NaN first, then inf sign, then normalised error), and small RAII device buffers.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#ifdef STRATA_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace gpu_test {

// Skips the current test with a message when no CUDA device is usable.
#define STRATA_REQUIRE_GPU()                                                           \
  do {                                                                                 \
    int n_ = 0;                                                                        \
    cudaError_t e_ = cudaGetDeviceCount(&n_);                                          \
    if (e_ != cudaSuccess || n_ == 0) {                                                \
      cudaGetLastError();                                                              \
      GTEST_SKIP() << "SKIPPED (gpu): no CUDA device here (" << cudaGetErrorString(e_) \
                   << "); run the gpu-labelled tests on the GPU host";                 \
    }                                                                                  \
  } while (0)

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x << ": " << cudaGetErrorString(x)

// A device buffer owned by the test (tests may use cudaMalloc; the engine never does outside its arena).
template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t n_) : n(n_) {
    if (cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void upload(const std::vector<T>& h) { cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& x) {
  std::vector<__nv_bfloat16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __float2bfloat16(x[i]);
  return y;
}
inline std::vector<float> from_bf16(const std::vector<__nv_bfloat16>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(x[i]);
  return y;
}
// Rounds through bf16, so cpu references see exactly the inputs the GPU sees.
inline std::vector<float> round_bf16(const std::vector<float>& x) {
  return from_bf16(to_bf16(x));
}

}  // namespace gpu_test
#endif

namespace gpu_test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  return x;
}

// ggml-style comparison: NaN first, then inf sign, then normalised mean squared error
// sum((a-b)^2) / sum(b^2) against `tol`.
inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                                        const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i]))
      return ::testing::AssertionFailure()
             << what << ": NaN mismatch at " << i << " (got " << got[i] << ", want " << want[i] << ")";
    if (std::isinf(got[i]) || std::isinf(want[i])) {
      if (got[i] != want[i])
        return ::testing::AssertionFailure()
               << what << ": inf mismatch at " << i << " (got " << got[i] << ", want " << want[i] << ")";
      continue;
    }
    if (std::isnan(want[i])) continue;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  double nmse = num / std::max(den, 1e-30);
  if (nmse > tol) return ::testing::AssertionFailure() << what << ": NMSE " << nmse << " > " << tol;
  return ::testing::AssertionSuccess() << what << ": NMSE " << nmse;
}

}  // namespace gpu_test

#ifdef STRATA_HAVE_CUDA
namespace gpu_test {

// A device tensor with the host values the cpu reference sees (bf16-rounded for bf16 tensors).
template <class T>
struct Dev {
  std::vector<float> h;
  DevBuf<T> d;
  explicit Dev(const std::vector<float>& x) : h(x), d(x.size()) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      h = round_bf16(x);
      d.upload(to_bf16(h));
    } else {
      d.upload(h);
    }
  }
  Dev(size_t n, uint32_t seed, float scale = 1.0f) : Dev(randn(n, seed, scale)) {}
  T* p(size_t off = 0) { return d.p + off; }
  std::vector<float> get() const {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      return from_bf16(d.download());
    else
      return d.download();
  }
  void poison() { cudaMemset(d.p, 0xff, d.n * sizeof(T)); }  // all-ones bits: NaN in bf16 and fp32
};

// n copies of value (a function: avoids the vexing parse of a braced vector).
inline std::vector<float> vec(size_t n, float value = 0.0f) {
  return std::vector<float>(n, value);
}

inline void device_sync() {
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
}

}  // namespace gpu_test
#endif
