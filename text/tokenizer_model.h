// The parts of a loaded tokenizer, as tokenizer_json.cpp reads them and tokenizer.cpp runs them.
// Internal to text/.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/bpe.h"
#include "text/char_tables.h"
#include "text/normalize.h"
#include "text/pretokenize.h"
#include "text/regex.h"

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
  // Whether some pattern occurs at s[i] (text/cut.cpp keeps cuts away from added tokens).
  bool occurs_at(std::string_view s, size_t i) const;
  size_t longest() const { return longest_; }  // bytes of the longest pattern

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
  size_t longest_ = 0;
};

// Text as tokenizers' NormalizedString holds it: for each byte of s, the byte range of the original
// text's character it came from. `align` is null where offsets are not tracked (encode()).
struct TextRef {
  std::string_view s;
  const Span* align = nullptr;
  TextRef sub(uint32_t begin, uint32_t end) const {
    return {s.substr(begin, end - begin), align ? align + begin : nullptr};
  }
  // The original range of bytes [begin, end) of s (tokenizers' convert_offsets).
  std::pair<uint32_t, uint32_t> original(uint32_t begin, uint32_t end) const {
    if (!align || begin >= end) return {0, 0};
    return {align[begin].begin, align[end - 1].end};
  }
};

// The owner of a transformed text (alignments filled only when the input had them).
struct AlignedText {
  std::string s;
  std::vector<Span> align;
  TextRef ref(bool tracked) const { return {s, tracked ? align.data() : nullptr}; }
};

// The text transforms of normalizers and pre-tokenizers, with the alignments tokenizers gives.
// `pre` before the text: each added character aligned with the text's first (non-empty input).
void prepend_text(TextRef in, std::string_view pre, AlignedText& out);
// Each match replaced by `content`, aligned with the match's last character.
void replace_text(TextRef in, const std::vector<Span>& matches, std::string_view content, AlignedText& out);
// Each byte as GPT-2's character for it, aligned with the character the byte is part of.
void byte_level_text(TextRef in, AlignedText& out);
// Rust's char::to_lowercase per character; false (out untouched) where nothing changes.
bool lowercase_text(TextRef in, AlignedText& out);
// NFC/NFD/NFKC/NFKD; false (out untouched) where the text is already in the form.
bool unicode_text(TextRef in, NormForm form, AlignedText& out);
// Without leading (left) and trailing (right) White_Space characters: a view of `in`.
TextRef strip_text(TextRef in, bool left, bool right);

struct NormalizerStep {
  enum Kind : uint8_t { kPrepend, kReplace, kUnicode, kLowercase, kStrip, kByteLevel } kind = kPrepend;
  std::string a, b;                    // Prepend: a; Replace: a (a literal) -> b
  std::shared_ptr<const Regex> regex;  // Replace with a {"Regex": ...} pattern
  NormForm form = NormForm::kNFC;      // kUnicode: NFC, NFD, NFKC or NFKD
  bool left = false, right = false;    // kStrip
};

// How a Split step finds its matches: by hand for the two known regexes, Oniguruma for others,
// or a literal string; then tokenizers' behavior and invert.
struct Splitter {
  std::shared_ptr<const Regex> regex;  // null: `fast`, `word_runs`, `char_set` or `literal`
  bool fast = false;
  // The Whitespace pre-tokenizer's \w+|[^\w\s]+, which tokenizers runs on the Rust regex crate
  // (whose \w differs from Oniguruma's: U+200D is a word character there).
  bool word_runs = false;
  // Digits and Punctuation: each character of these (tokenizers' Rust data, text/char_tables.h)
  // is a match of its own. Null: none.
  const CodeRange* char_set = nullptr;
  size_t char_set_count = 0;
  SplitRegex fast_regex = SplitRegex::kLlama3;
  std::string literal;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  void split(std::string_view s, std::vector<Span>& out) const;
};

struct PreTokenizerStep {
  enum Kind : uint8_t { kSplit, kByteLevel, kMetaspace } kind;
  Splitter splitter;              // kSplit; kByteLevel with use_regex (GPT-2's regex, Isolated)
  bool add_prefix_space = false;  // ByteLevel
  bool use_regex = false;         // ByteLevel
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
  // The ByteLevel post-processor's trim_offsets (and its add_prefix_space, which trimming reads).
  bool trim_offsets = false, trim_prefix_space = false;

  // Where a text may be cut so that its parts encode apart to the same ids (text/cut.cpp): why not
  // ("" where it may), and by byte, whether a cut may come right before that byte.
  std::string cut_refusal;
  std::array<bool, 256> cut_before{};

  // The normalizer applied to s (tokenizers skips empty strings: Prepend adds nothing to "").
  std::string normalize(std::string_view s) const;
  // The same without a copy where no step changes s: returns `in` itself, or a view of `out`
  // (`scratch` is a second buffer the steps alternate with). skip_prepend: s continues a cut text,
  // whose Prepend steps happened at the text's start, not here.
  TextRef normalize(TextRef in, AlignedText& out, AlignedText& scratch, bool skip_prepend = false) const;
};

// Fills m.cut_refusal and m.cut_before from the loaded pipeline (text/cut.cpp).
void analyze_cuts(TokenizerModel& m);

}  // namespace strata::text
