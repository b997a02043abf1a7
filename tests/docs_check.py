#!/usr/bin/env python3
"""Docs check: the options the docs name are the options the tools and the YAML parser take.

Run by ctest as `docs_check` (label cpu; registered in cmake/checks.cmake):
    docs_check.py --root SRC --tool strata-train=PATH --tool strata-bench=PATH ...

Checks, failing with file:line for each mismatch:
  1. every `--flag` the README and docs/USER_GUIDE.md give a checked tool is in that tool's --help;
  2. every `--flag` in a tool's --help is documented for that tool in docs/USER_GUIDE.md;
  3. every YAML key in a USER_GUIDE table's YAML column is a key of the settings table (the YAML
     column of `strata-train --settings-markdown`, keys and aliases), and every one of those is in
     such a column.

How the docs are read (plain rules, so a doc writer can predict them):
  - A tool's flags are the `--flags` in its --help output, less those right after another
    tool's name there.
  - Flags are taken only from code: fenced blocks (line by line) and inline `code spans`.
  - A code line or span that starts with a command word (after any VAR=value) belongs to that
    command: a checked tool is checked, anything else (strata-make-tiny, scripts, python) is not.
    Indented lines in a fenced block continue the command above them; `# comments` are dropped.
  - A line or span that starts with a flag belongs to the tool its section is about: the nearest
    enclosing heading that names a checked tool, else strata-train (the README's "Using it" and
    the guide's "Training" are about strata-train). A heading naming another tool
    (strata-calibrate) makes its section unchecked.
  - YAML keys: in a table whose header has a column starting with "YAML", each code span in that
    column names the key before its first ':' (`plan: {...}` is `plan`); spans starting with
    `--` are flags and are skipped. A cell may hold an escaped pipe (`\\|`).
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")
SPAN = re.compile(r"`([^`\n]+)`")
HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
COMMAND = re.compile(r"strata-[a-z-]+")
YAML_KEY = re.compile(r"^([a-z_][a-z0-9_]*)\s*(:|$)")
DEFAULT_TOOL = "strata-train"
UNSET = object()


def command_of(text, context, tools):
    """(owner, flags) of a code line or span: owner is a checked tool, or None for unchecked."""
    words = text.strip().lstrip("[(|").split()
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words.pop(0)
    if words and not words[0].startswith("-"):
        owner = words[0] if words[0] in tools else None
    else:
        owner = context
    return owner, FLAG.findall(text)


def documented_flags(path, tools):
    """{tool: {flag: first 'file:line'}} for the code in one markdown file."""
    found = {t: {} for t in tools}
    stack = []  # (heading level, tool or None) of the enclosing headings
    fenced = False
    block_owner = UNSET  # the command of the last unindented line in a fenced block
    for n, line in enumerate(path.read_text().splitlines(), 1):
        where = f"{path.name}:{n}"
        if line.lstrip().startswith("```"):
            fenced = not fenced
            block_owner = UNSET
            continue
        context = stack[-1][1] if stack else DEFAULT_TOOL
        uses = []
        if fenced:
            code = re.sub(r"(^|\s)#.*$", "", line)
            if not code.strip():
                continue
            if code[0].isspace() and block_owner is not UNSET:
                uses.append((block_owner, FLAG.findall(code)))
            else:
                block_owner, flags = command_of(code, context, tools)
                uses.append((block_owner, flags))
        else:
            m = HEADING.match(line)
            if m:
                level, text = len(m.group(1)), m.group(2)
                while stack and stack[-1][0] >= level:
                    stack.pop()
                named = COMMAND.findall(text)
                if named:
                    tool = named[0] if named[0] in tools else None
                else:
                    tool = stack[-1][1] if stack else DEFAULT_TOOL
                stack.append((level, tool))
                continue
            for span in SPAN.findall(line):
                uses.append(command_of(span, context, tools))
        for owner, flags in uses:
            if owner is None:
                continue
            for f in flags:
                found[owner].setdefault(f, where)
    return found


def help_flags(name, exe):
    """The flags in `exe --help`, less those right after another tool's name, which are that
    tool's ("(e.g. strata-plan --budget --write-config)" in strata-bench's)."""
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"docs_check: {exe} --help exited {out.returncode}: {out.stderr}")
    other = re.compile(r"(?<![\w-])(strata-[a-z-]+)((?:\s+--[a-z][a-z0-9-]*(?:\s+[A-Z][A-Z0-9_.]*)?)+)")
    text = other.sub(lambda m: m.group(0) if m.group(1) == name else m.group(1), out.stdout)
    return set(FLAG.findall(text))


def table_yaml_keys(text, name):
    """{key: 'name:line'} from the YAML column of every table in markdown `text` that has one."""
    keys = {}
    col = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            col = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if col is None:  # a table's header row
            col = next((i for i, c in enumerate(cells) if c.startswith("YAML")), -1)
            continue
        if col < 0 or col >= len(cells) or set(cells[col]) <= set("-: "):
            continue
        for span in SPAN.findall(cells[col]):
            m = YAML_KEY.match(span.strip())
            if m and not span.startswith("-"):
                keys.setdefault(m.group(1), f"{name}:{n}")
    return keys


def settings_yaml_keys(exe):
    """The settings table's keys and aliases: the YAML column of `strata-train --settings-markdown`."""
    out = subprocess.run([exe, "--settings-markdown"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"docs_check: {exe} --settings-markdown exited {out.returncode}: {out.stderr}")
    return set(table_yaml_keys(out.stdout, "settings"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--tool", action="append", required=True, help="NAME=PATH of a tool to check")
    args = ap.parse_args()
    tools = dict(t.split("=", 1) for t in args.tool)
    guide = args.root / "docs" / "USER_GUIDE.md"
    readme = args.root / "README.md"
    errors = []

    in_guide = documented_flags(guide, tools)
    in_readme = documented_flags(readme, tools)
    for name, exe in tools.items():
        have = help_flags(name, exe)
        for doc in (in_guide, in_readme):
            for f, where in sorted(doc[name].items()):
                if f not in have:
                    errors.append(f"{where}: {name} --{f} is documented but not in `{name} --help`")
        for f in sorted(have - set(in_guide[name])):
            errors.append(f"{guide.name}: {name} --{f} is in `{name} --help` but not documented")

    documented = table_yaml_keys(guide.read_text(), guide.name)
    parsed = settings_yaml_keys(tools["strata-train"])
    for k, where in sorted(documented.items()):
        if k not in parsed:
            errors.append(f"{where}: YAML key {k} is documented but is no key of the settings table")
    for k in sorted(parsed - set(documented)):
        errors.append(f"{guide.name}: YAML key {k} is in the settings table but in no YAML column")

    for e in errors:
        print(e)
    counts = ", ".join(f"{n} {len(in_guide[n])} flags" for n in tools)
    print(f"docs_check: {len(errors)} problem(s); USER_GUIDE: {counts}, {len(documented)} YAML keys")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
