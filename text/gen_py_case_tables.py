#!/usr/bin/env python3
"""Writes text/py_case_tables.cpp: Python's own character data for the str methods chat templates call
(jinja2 runs them on Python strings, so Python is the reference, not Rust or ICU):
  - the full lower, upper and title case mappings (str.lower/upper/title of one character: up to three
    characters, e.g. 'ß'.upper() == 'SS', 'İ'.lower() == 'i̇'); str.lower's final-sigma rule is code
    (text/py_case.cpp), with the Cased and Case_Ignorable properties it reads, found here by asking
    str.lower itself where it writes 'ς';
  - the Lowercase and Uppercase properties and category Lt (str.islower / isupper, Cased);
  - the characters of str.isalpha, isdecimal, isdigit, isnumeric and isspace.

Usage: python3 text/gen_py_case_tables.py [out.cpp] && clang-format -i text/py_case_tables.cpp
  (the data is this Python's Unicode version)
"""
import sys
import unicodedata

from gen_common import code_range_table, out_path, ranges, scalars, write_cpp

SCALARS = scalars()


def cased(ch):
    return ch.islower() or ch.isupper() or unicodedata.category(ch) == "Lt"


def case_ignorable(ch):
    """Case_Ignorable, read back from str.lower's final-sigma rule: after a cased letter, a case-ignorable
    character is skipped ('AxΣ' ends in 'ς'); any other one ends the search."""
    if ch == "\u03a3":
        return False
    if cased(ch):  # a cased character that is also case-ignorable is skipped too: '1xΣ' then ends in 'σ'
        return not ("1" + ch + "\u03a3").lower().endswith("\u03c2")
    return ("A" + ch + "\u03a3").lower().endswith("\u03c2")


def mapping(s):
    assert 1 <= len(s) <= 3, s
    return [ord(x) for x in s] + [0] * (3 - len(s))


def main():
    out = out_path(sys.argv, "py_case_tables.cpp")
    rows = []
    for c in SCALARS:
        ch = chr(c)
        lo, up, ti = ch.lower(), ch.upper(), ch.title()
        if (lo, up, ti) != (ch, ch, ch):
            rows.append((c, mapping(lo), mapping(up), mapping(ti)))
    props = {
        "kPyCased": [c for c in SCALARS if cased(chr(c))],
        "kPyCaseIgnorable": [c for c in SCALARS if case_ignorable(chr(c))],
        "kPyLowercase": [c for c in SCALARS if chr(c).islower()],
        "kPyUppercase": [c for c in SCALARS if chr(c).isupper()],
        "kPyTitlecase": [c for c in SCALARS if unicodedata.category(chr(c)) == "Lt"],
        "kPyAlpha": [c for c in SCALARS if chr(c).isalpha()],
        "kPyDecimal": [c for c in SCALARS if chr(c).isdecimal()],
        "kPyDigit": [c for c in SCALARS if chr(c).isdigit()],
        "kPyNumeric": [c for c in SCALARS if chr(c).isnumeric()],
        "kPySpace": [c for c in SCALARS if chr(c).isspace()],
    }
    assert 0x2E in props["kPyCaseIgnorable"] and 0x27 in props["kPyCaseIgnorable"] and 0x41 in props["kPyCased"]
    ver = f"Python {sys.version_info.major}.{sys.version_info.minor}, Unicode {unicodedata.unidata_version}"
    lines = [
        f'const char kPyUnicodeVersion[] = "{unicodedata.unidata_version}";',
        "",
        "const PyCaseRow kPyCaseRows[] = {",
    ]

    def triple(m):
        return "{" + ", ".join(f"0x{x:X}" for x in m) + "}"

    for c, lo, up, ti in rows:
        lines.append(f"    {{0x{c:X}, {triple(lo)}, {triple(up)}, {triple(ti)}}},")
    lines += ["};", f"const size_t kPyCaseRowCount = {len(rows)};", ""]
    for name, points in props.items():
        lines += code_range_table(f"{name}Ranges", f"{name}RangeCount", ranges(points))
    write_cpp(out, "gen_py_case_tables.py", ver, "py_case_tables.h", lines)
    print(f"{out}: {len(rows)} case mappings ({ver})")


if __name__ == "__main__":
    main()
