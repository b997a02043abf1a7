// Cutting a long text (a .txt dataset) into parts that encode apart, on several threads, to exactly
// the ids of the whole. A cut goes at p where text[p-2] is a visible ASCII character, text[p-1] is
// '\n' and text[p] an ASCII letter ("end.\nNext"), with no added token within reach. There:
//  - added tokens: none at or next to p, so the raw and normalized pieces around p run on through it;
//  - normalizers work per character (Unicode forms, Lowercase, ByteLevel, a literal Replace without
//    '\n' or letters), and Prepend only at a piece's start (a continuation skips it); Strip and
//    regex Replace could see across p and are refused;
//  - pre-tokenizers: a step of a known kind splits the text at p in the whole and in the parts alike
//    (the regexes below put "\n" in a match that ends at p whatever follows, and start afresh at the
//    letter); the steps before it must be local (character classes, literals: they only refine
//    pieces), the steps after it see the same pieces either way and may be anything.
//    Without such a step, BPE decides: no token holds '\n' followed by that letter, so no merge
//    crosses p and the merges either side run as they would apart (not with ignore_merges, where a
//    part's first word could be a token of its own);
//  - prefixes (ByteLevel's add_prefix_space, Metaspace's prepend) before that split are allowed at the
//    first step only, where the whole text's piece starts before p: a continuation adds none.
// Anything else (an unknown regex) is refused: the text is then tokenised on one thread.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "text/tokenizer.h"
#include "text/tokenizer_model.h"

namespace strata::text {
namespace {

// Split regexes (behavior Isolated) proven to end a match at p and restart there (tests/cpu/tokenizer_cut_test.cpp
// checks every cut on each family's tokenizer).
constexpr std::string_view kBoundaryPatterns[] = {
    // GPT-2's (ByteLevel use_regex)
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re",
    // Mistral-Nemo's tekken
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
    // DeepSeek's newlines (each its own piece)
    R"re([\r\n])re",
    // DeepSeek-V3's words
    R"re([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
// Regexes whose matches hold neither '\n' nor an ASCII letter: any behavior only refines pieces.
constexpr std::string_view kLocalPatterns[] = {
    R"re(\s)re",  // WhitespaceSplit (a '\n' match is a piece of its own or removed)
    R"re(\p{N}{1,3})re",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",  // DeepSeek-V3's CJK runs
};

bool has_letter(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; });
}

enum class Role { kLocal, kBoundary, kUnknown };

Role split_role(const Splitter& sp) {
  const bool isolated = sp.behavior == SplitBehavior::kIsolated && !sp.invert;
  if (sp.fast) return isolated ? Role::kBoundary : Role::kUnknown;
  if (sp.word_runs) return Role::kBoundary;  // Whitespace: \w+|[^\w\s]+ kept, '\n' removed
  if (sp.char_set) return Role::kLocal;      // Digits, Punctuation: neither '\n' nor a letter is in the set
  if (!sp.regex)
    return sp.literal.empty() || sp.literal.find('\n') != std::string::npos ? Role::kUnknown : Role::kLocal;
  const std::string& pattern = sp.regex->pattern();
  for (std::string_view k : kBoundaryPatterns)
    if (pattern == k) return isolated ? Role::kBoundary : Role::kUnknown;
  for (SplitRegex k : {SplitRegex::kLlama3, SplitRegex::kQwen2})
    if (pattern == split_regex_pattern(k)) return isolated ? Role::kBoundary : Role::kUnknown;
  for (std::string_view k : kLocalPatterns)
    if (pattern == k) return Role::kLocal;
  return Role::kUnknown;
}

// Why the normalizer or the added tokens forbid cuts, or "".
std::string text_refusal(const TokenizerModel& m) {
  for (const NormalizerStep& n : m.normalizer) {
    if (n.kind == NormalizerStep::kStrip) return "its Strip normalizer sees the ends of each part";
    if (n.kind == NormalizerStep::kReplace && n.regex)
      return fmt::format("its Replace normalizer's regex '{}' could match across a cut", n.regex->pattern());
    if (n.kind == NormalizerStep::kReplace &&
        (n.a.empty() || n.a.find('\n') != std::string::npos || has_letter(n.a) || n.b.find('\n') != std::string::npos))
      return fmt::format("its Replace normalizer's pattern '{}' could touch a cut", n.a);
  }
  if (!m.normalizer.empty())
    for (const AddedToken& t : m.added)
      if (t.normalized && (t.lstrip || t.rstrip || t.content.find('\n') != std::string::npos))
        return fmt::format("its normalized added token '{}' could reach across a cut", t.content);
  return {};
}

}  // namespace

