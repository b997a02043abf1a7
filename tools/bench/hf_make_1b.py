#!/usr/bin/env python3
"""On the GPU host: writes a Llama-3.2-1B-shaped Hugging Face checkpoint (random init, bf16
safetensors, llama3 rope scaling, tied embeddings) and a STRATOK1 token file, then prints
Hugging Face's loss on the first batch strata-train will draw (TokenBatcher: row r of step 0 is
the window starting at r * seq), so strata-train's step-1 loss can be checked against it.
  python3 tools/bench/hf_make_1b.py OUT_DIR --seq 4096 --batch 1
"""
import argparse
import json
import os

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=1 << 20)
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                      rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    # A learnable stream: runs of an affine rule next = (m * cur + c) mod V from random starts.
    rng = np.random.default_rng(1)
    ids = np.empty(a.tokens, dtype=np.int64)
    i = 0
    while i < a.tokens:
        n = int(rng.integers(16, 65))
        cur, m, c = int(rng.integers(0, cfg.vocab_size)), int(rng.choice([3, 5, 7, 11])), int(rng.integers(1, 97))
        for _ in range(min(n, a.tokens - i)):
            ids[i] = cur
            cur = (m * cur + c) % cfg.vocab_size
            i += 1
    tok = os.path.join(a.out, "tokens.bin")
    open(tok, "wb").write(b"STRATOK1" + np.array([4, 0], "<u4").tobytes() + ids.astype("<u4").tobytes())
    rows = [ids[r * a.seq: r * a.seq + a.seq + 1] for r in range(a.batch)]
    x = torch.tensor(np.stack([r[:-1] for r in rows]), device="cuda")
    y = torch.tensor(np.stack([r[1:] for r in rows]), device="cuda")
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
    print(json.dumps({"engine": "hf", "checkpoint": a.out, "tokens": tok, "seq": a.seq, "batch": a.batch,
                      "first_batch_loss": float(loss)}))


if __name__ == "__main__":
    main()
