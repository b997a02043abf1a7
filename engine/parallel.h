// Host-side data parallelism for big element-wise loops (checkpoint conversions, weight init,
// master-weight splits): an 8B model is 8e9 elements, which one core takes tens of seconds over.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace strata {

// Calls f(begin, end) for the chunks [k * grain, min(n, (k + 1) * grain)) of [0, n), on up to
// min(max_threads, hardware threads) threads, the caller's included. Chunk boundaries never depend on the
// thread count, so a per-chunk computation (e.g. one RNG stream a chunk) is deterministic. f must be
// safe to run concurrently on disjoint chunks. Small loops (one chunk) run inline.
template <class F>
void parallel_chunks(size_t n, size_t grain, F&& f, size_t max_threads = 16) {
  const size_t chunks = grain ? (n + grain - 1) / grain : 0;
  if (chunks <= 1) {
    if (n) f(size_t(0), n);
    return;
  }
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min<size_t>({std::max<size_t>(max_threads, 1), size_t(hw), chunks});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks;) f(c * grain, std::min(n, (c + 1) * grain));
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace strata
