#include "model/llama/seq_parallel.h"

#include <fmt/format.h>

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
  s.inputs.reserve(m), s.targets.reserve(m), s.positions.reserve(m);
  for (int64_t row = 0; row < b.B; ++row)
    for (int64_t i = first; i < first + Tl; ++i) {
      const size_t at = size_t(row * b.T + i);
      s.inputs.push_back(b.inputs[at]);
      s.targets.push_back(b.targets[at]);
      s.positions.push_back(b.positions.empty() ? int32_t(i) : b.positions[at]);
    }
  return s;
}

long seq_slice_targets(const Batch& b, int rank, int n) {
  check_seq_parallel_len(b.T, n);
  const int64_t Tl = b.T / n, first = int64_t(rank) * Tl;
  long k = 0;
  for (int64_t row = 0; row < b.B; ++row)
    for (int64_t i = first; i < first + Tl; ++i) k += b.targets[size_t(row * b.T + i)] >= 0;
  return k;
}

}  // namespace strata
