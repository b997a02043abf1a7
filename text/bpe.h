// The BPE model of Hugging Face tokenizers (models/bpe): a word's characters become tokens (or
// <0xNN> byte tokens, or <unk>), then merges apply lowest rank first, leftmost first among equal
// ranks, exactly as tokenizers' Word::merge_all orders them.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeMerge {
  int32_t left, right, merged;  // token ids; merged is the id of left's string + right's
};

struct BpeOptions {
  int32_t unk_id = -1;  // -1: characters not in the vocabulary are dropped (tokenizers does that)
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word that is itself in the vocabulary is one token
};

class Bpe {
 public:
  // `merges` in rank order; a pair listed twice keeps its last rank (as tokenizers' map does).
  Bpe(Vocab vocab, const std::vector<BpeMerge>& merges, BpeOptions options);

  // Appends the ids of one pre-tokenized word (valid UTF-8) to `out`; with `ends`, also the end
  // (bytes into word) of each token's text there.
  void encode_word(std::string_view word, std::vector<int32_t>& out, std::vector<uint32_t>* ends = nullptr) const;

  const Vocab& vocab() const { return vocab_; }
  const BpeOptions& options() const { return opt_; }

 private:
  struct Rank {
    int32_t rank, merged;
  };
  void merge_word(std::string_view word, std::vector<int32_t>& out, std::vector<uint32_t>* ends) const;
  // Open addressing (linear probing, load <= 1/2): the pair lookup is most of BPE's time.
  struct Slot {
    uint64_t key = kEmpty;  // left << 32 | right
    Rank value;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // ids are < 2^31: no pair has this key
  static uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
  size_t slot_of(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  const Rank* find_merge(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & (merges_.size() - 1)) {
      if (merges_[i].key == key) return &merges_[i].value;
      if (merges_[i].key == kEmpty) return nullptr;
    }
  }

  Vocab vocab_;
  std::vector<Slot> merges_;  // a power of two in size
  int shift_ = 64;
  BpeOptions opt_;
  int32_t byte_ids_[256];  // <0xNN> ids for byte fallback, -1 where absent
  uint64_t serial_;        // names this model's entries in the per-thread word cache
};

}  // namespace strata::text
