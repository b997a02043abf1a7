#!/usr/bin/env python3
"""Writes text/char_tables.cpp: character data of tokenizers' Rust side, read from tokenizers itself
so that strata has its Unicode versions (which differ from Oniguruma's 16.0 and from each other):
  - the lowercase mapping of the Lowercase normalizer (Rust's char::to_lowercase, character by
    character: no final-sigma rule);
  - the characters the Digits pre-tokenizer splits on (Rust's char::is_numeric);
  - the characters the Punctuation pre-tokenizer splits on (char::is_ascii_punctuation or the
    unicode_categories crate's is_punctuation, whose data is older).

Usage: pip install tokenizers && python3 text/gen_char_tables.py [out.cpp] && clang-format -i text/char_tables.cpp
"""
import sys

import tokenizers
from tokenizers import normalizers
from tokenizers import pre_tokenizers as pt

from gen_common import code_range_table, out_path, ranges, scalars, write_cpp

SCALARS = scalars(1)  # not NUL: it separates the characters below


def isolated(pre_tokenizer):
    """The code points the pre-tokenizer cuts out alone from between two 'a's."""
    text = "a".join(chr(c) for c in SCALARS)
    return sorted({ord(p) for p, _ in pre_tokenizer.pre_tokenize_str(text) if len(p) == 1 and p != "a"})


def main():
    out = out_path(sys.argv, "char_tables.cpp")
    lowered = normalizers.Lowercase().normalize_str("\0".join(chr(c) for c in SCALARS)).split("\0")
    assert len(lowered) == len(SCALARS)
    rows = [(c, [ord(x) for x in low]) for c, low in zip(SCALARS, lowered) if low != chr(c)]
    assert all(1 <= len(l) <= 2 for _, l in rows)
    numeric = ranges(isolated(pt.Digits(individual_digits=True)))
    punct = ranges(isolated(pt.Punctuation(behavior="isolated")))
    assert 0x30 <= numeric[0][0] and any(lo <= ord("!") <= hi for lo, hi in punct)
    lines = ["const LowerMapping kLowerMappings[] = {"]
    for c, low in rows:
        second = low[1] if len(low) > 1 else 0
        lines.append(f"    {{0x{c:X}, 0x{low[0]:X}, 0x{second:X}}},")
    lines += ["};", f"const size_t kLowerMappingCount = {len(rows)};", ""]
    lines += code_range_table("kNumericRanges", "kNumericRangeCount", numeric)
    lines += code_range_table("kPunctuationRanges", "kPunctuationRangeCount", punct)
    write_cpp(out, "gen_char_tables.py", f"tokenizers {tokenizers.__version__}", "char_tables.h", lines)
    print(f"{out}: {len(rows)} mappings, {len(numeric)} numeric and {len(punct)} punctuation ranges")


if __name__ == "__main__":
    main()
