// The Jinja built-ins chat templates use: jinja2's filters and tests, Python's str and dict
// methods, attribute and item access, and transformers' globals (raise_exception, strftime_now,
// namespace, dict). Anything else is an error naming it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>

#include "text/jinja_internal.h"
#include "text/py_case.h"

namespace strata::text::jinja {

using K = Value::Kind;

static uint32_t cp_of(const std::string& c) {
  unsigned char b0 = c[0];
  if (c.size() == 1) return b0;
  uint32_t cp = b0 & (c.size() == 2 ? 0x1F : c.size() == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < c.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(c[k]) & 0x3F);
  return cp;
}

std::string str_arg(const Value& v, const char* what, int line) {
  if (!v.is(K::string)) fail(std::string(what) + " expects a string, not " + type_name(v), line);
  return v.s;
}

int64_t int_arg(const Value& v, const char* what, int line) {
  if (v.is(K::boolean)) return v.b;
  if (!v.is(K::integer)) fail(std::string(what) + " expects an integer, not " + type_name(v), line);
  return v.i;
}

static Value bound(const Value& obj, const std::string& name) {
  auto fn = std::make_shared<Callable>();
  fn->name = name;
  fn->call = [obj, name](Renderer&, const Args& a) { return call_method(obj, name, a); };
  Value v = Value::make(K::callable);
  v.fn = fn;
  return v;
}

static Value callable(const std::string& name, std::function<Value(Renderer&, const Args&)> f) {
  auto fn = std::make_shared<Callable>();
  fn->name = name;
  fn->call = std::move(f);
  Value v = Value::make(K::callable);
  v.fn = fn;
  return v;
}

// Python's slice of a sequence of n items: the indices taken.
static std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step,
                                          int line) {
  int64_t st = step.is(K::none) ? 1 : int_arg(step, "a slice step", line);
  if (st == 0) fail("slice step cannot be zero", line);
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is(K::none)) return dflt;
    int64_t x = int_arg(v, "a slice index", line);
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t b = clamp(start, st > 0 ? 0 : n - 1), e = clamp(stop, st > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) idx.push_back(k);
  return idx;
}

// `item.a.b` for map/selectattr/sort's attribute=: each part an item lookup, as jinja2's attrgetter.
Value attr_path(const Value& item, const std::string& path, int line) {
  Value v = item;
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = path.find('.', b);
    if (e == std::string::npos) e = path.size();
    std::string part = path.substr(b, e - b);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = getitem(v, digits ? Value::integer(parse_int(part, line)) : Value::string(part), line);
    b = e + 1;
  }
  return v;
}

static std::vector<std::string> split(const std::string& s, const Value& sep, int64_t maxsplit, int line) {
  std::vector<std::string> out;
  if (sep.is(K::none) || sep.is_undefined()) {
    auto cps = code_points(s);
    size_t k = 0;
    while (true) {
      while (k < cps.size() && is_py_space(cp_of(cps[k]))) ++k;
      if (k >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest;
        for (size_t j = k; j < cps.size(); ++j) rest += cps[j];
        out.push_back(py_strip(rest, Value::undefined(), false, true));
        break;
      }
      std::string word;
      while (k < cps.size() && !is_py_space(cp_of(cps[k]))) word += cps[k++];
      charge(1, line);  // a piece: charged as it is built
      out.push_back(word);
    }
    return out;
  }
  std::string d = str_arg(sep, "split()", line);
  if (d.empty()) fail("empty separator", line);
  size_t b = 0;
  while (true) {
    size_t e = text_find(s, d, b);
    if (e == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(s.substr(b));
      return out;
    }
    charge(1, line);
    out.push_back(s.substr(b, e - b));
    b = e + d.size();
  }
}

