#!/usr/bin/env python3
"""Writes text/normalization_tables.cpp: the Unicode data of the NFC/NFD/NFKC/NFKD normalizers
(text/normalize.cpp runs the algorithm), as Hugging Face `tokenizers` has it.

The ground truth is `tokenizers` itself (its Rust unicode-normalization-alignments crate), probed
one code point at a time: its tables are Unicode 9.0 (the marks of 9.0, e.g. U+1DFB, U+08D4,
have their classes; those of 10.0 on, e.g. U+1DF6, U+0D3B, U+07FD, are starters), OLDER than
Python 3.11's `unicodedata` (14.0) and than its own regex classes (Oniguruma, 16.0): U+32FF
(12.1), U+11938 (13.0) and the Unicode 14 letters U+A7F2.., U+10780.. have no decomposition there,
and the 98 marks of 10.0-14.0 are starters (combining class 0). So:
  - full decompositions: tokenizers' NFD / NFKD of each code point alone (Hangul syllables are
    decomposed by the algorithm, not by the table);
  - canonical combining classes: unicodedata's, checked (and corrected) by how tokenizers' NFD
    orders each mark against one reference mark of every class;
  - composition pairs: unicodedata's two-code-point canonical mappings of the composites that
    tokenizers decomposes and recomposes (NFC(NFD(c)) == c), checked against tokenizers' NFC of
    every such pair;
  - quick-check flags: a code point that a form changes when alone is "No" for that form; one that
    is the second of a composition pair is "Maybe" for NFC/NFKC.
tests/tokenizer/compare_random.py then compares the C++ normalizers with tokenizers over random
strings of marks, jamo and composites; tests/cpu/tokenizer_test.cpp over committed tricky strings.

Usage: pip install tokenizers && python3 text/gen_normalization_tables.py [out.cpp]
"""
import random
import shutil
import subprocess
import sys
import unicodedata as ud
from pathlib import Path

import tokenizers
from tokenizers import normalizers

SCALARS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
HANGUL = range(0xAC00, 0xD7A4)
NFD, NFC, NFKD, NFKC = (getattr(normalizers, f)().normalize_str for f in ("NFD", "NFC", "NFKD", "NFKC"))
FLAG_NFD_NO, FLAG_NFKD_NO, FLAG_NFC_NO, FLAG_NFKC_NO, FLAG_MAYBE = 1, 2, 4, 8, 16


def combining_classes(canon):
    """Code point -> combining class for tokenizers (undecomposed code points only)."""
    def nonstarter(x):  # moves across U+0334 (class 1) or U+0345 (class 240)
        return NFD(x + "\u0334") != x + "\u0334" or NFD("\u0345" + x) != "\u0345" + x

    refs = {}
    for c in SCALARS:
        k = ud.combining(chr(c))
        if k and c not in canon and k not in refs and (nonstarter(chr(c)) or c in (0x334, 0x345)):
            refs[k] = c
    # The references must order among themselves as their classes say.
    for a, ra in refs.items():
        for b, rb in refs.items():
            swapped = NFD(chr(ra) + chr(rb)) != chr(ra) + chr(rb)
            assert swapped == (a > b), (hex(ra), hex(rb))
    lo_ref, hi_ref = refs[min(refs)], refs[max(refs)]
    ccc = {}
    for c in SCALARS:
        if c in canon or c in HANGUL:
            continue
        x = chr(c)
        # A starter never moves and nothing moves across it.
        if (NFD(x + chr(lo_ref)) == x + chr(lo_ref) and NFD(chr(hi_ref) + x) == chr(hi_ref) + x
                and ud.combining(x) not in (min(refs), max(refs))):
            continue
        found = [k for k, r in refs.items()
                 if NFD(x + chr(r)) == x + chr(r) and NFD(chr(r) + x) == chr(r) + x]
        if c in refs.values():
            found = [ud.combining(x)]
        assert len(found) == 1, (hex(c), found)
        ccc[c] = found[0]
    return ccc


