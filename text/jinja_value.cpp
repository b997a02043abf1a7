// Values of the Jinja interpreter with Python's semantics: str(), repr(), ==, <, json.dumps.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "text/jinja_internal.h"

namespace strata::text::jinja {

void fail(std::string message, int line) {
  throw JinjaError{std::move(message), line};
}

namespace {
thread_local RenderBudget* current_budget = nullptr;

uint32_t depth_of(const Value& v) {
  return v.is(Value::Kind::list) || v.is(Value::Kind::dict) ? v.depth : 0;
}
void check_depth(uint32_t depth) {
  if (depth > uint32_t(kMaxValueDepth))
    fail("lists and dicts nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
}
}  // namespace

RenderBudget::RenderBudget() : outer_(current_budget) {
  current_budget = this;
}
RenderBudget::~RenderBudget() {
  current_budget = outer_;
}

void charge(size_t units, int line) {
  RenderBudget* b = current_budget;
  if (!b) return;
  if (units > kMaxRenderWork - b->used)
    fail("the template does more work than a chat template does (more than " + std::to_string(kMaxRenderWork) +
             " units: statements, loop iterations, macro calls, list items and 256-byte pieces of text)",
         line);
  b->used += units;
}

void check_text(size_t bytes, int line) {
  if (bytes > kMaxRenderedBytes)
    fail("a text of more than " + std::to_string(kMaxRenderedBytes >> 20) + " MiB is too long for a chat template",
         line);
}

int64_t parse_int(const std::string& digits, int line) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec == std::errc::result_out_of_range)
    fail("the integer " + digits.substr(0, 40) + (digits.size() > 40 ? "..." : "") +
             " is past 64 bits: a chat template's integers are 64-bit",
         line);
  if (ec != std::errc() || end != digits.data() + digits.size()) fail("'" + digits + "' is not an integer", line);
  return v;
}

namespace {
// The first match at or after `from` of a needle of m bytes in a text of n (Knuth-Morris-Pratt: O(n + m) whatever
// the bytes; libstdc++'s boyer_moore_searcher builds its table in O(m^2)). at(i) and pat(j) read them.
template <class At, class Pat>
size_t kmp_find(size_t n, At at, size_t m, Pat pat, size_t from) {
  std::vector<uint32_t> border(m, 0);  // m <= kMaxRenderedBytes
  for (size_t j = 1, k = 0; j < m; ++j) {
    while (k && pat(j) != pat(k)) k = border[k - 1];
    if (pat(j) == pat(k)) ++k;
    border[j] = uint32_t(k);
  }
  for (size_t i = from, k = 0; i < n; ++i) {
    while (k && at(i) != pat(k)) k = border[k - 1];
    if (at(i) == pat(k)) ++k;
    if (k == m) return i + 1 - m;
  }
  return std::string_view::npos;
}
}  // namespace

size_t text_find(std::string_view s, std::string_view sub, size_t from) {
  if (from > s.size()) return std::string_view::npos;
  if (sub.size() <= 16) return s.find(sub, from);  // at most 16 comparisons a position
  return kmp_find(
      s.size(), [&](size_t i) { return s[i]; }, sub.size(), [&](size_t j) { return sub[j]; }, from);
}

size_t text_rfind(std::string_view s, std::string_view sub) {
  if (sub.size() <= 16) return s.rfind(sub);
  const size_t n = s.size(), m = sub.size();
  if (m > n) return std::string_view::npos;
  const size_t r = kmp_find(
      n, [&](size_t i) { return s[n - 1 - i]; }, m, [&](size_t j) { return sub[m - 1 - j]; }, 0);
  return r == std::string_view::npos ? r : n - r - m;  // the match in the reversed text ends where it starts here
}

size_t weight(const Value& v) {
  size_t w = 1 + v.s.size() / 256;
  if (v.is(Value::Kind::list))
    for (const Value& x : *v.list) w += 1 + x.s.size() / 256;
  if (v.is(Value::Kind::dict))
    for (const auto& [k, x] : v.dict->items) w += 1 + (k.size() + x.s.size()) / 256;
  return w;
}

