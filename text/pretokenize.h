// Pre-tokenizers: the splitting of text into words before BPE, as Hugging Face tokenizers does it
// for the Llama family. Inputs are valid UTF-8; outputs are byte ranges or new strings.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text {

struct Span {
  uint32_t begin, end;  // bytes, [begin, end)
};

// The Split pre-tokenizer regexes implemented here (by hand: std::regex has no \p classes).
enum class SplitRegex : uint8_t {
  kLlama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|...
  kQwen2,   // the same with \p{N} (one digit) in place of \p{N}{1,3}
};

// The pattern text a tokenizer.json gives for `r`.
std::string_view split_regex_pattern(SplitRegex r);

// Appends the pieces of `s` (Split with behavior Isolated: every match is a piece; the regex
// matches at every position, so there are no gaps) to `out`, as offsets into s.
void split_regex(std::string_view s, SplitRegex r, std::vector<Span>& out);

// Metaspace with split: a new piece starts at each `replacement` (MergedWithNext).
void split_before(std::string_view s, std::string_view replacement, std::vector<Span>& out);

// GPT-2's byte-to-character map (ByteLevel): appends the characters for the bytes of s.
void byte_level_append(std::string& out, std::string_view s);
// The inverse: the byte a ByteLevel character stands for, or -1.
int byte_level_byte(uint32_t cp);

}  // namespace strata::text
