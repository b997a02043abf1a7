// The Jinja evaluator: statements write to the output, expressions evaluate with Python's
// semantics, scopes as jinja2 keeps them (a frame per loop iteration, macros see the template's
// top level), and Template's parse/render wrapping errors with the template's name and line.
#include <fmt/format.h>

#include <cmath>

#include "engine/error.h"
#include "text/jinja.h"
#include "text/jinja_internal.h"

namespace strata::text::jinja {

Value Args::get(size_t index, const char* name, Value fallback) const {
  if (index < pos.size()) return pos[index];
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return fallback;
}

void Args::check(size_t max_pos, std::initializer_list<const char*> names, const char* what) const {
  if (pos.size() > max_pos) fail(fmt::format("{}() takes at most {} positional arguments", what, max_pos), line);
  for (const auto& [k, v] : kw) {
    bool known = false;
    for (const char* n : names) known = known || k == n;
    if (!known) fail(fmt::format("{}() got an unexpected keyword argument '{}'", what, k), line);
  }
}

Value Renderer::lookup(const std::string& name, int line) {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
    if (const Value* v = (*it)->find(name)) return *v;
  Value g = global(name);
  if (!g.is_undefined()) return g;
  (void)line;
  return Value::undefined(name);
}

namespace {

bool holds_namespace(const Value& v) {
  if (v.is(Value::Kind::ns)) return true;
  if (v.is(Value::Kind::list))
    for (const Value& x : *v.list)
      if (holds_namespace(x)) return true;
  if (v.is(Value::Kind::dict))
    for (const auto& [k, x] : v.dict->items)
      if (holds_namespace(x)) return true;
  return false;
}

// Python's integers are unbounded; a template's are 64-bit: past that is an error, not a wrapped number.
// `op` is one of __builtin_{add,sub,mul}_overflow.
template <typename Op>
int64_t checked(Op op, int64_t x, int64_t y, int line) {
  int64_t r = 0;
  if (op(x, y, &r)) fail("integer overflow: a chat template's integers are 64-bit", line);
  return r;
}
const auto add = [](int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); };
const auto sub = [](int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); };
const auto mul = [](int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); };

}  // namespace

void Renderer::assign(const std::string& name, Value v) {
  frames_.back()->set(name, std::move(v));
}

std::string Renderer::capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  ++captures_;
  Flow f = exec(body);
  --captures_;
  out_ = saved;
  if (f != Flow::normal) fail("break/continue outside a loop", line_);
  return buf;
}

void Renderer::run(const nlohmann::ordered_json& context, std::string& out,
                   std::vector<std::pair<size_t, size_t>>& gen) {
  if (!context.is_object() && !context.is_null()) fail("the context is not an object");
  auto globals = std::make_shared<Dict>();
  for (auto it = context.begin(); it != context.end(); ++it)
    globals->items.emplace_back(it.key(), from_json(it.value()));
  frames_ = {globals, std::make_shared<Dict>()};
  RenderBudget budget;
  out_ = &out;
  gen_ = &gen;
  if (exec(program_.body) != Flow::normal) fail("break/continue outside a loop");
}