Value Value::of_list(List items, bool tuple) {
  Value v = make(Kind::list);
  uint32_t depth = 1;
  for (const Value& x : items) depth = std::max(depth, depth_of(x) + 1);
  check_depth(depth);
  v.list = std::make_shared<List>(std::move(items));
  v.tuple = tuple;
  v.depth = depth;
  return v;
}

Value Value::of_dict(Dict d) {
  Value v = make(Kind::dict);
  uint32_t depth = 1;
  for (const auto& [k, x] : d.items) depth = std::max(depth, depth_of(x) + 1);
  check_depth(depth);
  v.dict = std::make_shared<Dict>(std::move(d));
  v.depth = depth;
  return v;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value::floating(j.get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::of_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json(it.value()));
      return Value::of_dict(std::move(d));
    }
    default:
      fail("the context holds a value JSON cannot express");
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return false;
    case Value::Kind::boolean:
      return v.b;
    case Value::Kind::integer:
      return v.i != 0;
    case Value::Kind::floating:
      return v.f != 0;
    case Value::Kind::string:
      return !v.s.empty();
    case Value::Kind::list:
      return !v.list->empty();
    case Value::Kind::dict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // -d.ddde±XX, the shortest digits that round-trip
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int decpt = exp + 1;  // digits are 0.DIGITS * 10^decpt
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out = "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out = digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

std::vector<std::string> code_points(std::string_view s) {
  charge(1 + s.size() / 16, 0);  // 32 bytes a code point: charged before they are built
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

static uint32_t decode(std::string_view c) {
  unsigned char b0 = c[0];
  if (c.size() == 1) return b0;
  uint32_t cp = b0 & (c.size() == 2 ? 0x1F : c.size() == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < c.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(c[k]) & 0x3F);
  return cp;
}

bool is_py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string py_strip(std::string_view s, const Value& chars, bool left, bool right) {
  auto cps = code_points(s);
  std::vector<std::string> set;
  bool whitespace = chars.is_undefined() || chars.is(Value::Kind::none);
  if (!whitespace) {
    if (!chars.is(Value::Kind::string)) fail("strip() takes a string, not " + type_name(chars));
    set = code_points(chars.s);
  }
  auto strip = [&](const std::string& c) {
    return whitespace ? is_py_space(decode(c)) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip(cps[b])) ++b;
  if (right)
    while (e > b && strip(cps[e - 1])) --e;
  std::string out;
  for (size_t k = b; k < e; ++k) out += cps[k];
  return out;
}

static std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (const auto& c : code_points(s)) {
    uint32_t cp = decode(c);
    char buf[16];
    if (cp == static_cast<uint32_t>(q) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      out += buf;
    } else if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
               (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + q;
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return "Undefined";
    case Value::Kind::string:
      return repr_string(v.s);
    case Value::Kind::list: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        out += (k ? ", " : "") + repr((*v.list)[k]);
        check_text(out.size(), 0);
      }
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::Kind::dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        out += (first ? "" : ", ") + repr_string(k) + ": " + repr(x);
        check_text(out.size(), 0);
        first = false;
      }
      return out + "}";
    }
    case Value::Kind::ns: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        out += (first ? "" : ", ") + repr_string(k) + ": " + repr(x);
        check_text(out.size(), 0);
        first = false;
      }
      return out + "}>";
    }
    default:
      return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return v.b ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(v.i);
    case Value::Kind::floating:
      return py_float(v.f);
    case Value::Kind::string:
      return v.s;
    case Value::Kind::callable:
      return "<function " + v.fn->name + ">";
    default:
      return repr(v);
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return "Undefined";
    case Value::Kind::none:
      return "NoneType";
    case Value::Kind::boolean:
      return "bool";
    case Value::Kind::integer:
      return "int";
    case Value::Kind::floating:
      return "float";
    case Value::Kind::string:
      return "str";
    case Value::Kind::list:
      return v.tuple ? "tuple" : "list";
    case Value::Kind::dict:
      return "dict";
    case Value::Kind::ns:
      return "Namespace";
    default:
      return "function";
  }
}

