// The lowercase mapping of tokenizers' Lowercase normalizer (generated: text/gen_case_tables.py).
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

}  // namespace strata::text
