// jinja2's filters and tests as chat templates use them (text/jinja_internal.h); anything else is an
// error naming it.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "text/jinja_internal.h"
#include "text/py_case.h"

namespace strata::text::jinja {

using K = Value::Kind;

namespace {

Value sorted(Renderer& r, List items, bool reverse, bool case_sensitive, const Value& attribute, int line) {
  (void)r;
  auto key = [&](const Value& v) {
    Value k = attribute.is_undefined() || attribute.is(K::none) ? v : attr_path(v, to_str(attribute), line);
    if (!case_sensitive && k.is(K::string)) k.s = text::py_lower(k.s);
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare(key(y), key(x), line) < 0 : compare(key(x), key(y), line) < 0;
  });
  return Value::of_list(std::move(items));
}

List select(Renderer& r, const Value& v, const Args& a, bool by_attr, bool keep_if) {
  List out;
  size_t first = by_attr ? 1 : 0;
  std::string attr = by_attr ? to_str(a.get(0, "attribute")) : "";
  for (const auto& item : iterate(v, a.line)) {
    Value x = by_attr ? attr_path(item, attr, a.line) : item;
    bool t;
    if (a.pos.size() <= first) {
      t = truthy(x);
    } else {
      std::string test = str_arg(a.pos[first], "a test name", a.line);
      Args ta;
      ta.line = a.line;
      ta.pos.assign(a.pos.begin() + static_cast<long>(first) + 1, a.pos.end());
      if (test == "defined" || test == "undefined")
        t = (test == "defined") != x.is_undefined();
      else
        t = apply_test(r, test, x, ta);
    }
    if (t == keep_if) out.push_back(item);
  }
  return out;
}

}  // namespace

bool apply_test(Renderer& r, const std::string& name, const Value& v, const Args& a) {
  (void)r;
  int line = a.line;
  auto arg = [&]() {
    if (a.pos.empty()) fail("the test '" + name + "' needs an argument", line);
    return a.pos[0];
  };
  if (name == "none") return v.is(K::none);
  if (name == "boolean") return v.is(K::boolean);
  if (name == "true") return v.is(K::boolean) && v.b;
  if (name == "false") return v.is(K::boolean) && !v.b;
  if (name == "integer") return v.is(K::integer);
  if (name == "float") return v.is(K::floating);
  if (name == "number") return v.is_number();
  if (name == "string") return v.is(K::string);
  if (name == "mapping") return v.is(K::dict);
  if (name == "iterable" || name == "sequence")
    return v.is(K::list) || v.is(K::dict) || v.is(K::string) || v.is_undefined();
  if (name == "callable") return v.is(K::callable);
  if (name == "odd" || name == "even") {  // value % 2 == 1 (or 0), floats included
    if (v.is(K::floating)) {
      double m = std::fmod(v.f, 2.0);
      if (m < 0) m += 2.0;
      return m == (name == "odd" ? 1.0 : 0.0);
    }
    int64_t x = int_arg(v, name.c_str(), line);
    return ((x % 2 + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value d = arg();
    if (v.is(K::floating) || d.is(K::floating)) {
      const double x = v.is(K::floating) ? v.f : double(int_arg(v, "divisibleby", line));
      const double y = d.is(K::floating) ? d.f : double(int_arg(d, "divisibleby", line));
      if (y == 0) fail("float modulo", line);
      return std::fmod(x, y) == 0;
    }
    const int64_t y = int_arg(d, "divisibleby", line);
    if (y == 0) fail("division by zero", line);
    return int_arg(v, "divisibleby", line) % y == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, arg());
  if (name == "ne" || name == "!=") return !equal(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg(), line) < 0;
  if (name == "le" || name == "<=") return compare(v, arg(), line) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg(), line) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg(), line) >= 0;
  if (name == "sameas") {
    Value o = arg();
    if (v.kind != o.kind) return false;
    if (v.is(K::list)) return v.list == o.list;
    if (v.is(K::dict) || v.is(K::ns)) return v.dict == o.dict;
    return equal(v, o);
  }
  if (name == "in") {
    Value c = arg();
    if (c.is(K::string)) {
      charge(weight(c), line);
      return text_find(c.s, str_arg(v, "'in <string>'", line)) != std::string::npos;
    }
    if (c.is(K::dict) || c.is(K::ns)) {
      if (v.is(K::list) && !v.tuple) fail("unhashable type: 'list'", line);
      if (v.is(K::dict)) fail("unhashable type: 'dict'", line);
      return v.is(K::string) && c.dict->find(v.s) != nullptr;
    }
    for (const auto& x : iterate(c, line))
      if (equal(x, v)) return true;
    return false;
  }
  if (name == "lower" || name == "upper")
    return name == "lower" ? text::py_islower(to_str(v)) : text::py_isupper(to_str(v));
  if (name == "escaped") return false;
  fail("the test '" + name + "' is not supported", line);
}

