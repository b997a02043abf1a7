// The Jinja parser: tokens to the syntax tree, with jinja2's operator precedence. A statement or
// expression outside the supported subset is an error here, at its line.
#include <cstdlib>
#include <set>

#include "text/jinja_internal.h"

namespace strata::text::jinja {
namespace {

using T = Token::Type;

struct Parser {
  const std::vector<Token>& toks;
  size_t p = 0;
  bool has_generation = false;
  int body_depth = 0;  // blocks open (if, for, macro, ...): a hostile template's nesting is bounded
  static constexpr int kMaxBodyDepth = 100;

  const Token& cur() const { return toks[p]; }
  const Token& peek(size_t k = 1) const { return toks[std::min(p + k, toks.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == T::op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == T::name && cur().value == n; }
  Token next() { return toks[p < toks.size() - 1 ? p++ : p]; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', found " + describe(cur()), cur().line);
    ++p;
  }
  std::string expect_name() {
    if (cur().type != T::name) fail("expected a name, found " + describe(cur()), cur().line);
    return next().value;
  }
  void expect_block_end() {
    if (cur().type != T::block_end) fail("expected the end of the tag, found " + describe(cur()), cur().line);
    ++p;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::eof:
        return "the end of the template";
      case T::block_end:
        return "'%}'";
      case T::var_end:
        return "'}}'";
      case T::string:
        return "a string";
      default:
        return "'" + t.value + "'";
    }
  }

  ExprP node(Expr::K k, int line) {
    auto e = std::make_shared<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }

  // Statements up to one of `ends` (a block tag name); leaves p at that tag's name.
  Body parse_body(const std::set<std::string>& ends, std::string* end_found) {
    if (++body_depth > kMaxBodyDepth)
      fail("blocks nested deeper than " + std::to_string(kMaxBodyDepth) + " levels", cur().line);
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{body_depth};
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::eof) {
        if (ends.empty()) return body;
        fail("a block is not closed: expected {% " + *ends.begin() + " %}", t.line);
      }
      if (t.type == T::text) {
        auto s = std::make_shared<Stmt>();
        s->k = Stmt::K::text;
        s->line = t.line;
        s->text = t.value;
        body.push_back(s);
        ++p;
      } else if (t.type == T::var_begin) {
        ++p;
        auto s = std::make_shared<Stmt>();
        s->k = Stmt::K::output;
        s->line = t.line;
        s->expr = parse_tuple_or_expr();
        if (cur().type != T::var_end) fail("expected '}}', found " + describe(cur()), cur().line);
        ++p;
        body.push_back(s);
      } else if (t.type == T::block_begin) {
        ++p;
        if (cur().type != T::name) fail("expected a statement name, found " + describe(cur()), cur().line);
        if (ends.count(cur().value)) {
          *end_found = cur().value;
          ++p;
          return body;
        }
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t), t.line);
      }
    }
  }

  StmtP parse_statement() {
    const Token& t = cur();
    std::string kw = next().value;
    auto s = std::make_shared<Stmt>();
    s->line = t.line;
    std::string end;
    if (kw == "if") {
      s->k = Stmt::K::if_;
      ExprP cond = parse_expr();
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, &end);
        s->branches.emplace_back(cond, std::move(b));
        if (end == "elif") {
          cond = parse_expr();
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          s->else_body = parse_body({"endif"}, &end);
        }
        expect_block_end();
        return s;
      }
    }
    if (kw == "for") {
      s->k = Stmt::K::for_;
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        ++p;
        s->targets.push_back(expect_name());
      }
      if (!is_name("in")) fail("expected 'in' in a for loop, found " + describe(cur()), cur().line);
      ++p;
      s->expr = parse_tuple_or_expr(/*no_cond=*/true);
      if (is_name("if")) {
        ++p;
        s->cond = parse_expr();
      }
      if (is_name("recursive")) fail("recursive for loops are not supported", cur().line);
      expect_block_end();
      s->body = parse_body({"else", "endfor"}, &end);
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &end);
      }
      expect_block_end();
      return s;
    }
    if (kw == "set") {
      std::string name = expect_name();
      if (is_op(".")) {
        ++p;
        s->ns_attr = expect_name();
      }
      s->targets.push_back(name);
      while (is_op(",") && s->ns_attr.empty()) {
        ++p;
        s->targets.push_back(expect_name());
      }
      if (is_op("=")) {
        ++p;
        s->k = Stmt::K::set;
        s->expr = parse_tuple_or_expr();
        expect_block_end();
        return s;
      }
      if (s->targets.size() != 1 || !s->ns_attr.empty()) fail("a block set assigns one name", s->line);
      s->k = Stmt::K::set_block;
      if (is_op("|")) s->filter = parse_filter_chain(nullptr);
      expect_block_end();
      s->body = parse_body({"endset"}, &end);
      expect_block_end();
      return s;
    }
    if (kw == "macro" || kw == "call") {
      s->k = kw == "macro" ? Stmt::K::macro : Stmt::K::call_block;
      if (kw == "macro") s->text = expect_name();
      if (kw == "macro" || is_op("(")) {
        expect_op("(");
        while (!is_op(")")) {
          std::string param = expect_name();
          ExprP def;
          if (is_op("=")) {
            ++p;
            def = parse_expr();
          }
          s->params.emplace_back(param, def);
          if (!is_op(",")) break;
          ++p;
        }
        expect_op(")");
      }
      if (kw == "call") s->expr = parse_expr();
      expect_block_end();
      s->body = parse_body({kw == "macro" ? "endmacro" : "endcall"}, &end);
      expect_block_end();
      return s;
    }
    if (kw == "filter") {
      s->k = Stmt::K::filter_block;
      p--;  // back on `filter`, which parse_filter_chain skips as it skips a '|'
      s->filter = parse_filter_chain(nullptr, /*first_without_pipe=*/true);
      expect_block_end();
      s->body = parse_body({"endfilter"}, &end);
      expect_block_end();
      return s;
    }
    if (kw == "break" || kw == "continue") {
      s->k = kw == "break" ? Stmt::K::break_ : Stmt::K::continue_;
      expect_block_end();
      return s;
    }
    if (kw == "generation") {
      s->k = Stmt::K::generation;
      has_generation = true;
      expect_block_end();
      s->body = parse_body({"endgeneration"}, &end);
      expect_block_end();
      return s;
    }
    fail("the statement {% " + kw + " %} is not supported", t.line);
  }

  // `x | f(a) | g` after `x`; `value` null for a filter block / block set (applied to the body).
  ExprP parse_filter_chain(ExprP value, bool first_without_pipe = false) {
    bool first = true;
    while ((first && first_without_pipe) || is_op("|")) {
      ++p;  // the '|', or the statement name `filter`
      first = false;
      auto f = node(Expr::K::filter, cur().line);
      f->name = expect_name();
      f->args.push_back(value);
      if (is_op("(")) parse_call_args(*f);
      value = f;
    }
    return value;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported", cur().line);
      if (cur().type == T::name && peek().type == T::op && peek().value == "=") {
        std::string key = next().value;
        ++p;
        e.kwargs.emplace_back(key, parse_expr());
      } else {
        if (!e.kwargs.empty()) fail("a positional argument follows a keyword argument", cur().line);
        e.args.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++p;
    }
    expect_op(")");
  }

  // `a, b` as a tuple (for loop iterables, set values, output).
  ExprP parse_tuple_or_expr(bool no_cond = false) {
    int line = cur().line;
    ExprP first = no_cond ? parse_or() : parse_expr();
    if (!is_op(",")) return first;
    auto t = node(Expr::K::tuple, line);
    t->args.push_back(first);
    while (is_op(",")) {
      ++p;
      if (cur().type == T::block_end || cur().type == T::var_end || is_name("if")) break;
      t->args.push_back(no_cond ? parse_or() : parse_expr());
    }
    return t;
  }

  ExprP parse_expr() {
    ExprP e = parse_or();
    while (is_name("if")) {
      auto c = node(Expr::K::cond, cur().line);
      ++p;
      ExprP test = parse_or();
      ExprP other;
      if (is_name("else")) {
        ++p;
        other = parse_expr();
      }
      c->args = {test, e, other};
      e = c;
    }
    return e;
  }

  ExprP parse_or() {
    ExprP e = parse_and();
    while (is_name("or")) {
      auto o = node(Expr::K::or_, cur().line);
      ++p;
      o->args = {e, parse_and()};
      e = o;
    }
    return e;
  }

  ExprP parse_and() {
    ExprP e = parse_not();
    while (is_name("and")) {
      auto a = node(Expr::K::and_, cur().line);
      ++p;
      a->args = {e, parse_not()};
      e = a;
    }
    return e;
  }

  ExprP parse_not() {
    if (is_name("not")) {
      auto n = node(Expr::K::not_, cur().line);
      ++p;
      n->args = {parse_not()};
      return n;
    }
    return parse_compare();
  }

  ExprP parse_compare() {
    int line = cur().line;
    ExprP e = parse_math1();
    auto c = node(Expr::K::compare, line);
    c->args.push_back(e);
    while (true) {
      std::string op;
      if (cur().type == T::op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                  cur().value == ">" || cur().value == "<=" || cur().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        ++p;
        op = "in";
      } else if (is_name("not") && peek().type == T::name && peek().value == "in") {
        p += 2;
        op = "not in";
      } else {
        break;
      }
      c->ops.push_back(op);
      c->args.push_back(parse_math1());
    }
    return c->ops.empty() ? e : c;
  }

  ExprP binary(const std::string& op, ExprP a, ExprP b, int line) {
    auto e = node(Expr::K::binary, line);
    e->name = op;
    e->args = {std::move(a), std::move(b)};
    return e;
  }

  ExprP parse_math1() {
    ExprP e = parse_concat();
    while (is_op("+") || is_op("-")) {
      int line = cur().line;
      std::string op = next().value;
      e = binary(op, e, parse_concat(), line);
    }
    return e;
  }

  ExprP parse_concat() {
    ExprP e = parse_math2();
    while (is_op("~")) {
      int line = next().line;
      e = binary("~", e, parse_math2(), line);
    }
    return e;
  }

  ExprP parse_math2() {
    ExprP e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      int line = cur().line;
      std::string op = next().value;
      e = binary(op, e, parse_pow(), line);
    }
    return e;
  }

  ExprP parse_pow() {
    ExprP e = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      e = binary("**", e, parse_unary(true), line);
    }
    return e;
  }

  ExprP parse_unary(bool with_filter) {
    ExprP e;
    if (is_op("-") || is_op("+")) {
      auto u = node(is_op("-") ? Expr::K::neg : Expr::K::pos, cur().line);
      ++p;
      u->args = {parse_unary(false)};
      e = u;
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filters_and_tests(e);
    return e;
  }

  ExprP parse_filters_and_tests(ExprP e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(e);
        e = parse_postfix(e);
      } else if (is_name("is")) {
        auto t = node(Expr::K::test, cur().line);
        ++p;
        if (is_name("not")) {
          ++p;
          t->negated = true;
        }
        t->name = expect_name();
        t->args.push_back(e);
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().type == T::name || cur().type == T::string || cur().type == T::integer ||
                    cur().type == T::floating || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") && !is_name("in") &&
                   !is_name("is") && !is_name("not")) {
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = t;
      } else {
        return e;
      }
    }
  }

  ExprP parse_postfix(ExprP e) {
    while (true) {
      if (is_op(".")) {
        int line = next().line;
        auto a = node(Expr::K::attr, line);
        if (cur().type == T::integer) {
          a->k = Expr::K::subscript;
          a->args = {e, literal(Value::integer(parse_int(next().value, line)), line)};
        } else {
          a->name = expect_name();
          a->args = {e};
        }
        e = a;
      } else if (is_op("[")) {
        int line = next().line;
        ExprP parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            if (++colons > 2) fail("a slice has at most two ':'", line);
            ++p;
            continue;
          }
          if (parts[colons]) fail("expected ']' or ':' in a subscript", cur().line);
          parts[colons] = parse_expr();
          if (is_op(",")) fail("tuple subscripts are not supported", cur().line);
        }
        ++p;
        if (colons == 0) {
          if (!parts[0]) fail("an empty subscript", line);
          auto s = node(Expr::K::subscript, line);
          s->args = {e, parts[0]};
          e = s;
        } else {
          auto s = node(Expr::K::slice, line);
          s->args = {e, parts[0], parts[1], parts[2]};
          e = s;
        }
      } else if (is_op("(")) {
        auto c = node(Expr::K::call, cur().line);
        c->args.push_back(e);
        parse_call_args(*c);
        e = c;
      } else {
        return e;
      }
    }
  }

  ExprP literal(Value v, int line) {
    auto e = node(Expr::K::literal, line);
    e->lit = std::move(v);
    return e;
  }

  ExprP parse_primary() {
    const Token& t = cur();
    int line = t.line;
    switch (t.type) {
      case T::name: {
        ++p;
        const std::string& n = t.value;
        if (n == "true" || n == "True") return literal(Value::boolean(true), line);
        if (n == "false" || n == "False") return literal(Value::boolean(false), line);
        if (n == "none" || n == "None") return literal(Value::none(), line);
        auto e = node(Expr::K::name, line);
        e->name = n;
        return e;
      }
      case T::string: {
        std::string s;
        while (cur().type == T::string) s += next().value;  // adjacent literals join
        return literal(Value::string(s), line);
      }
      case T::integer:
        ++p;
        return literal(Value::integer(parse_int(t.value, line)), line);
      case T::floating:
        ++p;
        return literal(Value::floating(std::strtod(t.value.c_str(), nullptr)), line);  // 1e999: inf
      case T::op:
        if (t.value == "(") {
          ++p;
          if (is_op(")")) {
            ++p;
            return node(Expr::K::tuple, line);
          }
          ExprP e = parse_expr();
          if (is_op(",")) {
            auto tup = node(Expr::K::tuple, line);
            tup->args.push_back(e);
            while (is_op(",")) {
              ++p;
              if (is_op(")")) break;
              tup->args.push_back(parse_expr());
            }
            e = tup;
          }
          expect_op(")");
          return e;
        }
        if (t.value == "[") {
          ++p;
          auto l = node(Expr::K::list, line);
          while (!is_op("]")) {
            l->args.push_back(parse_expr());
            if (!is_op(",")) break;
            ++p;
          }
          expect_op("]");
          return l;
        }
        if (t.value == "{") {
          ++p;
          auto d = node(Expr::K::dict, line);
          while (!is_op("}")) {
            d->args.push_back(parse_expr());
            expect_op(":");
            d->args.push_back(parse_expr());
            if (!is_op(",")) break;
            ++p;
          }
          expect_op("}");
          return d;
        }
        [[fallthrough]];
      default:
        fail("unexpected " + describe(t) + " in an expression", line);
    }
  }
};

}  // namespace

Body parse_tokens(const std::vector<Token>& tokens, bool* has_generation) {
  Parser ps{tokens};
  std::string end;
  Body body = ps.parse_body({}, &end);
  *has_generation = ps.has_generation;
  return body;
}

}  // namespace strata::text::jinja
