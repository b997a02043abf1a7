// The Jinja interpreter's parts (text/jinja.h): values with Python's semantics, the token stream,
// the syntax tree, and the built-in filters, tests and methods.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja.h"

namespace strata::text::jinja {

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;
struct Args;

// A Python value as a template sees it. Lists and dicts from the context are shared, never
// mutated (transformers renders in an immutable sandbox); a namespace is shared and mutable.
struct Value {
  enum class Kind : uint8_t { undefined, none, boolean, integer, floating, string, list, dict, ns, callable };
  Kind kind = Kind::undefined;
  bool b = false;
  bool tuple = false;  // a list that prints as a tuple
  uint32_t depth = 0;  // list and dict levels inside (at most kMaxValueDepth)
  int64_t i = 0;
  double f = 0;
  std::string s;  // the string; for undefined, what was looked up (for errors)
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // dict and namespace
  std::shared_ptr<Callable> fn;

  static Value undefined(std::string what = "") {
    Value v;
    v.s = std::move(what);
    return v;
  }
  static Value none() { return make(Kind::none); }
  static Value boolean(bool x) {
    Value v = make(Kind::boolean);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = make(Kind::integer);
    v.i = x;
    return v;
  }
  static Value floating(double x) {
    Value v = make(Kind::floating);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = make(Kind::string);
    v.s = std::move(x);
    return v;
  }
  static Value of_list(List items, bool tuple = false);
  static Value of_dict(Dict d);
  static Value make(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
  bool is(Kind k) const { return kind == k; }
  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_number() const { return kind == Kind::integer || kind == Kind::floating || kind == Kind::boolean; }
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python's dict
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

// Raised inside the interpreter; Template adds the file and line.
struct JinjaError {
  std::string message;
  int line = 0;  // 0: the innermost node's line is used
};
[[noreturn]] void fail(std::string message, int line = 0);

// The render's limits (text/jinja.h): charge() spends work units of the render under way on this thread (a no-op
// outside one), failing past kMaxRenderWork; check_text() fails for a string of more than kMaxRenderedBytes.
void charge(size_t units, int line);
// The budget of one render: charge() spends it while it lives (Renderer::run makes one).
class RenderBudget {
 public:
  RenderBudget();
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;
  size_t used = 0;

 private:
  RenderBudget* outer_;
};
void check_text(size_t bytes, int line);
// The work units a value's memory stands for: 1, plus its items (a list's or dict's, shallow), plus a string's
// 256-byte pieces (its own, or its items').
size_t weight(const Value& v);
// str.find / str.rfind in linear time however the text and the needle are made (std::string::find compares the
// whole needle at each position: 'a' * 10**7 searched for 'a' * 10**6 ~ 'b' would take hours). npos when absent.
size_t text_find(std::string_view s, std::string_view sub, size_t from = 0);
size_t text_rfind(std::string_view s, std::string_view sub);
// A decimal integer literal or index ("123"): an error past 64 bits, as Python's integers are unbounded.
int64_t parse_int(const std::string& digits, int line);
// Whether a finite double is a 64-bit integer's value once truncated (int() of it is defined).
inline bool fits_int64(double d) {
  return d > -9223372036854777856.0 && d < 9223372036854775808.0;
}

// Values (text/jinja_value.cpp).
Value from_json(const nlohmann::ordered_json& j);
bool truthy(const Value& v);
std::string to_str(const Value& v);     // Python's str()
std::string repr(const Value& v);       // Python's repr()
std::string type_name(const Value& v);  // Python's type name, for errors
std::string py_float(double d);         // Python's repr of a float
bool equal(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, int line);  // <0, 0, >0; error for unordered types
// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) as transformers' tojson.
std::string to_json(const Value& v, int indent, const std::string& item_sep, const std::string& key_sep,
                    bool sort_keys);
// The items a for loop or a filter iterates: a list's items, a dict's keys, a string's characters.
List iterate(const Value& v, int line);
int64_t length(const Value& v, int line);

// UTF-8 strings as Python indexes them (by code point).
std::vector<std::string> code_points(std::string_view s);
bool is_py_space(uint32_t cp);
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);

// Tokens.
struct Token {
  enum class Type : uint8_t {
    text,
    var_begin,
    var_end,
    block_begin,
    block_end,
    name,
    string,
    integer,
    floating,
    op,
    eof
  };
  Type type;
  std::string value;
  int line;
};
std::vector<Token> lex(std::string_view source);

// The syntax tree.
struct Expr;
using ExprP = std::shared_ptr<Expr>;
struct Expr {
  enum class K : uint8_t {
    literal,
    name,
    list,
    tuple,
    dict,
    attr,
    subscript,
    slice,
    call,
    filter,
    test,
    neg,
    pos,
    not_,
    and_,
    or_,
    cond,
    binary,
    compare
  };
  K k;
  int line = 0;
  Value lit;
  std::string name;         // name, attr, filter, test, binary operator
  std::vector<ExprP> args;  // operands; call: callee then positional; slice: obj, start, stop, step
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;  // compare: the operators between args
  bool negated = false;          // `is not`
};

struct Stmt;
using StmtP = std::shared_ptr<Stmt>;
using Body = std::vector<StmtP>;
struct Stmt {
  enum class K : uint8_t {
    text,
    output,
    if_,
    for_,
    set,
    set_block,
    macro,
    call_block,
    filter_block,
    break_,
    continue_,
    generation
  };
  K k;
  int line = 0;
  std::string text;                              // text; macro name; set_block name
  ExprP expr;                                    // output; set value; for iterable; call_block call
  std::vector<std::pair<ExprP, Body>> branches;  // if / elif
  Body body, else_body;
  std::vector<std::string> targets;                   // for / set names (more than one: unpacking)
  std::string ns_attr;                                // set ns.attr: targets[0] is the namespace
  ExprP cond;                                         // for ... if cond
  std::vector<std::pair<std::string, ExprP>> params;  // macro / call_block parameters, default or null
  ExprP filter;                                       // filter_block / set_block filter (a filter Expr, args[0] null)
};

struct Program {
  std::string name;
  Body body;
  bool has_generation = false;
};
Body parse_tokens(const std::vector<Token>& tokens, bool* has_generation);

// Calls.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
  // The parameter at `index` or named `name`; `fallback` when absent.
  Value get(size_t index, const char* name, Value fallback = Value::undefined()) const;
  void check(size_t max_pos, std::initializer_list<const char*> names, const char* what) const;
};
class Renderer;
struct Callable {
  std::string name;
  std::function<Value(Renderer&, const Args&)> call;
};

// Built-ins (text/jinja_builtins.cpp).
Value apply_filter(Renderer& r, const std::string& name, const Value& v, const Args& a);
bool apply_test(Renderer& r, const std::string& name, const Value& v, const Args& a);
Value call_method(const Value& obj, const std::string& name, const Args& a);
bool has_method(const Value& obj, const std::string& name);
Value global(const std::string& name);  // range, namespace, dict, raise_exception, strftime_now; undefined if none
Value getattr(const Value& obj, const std::string& name, int line);  // `obj.name`
Value getitem(const Value& obj, const Value& key, int line);         // `obj[key]`

// Helpers the built-ins share (text/jinja_builtins.cpp).
std::string str_arg(const Value& v, const char* what, int line);
int64_t int_arg(const Value& v, const char* what, int line);
Value attr_path(const Value& item, const std::string& path, int line);  // `a.b.0` as jinja2's attrgetter
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
std::string py_percent(const std::string& f, const Args& a);  // "..." % args
std::string html_escape(const std::string& s);
std::string jinja_title(const std::string& s, int line);
std::string capitalize(const std::string& s, int line);

// Evaluation (text/jinja_eval.cpp); builtins call back for filters like map('upper').
class Renderer {
 public:
  explicit Renderer(const Program& p, std::time_t now = 0) : program_(p), now_(now) {}
  std::time_t now() const { return now_ ? now_ : std::time(nullptr); }  // what strftime_now formats
  void run(const nlohmann::ordered_json& context, std::string& out, std::vector<std::pair<size_t, size_t>>& gen);
  Value call(const Value& fn, const Args& a, int line);
  int line() const { return line_; }

 private:
  enum class Flow { normal, brk, cont };
  Flow exec(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  Value eval(const Expr& e);  // eval_node, charged by what it builds
  Value eval_node(const Expr& e);
  Value eval_binary(const std::string& op, const Value& a, const Value& b, int line);
  Args eval_args(const Expr& e, size_t first);
  Value lookup(const std::string& name, int line);
  void assign(const std::string& name, Value v);
  std::string capture(const Body& body);
  Value make_macro(const Stmt& s);

  const Program& program_;
  std::vector<std::shared_ptr<Dict>> frames_;  // innermost last
  std::string* out_ = nullptr;
  std::vector<std::pair<size_t, size_t>>* gen_ = nullptr;
  int captures_ = 0;  // > 0 while rendering into a macro's, set block's or filter's buffer
  int depth_ = 0;     // macro calls under way (a recursive macro stops at kMaxCallDepth)
  static constexpr int kMaxCallDepth = 100;
  int line_ = 0;
  std::time_t now_ = 0;  // 0: the clock
};

}  // namespace strata::text::jinja
