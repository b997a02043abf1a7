#!/usr/bin/env python3
"""Settings doc check: docs/USER_GUIDE.md's option table is `strata-train --settings-markdown`.

Run by ctest as `settings_doc_check` (label cpu; registered in cmake/checks.cmake):
    settings_doc_check.py --root SRC --train PATH/strata-train [--write]

The guide holds the table between `<!-- settings:begin -->` and `<!-- settings:end -->`; the
table is generated from the settings table (model/run/settings_table.cpp). With --write the
block is replaced by the tool's output (how to regenerate it after changing a setting).
"""
import argparse
import subprocess
import sys
from pathlib import Path

BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--train", required=True, help="the strata-train executable")
    ap.add_argument("--write", action="store_true", help="replace the guide's block with the tool's output")
    args = ap.parse_args()
    out = subprocess.run([args.train, "--settings-markdown"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        print(f"settings_doc_check: {args.train} --settings-markdown exited {out.returncode}: {out.stderr}")
        return 1
    guide = args.root / "docs" / "USER_GUIDE.md"
    text = guide.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        print(f"{guide}: no {BEGIN} ... {END} block")
        return 1
    have = text[start + len(BEGIN):end].strip("\n")
    want = out.stdout.strip("\n")
    if args.write:
        guide.write_text(text[:start + len(BEGIN)] + "\n" + want + "\n" + text[end:])
        print(f"settings_doc_check: wrote {len(want.splitlines())} lines into {guide}")
        return 0
    if have == want:
        print(f"settings_doc_check: {guide.name}'s settings table matches ({len(want.splitlines()) - 2} rows)")
        return 0
    line = text[:start].count("\n") + 2
    for i, (h, w) in enumerate(zip(have.splitlines() + [""] * 999, want.splitlines() + [""] * 999)):
        if h != w:
            print(f"{guide}:{line + i}: differs from `strata-train --settings-markdown`:\n  guide: {h}\n  tool:  {w}")
            break
    print(f"regenerate it: python3 tests/settings_doc_check.py --root . --train {args.train} --write")
    return 1


if __name__ == "__main__":
    sys.exit(main())
