// The Jinja lexer: template text and tags, with jinja2's whitespace control as transformers
// configures it (trim_blocks: the newline after a block or comment tag goes; lstrip_blocks: the
// spaces and tabs before one on its line go; `-` strips all whitespace on its side, `+` keeps it).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "text/jinja_internal.h"

namespace strata::text::jinja {
namespace {

struct Lexer {
  std::string_view src;
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;
  std::vector<Token> out;

  int line_at(size_t p) const { return 1 + static_cast<int>(std::count(src.begin(), src.begin() + p, '\n')); }

  // Python's str.rstrip(): every whitespace code point, ASCII and beyond.
  static std::string rstrip(std::string_view s) { return py_strip(s, Value::undefined(), false, true); }

  // Python's `\s*` after a `-` tag end.
  size_t skip_space(size_t p) const {
    while (p < src.size()) {
      auto rest = src.substr(p, 4);
      auto cps = code_points(rest);
      if (cps.empty()) break;
      uint32_t cp = 0;
      const std::string& c = cps[0];
      if (c.size() == 1) {
        cp = static_cast<unsigned char>(c[0]);
      } else {
        cp = static_cast<unsigned char>(c[0]) & (c.size() == 2 ? 0x1F : c.size() == 3 ? 0x0F : 0x07);
        for (size_t k = 1; k < c.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(c[k]) & 0x3F);
      }
      if (!is_py_space(cp)) break;
      p += c.size();
    }
    return p;
  }

  void text(std::string t, int at_line) {
    if (!t.empty()) out.push_back({Token::Type::text, std::move(t), at_line});
  }

  // After a tag end at `p` (just past `}}`, `%}` or `#}`), with `sign` the character before it.
  void end_tag(size_t p, char sign, bool trims) {
    if (sign == '-') {
      p = skip_space(p);
    } else if (sign != '+' && trims && p < src.size() && src[p] == '\n') {
      ++p;
    }
    line_starting = p > 0 && src[p - 1] == '\n';
    pos = p;
  }

