#include "model/data/row_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "engine/error.h"

namespace strata {

TokenRows::TokenRows(std::vector<int32_t> tokens, int seq) : tokens_(std::move(tokens)), seq_(seq) {
  STRATA_CHECK(seq_ >= 1 && long(tokens_.size()) >= long(seq_) + 1, "token stream shorter than one row");
  rows_ = (long(tokens_.size()) - 1) / seq_;
  batch_lengths_ = {seq_};
}

TokenRows::TokenRows(std::vector<int32_t> inputs, std::vector<int32_t> targets, int seq)
    : tokens_(std::move(inputs)), targets_(std::move(targets)), seq_(seq) {
  STRATA_CHECK(seq_ >= 1 && !tokens_.empty() && tokens_.size() == targets_.size() && tokens_.size() % size_t(seq_) == 0,
               "rows: inputs and targets must hold the same whole number of rows");
  rows_ = long(tokens_.size() / size_t(seq_));
  lengths_.resize(size_t(rows_));
  for (long r = 0; r < rows_; ++r) {
    const int32_t* t = targets_.data() + size_t(r) * size_t(seq_);
    int n = seq_;
    while (n > 1 && t[n - 1] < 0) --n;
    lengths_[size_t(r)] = n;
  }
  batch_lengths_ = {seq_};
}

TokenRows::TokenRows(std::vector<int32_t> inputs, std::vector<int32_t> targets, std::vector<int32_t> positions, int seq,
                     long examples)
    : TokenRows(std::move(inputs), std::move(targets), seq) {
  STRATA_CHECK(positions.size() == tokens_.size(), "rows: positions must be given for every input");
  positions_ = std::move(positions);
  examples_ = examples;
}

void TokenRows::row(long r, int32_t* inputs, int32_t* targets, int32_t* positions, int len) const {
  STRATA_CHECK(r >= 0 && r < rows_, fmt::format("row {} outside [0, {})", r, rows_));
  if (len == 0) len = seq_;
  STRATA_CHECK(len >= row_len(r) && len <= seq_,
               fmt::format("row {} of {} tokens taken as {} (sequence_len {})", r, row_len(r), len, seq_));
  if (positions) {
    const size_t at = size_t(r) * size_t(seq_);
    for (int i = 0; i < len; ++i) positions[i] = packed() ? positions_[at + size_t(i)] : i;
  }
  if (!targets_.empty()) {
    const size_t at = size_t(r) * size_t(seq_);
    std::copy(tokens_.begin() + long(at), tokens_.begin() + long(at + size_t(len)), inputs);
    std::copy(targets_.begin() + long(at), targets_.begin() + long(at + size_t(len)), targets);
    return;
  }
  const int32_t* t = tokens_.data() + size_t(r) * size_t(seq_);
  std::copy(t, t + len, inputs);
  std::copy(t + 1, t + 1 + len, targets);
}

int TokenRows::longest_row() const {
  return lengths_.empty() ? seq_ : *std::max_element(lengths_.begin(), lengths_.end());
}

std::vector<int> TokenRows::bucket_lengths(int multiple) const {
  STRATA_CHECK(multiple >= 1, "bucket_lengths: multiple must be >= 1");
  std::vector<int> out;
  auto bucket = [&](int n) { return int(std::min<long>(seq_, (long(n) + multiple - 1) / multiple * multiple)); };
  if (lengths_.empty()) return {seq_};
  for (int n : lengths_) out.push_back(bucket(n));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void TokenRows::set_batch_lengths(std::vector<int> lengths) {
  STRATA_CHECK(!lengths.empty() && std::is_sorted(lengths.begin(), lengths.end()) && lengths.front() >= 1 &&
                   lengths.back() <= seq_ && lengths.back() >= longest_row(),
               "batch lengths: ascending, within [1, seq], the last holding the longest row");
  batch_lengths_ = std::move(lengths);
}

int TokenRows::batch_len(int longest) const {
  for (int n : batch_lengths_)
    if (n >= longest) return n;
  STRATA_CHECK(false, fmt::format("no batch length holds a row of {} tokens", longest));
  return seq_;
}

int row_multiple(int sequence_parallel) {
  return std::lcm(kRowMultiple, std::max(1, sequence_parallel));
}

RowSplit split_rows(long rows, double val_set_size, uint64_t seed, const std::string& file) {
  long n_val = 0;
  if (val_set_size > 0 && val_set_size < 1) {
    // The fraction as the user wrote it (0.1, not the float 0.100000001): 0.1 of 50 rows is 5.
    const double frac = std::strtod(fmt::format("{}", float(val_set_size)).c_str(), nullptr);
    n_val = long(std::ceil(frac * double(rows)));
  } else if (val_set_size >= 1) {
    // Compared as a double first: a count past the long range must not be converted (1e19 held out nothing).
    if (val_set_size >= double(rows))
      throw ConfigError(
          fmt::format("{}: val_set_size {} holds out all {} rows, leaving none to train on", file, val_set_size, rows),
          file, "val_set_size");
    if (val_set_size != std::floor(val_set_size))
      throw ConfigError(fmt::format("{}: val_set_size {} is neither a fraction below 1 nor a whole count of rows", file,
                                    val_set_size),
                        file, "val_set_size");
    n_val = long(val_set_size);
  }
  if (n_val >= rows)
    throw ConfigError(fmt::format("{}: val_set_size {} holds out {} of the {} rows, leaving none to train on", file,
                                  val_set_size, n_val, rows),
                      file, "val_set_size");
  std::vector<long> perm(static_cast<size_t>(rows));
  std::iota(perm.begin(), perm.end(), 0L);
  RowSplit s;
  if (n_val > 0) {
    Rng rng(seed ^ 0x7a1d5e7ull);
    for (long i = rows - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(rng.next() % uint64_t(i + 1))]);
    s.val.assign(perm.end() - n_val, perm.end());
    perm.resize(size_t(rows - n_val));
    std::sort(s.val.begin(), s.val.end());
    std::sort(perm.begin(), perm.end());
  }
  s.train = std::move(perm);
  return s;
}

RowSampler::RowSampler(std::vector<long> rows, uint64_t seed, bool shuffle)
    : rows_(std::move(rows)), shuffle_(shuffle), rng_(seed ^ 0x5a3b1e5ull) {
  STRATA_CHECK(!rows_.empty(), "no training rows");
  pos_.epoch_rng = rng_.state();
  draw_order();
}

void RowSampler::draw_order() {
  rng_.set_state(pos_.epoch_rng);
  order_ = rows_;
  if (shuffle_)
    for (long i = long(order_.size()) - 1; i > 0; --i)
      std::swap(order_[size_t(i)], order_[size_t(rng_.next() % uint64_t(i + 1))]);
}

void RowSampler::restore(const DataPosition& p) {
  if (p.epoch < 0 || p.index < 0 || p.index > long(rows_.size()))
    throw FormatError(
        fmt::format("data position epoch {} index {} is outside the {} training rows", p.epoch, p.index, rows_.size()),
        "trainer_state.json", "data.index");
  pos_ = p;
  draw_order();
}

Batch RowSampler::next(const TokenRows& data, int batch) {
  std::vector<long> picked(static_cast<size_t>(batch));
  int longest = 1;
  for (long& r : picked) {
    if (pos_.index == long(order_.size())) {  // the next epoch, in its own order
      ++pos_.epoch;
      pos_.index = 0;
      pos_.epoch_rng = rng_.state();
      draw_order();
    }
    r = order_[size_t(pos_.index++)];
    longest = std::max(longest, data.row_len(r));
  }
  Batch b;
  b.B = batch;
  b.T = data.batch_len(longest);
  b.inputs.resize(size_t(batch) * size_t(b.T));
  b.targets.resize(b.inputs.size());
  if (data.packed()) b.positions.resize(b.inputs.size());
  for (int i = 0; i < batch; ++i) {
    const size_t at = size_t(i) * size_t(b.T);
    data.row(picked[size_t(i)], b.inputs.data() + at, b.targets.data() + at,
             data.packed() ? b.positions.data() + at : nullptr, b.T);
  }
  return b;
}

std::vector<Batch> eval_batches(const TokenRows& data, const std::vector<long>& rows, int batch) {
  std::vector<Batch> out;
  for (size_t i = 0; i < rows.size(); i += size_t(batch)) {
    int longest = 1;
    for (size_t r = 0; r < size_t(batch) && i + r < rows.size(); ++r)
      longest = std::max(longest, data.row_len(rows[i + r]));
    Batch b;
    b.B = batch;
    b.T = data.batch_len(longest);
    b.inputs.assign(size_t(batch) * size_t(b.T), 0);
    b.targets.assign(b.inputs.size(), -1);
    if (data.packed()) {  // a filler row is one sequence of ignored targets
      b.positions.resize(b.inputs.size());
      for (size_t k = 0; k < b.positions.size(); ++k) b.positions[k] = int32_t(k % size_t(b.T));
    }
    for (size_t r = 0; r < size_t(batch) && i + r < rows.size(); ++r)
      data.row(rows[i + r], b.inputs.data() + r * size_t(b.T), b.targets.data() + r * size_t(b.T),
               data.packed() ? b.positions.data() + r * size_t(b.T) : nullptr, b.T);
    out.push_back(std::move(b));
  }
  return out;
}

long valid_targets(const Batch& b) {
  return long(std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t >= 0; }));
}

}  // namespace strata
