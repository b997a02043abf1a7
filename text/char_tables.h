// Character data of tokenizers' Rust side (generated: text/gen_char_tables.py): the Lowercase
// normalizer's mapping, and the characters the Digits and Punctuation pre-tokenizers split on.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::text {

struct LowerMapping {
  uint32_t cp, lower, second;  // second: 0, or the second character (U+0130 lowercases to two)
};

// Sorted by cp; code points not listed lowercase to themselves.
extern const LowerMapping kLowerMappings[];
extern const size_t kLowerMappingCount;

struct CodeRange {
  uint32_t lo, hi;  // inclusive
};
// Sorted, disjoint.
extern const CodeRange kNumericRanges[];  // Rust's char::is_numeric (Digits)
extern const size_t kNumericRangeCount;
extern const CodeRange kPunctuationRanges[];  // the Punctuation pre-tokenizer's characters
extern const size_t kPunctuationRangeCount;

bool in_ranges(const CodeRange* ranges, size_t count, uint32_t cp);

}  // namespace strata::text
