// The training loop's data: a token stream cut into rows, held-out rows for evaluation, and the
// training rows visited epoch by epoch in a shuffled order whose position is saved in a checkpoint
// and restored exactly.
//
// From a token stream, row r is the seq + 1 tokens starting at token r * seq: inputs are its first
// seq tokens, targets the next seq (so consecutive rows share one token, and every token is a
// target once). From a dataset (model/data/datasets.h), each row's inputs and targets are given.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/llama/batch.h"
#include "model/llama/rng.h"

namespace strata {

class TokenRows {
 public:
  TokenRows(std::vector<int32_t> tokens, int seq);
  // Rows given whole: inputs and targets hold rows * seq ids each (a target < 0 is ignored).
  TokenRows(std::vector<int32_t> inputs, std::vector<int32_t> targets, int seq);
  // Packed rows (sample packing): `examples` examples laid into them, `positions` per token as
  // Batch::positions.
  TokenRows(std::vector<int32_t> inputs, std::vector<int32_t> targets, std::vector<int32_t> positions, int seq,
            long examples);
  long rows() const { return rows_; }
  int seq() const { return seq_; }
  bool packed() const { return !positions_.empty(); }
  long examples() const { return examples_; }  // packed: examples in the rows (else 0)
  // Row r's inputs and targets, seq each; and its positions where `positions` is given and the rows
  // are packed (0..seq-1 otherwise).
  void row(long r, int32_t* inputs, int32_t* targets, int32_t* positions = nullptr) const;

 private:
  std::vector<int32_t> tokens_;
  std::vector<int32_t> targets_;    // rows given whole: tokens_ holds the inputs
  std::vector<int32_t> positions_;  // packed rows only
  int seq_;
  long rows_;
  long examples_ = 0;
};

// Held-out rows: `val_set_size` below 1 is a fraction of the rows (rounded up, as Hugging Face's
// train_test_split does), 1 or more a count. They are drawn by a permutation seeded with `seed`;
// both lists come back in row order. ConfigError naming `where` (file, field "val_set_size") when
// the value leaves no training row or is not a whole count.
struct RowSplit {
  std::vector<long> train, val;
};
RowSplit split_rows(long rows, double val_set_size, uint64_t seed, const std::string& file = "config");

// Where the sampler stands: `epoch` (0-based), `index` of the next row in that epoch's order, and
// the shuffle generator's state before it drew that order (the order is drawn again from it).
struct DataPosition {
  long epoch = 0;
  long index = 0;
  uint64_t epoch_rng = 0;
};

// The training rows, each epoch in a new order (Fisher-Yates from one seeded generator). A batch
// that crosses an epoch's end continues in the next epoch's order.
class RowSampler {
 public:
  RowSampler(std::vector<long> rows, uint64_t seed, bool shuffle = true);
  Batch next(const TokenRows& data, int batch);
  const DataPosition& position() const { return pos_; }
  // Continues from a saved position: the same rows in the same order as the run that saved it.
  void restore(const DataPosition& p);
  long rows() const { return long(rows_.size()); }

 private:
  void draw_order();
  std::vector<long> rows_, order_;
  bool shuffle_;
  DataPosition pos_;
  Rng rng_;
};

// The held-out rows as batches of `batch` rows; the last one is filled with rows whose targets are
// all ignored (-1), so every batch has the same shape and the loss counts only real tokens.
// Packed rows give packed batches (Batch::positions), as RowSampler::next does.
std::vector<Batch> eval_batches(const TokenRows& data, const std::vector<long>& rows, int batch);

// Targets that count in the loss (>= 0).
long valid_targets(const Batch& b);

}  // namespace strata