static double num(const Value& v) {
  return v.is(Value::Kind::floating) ? v.f : v.is(Value::Kind::boolean) ? (v.b ? 1 : 0) : static_cast<double>(v.i);
}
static bool int_like(const Value& v) {
  return v.is(Value::Kind::integer) || v.is(Value::Kind::boolean);
}
static int64_t int_of(const Value& v) {
  return v.is(Value::Kind::boolean) ? (v.b ? 1 : 0) : v.i;
}

bool equal(const Value& a, const Value& b) {
  charge(1, 0);
  if (a.is_number() && b.is_number()) {
    if (int_like(a) && int_like(b)) return int_of(a) == int_of(b);
    return num(a) == num(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.s == b.s;
    case Value::Kind::list:
      if (a.tuple != b.tuple || a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Kind::dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !equal(x, *y)) return false;
      }
      return true;
    default:
      return a.dict == b.dict && a.fn == b.fn;
  }
}

int compare(const Value& a, const Value& b, int line) {
  charge(1, line);
  if (a.is_number() && b.is_number()) {
    if (int_like(a) && int_like(b)) return int_of(a) < int_of(b) ? -1 : int_of(a) > int_of(b);
    return num(a) < num(b) ? -1 : num(a) > num(b);
  }
  if (a.is(Value::Kind::string) && b.is(Value::Kind::string)) return a.s.compare(b.s) < 0 ? -1 : a.s != b.s;
  if (a.is(Value::Kind::list) && b.is(Value::Kind::list) && a.tuple == b.tuple) {
    for (size_t k = 0; k < std::min(a.list->size(), b.list->size()); ++k)
      if (!equal((*a.list)[k], (*b.list)[k])) return compare((*a.list)[k], (*b.list)[k], line);
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
  }
  fail("'<' is not supported between " + type_name(a) + " and " + type_name(b), line);
}

static void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

static void json_value(std::string& out, const Value& v, int indent, int depth, const std::string& item_sep,
                       const std::string& key_sep, bool sort_keys) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    check_text(out.size() + 1 + size_t(indent) * size_t(d), 0);
    out += '\n';
    out.append(size_t(indent) * size_t(d), ' ');
  };
  switch (v.kind) {
    case Value::Kind::none:
      out += "null";
      return;
    case Value::Kind::boolean:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::integer:
      out += std::to_string(v.i);
      return;
    case Value::Kind::floating:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity") : py_float(v.f);
      return;
    case Value::Kind::string:
      json_string(out, v.s);
      return;
    case Value::Kind::list: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_value(out, (*v.list)[k], indent, depth + 1, item_sep, key_sep, sort_keys);
        check_text(out.size(), 0);
      }
      newline(depth);
      out += "]";
      return;
    }
    case Value::Kind::dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (sort_keys) std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += "{";
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_string(out, items[k]->first);
        out += key_sep;
        json_value(out, items[k]->second, indent, depth + 1, item_sep, key_sep, sort_keys);
        check_text(out.size(), 0);
      }
      newline(depth);
      out += "}";
      return;
    }
    default:
      fail("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                    bool sort_keys) {
  std::string out;
  json_value(out, v, indent, 0, item_sep, key_sep, sort_keys);
  return out;
}

List iterate(const Value& v, int line) {
  charge(weight(v), line);
  switch (v.kind) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
      return *v.list;
    case Value::Kind::dict: {
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::string: {
      charge(v.s.size(), line);  // a value a character: charged before they are built
      List chars;
      for (auto& c : code_points(v.s)) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default:
      fail("'" + type_name(v) + "' object is not iterable", line);
  }
}

int64_t length(const Value& v, int line) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return 0;
    case Value::Kind::string:
      return static_cast<int64_t>(code_points(v.s).size());
    case Value::Kind::list:
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::dict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      fail("object of type '" + type_name(v) + "' has no len()", line);
  }
}

}  // namespace strata::text::jinja
