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

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);  // the loader refuses empty patterns; never loop
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  for (size_t p; (p = s.find(from, i)) != std::string_view::npos; i = p + from.size()) {
    out.append(s.substr(i, p - i));
    out.append(to);
  }
  out.append(s.substr(i));
  return out;
}

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

// Runs pre-tokenizer steps [step, end) on one piece, then BPE on each word.
void pre_tokenize(const TokenizerModel& m, size_t step, std::string_view piece, bool at_start,
                  std::vector<int32_t>& out) {
  if (piece.empty()) return;
  if (step == m.pre_tokenizer.size()) {
    m.bpe->encode_word(piece, out);
    return;
  }
  const PreTokenizerStep& p = m.pre_tokenizer[step];
  switch (p.kind) {
    case PreTokenizerStep::kSplit: {
      std::vector<Span> spans;
      split_regex(piece, p.regex, spans);
      for (const Span& s : spans)
        pre_tokenize(m, step + 1, piece.substr(s.begin, s.end - s.begin), at_start && s.begin == 0, out);
      return;
    }
    case PreTokenizerStep::kByteLevel: {
      std::string mapped;
      mapped.reserve(piece.size() + 8);
      if (p.add_prefix_space && piece[0] != ' ') byte_level_append(mapped, " ");
      byte_level_append(mapped, piece);
      pre_tokenize(m, step + 1, mapped, at_start, out);
      return;
    }
    case PreTokenizerStep::kMetaspace: {
      std::string r = replace_all(piece, " ", p.replacement);
      bool prepend = p.prepend == PreTokenizerStep::kAlways || (p.prepend == PreTokenizerStep::kFirst && at_start);
      if (prepend && !std::string_view(r).starts_with(p.replacement)) r.insert(0, p.replacement);
      if (!p.split) {
        pre_tokenize(m, step + 1, r, at_start, out);
        return;
      }
      std::vector<Span> spans;
      split_before(r, p.replacement, spans);
      for (const Span& s : spans)
        pre_tokenize(m, step + 1, std::string_view(r).substr(s.begin, s.end - s.begin), at_start && s.begin == 0, out);
      return;
    }
  }
}

}  // namespace

void AddedTokenMatcher::build(std::vector<std::string> patterns, std::vector<const AddedToken*> tokens) {
  nodes_.assign(1, Node{});
  root_.fill(-1);
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

std::string_view TokenizerModel::normalize(std::string_view s, std::string& out) const {
  std::string next;
  for (const NormalizerStep& n : normalizer) {
    next.clear();
    switch (n.kind) {
      case NormalizerStep::kPrepend:
        if (s.empty()) continue;
        next.reserve(n.a.size() + s.size());
        next.append(n.a).append(s);
        break;
      case NormalizerStep::kReplace:
        if (s.find(n.a) == std::string_view::npos) continue;
        next = replace_all(s, n.a, n.b);
        break;
      case NormalizerStep::kUnicode:
        if (!normalize_unicode(s, n.form, next)) continue;
        break;
    }
    out.swap(next);  // s may have viewed the old `out`: it is in `next` until the next step
    s = out;
  }
  return s;
}

std::string TokenizerModel::normalize(std::string_view s) const {
  std::string out;
  return std::string(normalize(s, out));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  encode_append(text, add_special_tokens, ids);
  return ids;
}

void Tokenizer::encode_append(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  const TokenizerModel& m = *m_;
  std::string repaired;
  if (utf8_valid_prefix(text) != text.size()) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  if (add_special_tokens) out.insert(out.end(), m.template_prefix.begin(), m.template_prefix.end());
  std::vector<Piece> pieces, inner;
  find_matches(m.raw_tokens, text, pieces);
  for (const Piece& p : pieces) {
    if (p.token) {
      out.push_back(p.token->id);
      continue;
    }
    std::string_view raw = text.substr(p.begin, p.end - p.begin);
    std::string normalized;
    std::string_view s = m.normalize(raw, normalized);
    find_matches(m.normalized_tokens, s, inner);
    for (const Piece& q : inner) {
      if (q.token)
        out.push_back(q.token->id);
      else
        pre_tokenize(m, 0, s.substr(q.begin, q.end - q.begin), p.begin == 0 && q.begin == 0, out);
    }
  }
  if (add_special_tokens) out.insert(out.end(), m.template_suffix.begin(), m.template_suffix.end());
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
