// Helpers shared by the cpu kernel tests: seeded random data, double-precision dot products and a
// central-difference gradient check.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace strata::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline double dotd(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); i++) s += double(a[i]) * double(b[i]);
  return s;
}

// Central differences of loss() with respect to every element of x (loss reads x by reference).
// The step actually taken in float is used as the denominator.
inline std::vector<double> fd_grad(std::vector<float>& x, const std::function<double()>& loss, float h = 1e-2f) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const float x0 = x[i];
    const float xp = x0 + h, xm = x0 - h;
    x[i] = xp;
    const double lp = loss();
    x[i] = xm;
    const double lm = loss();
    x[i] = x0;
    g[i] = (lp - lm) / (double(xp) - double(xm));
  }
  return g;
}

// Analytic vs numeric gradient: relative error of the whole vector, then each element within
// abs + rel * |numeric|. The numeric gradient must not be zero, or the check proves nothing.
inline void expect_grad_near(const std::vector<float>& analytic, const std::vector<double>& numeric, const char* what,
                             double tol_norm = 1e-2, double abs = 1e-3, double rel = 1e-2) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double diff2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < numeric.size(); i++) {
    diff2 += (analytic[i] - numeric[i]) * (analytic[i] - numeric[i]);
    ref2 += numeric[i] * numeric[i];
  }
  ASSERT_GT(ref2, 1e-6) << what << ": numeric gradient is zero";
  EXPECT_LE(std::sqrt(diff2 / ref2), tol_norm) << what << ": relative error of the gradient vector";
  int bad = 0;
  for (size_t i = 0; i < numeric.size() && bad < 5; i++)
    if (!(std::abs(analytic[i] - numeric[i]) <= abs + rel * std::abs(numeric[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric[i];
      bad++;
    }
}

// A gradient buffer for an overwriting backward: NaN everywhere, so a stray read shows.
inline std::vector<float> poisoned(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// a and b hold the same bits (an overwrite must equal zeroing first and adding, bit for bit).
inline void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

// Elementwise a ~ b within abs + rel * |b|; NaN fails.
template <class A, class B>
inline void expect_all_near(const std::vector<A>& a, const std::vector<B>& b, double abs, double rel,
                            const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 5; i++)
    if (!(std::abs(double(a[i]) - double(b[i])) <= abs + rel * std::abs(double(b[i])))) {
      ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs " << b[i];
      bad++;
    }
}

}  // namespace strata::test
