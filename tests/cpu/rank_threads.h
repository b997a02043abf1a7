// N ranks as threads of one cpu communicator group (engine/comm.h), for the tests of the parallel modes.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm.h"

namespace strata::test_util {

// Runs f(comm, rank) on `world` threads, each with its own communicator of one CpuGroup, and returns each
// rank's result. errors == nullptr: a rank that throws aborts the group (the others fail at their next
// collective instead of waiting out the timeout) and the first rank's exception is rethrown once every
// thread has joined. Otherwise `errors` gets each rank's message ("" where it returned) and nothing aborts
// or rethrows (for ranks that are meant to fail together).
template <class R>
std::vector<R> run_rank_threads(int world, const std::function<R(Communicator*, int)>& f,
                                std::vector<std::string>* errors = nullptr, double timeout_s = 60) {
  CpuGroup group(world, timeout_s);
  std::vector<R> out(static_cast<size_t>(world));
  std::vector<std::exception_ptr> err(static_cast<size_t>(world));
  std::vector<std::string> msg(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = make_cpu_communicator(group, r);
        out[size_t(r)] = f(comm.get(), r);
      } catch (const std::exception& e) {
        err[size_t(r)] = std::current_exception();
        msg[size_t(r)] = e.what();
        if (!errors) group.abort("rank failed");
      }
    });
  for (auto& t : threads) t.join();
  if (errors) {
    *errors = msg;
    return out;
  }
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  return out;
}

// Weights of N ranks against one rank's after a few steps (per parameter, per element): the ranks' sums
// of the gradient are another summation order, and Adam moves an element whose gradient is near 0 by up
// to lr whatever its rounding (as gradient accumulation's test), so the worst element is bounded loosely
// (2e-4) and the root mean square tightly (2e-6).
inline void expect_weights_close(const std::vector<std::vector<float>>& one,
                                 const std::vector<std::vector<float>>& many, const std::string& what) {
  ASSERT_EQ(one.size(), many.size()) << what;
  double worst = 0, sum_sq = 0;
  long n = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].size(), many[i].size()) << what << ", parameter " << i;
    for (size_t e = 0; e < one[i].size(); ++e) {
      const double d = std::fabs(double(one[i][e]) - many[i][e]);
      worst = std::max(worst, d);
      sum_sq += d * d;
      ++n;
    }
  }
  EXPECT_LT(worst, 2e-4) << what;
  EXPECT_LT(std::sqrt(sum_sq / double(std::max(n, 1L))), 2e-6) << what;
}

}  // namespace strata::test_util
