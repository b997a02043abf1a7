// Batches from a token file: row r of step s is the window of seq+1 tokens starting at
// ((s * B + r) * seq) mod (n - seq - 1); inputs are its first seq tokens, targets the next.
#pragma once
#include <cstdint>
#include <vector>

#include "model/llama/batch.h"

namespace strata {

class TokenBatcher {
 public:
  TokenBatcher(std::vector<int32_t> tokens, int batch, int seq);
  Batch next();
  long windows() const { return long(tokens_.size()) - seq_ - 1; }

 private:
  std::vector<int32_t> tokens_;
  int B_, T_;
  long seq_;
  long cursor_ = 0;
};

// A learnable synthetic stream (strata-make-tiny's tokens.bin): segments of 16..64 tokens, each
// following one of four affine rules next = (a * cur + c) mod V from a random start.
std::vector<int32_t> synthetic_tokens(long n, int vocab, uint64_t seed);

}  // namespace strata
