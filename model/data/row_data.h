// The training loop's data: a token stream cut into rows, held-out rows for evaluation, and the
// training rows visited epoch by epoch in a shuffled order whose position is saved in a checkpoint
// and restored exactly.
//
// From a token stream, row r is the seq + 1 tokens starting at token r * seq: inputs are its first
// seq tokens, targets the next seq (so consecutive rows share one token, and every token is a
// target once). From a dataset (model/data/datasets.h), each row's inputs and targets are given.
//
// Rows sized to the data: a row's length is its last counted target's position + 1 (causal
// attention: nothing after it changes a counted prediction), and a batch is as long as the
// shortest allowed batch length that holds its longest row (TokenRows::set_batch_lengths; by
// default only seq, every batch padded to seq as before).
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
  // Row r's first `len` inputs and targets (0: seq; at least row_len(r)); and its positions where
  // `positions` is given and the rows are packed (0..len-1 otherwise).
  void row(long r, int32_t* inputs, int32_t* targets, int32_t* positions = nullptr, int len = 0) const;
  // The tokens of row r that matter: its last counted target's position + 1 (1 for a row with none;
  // seq for a token stream's rows).
  int row_len(long r) const { return lengths_.empty() ? seq_ : lengths_[size_t(r)]; }
  int longest_row() const;
  // The batch lengths rows of these lengths need: each row's length rounded up to `multiple`, at
  // most seq; distinct, ascending.
  std::vector<int> bucket_lengths(int multiple) const;
  // The lengths a batch may have (ascending, each in [1, seq], the last at least longest_row()):
  // a batch takes the first that holds its longest row. Default: {seq}.
  void set_batch_lengths(std::vector<int> lengths);
  const std::vector<int>& batch_lengths() const { return batch_lengths_; }
  // The batch length for rows whose longest is `longest` tokens.
  int batch_len(int longest) const;

 private:
  std::vector<int32_t> tokens_;
  std::vector<int32_t> targets_;    // rows given whole: tokens_ holds the inputs
  std::vector<int32_t> positions_;  // packed rows only
  std::vector<int> lengths_;        // rows given whole: row_len per row
  std::vector<int> batch_lengths_;
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

// The multiple a data-sized batch length is rounded up to: 128 tokens (the tile the GEMMs and flash
// attention work in; each new length is one more shape for the kernels' autotuning and the memory
// check), made a multiple of the sequence-parallel group so every rank holds T / n tokens.
inline constexpr int kRowMultiple = 128;
int row_multiple(int sequence_parallel);

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

// The held-out rows as batches of `batch` rows, each as long as TokenRows::batch_len of its rows;
// the last one is filled with rows whose targets are all ignored (-1), so every batch has `batch`
// rows and the loss counts only real tokens.
// Packed rows give packed batches (Batch::positions), as RowSampler::next does.
std::vector<Batch> eval_batches(const TokenRows& data, const std::vector<long>& rows, int batch);

// Targets that count in the loss (>= 0).
long valid_targets(const Batch& b);

}  // namespace strata
