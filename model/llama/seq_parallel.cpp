#include "model/llama/seq_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "engine/comm.h"
#include "model/llama/batch.h"

namespace strata {

int SeqShard::size() const {
  return comm ? comm->world() : 1;
}

int seq_parallel_kv_heads(const io::LlamaConfig& c, int n) {
  const int hq = c.num_attention_heads, hkv = c.num_key_value_heads;
  if (n <= 1) return hkv;
  if (hq % n != 0)
    STRATA_THROW(UnsupportedError,
                 fmt::format("sequence_parallel {}: num_attention_heads {} is not a multiple of {} (each rank "
                             "attends over H/n whole heads); use a sequence_parallel that divides {}",
                             n, hq, n, hq));
  if (hkv % n == 0) return hkv;
  const int rep = std::lcm(hkv, n);
  if (hq % rep != 0)
    STRATA_THROW(UnsupportedError,
                 fmt::format("sequence_parallel {}: num_key_value_heads {} does not split over {} ranks, and "
                             "replicating them to lcm({}, {}) = {} heads does not divide num_attention_heads {}",
                             n, hkv, n, hkv, n, rep, hq));
  return rep;
}

void check_seq_parallel_len(int T, int n) {
  if (n > 1 && T % n != 0)
    STRATA_THROW(ConfigError,
                 fmt::format("sequence_parallel {}: the sequence length {} is not a multiple of {} (each rank holds "
                             "T/{} tokens of every row); use a sequence_len that is, e.g. {}",
                             n, T, n, n, (T + n - 1) / n * n),
                 "config", "sequence_parallel");
}

SeqSlice seq_slice(const Batch& b, int rank, int n) {
  check_seq_parallel_len(b.T, n);
  STRATA_CHECK(rank >= 0 && rank < n, "seq_slice: rank outside the group");
  const int64_t Tl = b.T / n, first = int64_t(rank) * Tl;
  SeqSlice s;
  const size_t m = size_t(b.B) * size_t(Tl);
  s.inputs.resize(m), s.targets.resize(m), s.positions.resize(m);
  for (int64_t row = 0; row < b.B; ++row) {  // each row's slice is contiguous in the batch and in the slice
    const size_t from = size_t(row * b.T + first), to = size_t(row * Tl);
    std::copy_n(b.inputs.begin() + ptrdiff_t(from), Tl, s.inputs.begin() + ptrdiff_t(to));
    std::copy_n(b.targets.begin() + ptrdiff_t(from), Tl, s.targets.begin() + ptrdiff_t(to));
    if (b.positions.empty())
      std::iota(s.positions.begin() + ptrdiff_t(to), s.positions.begin() + ptrdiff_t(to + size_t(Tl)), int32_t(first));
    else
      std::copy_n(b.positions.begin() + ptrdiff_t(from), Tl, s.positions.begin() + ptrdiff_t(to));
  }
  return s;
}

std::shared_ptr<const SeqSlice> seq_slice_shared(const Batch& b, int rank, int n) {
  if (!b.zeros || !b.positions.empty()) return std::make_shared<const SeqSlice>(seq_slice(b, rank, n));
  struct Entry {
    std::array<int, 4> key;
    std::shared_ptr<const SeqSlice> slice;
  };
  constexpr size_t kKept = 4;
  thread_local std::vector<Entry> kept;
  const std::array<int, 4> key = {b.B, b.T, rank, n};
  for (const Entry& e : kept)
    if (e.key == key) return e.slice;
  if (kept.size() == kKept) kept.erase(kept.begin());
  kept.push_back({key, std::make_shared<const SeqSlice>(seq_slice(b, rank, n))});
  return kept.back().slice;
}

long seq_slice_targets(const Batch& b, int rank, int n) {
  check_seq_parallel_len(b.T, n);
  const int64_t Tl = b.T / n, first = int64_t(rank) * Tl;
  if (b.zeros) return long(b.B) * long(Tl);  // every target is 0: each counts
  long k = 0;
  for (int64_t row = 0; row < b.B; ++row)
    for (int64_t i = first; i < first + Tl; ++i) k += b.targets[size_t(row * b.T + i)] >= 0;
  return k;
}

}  // namespace strata