Renderer::Flow Renderer::exec(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

static Value apply_filter_chain(Renderer& r, const Expr& f, Value v, const std::function<Args(const Expr&)>& args) {
  if (f.args[0]) v = apply_filter_chain(r, *f.args[0], std::move(v), args);
  return apply_filter(r, f.name, v, args(f));
}

Renderer::Flow Renderer::exec(const Stmt& s) {
  line_ = s.line;
  charge(1, s.line);
  switch (s.k) {
    case Stmt::K::text:
      *out_ += s.text;
      check_text(out_->size(), s.line);
      return Flow::normal;
    case Stmt::K::output:
      *out_ += to_str(eval(*s.expr));
      check_text(out_->size(), s.line);
      return Flow::normal;
    case Stmt::K::if_:
      for (const auto& [cond, body] : s.branches)
        if (truthy(eval(*cond))) return exec(body);
      return exec(s.else_body);
    case Stmt::K::for_:
      return exec_for(s);
    case Stmt::K::set: {
      Value v = eval(*s.expr);
      if (!s.ns_attr.empty()) {
        Value ns = lookup(s.targets[0], s.line);
        if (!ns.is(Value::Kind::ns)) fail("can only set attributes of a namespace, not of " + type_name(ns), s.line);
        // A namespace holding a namespace could come to hold itself: a cycle no value could print or free.
        if (holds_namespace(v)) fail("a namespace inside a namespace's attribute is not supported", s.line);
        ns.dict->set(s.ns_attr, std::move(v));
      } else if (s.targets.size() == 1) {
        assign(s.targets[0], std::move(v));
      } else {
        List items = iterate(v, s.line);
        if (items.size() != s.targets.size()) fail("wrong number of values to unpack", s.line);
        for (size_t k = 0; k < items.size(); ++k) assign(s.targets[k], items[k]);
      }
      return Flow::normal;
    }
    case Stmt::K::set_block: {
      Value v = Value::string(capture(s.body));
      if (s.filter) v = apply_filter_chain(*this, *s.filter, v, [&](const Expr& f) { return eval_args(f, 1); });
      assign(s.targets[0], std::move(v));
      return Flow::normal;
    }
    case Stmt::K::filter_block: {
      Value v = Value::string(capture(s.body));
      *out_ += to_str(apply_filter_chain(*this, *s.filter, v, [&](const Expr& f) { return eval_args(f, 1); }));
      check_text(out_->size(), s.line);
      return Flow::normal;
    }
    case Stmt::K::macro:
      assign(s.text, make_macro(s));
      return Flow::normal;
    case Stmt::K::call_block: {
      if (s.expr->k != Expr::K::call) fail("{% call %} needs a macro call", s.line);
      auto frames = frames_;
      auto caller = std::make_shared<Callable>();
      caller->name = "caller";
      caller->call = [&s, frames](Renderer& r, const Args& a) {
        auto saved = r.frames_;
        r.frames_ = frames;
        r.frames_.push_back(std::make_shared<Dict>());
        for (size_t k = 0; k < s.params.size(); ++k) {
          Value v = a.get(k, s.params[k].first.c_str());
          if (v.is_undefined() && s.params[k].second) v = r.eval(*s.params[k].second);
          r.assign(s.params[k].first, v);
        }
        std::string text = r.capture(s.body);
        r.frames_ = saved;
        return Value::string(text);
      };
      Value fn = eval(*s.expr->args[0]);
      Args a = eval_args(*s.expr, 1);
      Value cv = Value::make(Value::Kind::callable);
      cv.fn = caller;
      a.kw.emplace_back("caller", cv);
      *out_ += to_str(call(fn, a, s.line));
      check_text(out_->size(), s.line);
      return Flow::normal;
    }
    case Stmt::K::break_:
      return Flow::brk;
    case Stmt::K::continue_:
      return Flow::cont;
    case Stmt::K::generation: {
      if (captures_ > 0) fail("{% generation %} inside a macro, call, filter or block set is not supported", s.line);
      size_t begin = out_->size();
      Flow f = exec(s.body);
      gen_->emplace_back(begin, out_->size());
      return f;
    }
  }
  return Flow::normal;
}

Value Renderer::make_macro(const Stmt& s) {
  auto fn = std::make_shared<Callable>();
  fn->name = s.text;
  fn->call = [&s](Renderer& r, const Args& a) {
    if (r.depth_ >= kMaxCallDepth) fail("macro '" + s.text + "' recurses too deep", a.line);
    charge(1, a.line);
    ++r.depth_;
    auto saved = r.frames_;
    r.frames_ = {saved[0], saved[1], std::make_shared<Dict>()};
    size_t used = 0;
    for (size_t k = 0; k < s.params.size(); ++k) {
      Value v = a.get(k, s.params[k].first.c_str());
      if (k < a.pos.size()) ++used;
      if (v.is_undefined() && s.params[k].second) v = r.eval(*s.params[k].second);
      if (v.is_undefined()) v = Value::undefined(s.params[k].first);
      r.assign(s.params[k].first, v);
    }
    if (a.pos.size() > used)
      fail("macro '" + s.text + "' takes not more than " + std::to_string(s.params.size()) + " argument(s)", a.line);
    for (const auto& [k, v] : a.kw) {
      bool known = k == "caller";
      for (const auto& p : s.params) known = known || p.first == k;
      if (!known) fail("macro '" + s.text + "' takes no keyword argument '" + k + "'", a.line);
      if (k == "caller") r.assign("caller", v);
    }
    std::string text = r.capture(s.body);
    r.frames_ = saved;
    --r.depth_;
    return Value::string(text);
  };
  Value v = Value::make(Value::Kind::callable);
  v.fn = fn;
  return v;
}

Renderer::Flow Renderer::exec_for(const Stmt& s) {
  Value seq = eval(*s.expr);
  List all = iterate(seq, s.line);
  auto bind = [&](const Value& item) {
    if (s.targets.size() == 1) {
      assign(s.targets[0], item);
      return;
    }
    List parts = iterate(item, s.line);
    if (parts.size() != s.targets.size()) fail("wrong number of values to unpack in a for loop", s.line);
    for (size_t k = 0; k < parts.size(); ++k) assign(s.targets[k], parts[k]);
  };
  List items;
  if (s.cond) {
    for (const auto& item : all) {
      frames_.push_back(std::make_shared<Dict>());
      bind(item);
      bool keep = truthy(eval(*s.cond));
      frames_.pop_back();
      if (keep) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  Flow result = Flow::normal;
  for (int64_t k = 0; k < n; ++k) {
    charge(1, s.line);
    Dict loop;  // distinct keys: appended, not looked up
    loop.items.reserve(12);
    loop.items.emplace_back("index", Value::integer(k + 1));
    loop.items.emplace_back("index0", Value::integer(k));
    loop.items.emplace_back("revindex", Value::integer(n - k));
    loop.items.emplace_back("revindex0", Value::integer(n - k - 1));
    loop.items.emplace_back("first", Value::boolean(k == 0));
    loop.items.emplace_back("last", Value::boolean(k == n - 1));
    loop.items.emplace_back("length", Value::integer(n));
    loop.items.emplace_back("depth", Value::integer(1));
    loop.items.emplace_back("depth0", Value::integer(0));
    loop.items.emplace_back("previtem", k > 0 ? items[k - 1] : Value::undefined("loop.previtem"));
    loop.items.emplace_back("nextitem", k + 1 < n ? items[k + 1] : Value::undefined("loop.nextitem"));
    auto cycle = std::make_shared<Callable>();
    cycle->name = "loop.cycle";
    cycle->call = [k](Renderer&, const Args& a) {
      if (a.pos.empty()) fail("loop.cycle() needs at least one argument", a.line);
      return a.pos[k % a.pos.size()];
    };
    Value cv = Value::make(Value::Kind::callable);
    cv.fn = cycle;
    loop.items.emplace_back("cycle", cv);
    frames_.push_back(std::make_shared<Dict>());
    Value lv = Value::of_dict(std::move(loop));
    assign("loop", lv);
    bind(items[k]);
    Flow f = exec(s.body);
    frames_.pop_back();
    if (f == Flow::brk) break;
  }
  if (n == 0) result = exec(s.else_body);
  return result;
}

Args Renderer::eval_args(const Expr& e, size_t first) {
  Args a;
  a.line = e.line;
  for (size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k]));
  for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x));
  return a;
}

