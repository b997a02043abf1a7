#!/usr/bin/env python3
"""Include check: every `#include "..."` of strata's sources follows the allowed edges.

Run by ctest as `include_check` (label cpu):  include_check.py --root SRC

The layers, lowest first (docs/ARCHITECTURE.md, "Layout"):
    engine  <-  kernels
    engine  <-  io  <-  text
    engine, io, text  <-  model/llama  <-  model/data, model/train  <-  model/plan  <-  model/run
    model/*  <-  api  <-  tools
A file may include its own layer and the layers its layer lists below. include/strata (the public
headers) includes only itself. Tests and examples may include anything. A violation prints
`file:line: LAYER may not include TARGET (allowed: ...)` and the check fails.
"""
import argparse
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# layer -> the layers it may include (itself always).
ALLOWED = {
    "strata": [],  # include/strata: the public headers
    "engine": ["strata"],
    "kernels": ["engine", "strata"],
    "io": ["engine", "strata"],
    "text": ["engine", "io", "strata"],
    "model/llama": ["engine", "io", "strata"],
    "model/data": ["model/llama", "engine", "io", "text", "strata"],
    "model/train": ["model/llama", "engine", "io", "strata"],
    "model/plan": ["model/train", "model/llama", "engine", "io", "strata"],
    "model/run": ["model/plan", "model/train", "model/data", "model/llama", "engine", "io", "text", "strata"],
    "api": ["model/run", "model/plan", "model/train", "model/data", "model/llama", "engine", "io", "text", "kernels",
            "strata"],
    "tools": ["api", "model/run", "model/plan", "model/train", "model/data", "model/llama", "engine", "io", "text",
              "kernels", "strata", "tools"],
}
SOURCE_DIRS = ["include/strata", "engine", "kernels", "io", "text", "model", "api", "tools"]
SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}


def layer_of(rel: str):
    """The layer of a path relative to the root (a source file or an include target)."""
    if rel.startswith("include/strata/") or rel.startswith("strata/"):
        return "strata"
    parts = rel.split("/")
    if parts[0] == "model":
        return "model/" + parts[1] if len(parts) > 2 else None  # a file directly in model/ has no room
    return parts[0] if parts[0] in ALLOWED else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    root = Path(ap.parse_args().root)
    errors, files = [], 0
    for d in SOURCE_DIRS:
        for f in sorted((root / d).rglob("*")):
            if f.suffix not in SUFFIXES or not f.is_file():
                continue
            rel = f.relative_to(root).as_posix()
            src = layer_of(rel)
            if src is None:
                errors.append(f"{rel}:1: a source file outside every layer (model/ files live in a room)")
                continue
            files += 1
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                dst = layer_of(target)
                if dst is None:
                    # A sibling header by plain name ("cudnn_graph.h") stays in its own layer.
                    if "/" not in target:
                        continue
                    errors.append(f"{rel}:{n}: includes {target}, which is in no layer")
                    continue
                if dst != src and dst not in ALLOWED[src]:
                    allowed = ", ".join([src] + ALLOWED[src])
                    errors.append(f"{rel}:{n}: {src} may not include {target} (allowed: {allowed})")
    for e in errors:
        print(e)
    print(f"include_check: {files} files, {len(errors)} violation{'s' if len(errors) != 1 else ''}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
