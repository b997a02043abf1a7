// Character classes of the Llama 3 pre-tokenizer regex (\p{L}, \p{N}, \s), as Hugging Face
// tokenizers' Oniguruma defines them. The table is generated (text/gen_unicode_tables.py).
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::text {

enum class CharClass : uint8_t { kOther = 0, kLetter, kNumber, kSpace };

struct CharRange {
  uint32_t lo, hi;  // inclusive code points
  CharClass cls;
};

// Sorted, disjoint ranges; code points in none of them are kOther.
extern const CharRange kCharRanges[];
extern const size_t kCharRangeCount;

// The class of a code point (any value; out of range is kOther).
CharClass char_class(uint32_t cp);

// The Rust regex crate's \w, which tokenizers uses for single_word added tokens.
struct WordRange {
  uint32_t lo, hi;  // inclusive
};
extern const WordRange kWordRanges[];
extern const size_t kWordRangeCount;
bool is_word_char(uint32_t cp);

}  // namespace strata::text
