// UTF-8 helpers for the tokenizer: decoding one code point, encoding one, and the lossy repair of
// invalid input the way Rust's String::from_utf8_lossy does it (what Hugging Face tokenizers sees
// when it is handed bytes that are not UTF-8).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "text/unicode_tables.h"

namespace strata::text {

// Decodes the code point at s[i] of a string known to be valid UTF-8; returns its byte length.
inline int utf8_decode(std::string_view s, size_t i, uint32_t* cp) {
  auto b = [&](size_t k) { return uint32_t(uint8_t(s[i + k])); };
  uint32_t c = b(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if (c < 0xE0) {
    *cp = ((c & 0x1F) << 6) | (b(1) & 0x3F);
    return 2;
  }
  if (c < 0xF0) {
    *cp = ((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    return 3;
  }
  *cp = ((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  return 4;
}

// Byte length of the UTF-8 sequence that starts with lead byte `c` (valid input only).
inline int utf8_length(uint8_t c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

void utf8_append(std::string& out, uint32_t cp);

// Length of the longest valid UTF-8 prefix of s.
size_t utf8_valid_prefix(std::string_view s);

// s with each maximal invalid subsequence replaced by U+FFFD (Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view s);

}  // namespace strata::text