static List strings(const std::vector<std::string>& v) {
  List out;
  for (const auto& s : v) out.push_back(Value::string(s));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    auto cps = code_points(s);
    int64_t n = 0;
    for (const auto& c : cps) {
      if (count < 0 || n++ < count) out += to;
      out += c;
      check_text(out.size(), 0);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t b = 0;
  int64_t n = 0;
  while (true) {
    size_t e = text_find(s, from, b);
    if (e == std::string::npos || (count >= 0 && n == count)) break;
    out += s.substr(b, e - b) + to;
    check_text(out.size(), 0);
    b = e + from.size();
    ++n;
  }
  return out + s.substr(b);
}

// Python's "...".format(): {}, {0}, {name}, {{ and }}, without format specs.
static std::string py_format(const std::string& f, const Args& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    char c = f[k];
    if (c == '{' && k + 1 < f.size() && f[k + 1] == '{') {
      out += '{';
      ++k;
    } else if (c == '}' && k + 1 < f.size() && f[k + 1] == '}') {
      out += '}';
      ++k;
    } else if (c == '{') {
      size_t e = f.find('}', k);
      if (e == std::string::npos) fail("a '{' in a format string is not closed", a.line);
      std::string field = f.substr(k + 1, e - k - 1);
      if (field.find_first_of(":!.[") != std::string::npos)
        fail("format specs are not supported: {" + field + "}", a.line);
      Value v;
      if (field.empty()) {
        v = a.get(auto_index++, "");
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        v = a.get(size_t(parse_int(field, a.line)), "");
      } else {
        v = a.get(static_cast<size_t>(-1), field.c_str());
      }
      if (v.is_undefined()) fail("format() has no argument for {" + field + "}", a.line);
      out += to_str(v);
      k = e;
    } else {
      out += c;
    }
  }
  return out;
}

// Python's "..." % args: %s, %r, %d, %i and %%.
std::string py_percent(const std::string& f, const Args& a) {
  std::string out;
  size_t n = 0;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k] != '%') {
      out += f[k];
      continue;
    }
    if (++k >= f.size()) fail("incomplete format", a.line);
    char c = f[k];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (n >= a.pos.size()) fail("not enough arguments for format string", a.line);
    const Value& v = a.pos[n++];
    if (c == 's')
      out += to_str(v);
    else if (c == 'r')
      out += repr(v);
    else if (c == 'd' || c == 'i') {
      if (v.is(K::floating) && !(std::isfinite(v.f) && fits_int64(v.f)))
        fail("%d of " + py_float(v.f) + ": a chat template's integers are 64-bit", a.line);
      if (v.is(K::floating))
        out += std::to_string(static_cast<int64_t>(v.f));
      else
        out += std::to_string(int_arg(v, "%d", a.line));
    } else
      fail(std::string("the format %") + c + " is not supported", a.line);
  }
  if (n != a.pos.size() && a.kw.empty()) fail("not all arguments converted during string formatting", a.line);
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string jinja_title(const std::string& s, int line) {
  (void)line;
  return text::jinja_title_filter(s);
}

std::string capitalize(const std::string& s, int line) {
  (void)line;
  return text::py_capitalize(s);
}

// jinja2's undefined for a missing attribute or item.
static Value no_attr(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(obj), name));
}

Value getattr(const Value& obj, const std::string& name, int line) {
  switch (obj.kind) {
    case K::undefined:
      fail("'" + obj.s + "' is undefined", line);
    case K::dict:
      if (has_method(obj, name)) return bound(obj, name);
      [[fallthrough]];
    case K::ns: {
      const Value* v = obj.dict->find(name);
      return v ? *v : no_attr(obj, name);
    }
    case K::string:
      if (has_method(obj, name)) return bound(obj, name);
      [[fallthrough]];
    default:
      return no_attr(obj, name);
  }
}

