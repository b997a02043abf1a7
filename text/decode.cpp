// Tokenizer::decode: the tokenizer.json decoder chain over the tokens' strings, each step as
// tokenizers' decode_chain does it (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace).
#include <string>
#include <vector>

#include "text/tokenizer.h"
#include "text/tokenizer_model.h"
#include "text/unicode.h"

namespace strata::text {
namespace {

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;  // the loader refuses empty patterns; never loop
  std::string out;
  size_t i = 0;
  for (size_t p; (p = s.find(from, i)) != std::string::npos; i = p + from.size()) {
    out.append(s, i, p - i);
    out.append(to);
  }
  out.append(s, i);
  return out;
}

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    i += size_t(utf8_decode(s, i, &cp));
    cps.push_back(cp);
  }
  return cps;
}

// All tokens' bytes (a token with a character outside the map contributes its own UTF-8), then
// the invalid sequences replaced as Rust's from_utf8_lossy does.
void decode_byte_level(std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens) {
    const size_t mark = bytes.size();
    for (size_t i = 0; i < t.size();) {
      uint32_t cp;
      i += size_t(utf8_decode(t, i, &cp));
      int b = byte_level_byte(cp);
      if (b < 0) {
        bytes.resize(mark);
        bytes += t;
        break;
      }
      bytes += char(b);
    }
  }
  tokens.assign(1, utf8_lossy(bytes));
}

// <0xNN> runs become their bytes when those are valid UTF-8, else one U+FFFD per byte.
void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string pending;
  auto flush = [&] {
    if (pending.empty()) return;
    if (utf8_valid_prefix(pending) == pending.size())
      out.push_back(pending);
    else
      for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
    pending.clear();
  };
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  for (std::string& t : tokens) {
    int byte = -1;
    if (t.size() == 6 && t.starts_with("<0x") && t[5] == '>') {
      // Rust's u8::from_str_radix(.., 16), which also takes a leading '+'.
      int h = hex(t[3]), l = hex(t[4]);
      if (h >= 0 && l >= 0)
        byte = h * 16 + l;
      else if (t[3] == '+' && l >= 0)
        byte = l;
    }
    if (byte >= 0) {
      pending += char(byte);
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void strip(std::vector<std::string>& tokens, const std::string& ch, size_t start, size_t stop) {
  uint32_t c;
  utf8_decode(ch, 0, &c);
  for (std::string& t : tokens) {
    std::vector<uint32_t> cps = code_points(t);
    size_t begin = 0, end = cps.size();
    while (begin < std::min(start, cps.size()) && cps[begin] == c) ++begin;
    for (size_t k = 0; k < stop && end > begin && cps[end - 1] == c; ++k) --end;
    std::string s;
    for (size_t k = begin; k < end; ++k) utf8_append(s, cps[k]);
    t = std::move(s);
  }
}

// Every replacement character becomes a space, except in the first token, where it is dropped
// (unless prepend_scheme is "never").
void metaspace(std::vector<std::string>& tokens, const std::string& replacement, bool prepend) {
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = replace_all(tokens[i], replacement, i == 0 && prepend ? "" : " ");
}

}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerModel& m = *m_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= m.tokens.size() || !m.present[size_t(id)]) continue;
    if (skip_special_tokens && m.special[size_t(id)]) continue;
    tokens.push_back(m.tokens[size_t(id)]);
  }
  if (!m.has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  for (const DecoderStep& d : m.decoder) {
    switch (d.kind) {
      case DecoderStep::kByteLevel:
        decode_byte_level(tokens);
        break;
      case DecoderStep::kReplace:
        for (std::string& t : tokens) t = replace_all(t, d.a, d.b);
        break;
      case DecoderStep::kByteFallback:
        byte_fallback(tokens);
        break;
      case DecoderStep::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, all);
        break;
      }
      case DecoderStep::kStrip:
        strip(tokens, d.a, d.start, d.stop);
        break;
      case DecoderStep::kMetaspace:
        metaspace(tokens, d.a, d.prepend);
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace strata::text
