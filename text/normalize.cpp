// The normalization algorithm of Unicode Standard Annex #15: full canonical or compatibility
// decomposition (Hangul syllables by arithmetic), canonical ordering of each run of non-starters by
// combining class (a stable sort), then for NFC/NFKC canonical composition: each character joins
// the last starter where a primary composite exists (composition exclusions are not in the pair
// table) and nothing between blocks it. Text is scanned with the quick check first; only the
// segments between two safe starters around a character that fails it are rewritten.
#include "text/normalize.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "text/normalization_tables.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

bool composes(NormForm f) {
  return f == NormForm::kNFC || f == NormForm::kNFKC;
}
bool compat(NormForm f) {
  return f == NormForm::kNFKC || f == NormForm::kNFKD;
}
// The flags that make a code point fail the quick check of form f.
uint8_t failing(NormForm f) {
  switch (f) {
    case NormForm::kNFC:
      return kNfcNo | kComposeMaybe;
    case NormForm::kNFD:
      return kNfdNo;
    case NormForm::kNFKC:
      return kNfkcNo | kComposeMaybe;
    case NormForm::kNFKD:
      return kNfkdNo;
  }
  return 0xFF;
}

struct Char {
  uint32_t cp;
  uint8_t ccc;
  int32_t change;  // characters added (> 0) or absorbed (< 0): unicode-normalization-alignments
};

// Appends c, keeping the run of non-starters at the end sorted by class (stable).
void push_ordered(std::vector<Char>& buf, uint32_t cp, uint8_t ccc, int32_t change) {
  buf.push_back({cp, ccc, change});
  if (ccc == 0) return;
  size_t i = buf.size() - 1;
  while (i > 0 && buf[i - 1].ccc > ccc) {
    buf[i] = buf[i - 1];
    --i;
  }
  buf[i] = {cp, ccc, change};
}

// The first character of a decomposition replaces cp (change 0); the others are added (1).
void decompose(uint32_t cp, bool compat, std::vector<Char>& buf) {
  if (cp - kSBase < kSCount) {
    uint32_t s = cp - kSBase;
    buf.push_back({kLBase + s / kNCount, 0, 0});
    buf.push_back({kVBase + (s % kNCount) / kTCount, 0, 1});
    if (s % kTCount) buf.push_back({kTBase + s % kTCount, 0, 1});
    return;
  }
  const NormRecord& r = norm_record(cp);
  size_t len = compat ? r.compat_len : r.canon_len;
  if (len == 0) {
    push_ordered(buf, cp, r.ccc, 0);
    return;
  }
  const uint32_t* d = kNormData + (compat ? r.compat_off : r.canon_off);
  for (size_t k = 0; k < len; ++k) push_ordered(buf, d[k], norm_record(d[k]).ccc, k == 0 ? 0 : 1);
}

// The primary composite of a + b, or 0.
uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a - kLBase < kLCount && b - kVBase < kVCount) return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a - kSBase < kSCount && (a - kSBase) % kTCount == 0 && b - kTBase - 1 < kTCount - 1) return a + (b - kTBase);
  const NormPair* end = kNormPairs + kNormPairCount;
  const NormPair* p =
      std::lower_bound(kNormPairs, end, std::pair(a, b), [](const NormPair& x, std::pair<uint32_t, uint32_t> k) {
        return x.first < k.first || (x.first == k.first && x.second < k.second);
      });
  return p != end && p->first == a && p->second == b ? p->composite : 0;
}

// Canonical composition in place.
void compose(std::vector<Char>& buf) {
  size_t starter = 0, kept = 0;
  bool have_starter = false;
  int last_ccc = -1;  // the class of the last kept character; -1: none since the starter
  for (size_t i = 0; i < buf.size(); ++i) {
    Char c = buf[i];
    if (have_starter && (last_ccc == -1 || (last_ccc != 0 && last_ccc < c.ccc))) {
      if (uint32_t comp = compose_pair(buf[starter].cp, c.cp)) {
        buf[starter].cp = comp;
        buf[starter].change += c.change - 1;  // the composite absorbs c
        continue;
      }
    }
    if (c.ccc == 0) {
      starter = kept;
      have_starter = true;
      last_ccc = -1;
    } else {
      last_ccc = c.ccc;
    }
    buf[kept++] = c;
  }
  buf.resize(kept);
}