  void run() {
    while (pos < src.size()) {
      size_t open = pos;
      while (true) {
        open = src.find('{', open);
        if (open == std::string_view::npos || open + 1 >= src.size()) {
          open = std::string_view::npos;
          break;
        }
        char c = src[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      if (open == std::string_view::npos) {
        text(std::string(src.substr(pos)), line_at(pos));
        return;
      }
      char kind = src[open + 1];
      char sign = open + 2 < src.size() ? src[open + 2] : 0;
      std::string data(src.substr(pos, open - pos));
      int data_line = line_at(pos);
      if (sign == '-') {
        data = rstrip(data);
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = data.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && data.find_first_not_of(" \t", l_pos) == std::string::npos)
          data.resize(l_pos);
      }
      text(std::move(data), data_line);
      size_t body = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      line = line_at(open);
      if (kind == '#') {
        size_t close = src.find("#}", body);
        if (close == std::string_view::npos) fail("a comment is not closed", line);
        char end_sign = close > body && (src[close - 1] == '-' || src[close - 1] == '+') ? src[close - 1] : 0;
        end_tag(close + 2, end_sign, true);
        continue;
      }
      out.push_back({kind == '{' ? Token::Type::var_begin : Token::Type::block_begin, "", line});
      size_t before = out.size();
      tag(body, kind == '{' ? '}' : '%');
      if (kind == '%' && out.size() == before + 2 && out[before].value == "raw") raw();
    }
  }

  // `{% raw %}` ... `{% endraw %}`: the text between, untouched.
  void raw() {
    size_t p = pos;
    while (true) {
      size_t open = src.find("{%", p);
      if (open == std::string_view::npos) fail("{% raw %} is not closed by {% endraw %}", line);
      size_t q = open + 2;
      char sign = q < src.size() ? src[q] : 0;
      if (sign == '-' || sign == '+') ++q;
      while (q < src.size() && (src[q] == ' ' || src[q] == '\t' || src[q] == '\n')) ++q;
      if (src.substr(q, 6) == "endraw") {
        q += 6;
        while (q < src.size() && (src[q] == ' ' || src[q] == '\t' || src[q] == '\n')) ++q;
        char end_sign = 0;
        if (q < src.size() && (src[q] == '-' || src[q] == '+')) end_sign = src[q++];
        if (src.substr(q, 2) == "%}") {
          std::string data(src.substr(pos, open - pos));
          if (sign == '-') data = rstrip(data);
          out.pop_back();  // block_end
          out.pop_back();  // raw
          out.pop_back();  // block_begin
          text(std::move(data), line_at(pos));
          end_tag(q + 2, end_sign, true);
          return;
        }
      }
      p = open + 2;
    }
  }

  // The tokens of a tag from `p` to its end (`}}` or `%}` with an optional `-`/`+`).
  void tag(size_t p, char close) {
    static const char* ops2[] = {"//", "**", "==", "!=", "<=", ">="};
    while (true) {
      while (p < src.size() && std::strchr(" \t\r\n", src[p]) && src[p]) {
        if (src[p] == '\n') ++line;
        ++p;
      }
      if (p >= src.size()) fail(std::string("a tag is not closed by ") + close + "}", line);
      char c = src[p];
      if ((c == '-' || c == '+') && p + 2 < src.size() + 0 && src[p + 1] == close && src[p + 2] == '}') {
        out.push_back({close == '}' ? Token::Type::var_end : Token::Type::block_end, "", line});
        end_tag(p + 3, c, close == '%');
        return;
      }
      if (c == close && p + 1 < src.size() && src[p + 1] == '}') {
        out.push_back({close == '}' ? Token::Type::var_end : Token::Type::block_end, "", line});
        end_tag(p + 2, 0, close == '%');
        return;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = p;
        while (p < src.size() && (std::isalnum(static_cast<unsigned char>(src[p])) || src[p] == '_')) ++p;
        out.push_back({Token::Type::name, std::string(src.substr(b, p - b)), line});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = p;
        bool is_float = false;
        while (p < src.size() && (std::isdigit(static_cast<unsigned char>(src[p])) || src[p] == '_')) ++p;
        if (p + 1 < src.size() && src[p] == '.' && std::isdigit(static_cast<unsigned char>(src[p + 1]))) {
          is_float = true;
          ++p;
          while (p < src.size() && (std::isdigit(static_cast<unsigned char>(src[p])) || src[p] == '_')) ++p;
        }
        if (p < src.size() && (src[p] == 'e' || src[p] == 'E')) {
          size_t q = p + 1;
          if (q < src.size() && (src[q] == '+' || src[q] == '-')) ++q;
          if (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) {
            is_float = true;
            p = q;
            while (p < src.size() && std::isdigit(static_cast<unsigned char>(src[p]))) ++p;
          }
        }
        std::string num(src.substr(b, p - b));
        num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
        out.push_back({is_float ? Token::Type::floating : Token::Type::integer, num, line});
      } else if (c == '\'' || c == '"') {
        p = string(p);
      } else {
        size_t len = 1;
        for (const char* o : ops2)
          if (src.substr(p, 2) == o) len = 2;
        std::string op(src.substr(p, len));
        if (!std::strchr("+-*/%~<>=()[]{},.:|!", c) || (op == "!"))
          fail(fmt::format("unexpected character '{}'", op), line);
        out.push_back({Token::Type::op, op, line});
        p += op.size();
      }
    }
  }

  static void put_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // A string literal with Python's escapes; returns the position after it.
  size_t string(size_t p) {
    char q = src[p++];
    std::string s;
    int start_line = line;
    while (true) {
      if (p >= src.size()) fail("a string literal is not closed", start_line);
      char c = src[p++];
      if (c == q) break;
      if (c == '\n') ++line;
      if (c != '\\') {
        s += c;
        continue;
      }
      if (p >= src.size()) fail("a string literal is not closed", start_line);
      char e = src[p++];
      auto hex = [&](int n) {
        // Exactly n hex digits, a code point Unicode has (Python refuses the rest; stoul threw out of the lexer).
        uint32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          const char h = p + k < src.size() ? src[p + k] : '\0';
          const int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
          if (d < 0)
            fail("a bad \\x/\\u/\\U escape in a string literal: " + std::to_string(n) + " hex digits expected", line);
          cp = cp * 16 + uint32_t(d);
        }
        if (cp > 0x10FFFF) fail("a \\U escape past U+10FFFF in a string literal", line);
        p += n;
        put_utf8(s, cp);
      };
      switch (e) {
        case 'n':
          s += '\n';
          break;
        case 't':
          s += '\t';
          break;
        case 'r':
          s += '\r';
          break;
        case '\\':
          s += '\\';
          break;
        case '\'':
          s += '\'';
          break;
        case '"':
          s += '"';
          break;
        case '0':
          s += '\0';
          break;
        case 'a':
          s += '\a';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'v':
          s += '\v';
          break;
        case '\n':
          ++line;
          break;
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:
          s += '\\';
          s += e;
      }
    }
    out.push_back({Token::Type::string, std::move(s), start_line});
    return p;
  }
};

}  // namespace

std::vector<Token> lex(std::string_view raw_source) {
  // As jinja2: every newline becomes \n and one trailing newline goes (keep_trailing_newline=False).
  std::string source;
  source.reserve(raw_source.size());
  for (size_t p = 0; p < raw_source.size(); ++p) {
    if (raw_source[p] == '\r') {
      if (p + 1 < raw_source.size() && raw_source[p + 1] == '\n') ++p;
      source += '\n';
    } else {
      source += raw_source[p];
    }
  }
  if (!source.empty() && source.back() == '\n') source.pop_back();
  Lexer lx;
  lx.src = source;
  lx.run();
  lx.out.push_back({Token::Type::eof, "", lx.line_at(source.size())});
  return lx.out;
}

}  // namespace strata::text::jinja
