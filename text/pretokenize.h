// Pre-tokenizers: the splitting of text into words before BPE, as Hugging Face tokenizers does it.
// Inputs are valid UTF-8; outputs are byte ranges or new strings.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/regex.h"

namespace strata::text {

// Two Split regexes implemented by hand as a fast path (tests prove them equal to Oniguruma).
enum class SplitRegex : uint8_t {
  kLlama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,   // the same with \p{N} (one digit) in place of \p{N}{1,3}
};

// The pattern text a tokenizer.json gives for `r`.
std::string_view split_regex_pattern(SplitRegex r);

// Appends the pieces of `s` (Split with behavior Isolated: every match is a piece; the regex
// matches at every position, so there are no gaps) to `out`, as offsets into s.
void split_regex(std::string_view s, SplitRegex r, std::vector<Span>& out);

// A piece of tokenizers' Pattern::find_matches: matched or not; together they cover the text.
struct Match {
  uint32_t begin, end;
  bool matched;
};

// find_matches for a regex's matches (or a literal's: an empty literal matches nothing), with
// `invert` flipping each piece's flag (tokenizers' Invert).
void matches_from_spans(std::string_view s, const std::vector<Span>& found, bool invert, std::vector<Match>& out);

// tokenizers' SplitDelimiterBehavior.
enum class SplitBehavior : uint8_t { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// NormalizedString::split: appends the non-empty pieces kept by `b`.
void split_by_behavior(const std::vector<Match>& m, SplitBehavior b, std::vector<Span>& out);

// The non-overlapping occurrences of a literal, left to right.
void find_literal(std::string_view s, std::string_view literal, std::vector<Span>& out);

// Metaspace with split: a new piece starts at each `replacement` (MergedWithNext).
void split_before(std::string_view s, std::string_view replacement, std::vector<Span>& out);

// GPT-2's byte-to-character map (ByteLevel): appends the characters for the bytes of s.
void byte_level_append(std::string& out, std::string_view s);
// The inverse: the byte a ByteLevel character stands for, or -1.
int byte_level_byte(uint32_t cp);

}  // namespace strata::text