void analyze_cuts(TokenizerModel& m) {
  m.cut_before.fill(false);
  m.cut_refusal = text_refusal(m);
  if (!m.cut_refusal.empty()) return;
  bool boundary = false;
  // Once a step has split at p, every later one sees the same pieces in the whole text and in the parts.
  for (size_t i = 0; i < m.pre_tokenizer.size() && !boundary; ++i) {
    const PreTokenizerStep& s = m.pre_tokenizer[i];
    Role role = Role::kLocal;
    if (s.kind == PreTokenizerStep::kSplit) role = split_role(s.splitter);
    if (s.kind == PreTokenizerStep::kByteLevel && s.use_regex) role = Role::kBoundary;
    const bool prefix = (s.kind == PreTokenizerStep::kByteLevel && s.add_prefix_space) ||
                        (s.kind == PreTokenizerStep::kMetaspace && s.prepend == PreTokenizerStep::kAlways);
    if (s.kind == PreTokenizerStep::kMetaspace &&
        (s.replacement.find('\n') != std::string::npos || has_letter(s.replacement)))
      role = Role::kUnknown;
    if (prefix && i > 0) {
      m.cut_refusal = fmt::format("pre_tokenizer step {} adds a prefix to pieces an earlier step cut elsewhere", i);
      return;
    }
    if (role == Role::kUnknown) {
      m.cut_refusal = s.splitter.regex
                          ? fmt::format("its pre-tokenizer regex '{}' is not one strata knows to cut at a line start",
                                        s.splitter.regex->pattern())
                          : fmt::format("pre_tokenizer step {} is not one strata knows to cut at a line start", i);
      return;
    }
    boundary = boundary || role == Role::kBoundary;
  }
  for (int c = 'A'; c <= 'z'; ++c) m.cut_before[size_t(c)] = (c <= 'Z' || c >= 'a');
  if (boundary) return;
  // No step splits at p: BPE sees "...\nLetter..." as one word.
  const Vocab& vocab = m.bpe->vocab();
  if (m.bpe->options().ignore_merges) {
    m.cut_refusal = "its BPE has ignore_merges and no pre-tokenizer splits at a line start";
    m.cut_before.fill(false);
    return;
  }
  std::string nl = m.byte_level ? "\xC4\x8A" : "\n";  // ByteLevel's 'Ċ' for '\n'
  if (!m.byte_level && !vocab.count(nl)) nl = "<0x0A>";
  if (!vocab.count(nl) || (nl == "<0x0A>" && !m.bpe->options().byte_fallback)) {
    m.cut_refusal = "the newline is not a token of its own";
    m.cut_before.fill(false);
    return;
  }
  const bool lower = std::any_of(m.normalizer.begin(), m.normalizer.end(),
                                 [](const NormalizerStep& n) { return n.kind == NormalizerStep::kLowercase; });
  for (int c = 0; c < 256; ++c) {
    if (!m.cut_before[size_t(c)]) continue;
    const char l = lower ? char(c | 0x20) : char(c);
    m.cut_before[size_t(c)] = vocab.count(std::string(1, l)) > 0;
  }
  // A token holding "\nL" could merge across the cut.
  for (const auto& [token, id] : vocab)
    for (size_t at = token.find(nl); at != std::string::npos; at = token.find(nl, at + 1)) {
      const size_t after = at + nl.size();
      if (after < token.size()) {
        const uint8_t b = uint8_t(token[after]);
        m.cut_before[b] = false;
        if (lower && b >= 'a' && b <= 'z') m.cut_before[b - 0x20] = false;  // Lowercase maps the upper case onto it
      }
    }
  if (std::none_of(m.cut_before.begin(), m.cut_before.end(), [](bool b) { return b; }))
    m.cut_refusal = "its vocabulary merges the newline with every letter";
}

const std::string& Tokenizer::cut_refusal() const {
  return m_->cut_refusal;
}

size_t Tokenizer::next_cut(std::string_view text, size_t from) const {
  const TokenizerModel& m = *m_;
  if (!m.cut_refusal.empty()) return std::string_view::npos;
  // Added tokens are matched on the raw text (and normalized ones on it too where nothing normalizes).
  const size_t reach = std::max(m.raw_tokens.longest(), m.normalizer.empty() ? m.normalized_tokens.longest() : 0);
  for (size_t nl = text.find('\n', from > 0 ? from - 1 : 0); nl != std::string_view::npos;
       nl = text.find('\n', nl + 1)) {
    const size_t p = nl + 1;
    if (p >= text.size()) break;
    if (nl == 0 || uint8_t(text[nl - 1]) <= 0x20 || uint8_t(text[nl - 1]) >= 0x7F || !m.cut_before[uint8_t(text[p])])
      continue;
    bool near = false;  // an added token starting in [nl - reach, p]: it could end at nl or strip across it
    for (size_t i = nl >= reach ? nl - reach : 0; i <= p && !near; ++i)
      near = m.raw_tokens.occurs_at(text, i) || (m.normalizer.empty() && m.normalized_tokens.occurs_at(text, i));
    if (!near) return p;
  }
  return std::string_view::npos;
}

}  // namespace strata::text
