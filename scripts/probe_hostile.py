#!/usr/bin/env python3
"""Hostile input against the built tools (cpu build): each probe must end in a clean error (exit code 1-127, not a
signal) whose message names the input, within seconds; a few must answer instead (a plan over 100,000 GPUs).
The inputs are written to a scratch directory at run time (the 100,000-deep JSON files are not committed).

Usage: scripts/probe_hostile.py [BUILD_DIR]   (default build-cpu; needs strata-train, strata-plan,
strata-tokenize and strata-make-tiny built there). Prints one line a probe; exits 1 if any is not clean.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEEP = 100000
LIMIT_S = 20  # what "within seconds" allows a probe here (2 shared cores)


def deep_array():
    return "[" * DEEP + "]" * DEEP


def write(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return path


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-cpu"))
    tool = {t: os.path.join(build, "tools", "strata-" + t) for t in ("train", "plan", "tokenize", "make-tiny")}
    for t, p in tool.items():
        if not os.path.exists(p):
            sys.exit(f"probe: {p} is not built")
    tmp = tempfile.mkdtemp(prefix="strata_probe_")
    try:
        return run_probes(tool, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_probes(tool, tmp):
    p = lambda *names: os.path.join(tmp, *names)
    tiny = p("tiny")
    subprocess.run([tool["make-tiny"], tiny, "--layers", "2", "--hidden", "32", "--heads", "4", "--kv-heads", "2",
                    "--intermediate", "64", "--vocab", "64", "--tokens", "4000"], check=True, capture_output=True)
    data = os.path.join(tiny, "tokens.bin")
    llama3 = os.path.join(ROOT, "tests", "tokenizer", "llama3")

    def model_copy(name):
        d = p(name)
        shutil.copytree(tiny, d)
        return d

    def tok_copy(name):
        d = p(name)
        shutil.copytree(llama3, d)
        return d

    def train(*args, model=tiny):
        return [tool["train"], "--model", model, "--data", data, "--backend", "cpu", "--seq", "16", "--steps", "2",
                *args]

    def yaml(name, text):
        return write(p(name), text)

    probes = []  # (family, argv, stdin, what the message must name, expected codes)
    err = range(1, 128)

    # JSON nested 100,000 deep, in every reader that takes it.
    d = model_copy("deep_config")
    cfg = json.load(open(os.path.join(d, "config.json")))
    write(os.path.join(d, "config.json"), json.dumps(cfg)[:-1] + ', "extra": ' + deep_array() + "}")
    probes += [("deep JSON: config.json passthrough field", train(model=d), None, "config.json", err),
               ("deep JSON: strata-plan --model DIR", [tool["plan"], "--model", d, "--seq", "64"], None, "config.json",
                err)]
    t = tok_copy("deep_tok")
    write(os.path.join(t, "tokenizer.json"), deep_array())
    probes.append(("deep JSON: tokenizer.json", [tool["tokenize"], "--tokenizer", t], b"hi", "tokenizer.json", err))
    t = tok_copy("deep_norm")
    tj = open(os.path.join(t, "tokenizer.json")).read()
    write(os.path.join(t, "tokenizer.json"), '{"normalizer": ' + deep_array() + ", " + tj.lstrip()[1:])
    probes.append(("deep JSON: tokenizer.json normalizer", [tool["tokenize"], "--tokenizer", t], b"hi",
                   "tokenizer.json", err))
    t = tok_copy("deep_eos")
    write(os.path.join(t, "tokenizer_config.json"), '{"eos_token": ' + deep_array() + "}")
    probes.append(("deep JSON: tokenizer_config.json eos_token", [tool["tokenize"], "--tokenizer", t], b"hi",
                   "tokenizer_config.json", err))

    # The planner: absurd shapes refused by range, endless files refused, searches bounded.
    plan = lambda *a: [tool["plan"], "--model", "Llama-3.2-1B", *a]
    probes += [
        ("plan: --seq 2^31-1", plan("--seq", "2147483647"), None, "--seq", err),
        ("plan: --seq 2^31-1 --budget", plan("--seq", "2147483647", "--budget", "40GiB"), None, "--seq", err),
        ("plan: --max-seq --seq-limit 2^31-1", plan("--max-seq", "--budget", "40GiB", "--seq-limit", "2147483647"),
         None, "--seq-limit", err),
        ("plan: --profile /dev/zero", plan("--seq", "1024", "--profile", "/dev/zero"), None, "/dev/zero", err),
        ("plan: --gpus 100000 --zero-stage 1 (answers)",
         plan("--seq", "1024", "--gpus", "100000", "--zero-stage", "1", "--budget", "40GiB"), None, "ranks 146-99999",
         [0]),
        ("plan: --gpus 1048577 (past WORLD_SIZE's range)", plan("--seq", "1024", "--gpus", "1048577"), None,
         "--gpus", err),
        ("plan: 1B at 1,048,576 tokens, 1 TiB host, 10 TiB disk (stops at the time limit)",
         plan("--seq", "1048576", "--budget", "80GiB", "--host-budget", "1TiB", "--disk-budget", "10TiB",
              "--plan-time-limit", "5"), None, "time limit", [0, 1]),
        ("plan: Llama-3-70B at 1,048,576 tokens, 2 TiB host (stops at the time limit)",
         [tool["plan"], "--model", "Llama-3-70B", "--seq", "1048576", "--budget", "80GiB", "--host-budget", "2TiB",
          "--plan-time-limit", "5"], None, "time limit", [0, 1]),
    ]

    # Shard names outside the checkpoint.
    for name, shard in (("escaping shard", "../../outside/stolen.safetensors"), ("NUL in a shard name",
                                                                                   "model.safetensors\u0000junk")):
        d = model_copy("index_" + name.replace(" ", "_"))
        write(os.path.join(d, "model.safetensors.index.json"),
              json.dumps({"weight_map": {"model.norm.weight": shard}}))
        probes.append(("index: " + name, train(model=d), None, "model.safetensors.index.json", err))

    # Settings silently accepted before: each an error naming the key or flag (the seed is 64 bits: 2^32 + 16 is a
    # seed, no longer wrapped to 16; 2^64 is out of range).
    for key, text in (("learning_rate", "learning_rate: 0.1\nlearning_rate: 0.2\n"), ("seed", "seed: 18446744073709551616\n"),
                      ("device_memory", "device_memory: 0\n"), ("host_memory_budget", "host_memory_budget: 0\n"),
                      ("datasets", "datasets:\n" + "- " * DEEP + "x\n")):
        probes.append(("YAML: " + text.splitlines()[0][:40], train("--config", yaml(key + ".yaml", text)), None, key,
                       err))
    probes += [("flag: --epochs 1e-30", train("--epochs", "1e-30"), None, "epochs", err),
               ("flag: --save ''", train("--save", ""), None, "save", err)]
    save = p("save_with_file")
    os.makedirs(save)
    write(os.path.join(save, "checkpoint-2"), "not a directory")
    probes.append(("--save DIR where checkpoint-2 is a file", train("--save", save, "--save-steps", "2"), None,
                   "checkpoint-2", err))

    # Weights, tokenizers, datasets, token caches.
    d = model_copy("i32_norm")
    raw = open(os.path.join(d, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header["model.norm.weight"]["dtype"] = "I32"  # the same 4 bytes an element
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    write(os.path.join(d, "model.safetensors"), struct.pack("<Q", len(h)) + h + raw[8 + n:])
    probes.append(("a norm weight stored as I32", train(model=d), None, "model.norm.weight", err))
    t = p("empty_vocab")
    os.makedirs(t)
    write(os.path.join(t, "tokenizer.json"), '{"model": {"type": "BPE", "vocab": {}, "merges": []}}')
    probes.append(("a tokenizer with an empty vocabulary", [tool["tokenize"], "--tokenizer", t], b"hi",
                   "tokenizer.json", err))
    probes.append(("strata-tokenize --decode ids that overflow", [tool["tokenize"], "--tokenizer", llama3, "--decode"],
                   b"1 99999999999999999999 2", "99999999999999999999", err))
    rows = write(p("empty.jsonl"), '{"text": ""}\n' * 3)
    tok_model = model_copy("with_tok")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(llama3, f), tok_model)
    probes.append(("a dataset whose every example is empty",
                   [tool["train"], "--config", yaml("empty_ds.yaml", f"base_model: {tok_model}\ndatasets:\n"
                                                    f"  - path: {rows}\n    type: completion\n"), "--preview-data",
                    "1"], None, "empty.jsonl", err))
    probes.append(("metrics_file on a full disk (warns, the run fails at its end)",
                   train("--config", yaml("full.yaml", "metrics_file: /dev/full\n")), None, "/dev/full", [1]))

    # Chat templates from a checkpoint: hostile ones end in an error naming the template file and line.
    for name, template in (
            ("nested loops of 10^10 iterations", "{% for i in range(100000) %}\n{% for j in range(100000) %}"
                                                  "{% endfor %}{% endfor %}"),
            ("range(10**12)", "{% for i in range(10**12) %}x{% endfor %}"),
            ("'a' * 10**12", "{{ 'a' * 10**12 }}"),
            ("text doubling", "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                              "{% endfor %}"),
            ("macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            ("macro fan-out 2^60", "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}"
                                   "{% endmacro %}{{ f(0) }}"),
            ("100,000 nested parentheses", "{{ " + "(" * DEEP + "1" + ")" * DEEP + " }}"),
            ("2 ** 10**18", "{{ 2 ** 10**18 }}")):
        t = tok_copy("chat_" + str(len(probes)))
        c = json.load(open(os.path.join(t, "tokenizer_config.json")))
        c["chat_template"] = template
        write(os.path.join(t, "tokenizer_config.json"), json.dumps(c))
        chat = write(p("chat.jsonl"), json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                               {"role": "assistant", "content": "yo"}]}) + "\n")
        run_yaml = yaml("chat_%d.yaml" % len(probes),
                        f"base_model: {t}\ndatasets:\n  - path: {chat}\n    type: chat_template\n")
        probes.append(("chat template: " + name, [tool["train"], "--config", run_yaml, "--preview-data", "1"], None,
                       "tokenizer_config.json, line", err))

    bad = 0
    for family, argv, stdin, want, codes in probes:
        t0 = time.monotonic()
        try:
            r = subprocess.run(argv, input=stdin or b"", capture_output=True, timeout=120)
            code, out = r.returncode, (r.stdout + r.stderr).decode(errors="replace")
        except subprocess.TimeoutExpired:
            code, out = "timeout", ""
        s = time.monotonic() - t0
        ok = code in codes and want in out and s < LIMIT_S
        bad += not ok
        last = out.strip().splitlines()[-1] if out.strip() else ""
        err_line = next((l for l in out.splitlines() if "error" in l), last)
        print(f"{'ok  ' if ok else 'FAIL'} {family}: rc {code}, {s:.1f} s: {err_line[:160]}")
    print(f"probe: {len(probes) - bad} of {len(probes)} clean")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
