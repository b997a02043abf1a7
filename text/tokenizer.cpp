// Encoding and decoding, in the order Hugging Face tokenizers runs its pipeline: added tokens that
// are not normalized are cut out of the raw text; each remaining piece is normalized, then cut at
// the normalized added tokens; each remaining piece is pre-tokenized into words and each word goes
// through BPE; the post-processor template adds BOS/EOS.
#include "text/tokenizer.h"

#include <algorithm>

#include "text/tokenizer_model.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

uint32_t last_cp(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80) --i;
  uint32_t cp;
  utf8_decode(s, i, &cp);
  return cp;
}

struct Piece {
  size_t begin, end;
  const AddedToken* token;  // null: text to tokenize
};

// tokenizers' AddedVocabulary::find_matches: the pieces of s, with lstrip/rstrip/single_word.
void find_matches(const AddedTokenMatcher& matcher, std::string_view s, std::vector<Piece>& out) {
  out.clear();
  size_t start_offset = 0;
  size_t from = 0, mb, me;
  while (const AddedToken* t = matcher.find(s, from, &mb, &me)) {
    from = me;
    size_t start = mb, stop = me;
    if (t->single_word) {
      bool start_space = start == 0 || !is_word_char(last_cp(s.substr(0, start)));
      uint32_t next = 0;
      if (stop < s.size()) utf8_decode(s, stop, &next);
      bool stop_space = stop == s.size() || !is_word_char(next);
      if (!start_space || !stop_space) continue;
    }
    if (t->lstrip) {
      size_t b = start;
      while (b > 0) {
        size_t k = b - 1;
        while (k > 0 && (uint8_t(s[k]) & 0xC0) == 0x80) --k;
        uint32_t cp;
        utf8_decode(s, k, &cp);
        if (char_class(cp) != CharClass::kSpace) break;
        b = k;
      }
      start = std::max(b, start_offset);
    }
    if (t->rstrip) {
      while (stop < s.size()) {
        uint32_t cp;
        int len = utf8_decode(s, stop, &cp);
        if (char_class(cp) != CharClass::kSpace) break;
        stop += size_t(len);
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, nullptr});
    out.push_back({start, stop, t});
    start_offset = stop;
  }
  if (start_offset < s.size()) out.push_back({start_offset, s.size(), nullptr});
}

// Where the ids go, and their offsets where they are tracked.
struct Sink {
  std::vector<int32_t>& ids;
  std::vector<std::pair<uint32_t, uint32_t>>* offsets;  // null: encode()
  // With offsets: the text each added token matched (its stripped spaces too), by token index.
  std::vector<std::pair<size_t, std::string>> added_text;
};

void encode_word(const TokenizerModel& m, TextRef w, Sink& out) {
  if (!out.offsets) {
    m.bpe->encode_word(w.s, out.ids);
    return;
  }
  thread_local std::vector<uint32_t> ends;
  ends.clear();
  m.bpe->encode_word(w.s, out.ids, &ends);
  uint32_t begin = 0;
  for (uint32_t end : ends) {
    out.offsets->push_back(w.original(begin, end));
    begin = end;
  }
}

