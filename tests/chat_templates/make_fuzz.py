#!/usr/bin/env python3
"""Random expression templates (seeded) rendered by transformers' chat-template environment into
fuzz.json. tests/cpu/jinja_test.cpp checks strata's interpreter never renders differently: the
same text, or an error (where transformers raises, or for a construct strata does not support).

    python3 tests/chat_templates/make_fuzz.py
"""
import copy
import json
import os
import random

from transformers.utils.chat_template_utils import _compile_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))
N = 1500

CONTEXT = {
    "s": " Hi, there ",
    "e": "",
    "u": "\u00e9t\u00e9 \u4f60",
    "i": 3,
    "j": -2,
    "f": 0.5,
    "t": True,
    "n": None,
    "l": [1, "a", None, [2]],
    "ls": ["x", "Y", "z"],
    "d": {"k": "v", "n": 1, "l": [1, 2]},
    "m": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
}

ATOMS = ["s", "e", "u", "i", "j", "f", "t", "n", "l", "ls", "d", "m", "undef", "1", "0", "2.5", "-1", "'ab'",
         "''", "\"q'\"", "none", "true", "false", "[1, 2]", "[]", "{'a': 1}", "(1, 'x')", "d.k", "d['n']",
         "m[0].role", "m[-1]['content']", "l[3]", "ls[1:]", "s[::-1]", "u[1:3]"]
BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "not in"]
FILTERS = ["length", "first", "last", "upper", "lower", "trim", "string", "list", "join", "join(',')",
           "default('D')", "default('D', true)", "tojson", "tojson(indent=1)", "int", "float", "abs", "unique | list",
           "reverse | list", "sort | list", "map('string') | list", "select | list", "reject | list",
           "replace('a', 'b')", "capitalize", "title", "indent(2)", "items | list", "dictsort", "count", "safe",
           "escape", "min", "max", "sum", "selectattr('role') | list", "map(attribute='role') | list"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "mapping", "iterable",
         "sequence", "odd", "even", "true", "false", "divisibleby 2", "eq 1", "in [1, 'a']", "lower", "upper"]
METHODS = ["strip()", "upper()", "lower()", "split()", "split(',')", "startswith('H')", "endswith(' ')",
           "replace(' ', '_')", "title()", "capitalize()", "find('i')", "count('e')", "lstrip()", "rstrip('e ')",
           "items() | list", "keys() | list", "values() | list", "get('k')", "get('zz', 0)"]


def expr(depth):
    r = random.random()
    if depth <= 0 or r < 0.25:
        return random.choice(ATOMS)
    if r < 0.45:
        return f"({expr(depth - 1)} {random.choice(BINOPS)} {expr(depth - 1)})"
    if r < 0.6:
        return f"({expr(depth - 1)} | {random.choice(FILTERS)})"
    if r < 0.7:
        neg = random.choice(["", "not "])
        return f"({expr(depth - 1)} is {neg}{random.choice(TESTS)})"
    if r < 0.8:
        return f"{random.choice(['s', 'e', 'u', 'd', '(s ~ i)'])}.{random.choice(METHODS)}"
    if r < 0.87:
        return f"({expr(depth - 1)} if {expr(depth - 1)} else {expr(depth - 1)})"
    if r < 0.93:
        return f"(not {expr(depth - 1)})"
    return f"{random.choice(['l', 'ls', 's', 'u', 'm'])}[{random.choice(['0', '-1', '1:', ':-1', '::2', '::-1', '5', 'i'])}]"


def main():
    random.seed(30)
    # A fresh copy each time: jinja2's indent filter extends a list it is given in place.
    env_render = lambda src: _compile_jinja_template(src).render(**copy.deepcopy(CONTEXT))
    cases, seen = [], set()
    while len(cases) < N:
        src = "{{ " + expr(3) + " }}"
        if src in seen:
            continue
        seen.add(src)
        case = {"template": src}
        try:
            case["text"] = env_render(src)
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    with open(os.path.join(HERE, "fuzz.json"), "w", encoding="utf-8") as f:
        json.dump({"context": CONTEXT, "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(len(cases), "cases,", sum("error" in c for c in cases), "raise")


if __name__ == "__main__":
    main()