Value Renderer::call(const Value& fn, const Args& a, int line) {
  if (fn.is_undefined()) fail("'" + fn.s + "' is undefined", line);
  if (!fn.is(Value::Kind::callable)) fail("'" + type_name(fn) + "' object is not callable", line);
  return fn.fn->call(*this, a);
}

Value Renderer::eval(const Expr& e) {
  Value v = eval_node(e);
  switch (e.k) {  // what builds a value is charged by its size; a name, literal or item only refers to one
    case Expr::K::literal:
    case Expr::K::name:
    case Expr::K::attr:
    case Expr::K::subscript:
      break;
    default:
      if (v.is(Value::Kind::string)) check_text(v.s.size(), e.line);
      charge(weight(v), e.line);
  }
  return v;
}

Value Renderer::eval_node(const Expr& e) {
  switch (e.k) {
    case Expr::K::literal:
      return e.lit;
    case Expr::K::name:
      return lookup(e.name, e.line);
    case Expr::K::list:
    case Expr::K::tuple: {
      List items;
      for (const auto& x : e.args) items.push_back(eval(*x));
      return Value::of_list(std::move(items), e.k == Expr::K::tuple);
    }
    case Expr::K::dict: {
      Dict d;
      for (size_t k = 0; k < e.args.size(); k += 2) {
        Value key = eval(*e.args[k]);
        if (!key.is(Value::Kind::string)) fail("dict literals with non-string keys are not supported", e.line);
        d.set(key.s, eval(*e.args[k + 1]));
      }
      return Value::of_dict(std::move(d));
    }
    case Expr::K::attr:
      return getattr(eval(*e.args[0]), e.name, e.line);
    case Expr::K::subscript:
      return getitem(eval(*e.args[0]), eval(*e.args[1]), e.line);
    case Expr::K::slice: {
      Value obj = eval(*e.args[0]);
      Args a;
      a.line = e.line;
      for (int k = 1; k <= 3; ++k) a.pos.push_back(e.args[k] ? eval(*e.args[k]) : Value::none());
      return call_method(obj, "__slice__", a);
    }
    case Expr::K::call: {
      const Expr& callee = *e.args[0];
      Args a = eval_args(e, 1);
      if (callee.k == Expr::K::attr) {
        Value obj = eval(*callee.args[0]);
        if (obj.is_undefined()) fail("'" + obj.s + "' is undefined", e.line);
        if (has_method(obj, callee.name)) return call_method(obj, callee.name, a);
        bool data = obj.is(Value::Kind::string) || obj.is(Value::Kind::list) ||
                    (obj.is(Value::Kind::dict) && !obj.dict->find(callee.name));
        if (data) fail("the method " + type_name(obj) + "." + callee.name + "() is not supported", e.line);
        return call(getattr(obj, callee.name, e.line), a, e.line);
      }
      return call(eval(callee), a, e.line);
    }
    case Expr::K::filter:
      return apply_filter(*this, e.name, eval(*e.args[0]), eval_args(e, 1));
    case Expr::K::test: {
      bool r;
      if (e.name == "defined" || e.name == "undefined") {
        r = !eval(*e.args[0]).is_undefined();
        if (e.name == "undefined") r = !r;
      } else {
        r = apply_test(*this, e.name, eval(*e.args[0]), eval_args(e, 1));
      }
      return Value::boolean(e.negated ? !r : r);
    }
    case Expr::K::neg:
    case Expr::K::pos: {
      Value v = eval(*e.args[0]);
      if (v.is(Value::Kind::integer) || v.is(Value::Kind::boolean)) {
        const int64_t x = v.is(Value::Kind::boolean) ? v.b : v.i;
        return Value::integer(e.k == Expr::K::neg ? checked(sub, 0, x, e.line) : x);
      }
      if (v.is(Value::Kind::floating)) return Value::floating(e.k == Expr::K::neg ? -v.f : v.f);
      fail("bad operand type for unary " + std::string(e.k == Expr::K::neg ? "-" : "+") + ": " + type_name(v), e.line);
    }
    case Expr::K::not_:
      return Value::boolean(!truthy(eval(*e.args[0])));
    case Expr::K::and_: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Expr::K::or_: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Expr::K::cond:
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the else branch of an if expression");
    case Expr::K::binary: {
      Value a = eval(*e.args[0]);
      Value b = eval(*e.args[1]);
      return eval_binary(e.name, a, b, e.line);
    }
    case Expr::K::compare: {
      Value left = eval(*e.args[0]);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1]);
        const std::string& op = e.ops[k];
        bool r;
        if (op == "==")
          r = equal(left, right);
        else if (op == "!=")
          r = !equal(left, right);
        else if (op == "in" || op == "not in") {
          r = apply_test(*this, "in", left, Args{{right}, {}, e.line});
          if (op == "not in") r = !r;
        } else {
          if (left.is_undefined() || right.is_undefined())
            fail("'" + (left.is_undefined() ? left.s : right.s) + "' is undefined", e.line);
          int c = compare(left, right, e.line);
          r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = right;
      }
      return Value::boolean(true);
    }
  }
  fail("an unknown expression", e.line);
}

