#!/usr/bin/env python3
"""Writes the golden reference for strata's cpu backend: tiny Llama checkpoints saved by
transformers' LlamaForCausalLM.save_pretrained, with the fp32 logits, loss and every parameter
gradient for a fixed batch (eager attention, cpu, float32).

Run on a machine with torch + transformers:  python3 make_golden.py OUT_DIR
Each case lands in OUT_DIR/<case>/{config.json, model.safetensors, reference.safetensors}.
reference.safetensors holds: input_ids [B,T] (I32), logits [B,T,V], loss [1], grad.<param> for
every trainable parameter (tied embeddings appear once, as model.embed_tokens.weight).
The loss is Hugging Face's: labels = input_ids, shifted inside the model (mean over B*(T-1)).
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

CASES = {
    # GQA (4 query heads over 2 kv heads), untied embeddings, default rope.
    "gqa_untied": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=101, rms_norm_eps=1e-5, rope_theta=10000.0,
                       tie_word_embeddings=False, max_position_embeddings=128, rope_scaling=None),
    # Tied embeddings and llama3 rope scaling with a short original context so the scaling bites.
    "tied_llama3": dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
                        num_key_value_heads=3, vocab_size=89, rms_norm_eps=1e-6, rope_theta=500000.0,
                        tie_word_embeddings=True, max_position_embeddings=256,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0, original_max_position_embeddings=8)),
    # Explicit head_dim different from hidden/heads, plain multi-head attention, 3 layers.
    "mha_headdim": dict(hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                        num_key_value_heads=4, head_dim=16, vocab_size=67, rms_norm_eps=1e-5, rope_theta=10000.0,
                        tie_word_embeddings=False, max_position_embeddings=64, rope_scaling=None),
}
B, T = 2, 13


def make_config(kw):
    kw = dict(kw)
    scaling = kw.pop("rope_scaling")
    theta = kw.pop("rope_theta")
    try:  # transformers 5: rope_parameters
        params = {"rope_type": "default", "rope_theta": theta}
        if scaling:
            params.update(scaling)
            params["rope_theta"] = theta
        return LlamaConfig(**kw, rope_parameters=params, initializer_range=0.1, attention_bias=False,
                           mlp_bias=False)
    except TypeError:
        return LlamaConfig(**kw, rope_theta=theta, rope_scaling=scaling, initializer_range=0.1)


def main(out_dir):
    print("torch", torch.__version__, "transformers", transformers.__version__)
    for i, (name, kw) in enumerate(CASES.items()):
        torch.manual_seed(1234 + i)
        cfg = make_config(kw)
        cfg._attn_implementation = "eager"
        model = LlamaForCausalLM(cfg).float()
        # Norm weights start at 1 in HF; perturb them so their gradients and scaling are exercised.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.add_(0.1 * torch.randn_like(p))
        d = os.path.join(out_dir, name)
        model.save_pretrained(d, safe_serialization=True)
        g = torch.Generator().manual_seed(99 + i)
        ids = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
        model.zero_grad()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        ref = {"input_ids": ids.to(torch.int32).contiguous(), "logits": out.logits.detach().float().contiguous(),
               "loss": out.loss.detach().reshape(1).float()}
        for n, p in model.named_parameters():
            ref["grad." + n] = p.grad.detach().float().contiguous()
        save_file(ref, os.path.join(d, "reference.safetensors"))
        print(name, "loss", float(out.loss), "params", sum(p.numel() for p in model.parameters()))
        print(open(os.path.join(d, "config.json")).read())


if __name__ == "__main__":
    main(sys.argv[1])
