#!/usr/bin/env python3
"""Case mapping beyond ASCII in chat templates: str.lower/upper/title/capitalize, the lower/upper/
title/capitalize filters, the lower/upper tests, str.islower/isupper/isalpha/isdigit/isalnum/isspace/
isdecimal/isnumeric and sort(case_sensitive=false), on multilingual text and on random strings drawn
from every cased and case-ignorable character, rendered by transformers' compiled chat-template
environment into case_expected.json; tests/cpu/jinja_test.cpp (Jinja.CaseMappingAsPython) renders each
with strata's interpreter and compares byte for byte.

    python3 tests/chat_templates/make_case_expected.py
"""
import json
import os
import random
import sys
import unicodedata

from transformers.utils.chat_template_utils import _compile_jinja_template

HERE = os.path.dirname(os.path.abspath(__file__))

TEXTS = [
    "Hello World",
    "ΟΔΥΣΣΕΥΣ ΚΑΙ ΣΙΣΥΦΟΣ",  # final sigma at word ends, medial elsewhere
    "ΑΣ. ΑΣ' Α'Σ ΑΣΑ Σ ΣΑ ΑΣ̈ Α.Σ.Β",  # case-ignorable characters around sigma
    "İstanbul ISPARTA ıi",  # dotted capital I lowercases to two characters
    "Straße STRASSE ß ẞ",  # sharp s uppercases to SS
    "ﬁnance ﬂow ﬀ ﬃ ŉ ǰ ΐ և",  # ligatures and others with multi-character upper/title
    "ǆemal ǅ Ǆ ǈ ǋ",  # titlecase digraphs
    "Ⅻ ⅻ Ⓐ ⓐ ª º ʰ ꭜ",  # Other_Uppercase / Other_Lowercase, not letters of Ll/Lu
    "ⴀ Ⴀ ᲐᲑᲒ ა Ꭰ ꭰ 𐐀 𐐨 𞤀 𞤢",  # Georgian, Cherokee, Deseret, Adlam
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ ａｂｃ",
    "ÉCOLE école Ångström ØRESUND",
    "привет МИР Ёлка",
    "Ǳ-ǳ (ǲ) [σς] {ΣΑ} <ᾈ> ᾳ ῼ",  # jinja2's title splits on whitespace and -({[<
    "数字 日本語 한국어 emoji 😀 ok",
    "١٢٣ ٤٥ ½ ² ³ ⅕ 〇 ① ߁ ৩",  # digits, decimals and numerics of other scripts
    "\u2003em space\u3000ideographic\u00a0nbsp\x1ffs",
    "",
    "a",
    "ΣΑΣ",
    "Σ",
    "ΑΣΣ",
    "aΣb Σb aΣ. 1Σ",
]

TEMPLATE = (
    "{% for s in texts %}"
    "{{ s.lower() }}|{{ s.upper() }}|{{ s.title() }}|{{ s.capitalize() }}|"
    "{{ s | lower }}|{{ s | upper }}|{{ s | title }}|{{ s | capitalize }}|"
    "{{ s is lower }}|{{ s is upper }}|{{ s.islower() }}|{{ s.isupper() }}|"
    "{{ s.isalpha() }}|{{ s.isdigit() }}|{{ s.isalnum() }}|{{ s.isspace() }}|{{ s.isdecimal() }}|"
    "{{ s.isnumeric() }}\n"
    "{% endfor %}"
    "{{ texts | sort(case_sensitive=false) | join('/') }}|{{ texts | unique(case_sensitive=false) | list | length }}"
)


def random_texts(n, seed):
    """Strings of cased and case-ignorable characters, spaces and sigmas, from Python's own Unicode data."""
    rng = random.Random(seed)
    pool = []
    for c in range(0x20, 0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        cat = unicodedata.category(ch)
        if ch.lower() != ch or ch.upper() != ch or ch.title() != ch or cat in ("Mn", "Lm", "Sk", "Lt", "Nd", "No"):
            pool.append(ch)
    extra = ["\u03a3", "\u03a3", " ", " ", "'", ".", "-", "(", "\u0301", "\u00ad", "1"]
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        out.append("".join(rng.choice(pool) if rng.random() < 0.7 else rng.choice(extra) for _ in range(k)))
    return out


def main():
    texts = TEXTS + random_texts(400, 30)
    tmpl = _compile_jinja_template(TEMPLATE)
    cases = []
    # One rendering per text (a failure in one does not hide the others), then the sorts over all.
    one = _compile_jinja_template(TEMPLATE.split("{% endfor %}")[0] + "{% endfor %}")
    for t in texts:
        cases.append({"text": t, "rendered": one.render(texts=[t])})
    out = {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "unicode": unicodedata.unidata_version,
        "template": TEMPLATE,
        "cases": cases,
        "all": tmpl.render(texts=texts),
    }
    path = os.path.join(HERE, "case_expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{path}: {len(cases)} texts, Unicode {unicodedata.unidata_version}")


if __name__ == "__main__":
    main()