def main():
    out_path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("normalization_tables.cpp")
    canon, compat = {}, {}
    for c in SCALARS:
        if c in HANGUL:
            continue
        d, k = NFD(chr(c)), NFKD(chr(c))
        if d != chr(c):
            canon[c] = [ord(x) for x in d]
        if k != chr(c):
            compat[c] = [ord(x) for x in k]
    ccc = combining_classes(canon)
    newer = sorted(c for c in SCALARS if ud.combining(chr(c)) and c not in canon and ccc.get(c, 0) == 0)
    differ = sorted(c for c in ccc if ccc[c] != ud.combining(chr(c)))
    assert not differ, [hex(c) for c in differ]

    pairs = {}
    for c in canon:
        m = ud.decomposition(chr(c)).split()
        if len(m) != 2 or m[0].startswith("<") or NFC(NFD(chr(c))) != chr(c):
            continue
        a, b = int(m[0], 16), int(m[1], 16)
        assert NFC(chr(a) + chr(b)) == chr(c), hex(c)
        pairs[(a, b)] = c
    # Every composite tokenizers recomposes is a pair here (Hangul aside).
    for c in canon:
        if NFC(chr(c)) == chr(c):
            assert c in pairs.values(), hex(c)
    seconds = {b for _, b in pairs} | set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))

    flags = {}
    for c in SCALARS:
        f = 0
        x = chr(c)
        f |= FLAG_NFD_NO if NFD(x) != x else 0
        f |= FLAG_NFKD_NO if NFKD(x) != x else 0
        f |= FLAG_NFC_NO if NFC(x) != x else 0
        f |= FLAG_NFKC_NO if NFKC(x) != x else 0
        f |= FLAG_MAYBE if c in seconds else 0
        if f:
            flags[c] = f
    # The C++ quick checks accept these without a look-up.
    assert all(c not in ccc and not flags.get(c, 0) & (FLAG_NFC_NO | FLAG_MAYBE) for c in range(0x300))
    assert all(c not in flags and c not in ccc for c in range(0xA0))

    # Per code point: a record (ccc, flags, canonical and compatibility decomposition).
    data, seq_at = [], {}

    def seq(s):
        if not s:
            return 0, 0
        t = tuple(s)
        if t not in seq_at:
            seq_at[t] = len(data)
            data.extend(s)
        return seq_at[t], len(s)

    records, record_at = [(0, 0, 0, 0, 0, 0)], {(0, 0, 0, 0, 0, 0): 0}
    rec_of = {}
    for c in sorted(set(canon) | set(compat) | set(ccc) | set(flags)):
        co, cl = seq(canon.get(c, []))
        ko, kl = seq(compat.get(c, canon.get(c, [])))
        r = (ccc.get(c, 0), flags.get(c, 0), co, cl, ko, kl)
        if r not in record_at:
            record_at[r] = len(records)
            records.append(r)
        rec_of[c] = record_at[r]
    assert len(records) < 65536 and len(data) < 65536 and max(r[3] for r in records) < 256
    block = 128
    limit = (max(rec_of) // block + 1) * block
    stage1, blocks, block_at = [], [], {}
    for lo in range(0, limit, block):
        b = tuple(rec_of.get(c, 0) for c in range(lo, lo + block))
        if b not in block_at:
            block_at[b] = len(blocks)
            blocks.append(b)
        stage1.append(block_at[b])
    comp = sorted((a, b, c) for (a, b), c in pairs.items())

    lines = [
        f"// Generated by text/gen_normalization_tables.py from Hugging Face tokenizers {tokenizers.__version__}",
        f"// ({len(canon)} canonical and {len(compat)} compatibility decompositions, {len(ccc)} marks,",
        f"// {len(pairs)} composition pairs). Do not edit; rerun the script.",
        '#include "text/normalization_tables.h"',
        "",
        "namespace strata::text {",
        "",
        f"const uint32_t kNormLimit = 0x{limit:X};",
        f"const uint16_t kNormStage1[{len(stage1)}] = {{{', '.join(map(str, stage1))}}};",
        f"const uint16_t kNormStage2[{len(blocks) * block}] = {{",
    ]
    lines += ["    " + ", ".join(map(str, b)) + "," for b in blocks]
    lines += ["};", f"const NormRecord kNormRecords[{len(records)}] = {{"]
    lines += [f"    {{{co}, {ko}, {cl}, {kl}, {k}, {f}}}," for k, f, co, cl, ko, kl in records]
    lines += ["};", f"const uint32_t kNormData[{len(data)}] = {{"]
    lines += ["    " + ", ".join(f"0x{x:X}" for x in data[i:i + 12]) + "," for i in range(0, len(data), 12)]
    lines += ["};", f"const NormPair kNormPairs[{len(comp)}] = {{"]
    lines += [f"    {{0x{a:X}, 0x{b:X}, 0x{c:X}}}," for a, b, c in comp]
    lines += ["};", f"const size_t kNormPairCount = {len(comp)};", "", "}  // namespace strata::text", ""]
    out_path.write_text("\n".join(lines))
    if shutil.which("clang-format"):
        subprocess.run(["clang-format", "-i", str(out_path)], check=True)
    print(f"wrote {out_path}: {len(records)} records, {len(blocks)} blocks of {block}, {len(data)} code points of "
          f"decompositions, {len(comp)} pairs; unicodedata {ud.unidata_version} marks that tokenizers treats as "
          f"starters: {len(newer)} ({', '.join(f'U+{c:04X}' for c in newer[:8])}...)")


if __name__ == "__main__":
    main()
