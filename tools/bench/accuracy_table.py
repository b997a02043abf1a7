#!/usr/bin/env python3
"""Forecast vs measured: runs strata-plan (sim backend, no GPU) for every configuration that
scripts/gpu_accuracy.sh measured with strata-bench, and prints a markdown table.
  python3 tools/bench/accuracy_table.py build/tools/strata-plan MEASURED.jsonl PROFILE
"""
import json
import subprocess
import sys

PLANS = {"keep": "keep", "gc": "gradient_checkpointing", "selective": "selective_recompute"}


def main():
    plan_tool, measured, profile = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = [json.loads(l) for l in open(measured) if l.startswith("{")]
    print("| model | seq | mode | plan | peak measured | peak forecast | error | step measured | step forecast | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst_mem = worst_time = 0.0
    for r in rows:
        cmd = [plan_tool, "--model", r["shape"], "--seq", str(r["seq"]), "--mode", r["mode"], "--preset",
               PLANS[r["plan"]], "--loss-chunk", "1024", "--profile", profile, "--json"]
        if r["mode"] == "lora":
            cmd += ["--lora-rank", "16", "--lora-alpha", "32"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        f = json.loads(out[out.index("{"):])["forecast"]
        mem_err = (f["peak_bytes"] - r["peak_arena_bytes"]) / r["peak_arena_bytes"]
        t_err = (f["step_s"] - r["step_s"]) / r["step_s"]
        worst_mem, worst_time = max(worst_mem, abs(mem_err)), max(worst_time, abs(t_err))
        print(f"| {r['shape']} | {r['seq']} | {r['mode']} | {r['plan']} | {r['peak_arena_bytes'] / 1e9:.3f} GB | "
              f"{f['peak_bytes'] / 1e9:.3f} GB | {100 * mem_err:+.2f}% | {r['step_s']:.4f} s | {f['step_s']:.4f} s | "
              f"{100 * t_err:+.1f}% |")
    print(f"\nworst peak error {100 * worst_mem:.2f}%, worst step-time error {100 * worst_time:.1f}% over {len(rows)} configurations")


if __name__ == "__main__":
    main()