// Runs pre-tokenizer steps [step, end) on one piece, then BPE on each word. no_prefix: the piece
// continues a cut text (step 0 only: text/cut.cpp allows prefixes nowhere else), nothing goes before it.
void pre_tokenize(const TokenizerModel& m, size_t step, TextRef piece, bool at_start, Sink& out,
                  bool no_prefix = false) {
  if (piece.s.empty()) return;
  if (step == m.pre_tokenizer.size()) {
    encode_word(m, piece, out);
    return;
  }
  const bool tracked = piece.align != nullptr;
  const PreTokenizerStep& p = m.pre_tokenizer[step];
  switch (p.kind) {
    case PreTokenizerStep::kSplit: {
      std::vector<Span> spans;
      p.splitter.split(piece.s, spans);
      for (const Span& s : spans) pre_tokenize(m, step + 1, piece.sub(s.begin, s.end), at_start && s.begin == 0, out);
      return;
    }
    case PreTokenizerStep::kByteLevel: {
      AlignedText prefixed, mapped;
      if (p.add_prefix_space && !no_prefix && piece.s[0] != ' ') {
        prepend_text(piece, " ", prefixed);
        piece = prefixed.ref(tracked);
      }
      if (!p.use_regex) {
        byte_level_text(piece, mapped);
        pre_tokenize(m, step + 1, mapped.ref(tracked), at_start, out);
        return;
      }
      std::vector<Span> spans;
      p.splitter.split(piece.s, spans);
      for (const Span& s : spans) {
        byte_level_text(piece.sub(s.begin, s.end), mapped);
        pre_tokenize(m, step + 1, mapped.ref(tracked), at_start && s.begin == 0, out);
      }
      return;
    }
    case PreTokenizerStep::kMetaspace: {
      AlignedText replaced, prefixed;
      std::vector<Span> spaces;
      find_literal(piece.s, " ", spaces);
      if (!spaces.empty()) {
        replace_text(piece, spaces, p.replacement, replaced);
        piece = replaced.ref(tracked);
      }
      bool prepend =
          !no_prefix && (p.prepend == PreTokenizerStep::kAlways || (p.prepend == PreTokenizerStep::kFirst && at_start));
      if (prepend && !piece.s.starts_with(p.replacement)) {
        prepend_text(piece, p.replacement, prefixed);
        piece = prefixed.ref(tracked);
      }
      if (!p.split) {
        pre_tokenize(m, step + 1, piece, at_start, out);
        return;
      }
      std::vector<Span> spans;
      split_before(piece.s, p.replacement, spans);
      for (const Span& s : spans) pre_tokenize(m, step + 1, piece.sub(s.begin, s.end), at_start && s.begin == 0, out);
      return;
    }
  }
}

// The ByteLevel post-processor's trim_offsets (tokenizers' process_offsets): a token's leading and
// trailing spaces (Ġ or White_Space characters of its string) are left out of its offsets, counted
// in characters of the text (transformers' offsets are characters when they are trimmed). An added
// token's string there is the text it matched, with the spaces lstrip/rstrip took.
void trim_offsets(const TokenizerModel& m, std::string_view text, const Sink& sink, size_t first) {
  auto is_space = [](uint32_t cp) { return cp == 0x120 || char_class(cp) == CharClass::kSpace; };
  auto char_start = [&](uint32_t i) {
    while (i > 0 && (uint8_t(text[i]) & 0xC0) == 0x80) --i;
    return i;
  };
  const std::vector<int32_t>& ids = sink.ids;
  std::vector<std::pair<uint32_t, uint32_t>>& offsets = *sink.offsets;
  size_t next_added = 0;
  std::vector<uint32_t> cps;
  for (size_t i = first; i < ids.size(); ++i) {
    std::string_view t = m.tokens[size_t(ids[i])];
    if (next_added < sink.added_text.size() && sink.added_text[next_added].first == i)
      t = sink.added_text[next_added++].second;
    cps.clear();
    for (size_t k = 0; k < t.size();) {
      uint32_t cp;
      k += size_t(utf8_decode(t, k, &cp));
      cps.push_back(cp);
    }
    size_t leading = 0, trailing = 0;
    while (leading < cps.size() && is_space(cps[leading])) ++leading;
    while (trailing < cps.size() && is_space(cps[cps.size() - 1 - trailing])) ++trailing;
    auto& [b, e] = offsets[i];
    if (leading > 0) {
      bool is_first = i == first || b == 0;
      if (is_first && m.trim_prefix_space && leading == 1) leading = 0;
      for (; leading > 0 && b < e; --leading) b += uint32_t(utf8_length(uint8_t(text[b])));
      b = std::min(b, e);
    }
    if (trailing > 0) {
      size_t chars_before = 0;  // of text[0, e), counted up to `trailing`
      for (uint32_t k = e; k > 0 && chars_before < trailing; k = char_start(k - 1)) ++chars_before;
      if (chars_before >= trailing)
        for (; trailing > 0 && e > b; --trailing) e = char_start(e - 1);
    }
  }
}

