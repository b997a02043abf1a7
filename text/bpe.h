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

  // Appends the ids of one pre-tokenized word (valid UTF-8) to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const Vocab& vocab() const { return vocab_; }

 private:
  struct Rank {
    int32_t rank, merged;
  };
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  const Rank* find_merge(int32_t left, int32_t right) const {
    auto it = merges_.find((uint64_t(uint32_t(left)) << 32) | uint32_t(right));
    return it == merges_.end() ? nullptr : &it->second;
  }

  Vocab vocab_;
  std::unordered_map<uint64_t, Rank> merges_;
  BpeOptions opt_;
  int32_t byte_ids_[256];  // <0xNN> ids for byte fallback, -1 where absent
  uint64_t serial_;        // names this model's entries in the per-thread word cache
};

}  // namespace strata::text
