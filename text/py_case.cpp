#include "text/py_case.h"

#include <algorithm>
#include <vector>

#include "text/py_case_tables.h"
#include "text/unicode.h"

namespace strata::text {

namespace {

// Code points of s; an invalid byte stays a byte (kByte | b) and maps to itself.
constexpr uint32_t kByte = 0x80000000u;

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t valid = utf8_valid_prefix(s.substr(i, std::min<size_t>(4, s.size() - i)));
    const int len = utf8_length(uint8_t(s[i]));
    if (valid >= size_t(len)) {
      uint32_t cp;
      utf8_decode(s, i, &cp);
      out.push_back(cp);
      i += size_t(len);
    } else {
      out.push_back(kByte | uint8_t(s[i]));
      ++i;
    }
  }
  return out;
}

void append(std::string& out, uint32_t cp) {
  if (cp & kByte)
    out += char(cp & 0xFF);
  else
    utf8_append(out, cp);
}

const PyCaseRow* row_of(uint32_t cp) {
  const PyCaseRow* end = kPyCaseRows + kPyCaseRowCount;
  const PyCaseRow* r = std::lower_bound(kPyCaseRows, end, cp, [](const PyCaseRow& a, uint32_t c) { return a.cp < c; });
  return r != end && r->cp == cp ? r : nullptr;
}

enum class Map { lower, upper, title };

void append_mapped(std::string& out, uint32_t cp, Map m) {
  const PyCaseRow* r = (cp & kByte) ? nullptr : row_of(cp);
  if (!r) return append(out, cp);
  const uint32_t* to = m == Map::lower ? r->lower : m == Map::upper ? r->upper : r->title;
  for (int k = 0; k < 3 && to[k]; ++k) utf8_append(out, to[k]);
}

bool in(const CodeRange* r, size_t n, uint32_t cp) {
  return !(cp & kByte) && in_ranges(r, n, cp);
}
bool cased(uint32_t cp) {
  return in(kPyCasedRanges, kPyCasedRangeCount, cp);
}
bool case_ignorable(uint32_t cp) {
  return in(kPyCaseIgnorableRanges, kPyCaseIgnorableRangeCount, cp);
}

// CPython's lower_ucs4: U+03A3 is final sigma when a cased character precedes it (case-ignorable ones
// skipped) and none follows it (likewise).
void append_lower(std::string& out, const std::vector<uint32_t>& cps, size_t i) {
  if (cps[i] != 0x3A3) return append_mapped(out, cps[i], Map::lower);
  size_t j = i;
  while (j > 0 && case_ignorable(cps[j - 1])) --j;
  bool final_sigma = j > 0 && cased(cps[j - 1]);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < cps.size() && case_ignorable(cps[k])) ++k;
    final_sigma = k == cps.size() || !cased(cps[k]);
  }
  utf8_append(out, final_sigma ? 0x3C2 : 0x3C3);
}

std::string lower_of(const std::vector<uint32_t>& cps, size_t from, size_t to) {
  const std::vector<uint32_t> part(cps.begin() + long(from), cps.begin() + long(to));
  std::string out;
  for (size_t i = 0; i < part.size(); ++i) append_lower(out, part, i);
  return out;
}

}  // namespace

std::string py_lower(std::string_view s) {
  const std::vector<uint32_t> cps = decode(s);
  return lower_of(cps, 0, cps.size());
}

std::string py_upper(std::string_view s) {
  std::string out;
  for (uint32_t cp : decode(s)) append_mapped(out, cp, Map::upper);
  return out;
}

std::string py_title(std::string_view s) {
  const std::vector<uint32_t> cps = decode(s);
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (previous_cased)
      append_lower(out, cps, i);
    else
      append_mapped(out, cps[i], Map::title);
    previous_cased = cased(cps[i]);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  const std::vector<uint32_t> cps = decode(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0)
      append_mapped(out, cps[i], Map::title);
    else
      append_lower(out, cps, i);
  }
  return out;
}

std::string jinja_title_filter(std::string_view s) {
  // re.split(r"([-\s({\[<]+)", s): words and separators; each non-empty piece is item[0].upper() + item[1:].lower().
  const std::vector<uint32_t> cps = decode(s);
  auto sep = [](uint32_t cp) {
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || (!(cp & kByte) && py_isspace_char(cp));
  };
  std::string out;
  for (size_t b = 0; b < cps.size();) {
    size_t e = b + 1;
    while (e < cps.size() && sep(cps[e]) == sep(cps[b])) ++e;
    append_mapped(out, cps[b], Map::upper);
    out += lower_of(cps, b + 1, e);
    b = e;
  }
  return out;
}

bool py_islower(std::string_view s) {
  bool any = false;
  for (uint32_t cp : decode(s)) {
    if (in(kPyUppercaseRanges, kPyUppercaseRangeCount, cp) || in(kPyTitlecaseRanges, kPyTitlecaseRangeCount, cp))
      return false;
    any = any || in(kPyLowercaseRanges, kPyLowercaseRangeCount, cp);
  }
  return any;
}

bool py_isupper(std::string_view s) {
  bool any = false;
  for (uint32_t cp : decode(s)) {
    if (in(kPyLowercaseRanges, kPyLowercaseRangeCount, cp) || in(kPyTitlecaseRanges, kPyTitlecaseRangeCount, cp))
      return false;
    any = any || in(kPyUppercaseRanges, kPyUppercaseRangeCount, cp);
  }
  return any;
}

bool py_isspace_char(uint32_t cp) {
  return in_ranges(kPySpaceRanges, kPySpaceRangeCount, cp);
}

bool py_is(std::string_view s, PyCharClass c) {
  const std::vector<uint32_t> cps = decode(s);
  if (cps.empty()) return false;
  auto alpha = [](uint32_t cp) { return in(kPyAlphaRanges, kPyAlphaRangeCount, cp); };
  auto decimal = [](uint32_t cp) { return in(kPyDecimalRanges, kPyDecimalRangeCount, cp); };
  auto digit = [](uint32_t cp) { return in(kPyDigitRanges, kPyDigitRangeCount, cp); };
  auto numeric = [](uint32_t cp) { return in(kPyNumericRanges, kPyNumericRangeCount, cp); };
  return std::all_of(cps.begin(), cps.end(), [&](uint32_t cp) {
    switch (c) {
      case PyCharClass::alpha:
        return alpha(cp);
      case PyCharClass::alnum:
        return alpha(cp) || decimal(cp) || digit(cp) || numeric(cp);
      case PyCharClass::decimal:
        return decimal(cp);
      case PyCharClass::digit:
        return digit(cp);
      case PyCharClass::numeric:
        return numeric(cp);
      case PyCharClass::space:
        return in(kPySpaceRanges, kPySpaceRangeCount, cp);
    }
    return false;
  });
}

}  // namespace strata::text