Value Renderer::eval_binary(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (op == "%" && a.is(Value::Kind::string) && b.is_undefined()) {  // Python takes Undefined as a mapping
    Args args;
    args.line = line;
    args.pos = {b};
    args.kw.emplace_back("__mapping__", b);
    return call_method(a, "__mod__", args);
  }
  if (a.is_undefined() || b.is_undefined()) fail("'" + (a.is_undefined() ? a.s : b.s) + "' is undefined", line);
  auto bad = [&]() -> Value {
    fail("unsupported operand types for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'", line);
  };
  if (a.is_number() && b.is_number()) {
    bool ints = !a.is(Value::Kind::floating) && !b.is(Value::Kind::floating);
    int64_t x = a.is(Value::Kind::boolean) ? a.b : a.i, y = b.is(Value::Kind::boolean) ? b.b : b.i;
    double fx = a.is(Value::Kind::floating) ? a.f : static_cast<double>(x);
    double fy = b.is(Value::Kind::floating) ? b.f : static_cast<double>(y);
    if (op == "+") return ints ? Value::integer(checked(add, x, y, line)) : Value::floating(fx + fy);
    if (op == "-") return ints ? Value::integer(checked(sub, x, y, line)) : Value::floating(fx - fy);
    if (op == "*") return ints ? Value::integer(checked(mul, x, y, line)) : Value::floating(fx * fy);
    if ((op == "/" || op == "//" || op == "%") && fy == 0) fail("division by zero", line);
    if (op == "/") return Value::floating(fx / fy);
    if (ints && y == -1 && (op == "//" || op == "%")) {  // INT64_MIN / -1 overflows (and traps)
      if (op == "%") return Value::integer(0);
      return Value::integer(checked(sub, 0, x, line));
    }
    if (op == "//") {
      if (ints) return Value::integer(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
      return Value::floating(std::floor(fx / fy));
    }
    if (op == "%") {
      if (ints) return Value::integer(x % y != 0 && ((x % y < 0) != (y < 0)) ? x % y + y : x % y);
      double m = std::fmod(fx, fy);
      return Value::floating(m != 0 && ((m < 0) != (fy < 0)) ? m + fy : m);
    }
    if (op == "**") {
      if (ints && y >= 0) {  // by squaring: y may be huge where x is 0, 1 or -1
        int64_t result = 1, base = x;
        for (int64_t k = y; k > 0; k >>= 1) {
          if (k & 1) result = checked(mul, result, base, line);
          if (k > 1) base = checked(mul, base, base, line);
        }
        return Value::integer(result);
      }
      return Value::floating(std::pow(fx, fy));
    }
    return bad();
  }
  if (op == "+") {
    if (a.is(Value::Kind::string) && b.is(Value::Kind::string)) return Value::string(a.s + b.s);
    if (a.is(Value::Kind::list) && b.is(Value::Kind::list) && a.tuple == b.tuple) {
      List items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::of_list(std::move(items), a.tuple);
    }
    return bad();
  }
  if (op == "*") {
    const Value& seq = a.is_number() ? b : a;
    const Value& count_v = a.is_number() ? a : b;
    if (!count_v.is(Value::Kind::integer) && !count_v.is(Value::Kind::boolean)) return bad();
    Value count = Value::integer(count_v.is(Value::Kind::boolean) ? count_v.b : count_v.i);  // True is 1
    if (!seq.is(Value::Kind::string) && !seq.is(Value::Kind::list)) return bad();
    const size_t len = seq.is(Value::Kind::string) ? seq.s.size() : seq.list->size();
    if (count.i <= 0 || len == 0)
      return seq.is(Value::Kind::string) ? Value::string("") : Value::of_list({}, seq.tuple);
    const size_t n = size_t(count.i);  // what the result would hold, checked before it is built
    if (seq.is(Value::Kind::string)) check_text(n > kMaxRenderedBytes / len ? kMaxRenderedBytes + 1 : n * len, line);
    const size_t w = seq.is(Value::Kind::string) ? 0 : weight(seq);  // a string is charged as its result is
    if (w) charge(n > kMaxRenderWork / w ? kMaxRenderWork + 1 : n * w, line);
    if (seq.is(Value::Kind::string)) {
      std::string out;
      for (int64_t k = 0; k < count.i; ++k) out += seq.s;
      return Value::string(out);
    }
    if (seq.is(Value::Kind::list)) {
      List items;
      for (int64_t k = 0; k < count.i; ++k) items.insert(items.end(), seq.list->begin(), seq.list->end());
      return Value::of_list(std::move(items), seq.tuple);
    }
    return bad();
  }
  if (op == "%" && a.is(Value::Kind::string)) {
    Args args;
    args.line = line;
    args.pos = b.is(Value::Kind::list) && b.tuple ? *b.list : List{b};
    // Python takes a list or dict operand as a mapping: arguments left over are no error then.
    if ((b.is(Value::Kind::list) && !b.tuple) || b.is(Value::Kind::dict)) args.kw.emplace_back("__mapping__", b);
    return call_method(a, "__mod__", args);
  }
  return bad();
}

// Template.

static std::string located(const Program& p, const JinjaError& e, int fallback_line) {
  int line = e.line ? e.line : fallback_line;
  return fmt::format("{}, line {}: {}", p.name, line, e.message);
}

namespace {
// A tag ({{ }} or {% %}) of more tokens than any chat template writes is refused before parsing: the parser and the
// evaluator recurse once per operator of a chain or level of parentheses, so a hostile template's depth is bounded.
constexpr size_t kMaxTagTokens = 1024;
void check_tag_sizes(const std::vector<Token>& toks) {
  size_t open = 0;
  bool in_tag = false;
  for (size_t k = 0; k < toks.size(); ++k) {
    const Token::Type t = toks[k].type;
    if (t == Token::Type::var_begin || t == Token::Type::block_begin) in_tag = true, open = k;
    if (t == Token::Type::var_end || t == Token::Type::block_end) in_tag = false;
    if (in_tag && k - open > kMaxTagTokens)
      fail("a tag of more than " + std::to_string(kMaxTagTokens) + " tokens", toks[open].line);
  }
}
}  // namespace

Template Template::parse(std::string_view source, const std::string& name) {
  auto prog = std::make_shared<Program>();
  prog->name = name;
  try {
    const std::vector<Token> toks = lex(source);
    check_tag_sizes(toks);
    prog->body = parse_tokens(toks, &prog->has_generation);
  } catch (const JinjaError& e) {
    STRATA_THROW(ConfigError, located(*prog, e, 0), name, "chat_template");
  }
  Template t;
  t.program_ = prog;
  return t;
}

Rendered Template::render(const nlohmann::ordered_json& context, std::time_t now) const {
  Rendered r;
  Renderer rr(*program_, now);
  try {
    rr.run(context, r.text, r.generation);
  } catch (const JinjaError& e) {
    STRATA_THROW(ConfigError, located(*program_, e, rr.line()), program_->name, "chat_template");
  }
  return r;
}

bool Template::has_generation() const {
  return program_->has_generation;
}
const std::string& Template::name() const {
  return program_->name;
}

}  // namespace strata::text::jinja