// Appends the normalized text of a segment.
// Appends the normalized text of a segment; `changes` as normalize_unicode's.
void normalize_segment(std::string_view seg, NormForm f, std::vector<Char>& buf, std::string& out,
                       std::vector<int32_t>* changes) {
  buf.clear();
  for (size_t i = 0; i < seg.size();) {
    uint32_t cp;
    i += size_t(utf8_decode(seg, i, &cp));
    decompose(cp, compat(f), buf);
  }
  if (composes(f)) compose(buf);
  for (const Char& c : buf) {
    utf8_append(out, c.cp);
    if (changes) changes->push_back(c.change);
  }
}

}  // namespace

bool normalize_unicode(std::string_view s, NormForm f, std::string& out, std::vector<int32_t>* changes) {
  const uint8_t fail = failing(f);
  // A safe starter: nothing before it reorders or composes with it or anything after it.
  auto safe = [&](const NormRecord& r) { return r.ccc == 0 && !(r.flags & fail); };
  size_t copied = 0, boundary = 0;  // s[0, copied) is in `result`; boundary: the last safe starter
  uint8_t last_ccc = 0;
  std::string result;
  std::vector<Char> buf;
  bool changed = false;
  // Unchanged text: each character replaces itself.
  auto append_source = [&](size_t from, size_t to) {
    if (!changes) return;
    for (size_t k = from; k < to; k += size_t(utf8_length(uint8_t(s[k])))) changes->push_back(0);
  };
  for (size_t i = 0; i < s.size();) {
    if (uint8_t(s[i]) < 0x80) {
      // ASCII: starters that compose with nothing before them; a run of it, 8 bytes at a time.
      size_t j = i + 1;
      for (uint64_t w; j + 8 <= s.size(); j += 8) {
        std::memcpy(&w, s.data() + j, 8);
        if (w & 0x8080808080808080ull) break;
      }
      while (j < s.size() && uint8_t(s[j]) < 0x80) ++j;
      boundary = j - 1;
      last_ccc = 0;
      i = j;
      continue;
    }
    uint32_t cp;
    size_t len = size_t(utf8_decode(s, i, &cp));
    const NormRecord& r = norm_record(cp);
    if (safe(r)) {
      boundary = i;
      last_ccc = 0;
      i += len;
      continue;
    }
    if (!(r.flags & fail) && (r.ccc == 0 || last_ccc <= r.ccc)) {
      last_ccc = r.ccc;
      i += len;
      continue;
    }
    // Rewrite [boundary, the next safe starter) and go on checking from there.
    size_t end = i + len;
    while (end < s.size()) {
      if (uint8_t(s[end]) < 0x80) break;
      uint32_t c2;
      size_t l2 = size_t(utf8_decode(s, end, &c2));
      if (safe(norm_record(c2))) break;
      end += l2;
    }
    if (!changed) {
      result.reserve(s.size() + s.size() / 4 + 8);
      changed = true;
      if (changes) changes->clear();
    }
    append_source(copied, boundary);
    result.append(s.substr(copied, boundary - copied));
    normalize_segment(s.substr(boundary, end - boundary), f, buf, result, changes);
    copied = boundary = i = end;
    last_ccc = 0;
  }
  if (!changed) return false;
  append_source(copied, s.size());
  result.append(s.substr(copied));
  out.swap(result);
  return true;
}

std::string normalized(std::string_view s, NormForm form) {
  std::string out;
  if (!normalize_unicode(s, form, out)) out.assign(s);
  return out;
}

}  // namespace strata::text
