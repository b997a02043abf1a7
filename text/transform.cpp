// The text transforms of normalizers and pre-tokenizers with tokenizers' alignments
// (NormalizedString::transform_range): a character that replaces one keeps that one's original
// range; an inserted character takes the range of the character before it.
#include <algorithm>

#include "text/case_tables.h"
#include "text/tokenizer_model.h"
#include "text/unicode.h"

namespace strata::text {

void prepend_text(TextRef in, std::string_view pre, AlignedText& out) {
  out.s.clear();
  out.s.reserve(pre.size() + in.s.size());
  out.s.append(pre).append(in.s);
  out.align.clear();
  if (!in.align || in.s.empty()) return;
  out.align.assign(pre.size(), in.align[0]);
  out.align.insert(out.align.end(), in.align, in.align + in.s.size());
}

void replace_text(TextRef in, const std::vector<Span>& matches, std::string_view content, AlignedText& out) {
  out.s.clear();
  out.align.clear();
  size_t last = 0;
  for (const Span& m : matches) {
    out.s.append(in.s.substr(last, m.begin - last));
    out.s.append(content);
    if (in.align) {
      out.align.insert(out.align.end(), in.align + last, in.align + m.begin);
      out.align.insert(out.align.end(), content.size(), m.end > 0 ? in.align[m.end - 1] : Span{0, 0});
    }
    last = m.end;
  }
  out.s.append(in.s.substr(last));
  if (in.align) out.align.insert(out.align.end(), in.align + last, in.align + in.s.size());
}

void byte_level_text(TextRef in, AlignedText& out) {
  out.s.clear();
  out.s.reserve(in.s.size() * 2);
  out.align.clear();
  if (!in.align) {
    byte_level_append(out.s, in.s);
    return;
  }
  for (size_t i = 0; i < in.s.size(); ++i) {
    byte_level_append(out.s, in.s.substr(i, 1));
    out.align.resize(out.s.size(), in.align[i]);
  }
}

namespace {

const LowerMapping* lower_of(uint32_t cp) {
  const LowerMapping* end = kLowerMappings + kLowerMappingCount;
  const LowerMapping* p =
      std::lower_bound(kLowerMappings, end, cp, [](const LowerMapping& m, uint32_t c) { return m.cp < c; });
  return p != end && p->cp == cp ? p : nullptr;
}

}  // namespace

bool lowercase_text(TextRef in, AlignedText& out) {
  size_t i = 0;
  for (; i < in.s.size(); ++i) {
    uint8_t c = uint8_t(in.s[i]);
    if (c >= 0x80 || (c >= 'A' && c <= 'Z')) break;
  }
  if (i == in.s.size()) return false;  // ASCII without capitals
  out.s.assign(in.s.substr(0, i));
  out.align.clear();
  if (in.align) out.align.assign(in.align, in.align + i);
  bool changed = false;
  while (i < in.s.size()) {
    uint32_t cp;
    size_t len = size_t(utf8_decode(in.s, i, &cp));
    const LowerMapping* m = cp >= 'A' ? lower_of(cp) : nullptr;
    if (m) {
      changed = true;
      utf8_append(out.s, m->lower);
      if (m->second) utf8_append(out.s, m->second);
    } else {
      out.s.append(in.s.substr(i, len));
    }
    if (in.align) out.align.resize(out.s.size(), in.align[i]);
    i += len;
  }
  return changed;
}

bool unicode_text(TextRef in, NormForm form, AlignedText& out) {
  thread_local std::vector<int32_t> changes;
  if (!normalize_unicode(in.s, form, out.s, in.align ? &changes : nullptr)) return false;
  out.align.clear();
  if (!in.align) return true;
  // transform_range: a character with change <= 0 takes the next input character's range and
  // consumes 1 - change of them; an added one takes the range of the last consumed.
  size_t offset = 0, k = 0;
  for (int32_t change : changes) {
    const size_t at = std::min(offset, in.s.size() - 1);  // in.s is not empty: the text changed
    Span a = change > 0 ? (offset > 0 ? in.align[offset - 1] : Span{0, 0}) : in.align[at];
    if (change <= 0)
      for (int32_t n = 0; n < 1 - change && offset < in.s.size(); ++n)
        offset += size_t(utf8_length(uint8_t(in.s[offset])));
    size_t len = size_t(utf8_length(uint8_t(out.s[k])));
    out.align.insert(out.align.end(), len, a);
    k += len;
  }
  return true;
}

TextRef strip_text(TextRef in, bool left, bool right) {
  uint32_t begin = 0, end = uint32_t(in.s.size());
  if (left)
    while (begin < end) {
      uint32_t cp;
      int len = utf8_decode(in.s, begin, &cp);
      if (char_class(cp) != CharClass::kSpace) break;
      begin += uint32_t(len);
    }
  if (right)
    while (end > begin) {
      uint32_t k = end - 1;
      while (k > begin && (uint8_t(in.s[k]) & 0xC0) == 0x80) --k;
      uint32_t cp;
      utf8_decode(in.s, k, &cp);
      if (char_class(cp) != CharClass::kSpace) break;
      end = k;
    }
  return in.sub(begin, end);
}

void Splitter::split(std::string_view s, std::vector<Span>& out) const {
  if (fast && behavior == SplitBehavior::kIsolated && !invert) {
    split_regex(s, fast_regex, out);  // every match is a piece; the regex leaves no gaps
    return;
  }
  thread_local std::vector<Span> found;
  thread_local std::vector<Match> matches;
  found.clear();
  matches.clear();
  if (regex)
    regex->find_all(s, found);
  else if (fast)
    split_regex(s, fast_regex, found);
  else
    find_literal(s, literal, found);
  matches_from_spans(s, found, invert, matches);
  split_by_behavior(matches, behavior, out);
}

}  // namespace strata::text
