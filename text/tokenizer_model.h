// The parts of a loaded tokenizer, as tokenizer_json.cpp reads them and tokenizer.cpp runs them.
// Internal to text/.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/bpe.h"
#include "text/normalize.h"
#include "text/pretokenize.h"

namespace strata::text {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// Finds added tokens in text: leftmost match, longest at that position (aho-corasick's
// LeftmostLongest, as tokenizers' AddedVocabulary uses it).
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { root_.fill(-1); }
  // `patterns[k]` is what token `tokens[k]` matches (its content, normalized where it is).
  void build(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens);
  bool empty() const { return nodes_.size() <= 1; }
  // The first match at or after `from`: sets begin/end (bytes) and returns its token, or null.
  const AddedToken* find(std::string_view s, size_t from, size_t* begin, size_t* end) const;

 private:
  // A byte trie: Llama 3's 256 special tokens all start with "<|", so trying each in turn at
  // every '<' of a code or HTML text would cost 256 comparisons there.
  struct Node {
    const AddedToken* token = nullptr;              // a pattern ends here
    std::vector<std::pair<uint8_t, int32_t>> next;  // child by byte
  };
  int32_t child(int32_t n, uint8_t b) const;
  std::vector<Node> nodes_{1};       // nodes_[0] is the root
  std::array<int32_t, 256> root_{};  // the root's children, -1 where none
};

struct NormalizerStep {
  enum Kind : uint8_t { kPrepend, kReplace, kUnicode } kind;
  std::string a, b;                // Prepend: a; Replace: a -> b
  NormForm form = NormForm::kNFC;  // kUnicode: NFC, NFD, NFKC or NFKD
};

struct PreTokenizerStep {
  enum Kind : uint8_t { kSplit, kByteLevel, kMetaspace } kind;
  SplitRegex regex = SplitRegex::kLlama3;
  bool add_prefix_space = false;  // ByteLevel
  std::string replacement;        // Metaspace
  enum Prepend : uint8_t { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = false;  // Metaspace
};

struct DecoderStep {
  enum Kind : uint8_t { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string a, b;            // Replace: a -> b; Strip: a is the character; Metaspace: a is the replacement
  size_t start = 0, stop = 0;  // Strip
  bool prepend = true;         // Metaspace: prepend_scheme is not "never"
};

struct TokenizerModel {
  std::string json_name;
  std::unique_ptr<Bpe> bpe;
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_tokens, normalized_tokens;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  bool has_decoder = false;
  std::vector<DecoderStep> decoder;
  std::vector<int32_t> template_prefix, template_suffix;  // ids around $A with add_special_tokens
  std::vector<std::string> tokens;                        // by id: added tokens over the vocabulary
  std::vector<uint8_t> special;                           // by id: a special added token
  std::vector<uint8_t> present;                           // by id: some token has this id
  int32_t bos_id = -1, eos_id = -1;
  bool byte_level = false;

  // The normalizer applied to s (tokenizers skips empty strings: Prepend adds nothing to "").
  std::string normalize(std::string_view s) const;
  // The same without a copy where no step changes s: returns s itself, or a view of `out`.
  std::string_view normalize(std::string_view s, std::string& out) const;
};

}  // namespace strata::text
