// What a few training steps leave behind, and a bit-for-bit comparison of two such runs: the
// plan and LM-head tests compare every variant against keep-everything / the recomputing path.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "model/llama.h"

namespace strata::test_util {

struct RunResult {
  std::vector<float> losses;
  std::vector<std::vector<float>> params, grads;  // every parameter; gradients of the trainable ones
  size_t peak = 0;
  long recomputed = 0;
  std::map<std::string, int> allocs_per_tag;  // arena allocations per tag, all steps
};

// Downloads the model's parameters and gradients and counts the arena's allocations per tag.
inline void capture(RunResult& r, Backend& be, LlamaModel& model) {
  for (auto& p : model.params()) {
    std::vector<float> h(size_t(p.shape.numel()));
    be.download_f32(h.data(), p.value());
    r.params.push_back(h);
    if (p.trainable) {
      be.download_f32(h.data(), p.grad_view());
      r.grads.push_back(h);
    }
  }
  for (auto& e : be.arena().events())
    if (e.delta > 0) r.allocs_per_tag[e.tag]++;
}

inline void expect_bit_identical(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], 4), 0)
        << what << ": loss of step " << i << " differs (" << a.losses[i] << " vs " << b.losses[i] << ")";
  ASSERT_EQ(a.grads.size(), b.grads.size()) << what;
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_EQ(std::memcmp(a.grads[i].data(), b.grads[i].data(), a.grads[i].size() * 4), 0)
        << what << ": gradient " << i << " differs";
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_EQ(std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * 4), 0)
        << what << ": parameter " << i << " differs after the steps";
}

}  // namespace strata::test_util