void encode_impl(const TokenizerModel& m, std::string_view text, bool add_special_tokens, Sink& out,
                 bool continuation = false) {
  std::string repaired;
  if (utf8_valid_prefix(text) != text.size()) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  auto add_template = [&](const std::vector<int32_t>& ids) {
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    if (out.offsets) out.offsets->resize(out.ids.size(), {0, 0});
  };
  if (add_special_tokens) add_template(m.template_prefix);
  const size_t first = out.ids.size();
  // Offsets: each byte of the text aligned with its character's range.
  std::vector<Span> align;
  if (out.offsets) {
    align.resize(text.size());
    for (size_t i = 0; i < text.size();) {
      size_t len = size_t(utf8_length(uint8_t(text[i])));
      for (size_t k = 0; k < len; ++k) align[i + k] = {uint32_t(i), uint32_t(i + len)};
      i += len;
    }
  }
  std::vector<Piece> pieces, inner;
  find_matches(m.raw_tokens, text, pieces);
  AlignedText normalized, scratch;
  for (const Piece& p : pieces) {
    if (p.token) {
      if (out.offsets) {
        out.added_text.push_back({out.ids.size(), std::string(text.substr(p.begin, p.end - p.begin))});
        out.offsets->push_back({uint32_t(p.begin), uint32_t(p.end)});
      }
      out.ids.push_back(p.token->id);
      continue;
    }
    TextRef raw{text.substr(p.begin, p.end - p.begin), out.offsets ? align.data() + p.begin : nullptr};
    const bool cont = continuation && p.begin == 0;  // text/cut.cpp: no added token at a cut
    TextRef s = m.normalize(raw, normalized, scratch, cont);
    find_matches(m.normalized_tokens, s.s, inner);
    for (const Piece& q : inner) {
      if (q.token) {
        if (out.offsets) {
          out.added_text.push_back({out.ids.size(), std::string(s.s.substr(q.begin, q.end - q.begin))});
          out.offsets->push_back(s.original(uint32_t(q.begin), uint32_t(q.end)));
        }
        out.ids.push_back(q.token->id);
      } else {
        const bool first = p.begin == 0 && q.begin == 0;
        pre_tokenize(m, 0, s.sub(uint32_t(q.begin), uint32_t(q.end)), first && !continuation, out, first && cont);
      }
    }
  }
  if (out.offsets && m.trim_offsets) trim_offsets(m, text, out, first);
  if (add_special_tokens) add_template(m.template_suffix);
}

}  // namespace

void AddedTokenMatcher::build(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens) {
  nodes_.assign(1, Node{});
  root_.fill(-1);
  longest_ = 0;
  for (size_t k = 0; k < patterns.size(); ++k) {
    if (patterns[k].empty()) continue;
    int32_t n = 0;
    for (char ch : patterns[k]) {
      uint8_t b = uint8_t(ch);
      int32_t c = child(n, b);
      if (c < 0) {
        c = int32_t(nodes_.size());
        nodes_.emplace_back();
        if (n == 0)
          root_[b] = c;
        else
          nodes_[size_t(n)].next.push_back({b, c});
      }
      n = c;
    }
    // Among equal patterns the first listed wins (aho-corasick reports the lowest pattern).
    if (!nodes_[size_t(n)].token) nodes_[size_t(n)].token = tokens[k];
    longest_ = std::max(longest_, patterns[k].size());
  }
}

