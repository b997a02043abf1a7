#!/usr/bin/env python3
"""Forecast vs measured: runs strata-plan (sim backend, no GPU) for every strata-bench line of the
given JSONL files (scripts/gpu.sh accuracy, the tier and paging benchmarks, the planner acceptance
run) and prints a markdown table.
  python3 tools/bench/accuracy_table.py build/tools/strata-plan PROFILE MEASURED.jsonl [MORE.jsonl ...]
Lines measured with --config PLAN.yaml carry the YAML's path in "config" (scripts/gpu.sh plan_acceptance);
the host column is the slot store's pinned pool (the weight pager's fixed reservation is left out,
as strata-bench reports it).
"""
import json
import os
import subprocess
import sys

PLANS = {"keep": "keep", "gc": "gradient_checkpointing", "selective": "selective_recompute", "offload": "offload",
         "legacy": "legacy", "hidden_states": "hidden_states", "disk": "disk"}


def forecast(plan_tool, profile, r):
    cmd = [plan_tool, "--model", r["shape"], "--seq", str(r["seq"]), "--mode", r["mode"], "--loss-chunk", "1024",
           "--profile", profile, "--json"]
    if r["plan"] in PLANS:
        cmd += ["--preset", PLANS[r["plan"]]]
    elif r.get("config"):
        cmd += ["--config", r["config"]]
    else:
        return None
    if r["mode"] == "lora":
        cmd += ["--lora-rank", "16", "--lora-alpha", "32"]
    if r.get("layer_offloading"):
        cmd.append("--layer-offloading")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])["forecast"]


def main():
    plan_tool, profile = sys.argv[1], sys.argv[2]
    rows = []
    for path in sys.argv[3:]:
        for line in open(path):
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("engine") == "strata" and r.get("step_s"):
                    if r.get("config") and not os.path.isabs(r["config"]):
                        r["config"] = os.path.join(os.path.dirname(path), r["config"])
                    rows.append(r)
    print("| model | seq | mode | plan | paging | peak measured | peak forecast | error | host measured | host forecast "
          "| step measured | step forecast | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst_mem = worst_time = 0.0
    n = 0
    for r in rows:
        f = forecast(plan_tool, profile, r)
        if f is None:
            continue
        n += 1
        mem_err = (f["peak_bytes"] - r["peak_arena_bytes"]) / r["peak_arena_bytes"]
        t_err = (f["step_s"] - r["step_s"]) / r["step_s"]
        worst_mem, worst_time = max(worst_mem, abs(mem_err)), max(worst_time, abs(t_err))
        host = lambda b: f"{b / 1e9:.2f} GB" if b else "—"
        print(f"| {r['shape']} | {r['seq']} | {r['mode']} | {r.get('label', r['plan'])} | "
              f"{'on' if r.get('layer_offloading') else 'off'} | {r['peak_arena_bytes'] / 1e9:.3f} GB | "
              f"{f['peak_bytes'] / 1e9:.3f} GB | {100 * mem_err:+.2f}% | {host(r.get('peak_host_bytes', 0))} | "
              f"{host(f['peak_host_slot_bytes'])} | {r['step_s']:.4f} s | {f['step_s']:.4f} s | {100 * t_err:+.1f}% |")
    print(f"\nworst peak error {100 * worst_mem:.2f}%, worst step-time error {100 * worst_time:.1f}% over {n} configurations")


if __name__ == "__main__":
    main()
