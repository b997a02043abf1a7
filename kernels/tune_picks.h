// What the cuda kernels' tuners share (kernels/gemm_cuda.cpp, kernels/attention_cudnn_cuda.cpp):
// the process's switches (engine/switches.h: whether and how to tune), and a process-wide record of
// each tuned pick, keyed by device and problem, so every backend of a process runs the same
// algorithm and results agree bit for bit.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "engine/switches.h"

namespace strata::cuda {

// Index of the winning candidate per (current device, Key); -1 when not tuned yet.
template <class Key>
class TunePicks {
 public:
  int get(const Key& k) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = picks_.find({device(), k});
    return it == picks_.end() ? -1 : it->second;
  }
  void put(const Key& k, int i) {
    std::lock_guard<std::mutex> lock(m_);
    picks_[{device(), k}] = i;
  }

 private:
  static int device() {
    int d = 0;
    cudaGetDevice(&d);
    return d;
  }
  std::mutex m_;
  std::map<std::pair<int, Key>, int> picks_;
};

// A later-ranked candidate must beat the best so far by this much: timing noise should not flip
// a pick between runs.
constexpr float kTuneMargin = 0.03f;

}  // namespace strata::cuda