int32_t AddedTokenMatcher::child(int32_t n, uint8_t b) const {
  if (n == 0) return root_[b];
  for (const auto& [byte, c] : nodes_[size_t(n)].next)
    if (byte == b) return c;
  return -1;
}

// Leftmost, then longest at that position (aho-corasick's MatchKind::LeftmostLongest).
const AddedToken* AddedTokenMatcher::find(std::string_view s, size_t from, size_t* begin, size_t* end) const {
  if (empty()) return nullptr;
  for (size_t i = from; i < s.size(); ++i) {
    int32_t n = root_[uint8_t(s[i])];
    const AddedToken* best = nullptr;
    for (size_t j = i + 1; n >= 0; ++j) {
      if (nodes_[size_t(n)].token) {
        best = nodes_[size_t(n)].token;
        *end = j;
      }
      if (j == s.size()) break;
      n = child(n, uint8_t(s[j]));
    }
    if (best) {
      *begin = i;
      return best;
    }
  }
  return nullptr;
}

bool AddedTokenMatcher::occurs_at(std::string_view s, size_t i) const {
  if (empty() || i >= s.size()) return false;
  for (int32_t n = root_[uint8_t(s[i])]; n >= 0; n = ++i < s.size() ? child(n, uint8_t(s[i])) : -1)
    if (nodes_[size_t(n)].token) return true;
  return false;
}

TextRef TokenizerModel::normalize(TextRef s, AlignedText& out, AlignedText& scratch, bool skip_prepend) const {
  const bool tracked = s.align != nullptr;
  for (const NormalizerStep& n : normalizer) {
    // A step reads s (a view of `out` or of the input) and writes `scratch`; the two then swap.
    switch (n.kind) {
      case NormalizerStep::kPrepend:
        if (s.s.empty() || skip_prepend) continue;
        prepend_text(s, n.a, scratch);
        break;
      case NormalizerStep::kReplace: {
        thread_local std::vector<Span> found;
        found.clear();
        if (n.regex)
          n.regex->find_all(s.s, found);
        else
          find_literal(s.s, n.a, found);
        if (found.empty()) continue;
        replace_text(s, found, n.b, scratch);
        break;
      }
      case NormalizerStep::kUnicode:
        if (!unicode_text(s, n.form, scratch)) continue;
        break;
      case NormalizerStep::kLowercase:
        if (!lowercase_text(s, scratch)) continue;
        break;
      case NormalizerStep::kStrip:
        s = strip_text(s, n.left, n.right);
        continue;
      case NormalizerStep::kByteLevel:
        if (s.s.empty()) continue;
        byte_level_text(s, scratch);
        break;
    }
    std::swap(out, scratch);
    s = out.ref(tracked);
  }
  return s;
}

std::string TokenizerModel::normalize(std::string_view s) const {
  AlignedText out, scratch;
  return std::string(normalize(TextRef{s}, out, scratch).s);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  encode_append(text, add_special_tokens, ids);
  return ids;
}

void Tokenizer::encode_append(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out,
                              bool continuation) const {
  Sink sink{out, nullptr, {}};
  encode_impl(*m_, text, add_special_tokens, sink, continuation);
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, bool add_special_tokens) const {
  Encoding e;
  Sink sink{e.ids, &e.offsets, {}};
  encode_impl(*m_, text, add_special_tokens, sink);
  return e;
}

int32_t Tokenizer::vocab_size() const {
  return int32_t(m_->tokens.size());
}
int32_t Tokenizer::bos_id() const {
  return m_->bos_id;
}
int32_t Tokenizer::eos_id() const {
  return m_->eos_id;
}
bool Tokenizer::byte_level() const {
  return m_->byte_level;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : m_->added)
    if (t.content == token) return t.id;
  auto it = m_->bpe->vocab().find(token);
  if (it != m_->bpe->vocab().end()) return it->second;
  return std::nullopt;
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= m_->tokens.size()) return {};
  return m_->tokens[size_t(id)];
}

}  // namespace strata::text