Value getitem(const Value& obj, const Value& key, int line) {
  switch (obj.kind) {
    case K::undefined:
      fail("'" + obj.s + "' is undefined", line);
    case K::dict:
    case K::ns:
      if (key.is(K::string)) {
        if (const Value* v = obj.dict->find(key.s)) return *v;
        if (obj.is(K::dict) && has_method(obj, key.s)) return bound(obj, key.s);
      }
      return no_attr(obj, to_str(key));
    case K::list:
    case K::string: {
      if (!key.is(K::integer) && !key.is(K::boolean)) {
        if (obj.is(K::string) && key.is(K::string) && has_method(obj, key.s)) return bound(obj, key.s);
        return no_attr(obj, to_str(key));
      }
      int64_t i = key.is(K::boolean) ? key.b : key.i;
      if (obj.is(K::list)) {
        int64_t n = static_cast<int64_t>(obj.list->size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(type_name(obj) + " index out of range");
        return (*obj.list)[static_cast<size_t>(i)];
      }
      auto cps = code_points(obj.s);
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("string index out of range");
      return Value::string(cps[static_cast<size_t>(i)]);
    }
    default:
      return no_attr(obj, to_str(key));
  }
}

bool has_method(const Value& obj, const std::string& name) {
  static const char* str_methods[] = {
      "strip",   "lstrip",     "rstrip",  "split",      "rsplit",  "startswith", "endswith",  "upper",    "lower",
      "title",   "capitalize", "replace", "join",       "find",    "rfind",      "count",     "format",   "isdigit",
      "isalpha", "isalnum",    "isspace", "splitlines", "islower", "isupper",    "isdecimal", "isnumeric"};
  static const char* dict_methods[] = {"items", "keys", "values", "get"};
  if (obj.is(K::string))
    return std::find(std::begin(str_methods), std::end(str_methods), name) != std::end(str_methods);
  if (obj.is(K::dict))
    return std::find(std::begin(dict_methods), std::end(dict_methods), name) != std::end(dict_methods);
  return false;
}

Value call_method(const Value& obj, const std::string& name, const Args& a) {
  int line = a.line;
  charge(weight(obj), line);  // a method walks its object
  if (name == "__slice__") {
    if (obj.is(K::list)) {
      List out;
      for (int64_t i : slice_indices(static_cast<int64_t>(obj.list->size()), a.pos[0], a.pos[1], a.pos[2], line))
        out.push_back((*obj.list)[static_cast<size_t>(i)]);
      return Value::of_list(std::move(out), obj.tuple);
    }
    if (obj.is(K::string)) {
      auto cps = code_points(obj.s);
      std::string out;
      for (int64_t i : slice_indices(static_cast<int64_t>(cps.size()), a.pos[0], a.pos[1], a.pos[2], line))
        out += cps[static_cast<size_t>(i)];
      return Value::string(out);
    }
    if (obj.is_undefined()) fail("'" + obj.s + "' is undefined", line);
    fail(fmt::format("'{}' object is not subscriptable", type_name(obj)), line);  // (GCC 12 -Wrestrict on "'" + s)
  }
  if (obj.is(K::string)) {
    const std::string& s = obj.s;
    if (name == "__mod__") return Value::string(py_percent(s, a));
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value::string(py_strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip"));
    if (name == "split" || name == "rsplit") {
      Value maxsplit = a.get(1, "maxsplit", Value::integer(-1));
      if (name == "rsplit" && int_arg(maxsplit, "maxsplit", line) >= 0)
        fail("rsplit() with maxsplit is not supported", line);
      return Value::of_list(
          strings(split(s, a.get(0, "sep", Value::none()), int_arg(maxsplit, "maxsplit", line), line)));
    }
    if (name == "startswith" || name == "endswith") {
      if (a.pos.size() > 1) fail(name + "() with start/end is not supported", line);
      Value p = a.get(0, "prefix");
      List options = p.is(K::list) ? *p.list : List{p};
      for (const auto& o : options) {
        std::string x = str_arg(o, name.c_str(), line);
        bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                        : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "upper" || name == "lower")
      return Value::string(name == "upper" ? text::py_upper(s) : text::py_lower(s));
    if (name == "title") return Value::string(text::py_title(s));
    if (name == "capitalize") return Value::string(capitalize(s, line));
    if (name == "replace")
      return Value::string(py_replace(s, str_arg(a.get(0, "old"), "replace()", line),
                                      str_arg(a.get(1, "new"), "replace()", line),
                                      int_arg(a.get(2, "count", Value::integer(-1)), "replace()", line)));
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const auto& x : iterate(a.get(0, "iterable"), line)) {
        out += (first ? "" : s) + str_arg(x, "join()", line);
        check_text(out.size(), line);
        first = false;
      }
      return Value::string(out);
    }
    if (name == "find" || name == "rfind" || name == "count") {
      std::string sub = str_arg(a.get(0, "sub"), name.c_str(), line);
      if (a.pos.size() > 1) fail(name + "() with start/end is not supported", line);
      if (name == "count") {
        if (sub.empty()) return Value::integer(length(obj, line) + 1);
        int64_t n = 0;
        for (size_t p = text_find(s, sub); p != std::string::npos; p = text_find(s, sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      size_t p = name == "find" ? text_find(s, sub) : text_rfind(s, sub);
      if (p == std::string::npos) return Value::integer(-1);
      return Value::integer(static_cast<int64_t>(code_points(s.substr(0, p)).size()));
    }
    if (name == "format") return Value::string(py_format(s, a));
    if (name == "splitlines") {
      std::vector<std::string> lines;
      size_t b = 0;
      for (size_t k = 0; k < s.size(); ++k)
        if (s[k] == '\n' || s[k] == '\r') {
          charge(1, line);
          lines.push_back(s.substr(b, k - b));
          if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
          b = k + 1;
        }
      if (b < s.size()) lines.push_back(s.substr(b));
      return Value::of_list(strings(lines));
    }
    if (name == "islower") return Value::boolean(text::py_islower(s));
    if (name == "isupper") return Value::boolean(text::py_isupper(s));
    if (name.rfind("is", 0) == 0) {
      using C = text::PyCharClass;
      const C c = name == "isdigit"     ? C::digit
                  : name == "isalpha"   ? C::alpha
                  : name == "isalnum"   ? C::alnum
                  : name == "isdecimal" ? C::decimal
                  : name == "isnumeric" ? C::numeric
                                        : C::space;
      return Value::boolean(text::py_is(s, c));
    }
  }
  if (obj.is(K::dict)) {
    if (name == "items") {
      List out;
      for (const auto& [k, v] : obj.dict->items) out.push_back(Value::of_list({Value::string(k), v}, true));
      return Value::of_list(std::move(out));
    }
    if (name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : obj.dict->items) out.push_back(name == "keys" ? Value::string(k) : v);
      return Value::of_list(std::move(out));
    }
    if (name == "get") {
      Value key = a.get(0, "key");
      const Value* v = key.is(K::string) ? obj.dict->find(key.s) : nullptr;
      return v ? *v : a.get(1, "default", Value::none());
    }
  }
  if (obj.is_undefined()) fail("'" + obj.s + "' is undefined", line);
  fail("the method " + type_name(obj) + "." + name + "() is not supported", line);
}

Value global(const std::string& name) {
  if (name == "raise_exception")
    return callable(name, [](Renderer&, const Args& a) -> Value { fail(to_str(a.get(0, "message")), a.line); });
  if (name == "namespace" || name == "dict")
    return callable(name, [name](Renderer&, const Args& a) {
      Dict d;
      if (!a.pos.empty()) {
        if (a.pos.size() > 1 || !a.pos[0].is(K::dict)) fail(name + "() takes a dict and keyword arguments", a.line);
        d = *a.pos[0].dict;
      }
      for (const auto& [k, v] : a.kw) d.set(k, v);
      Value v = Value::of_dict(std::move(d));
      if (name == "namespace") v.kind = K::ns;
      return v;
    });
  if (name == "range")
    return callable(name, [](Renderer&, const Args& a) {
      if (a.pos.empty() || a.pos.size() > 3) fail("range() takes 1 to 3 arguments", a.line);
      int64_t b = 0, e, st = 1;
      if (a.pos.size() == 1) {
        e = int_arg(a.pos[0], "range()", a.line);
      } else {
        b = int_arg(a.pos[0], "range()", a.line);
        e = int_arg(a.pos[1], "range()", a.line);
        if (a.pos.size() == 3) st = int_arg(a.pos[2], "range()", a.line);
      }
      if (st == 0) fail("range() arg 3 must not be zero", a.line);
      // Its length before anything is built (in 128 bits: b, e and st may be anywhere in the 64-bit range).
      const __int128 span = st > 0 ? __int128(e) - b : __int128(b) - e, step = st > 0 ? __int128(st) : -__int128(st);
      const __int128 n = span <= 0 ? 0 : (span + step - 1) / step;
      if (n > 100000) fail("range() of more than 100000 numbers is too long for a chat template", a.line);
      List out;
      for (__int128 k = 0; k < n; ++k) out.push_back(Value::integer(int64_t(b + k * st)));
      return Value::of_list(std::move(out));
    });
  if (name == "strftime_now")
    return callable(name, [](Renderer& r, const Args& a) {
      std::string f = str_arg(a.get(0, "format"), "strftime_now()", a.line);
      const std::time_t now = r.now();
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
  return Value::undefined(name);
}

}  // namespace strata::text::jinja
