#!/usr/bin/env python3
"""How fast does strata tokenize? strata-tokenize against Hugging Face `tokenizers` on one core.

Both encode the same documents (one per line of a JSONL file, with special tokens) one at a time:
strata-tokenize --jsonl --stats (its time includes reading and parsing the JSON and printing the
ids), and `tokenizers`' Tokenizer.encode in a loop with RAYON_NUM_THREADS=1 and
TOKENIZERS_PARALLELISM=false, both pinned to one core. Prints MB/s and tokens/s for both, and
checks that the ids are the same.

    python3 scripts/bench_tokenize.py BUILD/tools/strata-tokenize [--mb 8] [--tokenizers llama3,gpt2,...]
    python3 scripts/bench_tokenize.py BUILD/tools/strata-tokenize --txt [--mb 8]

--txt: the documents joined into one text, as a .txt dataset is read: strata-tokenize --threads 1 and
--threads 0 (cut at line starts, a part per core, as strata-train tokenizes a .txt file) against
`tokenizers`' encode of the one text (which runs on one thread: it has no way to split one text), on
every core this process may use; ids checked equal, no special tokens.

The text (built here, deterministic): the standard library's Python sources as code documents, plus
the multilingual lines of tests/tokenizer/corpus.jsonl, to about --mb megabytes. The tokenizers are
the test ones under tests/tokenizer/ (3k vocabularies, the layouts of real checkpoints);
"llama3-onig" is llama3 with every split regex on Oniguruma (strata-tokenize --onig-only).
"""
import argparse
import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKDIR = ROOT / "tests" / "tokenizer"


def documents(mb):
    corpus = [json.loads(line)["text"] for line in (TOKDIR / "corpus.jsonl").open(encoding="utf-8")]
    stdlib = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    docs, size, i = [], 0, 0
    while size < mb * 1e6:
        if i % 4 == 3:
            doc = "\n".join(corpus)
        else:
            doc = stdlib[(i // 4 * 3 + i % 4) % len(stdlib)].read_text(encoding="utf-8", errors="replace")
        docs.append(doc)
        size += len(doc.encode())
        i += 1
    return docs


def strata_run(cmd, stdin):
    run = subprocess.run(cmd, input=stdin, capture_output=True, check=True)
    stats = run.stderr.decode().strip().splitlines()[-1]  # "B bytes -> T tokens in S s: ..."
    words = stats.split()
    ids = [int(x) for x in run.stdout.decode().split()]
    return ids, int(words[3]), float(words[6]), run.stderr.decode()


def bench_txt(args):
    from tokenizers import Tokenizer
    text = "\n".join(documents(args.mb))
    stdin = text.encode()
    cores = len(os.sched_getaffinity(0))
    print(f"one text of {len(stdin) / 1e6:.1f} MB (a .txt dataset), {cores} cores, no special tokens")
    print(f"{'tokenizer':<13} {'strata 1 thread MB/s':>21} {f'strata {cores} cores MB/s':>22} {'HF MB/s':>8} "
          f"{'ratio':>6}  note")
    failed = False
    for name in args.tokenizers.split(","):
        base = name.removesuffix("-onig")
        cmd = [args.tool, "--tokenizer", str(TOKDIR / base), "--stats"]
        if name.endswith("-onig"):
            cmd.append("--onig-only")
        one, _, one_sec, _ = strata_run(cmd + ["--threads", "1"], stdin)
        many, _, many_sec, err = strata_run(cmd + ["--threads", "0"], stdin)
        tok = Tokenizer.from_file(str(TOKDIR / base / "tokenizer.json"))
        t0 = time.perf_counter()
        hf = tok.encode(text, add_special_tokens=False).ids
        h_sec = time.perf_counter() - t0
        same = one == hf and many == hf
        failed |= not same
        mb = len(stdin) / 1e6
        note = "one thread: tokenizer not cut" if "one thread" in err else ""
        print(f"{name:<13} {mb / one_sec:>21.2f} {mb / many_sec:>22.2f} {mb / h_sec:>8.2f} "
              f"{h_sec / many_sec:>5.1f}x  {note}{'' if same else ' IDS DIFFER'}")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("--mb", type=float, default=8)
    ap.add_argument("--tokenizers", default="llama3,llama3-onig,qwen25,gpt2,tekken,llama2")
    ap.add_argument("--txt", action="store_true", help="one text on every core, as a .txt dataset")
    args = ap.parse_args()
    if args.txt:
        return bench_txt(args)
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    from tokenizers import Tokenizer  # after the environment is set
    docs = documents(args.mb)
    nbytes = sum(len(d.encode()) for d in docs)
    stdin = "".join(json.dumps(d) + "\n" for d in docs).encode()
    print(f"{len(docs)} documents, {nbytes / 1e6:.1f} MB, one core")
    print(f"{'tokenizer':<13} {'strata MB/s':>11} {'strata tok/s':>13} {'HF MB/s':>8} {'HF tok/s':>10} {'ratio':>6}")
    failed = False
    for name in args.tokenizers.split(","):
        base = name.removesuffix("-onig")
        cmd = [args.tool, "--tokenizer", str(TOKDIR / base), "--jsonl", "--stats"]
        if name.endswith("-onig"):
            cmd.append("--onig-only")
        run = subprocess.run(cmd, input=stdin, capture_output=True, check=True)
        stats = run.stderr.decode().strip().splitlines()[-1]  # "B bytes -> T tokens in S s: ..."
        words = stats.split()
        s_tokens, s_sec = int(words[3]), float(words[6])
        tok = Tokenizer.from_file(str(TOKDIR / base / "tokenizer.json"))
        t0 = time.perf_counter()
        encs = [tok.encode(d).ids for d in docs]
        h_sec = time.perf_counter() - t0
        h_tokens = sum(len(e) for e in encs)
        got = [[int(x) for x in line.split()] for line in run.stdout.decode().splitlines()]
        same = got == encs
        failed |= not same
        s_mb, h_mb = nbytes / s_sec / 1e6, nbytes / h_sec / 1e6
        print(f"{name:<13} {s_mb:>11.2f} {s_tokens / s_sec:>13.0f} {h_mb:>8.2f} {h_tokens / h_sec:>10.0f} "
              f"{s_mb / h_mb:>5.1f}x{'' if same else '  IDS DIFFER'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
