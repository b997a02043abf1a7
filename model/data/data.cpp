#include "model/data/data.h"

#include "engine/error.h"
#include "model/llama/rng.h"

namespace strata {

TokenBatcher::TokenBatcher(std::vector<int32_t> tokens, int batch, int seq)
    : tokens_(std::move(tokens)), B_(batch), T_(seq), seq_(seq) {
  STRATA_CHECK(long(tokens_.size()) >= seq_ + 1, "token stream shorter than one sequence");
}

Batch TokenBatcher::next() {
  Batch b;
  b.B = B_;
  b.T = T_;
  const long span = std::max(1L, windows());
  for (int r = 0; r < B_; ++r) {
    long start = (cursor_ * seq_) % span;
    ++cursor_;
    for (int t = 0; t < T_; ++t) {
      b.inputs.push_back(tokens_[size_t(start + t)]);
      b.targets.push_back(tokens_[size_t(start + t + 1)]);
    }
  }
  return b;
}

std::vector<int32_t> synthetic_tokens(long n, int vocab, uint64_t seed) {
  Rng rng(seed ^ 0x5eedull);
  const int64_t rules[4][2] = {{1, 1}, {3, 7}, {5, 3}, {7, 11}};
  std::vector<int32_t> out;
  out.reserve(size_t(n));
  while (long(out.size()) < n) {
    int len = 16 + rng.below(49);
    const auto& r = rules[rng.below(4)];
    int64_t cur = rng.below(vocab);
    for (int i = 0; i < len && long(out.size()) < n; ++i) {
      out.push_back(int32_t(cur));
      cur = (r[0] * cur + r[1]) % vocab;
    }
  }
  return out;
}

}  // namespace strata
