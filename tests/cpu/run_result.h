// What a few training steps leave behind, and a bit-for-bit comparison of two such runs: the
// plan, tier and LM-head tests compare every variant against keep-everything / the recomputing path.
// Also what their runs share: the trainer's settings with clipping active, a plan with a state table,
// every parameter's weights after the steps.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/plan.h"
#include "model/llama/llama.h"
#include "model/train/trainer.h"

namespace strata::test_util {

struct RunResult {
  std::vector<float> losses;
  std::vector<std::vector<float>> params, grads;  // every parameter; gradients of the trainable ones
  size_t peak = 0;
  size_t host_peak = 0, disk_peak = 0;  // the host and disk tiers' peaks (the last step's)
  long recomputed = 0;
  std::map<std::string, int> allocs_per_tag;  // arena allocations per tag, all steps
};

// AdamW at lr 1e-2 with weight decay, and a max_grad_norm so small that clipping is active on every step
// (so a run's gradient norm, and its sum over ranks or tiers, decides every update).
inline TrainOptions clipped_train_options() {
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.adam.weight_decay = 0.1f;
  to.max_grad_norm = 0.05f;  // small: clipping is active on every step
  return to;
}

// A persistent-state table (Plan::state: class pattern -> keep, host or disk), first match wins.
using StateTable = std::vector<std::pair<std::string, Decision>>;

// `p` with its state table replaced by `state`.
inline Plan with_state(Plan p, StateTable state) {
  p.state = std::move(state);
  return p;
}

// Every parameter's weights (fp32) once the pending update has landed; empty for a ZeRO-3 layer matrix this
// rank does not hold.
inline std::vector<std::vector<float>> model_weights(Backend& be, const LlamaModel& model) {
  model.sync_state();
  std::vector<std::vector<float>> out;
  for (const Parameter& p : model.params()) {
    std::vector<float> h;
    if (!p.gathered()) {
      h.resize(size_t(p.shape.numel()));
      be.download_f32(h.data(), p.value());
    }
    out.push_back(std::move(h));
  }
  return out;
}

// Two arrays of floats bit for bit, as a whole.
inline void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  if (a.empty()) return;  // (memcmp's pointers must not be null, even for no bytes)
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

// Two runs' per-step values (losses, gradient norms, evaluations) bit for bit, each named "<what>: <each> <i>".
inline void expect_each_bit_identical(const std::vector<float>& a, const std::vector<float>& b, const std::string& what,
                                      const std::string& each) {
  ASSERT_EQ(a.size(), b.size()) << what << ": " << each;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0) << what << ": " << each << " " << i;
}

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
