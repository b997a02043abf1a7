#!/usr/bin/env python3
"""Trains Hugging Face LlamaForCausalLM on the same checkpoint, token file and batches as
strata-train (fp32 master weights, bf16 autocast, torch AdamW, global-norm clipping 1.0), and
compares its loss curve with strata's `--json` output.

  python3 hf_loss_curve.py --model DIR --data tokens.bin --seq 128 --batch 8 --steps 100 --lr 3e-3 \
      --strata strata_steps.jsonl
Batches follow model/data/data.cpp: row r of step s starts at ((s*B + r) * seq) mod (n - seq - 1).
"""
import argparse
import json
import struct

import numpy as np
import torch
from transformers import LlamaForCausalLM


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:8] == b"STRATOK1", "not a strata token file"
    width = struct.unpack("<I", raw[8:12])[0]
    return np.frombuffer(raw[16:], dtype=np.uint32 if width == 4 else np.uint16).astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--strata", help="strata-train --json output to compare with")
    a = ap.parse_args()
    tok = read_tokens(a.data)
    span = max(1, len(tok) - a.seq - 1)
    model = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32, attn_implementation="sdpa").cuda()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    cursor, losses = 0, []
    for s in range(a.steps):
        rows = []
        for r in range(a.batch):
            start = (cursor * a.seq) % span
            cursor += 1
            rows.append(tok[start:start + a.seq + 1])
        ids = torch.tensor(np.stack(rows), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        # The window has seq+1 tokens: HF's shifted loss covers exactly strata's seq targets.
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(out.loss))
    result = {"hf_first": losses[0], "hf_last": losses[-1], "hf_last10_mean": float(np.mean(losses[-10:]))}
    if a.strata:
        ours = [json.loads(l)["loss"] for l in open(a.strata) if l.startswith("{")]
        n = min(len(ours), len(losses))
        diff = np.abs(np.array(ours[:n]) - np.array(losses[:n]))
        result.update({"strata_first": ours[0], "strata_last": ours[n - 1],
                       "strata_last10_mean": float(np.mean(ours[n - 10:n])), "max_abs_diff": float(diff.max()),
                       "mean_abs_diff": float(diff.mean()), "steps": n})
    print(json.dumps(result))
    with open("hf_losses.json", "w") as f:
        json.dump(losses, f)


if __name__ == "__main__":
    main()