Value apply_filter(Renderer& r, const std::string& name, const Value& v, const Args& a) {
  int line = a.line;
  // A filter walks its input: charged by its size, except those that only look at its ends or its length.
  if (name != "length" && name != "count" && name != "first" && name != "last" && name != "default" && name != "d")
    charge(weight(v), line);
  if (name == "trim") return Value::string(py_strip(to_str(v), a.get(0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::integer(length(v, line));
  if (name == "string") return Value::string(to_str(v));
  if (name == "safe") return Value::string(to_str(v));  // Markup(value): a string, even of undefined
  if (name == "escape" || name == "e") return Value::string(html_escape(to_str(v)));
  if (name == "upper" || name == "lower")
    return Value::string(name == "upper" ? text::py_upper(to_str(v)) : text::py_lower(to_str(v)));
  if (name == "capitalize") return Value::string(capitalize(to_str(v), line));
  if (name == "title") return Value::string(jinja_title(to_str(v), line));
  if (name == "default" || name == "d") {
    bool boolean = truthy(a.get(1, "boolean", Value::boolean(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0, "default_value", Value::string(""));
    return v;
  }
  if (name == "first" || name == "last") {
    List items = iterate(v, line);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::of_list(iterate(v, line));
  if (name == "reverse") {
    if (v.is(K::string)) {
      auto cps = code_points(v.s);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::string(out);
    }
    List items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::of_list(std::move(items));
  }
  if (name == "join") {
    a.check(2, {"d", "attribute"}, "join");
    std::string sep = to_str(a.get(0, "d", Value::string("")));
    Value attribute = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& x : iterate(v, line)) {
      out += (first ? "" : sep) + to_str(attribute.is_undefined() ? x : attr_path(x, to_str(attribute), line));
      check_text(out.size(), line);
      first = false;
    }
    return Value::string(out);
  }
  if (name == "replace") {
    std::string s = to_str(v);
    return Value::string(py_replace(s, to_str(a.get(0, "old")), to_str(a.get(1, "new")),
                                    int_arg(a.get(2, "count", Value::integer(-1)), "replace", line)));
  }
  if ((name == "map" || name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") &&
      !truthy(v))
    return Value::of_list({});  // jinja2 iterates these only `if value`
  if (name == "map") {
    List out;
    Value attribute = a.get(static_cast<size_t>(-1), "attribute");
    for (const auto& x : iterate(v, line)) {
      if (!attribute.is_undefined()) {
        Value y = attr_path(x, to_str(attribute), line);
        if (y.is_undefined()) y = a.get(static_cast<size_t>(-1), "default", y);
        out.push_back(y);
      } else {
        if (a.pos.empty()) fail("map() needs a filter name or attribute=", line);
        Args fa;
        fa.line = line;
        fa.pos.assign(a.pos.begin() + 1, a.pos.end());
        fa.kw = a.kw;
        out.push_back(apply_filter(r, str_arg(a.pos[0], "map()", line), x, fa));
      }
    }
    return Value::of_list(std::move(out));
  }
  if (name == "select" || name == "reject") return Value::of_list(select(r, v, a, false, name == "select"));
  if (name == "selectattr" || name == "rejectattr") return Value::of_list(select(r, v, a, true, name == "selectattr"));
  if ((name == "int" || name == "float" || name == "abs") && v.is_undefined()) fail("'" + v.s + "' is undefined", line);
  if (name == "int") {
    Value dflt = a.get(0, "default", Value::integer(0));
    if (v.is(K::integer)) return v;
    if (v.is(K::boolean)) return Value::integer(v.b);
    // int(x) of a float past the 64-bit range is an error, not undefined behaviour.
    if (v.is(K::floating) && std::isfinite(v.f) && !fits_int64(v.f))
      fail("int() of " + py_float(v.f) + ": a chat template's integers are 64-bit", line);
    if (v.is(K::floating)) return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : dflt;
    if (v.is(K::string)) {
      std::string s = py_strip(v.s, Value::undefined(), true, true);
      try {
        size_t used = 0;
        long long x = std::stoll(s, &used);
        if (used == s.size()) return Value::integer(x);
        double d = std::stod(s, &used);
        if (used == s.size() && std::isfinite(d) && fits_int64(d)) return Value::integer(static_cast<int64_t>(d));
      } catch (...) {
      }
    }
    return dflt;
  }
  if (name == "float") {
    Value dflt = a.get(0, "default", Value::floating(0));
    if (v.is(K::floating)) return v;
    if (v.is(K::integer) || v.is(K::boolean)) return Value::floating(v.is(K::boolean) ? v.b : static_cast<double>(v.i));
    if (v.is(K::string)) {
      std::string s = py_strip(v.s, Value::undefined(), true, true);
      try {
        size_t used = 0;
        double d = std::stod(s, &used);
        if (used == s.size()) return Value::floating(d);
      } catch (...) {
      }
    }
    return dflt;
  }
  if (name == "abs") {
    if (v.is(K::integer)) return Value::integer(v.i < 0 ? -v.i : v.i);
    if (v.is(K::boolean)) return Value::integer(v.b);
    if (v.is(K::floating)) return Value::floating(std::fabs(v.f));
    fail("bad operand type for abs(): " + type_name(v), line);
  }
  if (name == "unique") {
    bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
    Value attribute = a.get(1, "attribute");
    List out, keys;
    for (const auto& x : iterate(v, line)) {
      Value k = attribute.is_undefined() ? x : attr_path(x, to_str(attribute), line);
      if ((k.is(K::list) && !k.tuple) || k.is(K::dict)) fail("unhashable type: '" + type_name(k) + "'", line);
      if (!cs && k.is(K::string)) k.s = text::py_lower(k.s);
      if (std::none_of(keys.begin(), keys.end(), [&](const Value& y) { return equal(y, k); })) {
        keys.push_back(k);
        out.push_back(x);
      }
    }
    return Value::of_list(std::move(out));
  }
  if (name == "indent") {
    if (!v.is(K::string)) fail("indent() of a " + type_name(v) + ", not a string", line);
    Value width = a.get(0, "width", Value::integer(4));
    const int64_t spaces = width.is(K::string) ? 0 : int_arg(width, "indent", line);
    if (spaces < 0 || spaces > 4096) fail("indent() width must be 0 to 4096, got " + std::to_string(spaces), line);
    std::string ind = width.is(K::string) ? width.s : std::string(static_cast<size_t>(spaces), ' ');
    bool first = truthy(a.get(1, "first", Value::boolean(false)));
    bool blank = truthy(a.get(2, "blank", Value::boolean(false)));
    std::string s = to_str(v) + "\n";
    Value lines_v = call_method(Value::string(s), "splitlines", Args{{}, {}, line});
    std::string rv;
    for (size_t k = 0; k < lines_v.list->size(); ++k) {
      const std::string& l = (*lines_v.list)[k].s;
      if (k == 0)
        rv = l;
      else
        rv += "\n" + ((blank || !l.empty()) ? ind + l : l);
      check_text(rv.size(), line);
    }
    return Value::string(first ? ind + rv : rv);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::of_list({});
    if (!v.is(K::dict)) fail("items() of a " + type_name(v) + ", not a dict", line);
    return call_method(v, "items", Args{{}, {}, line});
  }
  if (name == "dictsort") {
    if (!v.is(K::dict)) fail("dictsort of a " + type_name(v) + ", not a dict", line);
    bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
    std::string by = to_str(a.get(1, "by", Value::string("key")));
    bool rev = truthy(a.get(2, "reverse", Value::boolean(false)));
    Value items = call_method(v, "items", Args{{}, {}, line});
    return sorted(r, *items.list, rev, cs, Value::string(by == "value" ? "1" : "0"), line);
  }
  if (name == "sort") {
    return sorted(r, iterate(v, line), truthy(a.get(0, "reverse", Value::boolean(false))),
                  truthy(a.get(1, "case_sensitive", Value::boolean(false))), a.get(2, "attribute"), line);
  }
  if (name == "tojson") {
    a.check(1, {"indent", "ensure_ascii", "separators", "sort_keys"}, "tojson");
    Value indent = a.get(0, "indent", Value::none());
    if (truthy(a.get(static_cast<size_t>(-1), "ensure_ascii", Value::boolean(false))))
      fail("tojson(ensure_ascii=true) is not supported", line);
    const int64_t ind64 = indent.is(K::none) ? -1 : int_arg(indent, "tojson indent", line);
    if (ind64 > 4096) fail("tojson indent must be at most 4096, got " + std::to_string(ind64), line);
    const int ind = int(std::max<int64_t>(ind64, -1));
    std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
    Value seps = a.get(static_cast<size_t>(-1), "separators", Value::none());
    if (!seps.is(K::none)) {
      if (!seps.is(K::list) || seps.list->size() != 2) fail("tojson separators must be a pair of strings", line);
      item_sep = str_arg((*seps.list)[0], "tojson separators", line);
      key_sep = str_arg((*seps.list)[1], "tojson separators", line);
    }
    return Value::string(to_json(v, ind, item_sep, key_sep, truthy(a.get(static_cast<size_t>(-1), "sort_keys"))));
  }
  if (name == "attr") {  // Python's getattr only: a dict's keys are items, not attributes
    const std::string n = str_arg(a.get(0, "name"), "attr", line);
    if (v.is(K::dict) && !has_method(v, n)) return Value::undefined("'dict object' has no attribute '" + n + "'");
    return getattr(v, n, line);
  }
  if (name == "format") return Value::string(py_percent(to_str(v), a));
  if (name == "sum") {
    Value attribute = a.get(0, "attribute");
    Value total = a.get(1, "start", Value::integer(0));
    for (const auto& x : iterate(v, line)) {
      Value y = attribute.is_undefined() ? x : attr_path(x, to_str(attribute), line);
      if (!y.is_number() || !total.is_number()) fail("sum() of non-numbers", line);
      total = total.is(K::floating) || y.is(K::floating)
                  ? Value::floating((total.is(K::floating) ? total.f : total.i) + (y.is(K::floating) ? y.f : y.i))
                  : Value::integer(total.i + y.i);
    }
    return total;
  }
  if (name == "min" || name == "max") {
    Value s = sorted(r, iterate(v, line), false, truthy(a.get(0, "case_sensitive", Value::boolean(false))),
                     a.get(1, "attribute"), line);
    if (s.list->empty()) return Value::undefined("No aggregated item, sequence was empty.");
    return name == "min" ? s.list->front() : s.list->back();
  }
  fail("the filter '" + name + "' is not supported", line);
}

}  // namespace strata::text::jinja
