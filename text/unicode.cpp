#include "text/unicode.h"

#include <algorithm>

namespace strata::text {

CharClass char_class(uint32_t cp) {
  // Latin-1 is most of the text and all of the hot path: a table, built once.
  static const auto latin1 = [] {
    struct Table {
      CharClass c[256];
    } t{};
    for (size_t r = 0; r < kCharRangeCount && kCharRanges[r].lo < 256; ++r)
      for (uint32_t c = kCharRanges[r].lo; c <= kCharRanges[r].hi && c < 256; ++c) t.c[c] = kCharRanges[r].cls;
    return t;
  }();
  if (cp < 256) return latin1.c[cp];
  const CharRange* end = kCharRanges + kCharRangeCount;
  const CharRange* it = std::upper_bound(kCharRanges, end, cp, [](uint32_t v, const CharRange& r) { return v < r.lo; });
  if (it == kCharRanges) return CharClass::kOther;
  --it;
  return cp <= it->hi ? it->cls : CharClass::kOther;
}

bool is_word_char(uint32_t cp) {
  const WordRange* end = kWordRanges + kWordRangeCount;
  const WordRange* it = std::upper_bound(kWordRanges, end, cp, [](uint32_t v, const WordRange& r) { return v < r.lo; });
  return it != kWordRanges && cp <= (it - 1)->hi;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

namespace {

// Length of the valid sequence at s[i] (1-4), or -(n) where n >= 1 is the length of the maximal
// invalid prefix to replace by one U+FFFD (the Unicode "maximal subpart" rule Rust follows).
int sequence_at(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return i + k < s.size() ? int(uint8_t(s[i + k])) : -1; };
  int c = at(0);
  if (c < 0x80) return 1;
  int need;
  int lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    int b = at(k);
    int l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return -k;
  }
  return need + 1;
}

}  // namespace

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int n = sequence_at(s, i);
    if (n < 0) return i;
    i += size_t(n);
  }
  return i;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    int n = sequence_at(s, i);
    if (n > 0) {
      out.append(s.substr(i, size_t(n)));
      i += size_t(n);
    } else {
      out += "\xEF\xBF\xBD";
      i += size_t(-n);
    }
  }
  return out;
}

}  // namespace strata::text
