#!/usr/bin/env python3
"""Small templates, one construct each, rendered by transformers' compiled chat-template
environment into snippets.json (text, or the error for those it raises); tests/cpu/jinja_test.cpp
renders each with strata's interpreter and compares byte for byte (errors: only that one is raised).

    python3 tests/chat_templates/make_snippets.py
"""
import json
import os

from transformers.utils.chat_template_utils import _compile_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))

CONTEXT = {
    "s": "  Hello, World!  ",
    "u": "caf\u00e9 \u4f60\u597d \U0001f600",
    "n": 42,
    "f": 2.5,
    "neg": -7,
    "t": True,
    "z": None,
    "l": [3, 1, 2],
    "words": ["b", "A", "c", "a"],
    "d": {"b": 2, "a": 1, "c": {"x": [1, {"y": "deep"}]}},
    "msgs": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "user", "content": ""},
    ],
    "big": 12345678901234,
    "tiny": 1.5e-07,
    "ws": "a\tb\n\nc  d\r\ne",
}

SNIPPETS = [
    # output of values
    "{{ n }}|{{ f }}|{{ neg }}|{{ t }}|{{ z }}|{{ l }}|{{ d }}|{{ big }}|{{ tiny }}",
    "{{ 1/3 }}|{{ 2/2 }}|{{ 10/4 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 123456789.123 }}|{{ 0.1 * 3 }}|{{ -0.0 }}",
    "{{ 7 % -3 }}|{{ -7 // -2 }}|{{ 2 ** -1 }}|{{ 5.5 // 2 }}|{{ -5.5 % 2 }}|{{ 3 - 5 }}|{{ n * f }}",
    "{{ 'a' ~ n ~ f ~ t ~ z }}|{{ [1] + [2, 3] }}|{{ 'ab' * 2 }}|{{ 2 * 'cd' }}|{{ (1, 2) + (3,) }}",
    "{{ u }}|{{ u | length }}|{{ u[0] }}|{{ u[-1] }}|{{ u[2:6] }}|{{ u[::-1] }}|{{ u | reverse }}",
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s | trim }}|{{ s.strip(' H!') }}|{{ 'xxhixx' | trim('x') }}",
    "{{ ws.split() }}|{{ ws.split('\\n') }}|{{ ws.splitlines() }}|{{ 'a,b,c'.split(',', 1) }}|{{ ''.split() }}",
    "{{ 'a,b,c'.rsplit(',') }}|{{ ' x '.split(' ') }}",
    "{{ s.upper() }}|{{ s.lower() }}|{{ 'hello world'.title() }}|{{ \"it's a dog's\".title() }}|{{ 'ab-cd ef'|title }}",
    "{{ 'hELLO wORLD'.capitalize() }}|{{ 'hELLO'|capitalize }}|{{ ''.capitalize() }}",
    "{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.replace('', '-') }}|{{ 'abab' | replace('b', 'c') }}",
    "{{ 'abcabc'.find('c') }}|{{ 'abcabc'.rfind('c') }}|{{ u.find('\u4f60') }}|{{ 'abc'.find('z') }}|{{ 'aaa'.count('a') }}",
    "{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith('bc') }}|{{ 'abc'.startswith(('x', 'a')) }}|{{ ''.startswith('') }}",
    "{{ '123'.isdigit() }}|{{ 'abc'.isalpha() }}|{{ 'a1'.isalnum() }}|{{ ' \\t'.isspace() }}|{{ ''.isdigit() }}",
    "{{ 'x{}y{}'.format(1, 'z') }}|{{ '{0}-{0}-{1}'.format('a', 'b') }}|{{ '{k}!'.format(k=3) }}|{{ '{{}}'.format() }}",
    "{{ '%s and %s' % ('a', 'b') }}|{{ '%d%%' % 5 }}|{{ '%r' % 'q' }}|{{ '%s' | format('x') }}",
    # subscripts and slices
    "{{ l[0] }}|{{ l[-1] }}|{{ l[1:] }}|{{ l[:-1] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ l[5:] }}|{{ l[-10:2] }}|{{ l[2:0:-1] }}",
    "{{ d.a }}|{{ d['b'] }}|{{ d.c.x[1].y }}|{{ d['c']['x'][0] }}|{{ d.nope is defined }}|{{ l[9] is defined }}",
    "{{ d.get('a') }}|{{ d.get('q', 'dflt') }}|{{ d.get('q') }}|{{ d.keys() | list }}|{{ d.values() | list | length }}",
    "{% for k, v in d.items() %}{{ k }}:{{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}",
    "{% for k, v in d | dictsort %}{{ k }}{% endfor %}|{% for k, v in d | dictsort(reverse=true) %}{{ k }}{% endfor %}",
    "{{ d | items | list }}|{{ z | items | list }}",
    # tests
    "{{ n is number }}|{{ f is number }}|{{ t is number }}|{{ n is integer }}|{{ t is integer }}|{{ f is float }}",
    "{{ t is boolean }}|{{ n is boolean }}|{{ t is true }}|{{ z is false }}|{{ z is none }}|{{ nope is none }}",
    "{{ s is string }}|{{ l is string }}|{{ d is mapping }}|{{ l is mapping }}|{{ l is iterable }}|{{ s is iterable }}",
    "{{ d is iterable }}|{{ n is iterable }}|{{ l is sequence }}|{{ s is sequence }}|{{ nope is iterable }}",
    "{{ n is even }}|{{ neg is odd }}|{{ n is divisibleby 7 }}|{{ n is divisibleby(5) }}",
    "{{ n is eq 42 }}|{{ n is ne 42 }}|{{ n is lt 50 }}|{{ n is gt 50 }}|{{ n is ge 42 }}|{{ n is le 41 }}",
    "{{ 'a' is in 'cat' }}|{{ 2 is in l }}|{{ 'a' is in d }}|{{ 'abc' is lower }}|{{ 'ABC' is upper }}|{{ 'Abc' is lower }}",
    "{{ nope is defined }}|{{ nope is undefined }}|{{ n is defined }}|{{ z is defined }}|{{ d.a is not none }}",
    "{{ z is sameas none }}|{{ t is sameas true }}|{{ l is sameas l }}",
    # comparisons and logic
    "{{ 1 < 2 }}|{{ 2 <= 2 }}|{{ 'b' > 'a' }}|{{ [1, 2] < [1, 3] }}|{{ 1 == 1.0 }}|{{ 1 != '1' }}|{{ t == 1 }}",
    "{{ 1 < n < 100 }}|{{ 1 < n > 100 }}|{{ 'x' in 'xyz' }}|{{ 'w' not in 'xyz' }}|{{ 3 in l }}|{{ 'b' in d }}",
    "{{ z or 'd' }}|{{ 0 or [] or 'last' }}|{{ n and 'yes' }}|{{ '' and 'no' }}|{{ not z }}|{{ not not n }}",
    "{{ 'y' if n > 40 else 'n' }}|{{ 'y' if n > 50 else 'n' if n > 41 else 'm' }}|[{{ 'x' if false }}]",
    "{{ -n }}|{{ +n }}|{{ - f }}|{{ -(n + 1) }}|{{ not n == 42 }}|{{ (n + 1) * 2 }}|{{ n + 1 * 2 }}|{{ 2 ** 3 ** 2 }}",
    # filters
    "{{ l | sort }}|{{ l | sort(reverse=true) }}|{{ words | sort }}|{{ words | sort(case_sensitive=true) }}",
    "{{ msgs | sort(attribute='role') | map(attribute='content') | list }}",
    "{{ l | first }}|{{ l | last }}|{{ s | first }}|{{ [] | first is defined }}|{{ l | min }}|{{ l | max }}|{{ l | sum }}",
    "{{ l | join }}|{{ l | join(', ') }}|{{ msgs | join('/', attribute='role') }}|{{ words | join(d='-') }}",
    "{{ words | unique | list }}|{{ words | unique(case_sensitive=true) | list }}|{{ l | length }}|{{ d | count }}",
    "{{ nope | default('D') }}|{{ z | default('D') }}|{{ '' | default('E') }}|{{ '' | d('E', true) }}|{{ 0 | d(1, boolean=true) }}",
    "{{ msgs | map(attribute='role') | list }}|{{ msgs | map(attribute='nope', default='-') | list }}|{{ words | map('upper') | list }}",
    "{{ msgs | selectattr('content') | list | length }}|{{ msgs | rejectattr('content') | list | length }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}",
    "{{ msgs | selectattr('tool_calls', 'defined') | list | length }}|{{ msgs | rejectattr('tool_calls', 'undefined') | list | length }}",
    "{{ l | select('odd') | list }}|{{ l | reject('odd') | list }}|{{ [0, 1, '', 'a', none] | select | list }}",
    "{{ l | select('gt', 1) | list }}|{{ l | select('in', [1, 3]) | list }}|{{ words | select('lower') | list }}",
    "{{ '3' | int }}|{{ '3.7' | int }}|{{ 'x' | int }}|{{ 'x' | int(9) }}|{{ 3.9 | int }}|{{ '2' | float }}|{{ 'q' | float }}",
    "{{ -3 | abs }}|{{ -2.5 | abs }}|{{ n | string }}|{{ l | string }}|{{ z | string }}|{{ '<&>\"\\'' | escape }}|{{ 'x' | safe }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ') }}",
    "{{ s | upper }}|{{ s | lower }}|{{ 'ab' | list }}|{{ d | list }}|{{ l | reverse | list }}|{{ 'a b c' | replace(' ', '') }}",
    "{{ d | tojson }}|{{ l | tojson }}|{{ u | tojson }}|{{ ws | tojson }}|{{ z | tojson }}|{{ f | tojson }}|{{ t | tojson }}",
    "{{ d | tojson(indent=4) }}|{{ msgs[1] | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}",
    "{{ {'k': 'v', 'n': [1, {'m': none}]} | tojson }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson }}|{{ '\\u0001\\x7f' | tojson }}",
    "{{ d | attr('a') }}|{{ msgs | length }}|{{ msgs[1].tool_calls[0].function.arguments | tojson }}",
    # statements
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}",
    "{% for x in l %}{{ loop.previtem | default('^') }}{{ x }}{{ loop.nextitem | default('$') }} {% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}|{% for x in l %}{% if x == 1 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% for x in 'ab' %}{{ x }}.{% endfor %}|{% for i in range(3) %}{{ i }}{% endfor %}",
    "{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}|{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}|{{ range(3) | list }}",
    "{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}",
    "{% set x = 1 %}{% for i in l %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}",
    "{% set ns = namespace(x=1, items=[]) %}{% for i in l %}{% set ns.x = ns.x + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.x }}{{ ns.items }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set c = (3, 4) %}{{ c }}|{% set t2 = 5, %}{{ t2 }}",
    "{% set blk %}  inner {{ n }}  {% endset %}[{{ blk }}]|{% set blk2 | upper %}up{% endset %}{{ blk2 }}",
    "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(1, c=3) }}|{{ m(a='x') }}",
    "{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}body {{ n }}{% endcall %}",
    "{% macro list_it(items) %}{% for i in items %}<{{ caller(i) }}>{% endfor %}{% endmacro %}{% call(x) list_it(l) %}{{ x * 2 }}{% endcall %}",
    "{% filter upper %}shout {{ s }}{% endfilter %}|{% filter trim %}   pad   {% endfilter %}|",
    "{% if n > 50 %}big{% elif n > 40 %}mid{% elif n > 0 %}small{% else %}neg{% endif %}",
    "{% if nope %}a{% elif not nope %}b{% endif %}|{% if l %}non-empty{% endif %}|{% if d.nope %}x{% else %}y{% endif %}",
    "{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}|{{ dict(d, e=5) | length }}",
    "{% raw %}{{ keep }}{% if %}{% endraw %}|{#- comment -#}  after",
    # whitespace control
    "a  {{- n -}}  b|a {{ n }} b|a  {%- if t -%}  x  {%- endif -%}  b",
    "line1\n    {% if t %}\n    inside\n    {% endif %}\nline2",
    "line1\n    {%- if t %}\n    inside\n    {%- endif %}\nline2",
    "line1\n  {%+ if t %}\n  inside\n  {%+ endif +%}\nline2",
    "  {# c #}\nx\n  {# c2 -#}\n  y\n{{ n }}\n{{ n }}\n",
    "{% for x in l %}\n  {{ x }}\n{% endfor %}\n",
    "{% for x in l -%}\n  {{ x }}\n{%- endfor %}\nend\n\n",
    "\t{% if t %}tab{% endif %}\n \t {% if t %}mixed{% endif %} after\r\nnext",
    "{{ 'a' }}  {% if t %}b{% endif %}",
    "{{ 'str with {{ braces }} and {% tags %}' }}|{{ \"dq 'single'\" }}|{{ 'esc \\n \\t \\\\ \\u00e9 \\x41' }}|{{ 'adj' 'acent' }}",
    # errors (transformers raises; strata must raise too)
    "{{ raise_exception('boom ' ~ n) }}",
    "{{ nope.attr }}",
    "{{ 'a' + 1 }}",
    "{{ l.nope() }}",
    "{{ n() }}",
    "{{ 1 / 0 }}",
    "{% for x in n %}{% endfor %}",
    "{{ d.a.b.c }}",
]


def main():
    out = []
    for src in SNIPPETS:
        case = {"template": src}
        try:
            case["text"] = _compile_jinja_template(src).render(**CONTEXT)
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    with open(os.path.join(HERE, "snippets.json"), "w", encoding="utf-8") as f:
        json.dump({"context": CONTEXT, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(len(out), "snippets,", sum("error" in c for c in out), "raise")


if __name__ == "__main__":
    main()
