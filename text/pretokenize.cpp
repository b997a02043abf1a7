#include "text/pretokenize.h"

#include <array>

#include "text/unicode.h"

namespace strata::text {

std::string_view split_regex_pattern(SplitRegex r) {
  switch (r) {
    case SplitRegex::kLlama3:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    case SplitRegex::kQwen2:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  }
  return {};
}

namespace {

// The code points of a segment with their classes and byte offsets, decoded once.
struct Decoded {
  std::vector<uint32_t> cp;
  std::vector<CharClass> cls;
  std::vector<uint32_t> off;  // off[i] = byte offset of cp[i]; off[n] = size
  size_t n = 0;

  void decode(std::string_view s) {
    cp.clear();
    cls.clear();
    off.clear();
    for (size_t i = 0; i < s.size();) {
      uint32_t c;
      int len = utf8_decode(s, i, &c);
      cp.push_back(c);
      cls.push_back(char_class(c));
      off.push_back(uint32_t(i));
      i += size_t(len);
    }
    off.push_back(uint32_t(s.size()));
    n = cp.size();
  }
};

// Simple case folding for the contraction letters: Oniguruma's (?i) also folds U+017F (long s).
uint32_t fold(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';
  return c;
}

// The end (code point index) of the regex match that starts at i.
size_t match_at(const Decoded& d, size_t i, size_t max_digits) {
  const size_t n = d.n;
  auto is = [&](size_t k, CharClass c) { return k < n && d.cls[k] == c; };
  auto is_crlf = [&](size_t k) { return k < n && (d.cp[k] == '\r' || d.cp[k] == '\n'); };
  const uint32_t c = d.cp[i];
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c == '\'' && i + 1 < n) {
    uint32_t a = fold(d.cp[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      uint32_t b = fold(d.cp[i + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t j = i;
    if (!is(i, CharClass::kLetter) && !is(i, CharClass::kNumber) && !is_crlf(i) && is(i + 1, CharClass::kLetter))
      j = i + 1;
    if (is(j, CharClass::kLetter)) {
      while (is(j, CharClass::kLetter)) ++j;
      return j;
    }
  }
  // \p{N}{1,3}
  if (is(i, CharClass::kNumber)) {
    size_t j = i;
    while (j - i < max_digits && is(j, CharClass::kNumber)) ++j;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*
  {
    size_t j = (c == ' ' && is(i + 1, CharClass::kOther)) ? i + 1 : i;
    if (is(j, CharClass::kOther)) {
      while (is(j, CharClass::kOther)) ++j;
      while (is_crlf(j)) ++j;
      return j;
    }
  }
  // What is left at i is whitespace (the classes partition the code points).
  size_t q = i;
  while (is(q, CharClass::kSpace)) ++q;
  // \s*[\r\n]+ : through the last \r or \n of the run
  for (size_t r = q; r > i; --r)
    if (is_crlf(r - 1)) return r;
  // \s+(?!\S) : the run, less its last character when a non-space follows
  if (q == n) return q;
  if (q - i >= 2) return q - 1;
  // \s+
  return q;
}

}  // namespace

void split_regex(std::string_view s, SplitRegex r, std::vector<Span>& out) {
  thread_local Decoded d;
  d.decode(s);
  const size_t max_digits = r == SplitRegex::kQwen2 ? 1 : 3;
  for (size_t i = 0; i < d.n;) {
    size_t j = match_at(d, i, max_digits);
    out.push_back({d.off[i], d.off[j]});
    i = j;
  }
}

void matches_from_spans(std::string_view s, const std::vector<Span>& found, bool invert, std::vector<Match>& out) {
  uint32_t prev = 0;
  for (const Span& f : found) {
    if (prev != f.begin) out.push_back({prev, f.begin, invert});
    out.push_back({f.begin, f.end, !invert});
    prev = f.end;
  }
  if (prev != s.size()) out.push_back({prev, uint32_t(s.size()), invert});
}

void split_by_behavior(const std::vector<Match>& m, SplitBehavior b, std::vector<Span>& out) {
  auto keep = [&](uint32_t begin, uint32_t end) {
    if (begin < end) out.push_back({begin, end});
  };
  switch (b) {
    case SplitBehavior::kRemoved:
      for (const Match& x : m)
        if (!x.matched) keep(x.begin, x.end);
      return;
    case SplitBehavior::kIsolated:
      for (const Match& x : m) keep(x.begin, x.end);
      return;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious: {
      // Contiguous: a piece joins the last one when both are matches or both are not (every
      // empty match too: pieces are merged before the empty ones are dropped).
      std::vector<Span> acc;
      bool previous = false;
      for (const Match& x : m) {
        bool join = b == SplitBehavior::kContiguous ? x.matched == previous : x.matched && !previous;
        if (join && !acc.empty())
          acc.back().end = x.end;
        else
          acc.push_back({x.begin, x.end});
        previous = x.matched;
      }
      for (const Span& a : acc) keep(a.begin, a.end);
      return;
    }
    case SplitBehavior::kMergedWithNext: {
      std::vector<Span> acc;  // built from the end
      bool previous = false;
      for (size_t i = m.size(); i-- > 0;) {
        const Match& x = m[i];
        if (x.matched && !previous && !acc.empty())
          acc.back().begin = x.begin;
        else
          acc.push_back({x.begin, x.end});
        previous = x.matched;
      }
      for (size_t i = acc.size(); i-- > 0;) keep(acc[i].begin, acc[i].end);
      return;
    }
  }
}

void find_literal(std::string_view s, std::string_view literal, std::vector<Span>& out) {
  if (literal.empty()) return;
  for (size_t p = s.find(literal); p != std::string_view::npos; p = s.find(literal, p + literal.size()))
    out.push_back({uint32_t(p), uint32_t(p + literal.size())});
}

void split_before(std::string_view s, std::string_view replacement, std::vector<Span>& out) {
  if (s.empty()) return;
  uint32_t begin = 0;
  if (replacement.empty()) {
    out.push_back({0, uint32_t(s.size())});
    return;
  }
  for (size_t pos = s.find(replacement, 1); pos != std::string_view::npos; pos = s.find(replacement, pos + 1)) {
    if (pos == begin) continue;
    out.push_back({begin, uint32_t(pos)});
    begin = uint32_t(pos);
  }
  out.push_back({begin, uint32_t(s.size())});
}

namespace {

struct ByteMap {
  std::array<uint32_t, 256> to_cp;
  std::array<std::array<char, 3>, 256> utf8;  // the character's UTF-8 bytes, zero padded
  std::array<uint8_t, 256> utf8_len;
};

const ByteMap& byte_map() {
  static const ByteMap m = [] {
    ByteMap b{};
    uint32_t extra = 0;
    for (uint32_t v = 0; v < 256; ++v) {
      bool printable = (v >= 33 && v <= 126) || (v >= 161 && v <= 172) || (v >= 174);
      b.to_cp[v] = printable ? v : 256 + extra++;
      std::string u;
      utf8_append(u, b.to_cp[v]);
      b.utf8_len[v] = uint8_t(u.size());
      for (size_t k = 0; k < u.size(); ++k) b.utf8[v][k] = u[k];
    }
    return b;
  }();
  return m;
}

}  // namespace

void byte_level_append(std::string& out, std::string_view s) {
  const ByteMap& m = byte_map();
  for (char ch : s) {
    uint8_t v = uint8_t(ch);
    out.append(m.utf8[v].data(), m.utf8_len[v]);
  }
}

int byte_level_byte(uint32_t cp) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> inv;
    inv.fill(-1);
    for (int v = 0; v < 256; ++v) inv[byte_map().to_cp[size_t(v)]] = v;
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

}  // namespace strata::text
