// Python's character data for the str methods chat templates call (generated: text/gen_py_case_tables.py).
#pragma once
#include <cstddef>
#include <cstdint>

#include "text/char_tables.h"

namespace strata::text {

// A character whose str.lower, str.upper or str.title differs from itself; each mapping is up to three
// characters, 0-terminated when shorter.
struct PyCaseRow {
  uint32_t cp;
  uint32_t lower[3], upper[3], title[3];
};
extern const char kPyUnicodeVersion[];
extern const PyCaseRow kPyCaseRows[];  // sorted by cp
extern const size_t kPyCaseRowCount;

// Sorted, disjoint ranges (CodeRange, in_ranges: text/char_tables.h).
extern const CodeRange kPyCasedRanges[];          // Cased: Lowercase, Uppercase or Lt
extern const CodeRange kPyCaseIgnorableRanges[];  // Case_Ignorable (the final-sigma rule skips them)
extern const CodeRange kPyLowercaseRanges[];      // str.islower of the character
extern const CodeRange kPyUppercaseRanges[];      // str.isupper of the character
extern const CodeRange kPyTitlecaseRanges[];      // category Lt
extern const CodeRange kPyAlphaRanges[];          // str.isalpha
extern const CodeRange kPyDecimalRanges[];        // str.isdecimal
extern const CodeRange kPyDigitRanges[];          // str.isdigit
extern const CodeRange kPyNumericRanges[];        // str.isnumeric
extern const CodeRange kPySpaceRanges[];          // str.isspace
extern const size_t kPyCasedRangeCount, kPyCaseIgnorableRangeCount, kPyLowercaseRangeCount, kPyUppercaseRangeCount,
    kPyTitlecaseRangeCount, kPyAlphaRangeCount, kPyDecimalRangeCount, kPyDigitRangeCount, kPyNumericRangeCount,
    kPySpaceRangeCount;

}  // namespace strata::text
