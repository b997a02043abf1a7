#!/usr/bin/env python3
"""Writes the golden reference for strata's cpu backend: tiny checkpoints saved by transformers'
LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and MistralForCausalLM save_pretrained, with
the fp32 logits, loss and every parameter gradient for a fixed batch (eager attention, cpu, float32).

Run on a machine with torch + transformers:  python3 make_golden.py OUT_DIR [CASE ...]
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
import transformers as tf

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
    # linear: every frequency divided by factor.
    "linear_llama": dict(hidden_size=40, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=47, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=False, max_position_embeddings=64,
                         rope_scaling=dict(rope_type="linear", factor=3.0)),
    # dynamic NTK: the batch (13 tokens) runs past max_position_embeddings 8, so the base grows; head_dim 10.
    "dynamic_llama": dict(hidden_size=40, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=4, head_dim=10, vocab_size=43, rms_norm_eps=1e-5, rope_theta=10000.0,
                          tie_word_embeddings=True, max_position_embeddings=8,
                          rope_scaling=dict(rope_type="dynamic", factor=2.0)),
    # longrope: the batch runs past original_max_position_embeddings 8, so long_factor applies; the attention
    # factor comes from max_position_embeddings / original = 8 (no factor given).
    "longrope_llama": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=41, rms_norm_eps=1e-5, rope_theta=10000.0,
                           tie_word_embeddings=False, max_position_embeddings=64,
                           rope_scaling=dict(rope_type="longrope", original_max_position_embeddings=8,
                                             short_factor=[1.0, 1.25, 1.5, 2.0], long_factor=[1.5, 3.0, 7.25, 16.0])),
}
# Architectures beside Llama (model_type qwen3, qwen2, mistral). Each case: (arch, config kwargs).
ARCH_CASES = {
    # Qwen3: q_norm/k_norm per head, explicit head_dim unlike hidden/heads, tied, GQA 3:1.
    "qwen3_tied": ("qwen3", dict(hidden_size=40, intermediate_size=72, num_hidden_layers=2, num_attention_heads=6,
                                 num_key_value_heads=2, head_dim=12, vocab_size=97, rms_norm_eps=1e-6,
                                 rope_theta=1000000.0, tie_word_embeddings=True, max_position_embeddings=64,
                                 rope_scaling=None, attention_bias=False)),
    # Qwen3 with attention_bias (q, k, v and o biases) and untied embeddings.
    "qwen3_bias": ("qwen3", dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=4, head_dim=8, vocab_size=61, rms_norm_eps=1e-6,
                                 rope_theta=10000.0, tie_word_embeddings=False, max_position_embeddings=64,
                                 rope_scaling=None, attention_bias=True)),
    # Qwen2: biases on q, k and v (not o), untied, GQA 3:1.
    "qwen2_bias": ("qwen2", dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
                                 num_key_value_heads=2, vocab_size=83, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                 tie_word_embeddings=False, max_position_embeddings=64, rope_scaling=None)),
    # yarn with the mscale pair's attention factor, no truncation and a ramp (beta_fast 2, beta_slow 0.01) that
    # spans every dimension of head_dim 16 at rope_theta 100, past a short original context.
    "yarn_qwen2": ("qwen2", dict(hidden_size=64, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=59, rms_norm_eps=1e-6, rope_theta=100.0,
                                 tie_word_embeddings=False, max_position_embeddings=32,
                                 rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=8,
                                                   beta_fast=2.0, beta_slow=0.01, mscale=1.0, mscale_all_dim=0.5,
                                                   truncate=False))),
    # yarn with its default attention factor (0.1 ln(factor) + 1) and truncated ramp, head_dim 12.
    "yarn_qwen3": ("qwen3", dict(hidden_size=36, intermediate_size=64, num_hidden_layers=2, num_attention_heads=3,
                                 num_key_value_heads=1, head_dim=12, vocab_size=53, rms_norm_eps=1e-6,
                                 rope_theta=1000.0, tie_word_embeddings=True, max_position_embeddings=32,
                                 rope_scaling=dict(rope_type="yarn", factor=3.0, original_max_position_embeddings=8),
                                 attention_bias=False)),
    # Mistral: Llama's layout with a sliding window longer than the batch (so it does not bite).
    "mistral_gqa": ("mistral", dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
                                    num_key_value_heads=2, head_dim=8, vocab_size=71, rms_norm_eps=1e-5,
                                    rope_theta=10000.0, tie_word_embeddings=False, max_position_embeddings=64,
                                    rope_scaling=None, sliding_window=32)),
}
ARCHS = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
         "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM), "mistral": (tf.MistralConfig, tf.MistralForCausalLM)}
B, T = 2, 13


def make_config(arch, kw):
    kw = dict(kw)
    scaling = kw.pop("rope_scaling")
    theta = kw.pop("rope_theta")
    Config = ARCHS[arch][0]
    if arch == "llama":
        kw.update(attention_bias=False, mlp_bias=False)
    try:  # transformers 5: rope_parameters
        params = {"rope_type": "default", "rope_theta": theta}
        if scaling:
            params.update(scaling)
            params["rope_theta"] = theta
        return Config(**kw, rope_parameters=params, initializer_range=0.1)
    except TypeError:
        return Config(**kw, rope_theta=theta, rope_scaling=scaling, initializer_range=0.1)


def main(out_dir, only):
    print("torch", torch.__version__, "transformers", transformers.__version__)
    cases = [(n, ("llama", kw)) for n, kw in CASES.items()] + list(ARCH_CASES.items())
    for i, (name, (arch, kw)) in enumerate(cases):
        if only and name not in only:
            continue
        torch.manual_seed(1234 + i)
        cfg = make_config(arch, kw)
        cfg._attn_implementation = "eager"
        model = ARCHS[arch][1](cfg).float()
        # Norm weights start at 1 and biases at 0 in HF; perturb them so their gradients and scaling
        # are exercised.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n or n.endswith(".bias"):
                    p.add_(0.1 * torch.randn_like(p))
        d = os.path.join(out_dir, name)
        model.save_pretrained(d, safe_serialization=True)
        g = torch.Generator().manual_seed(99 + i)
        if hasattr(cfg, "sliding_window") and cfg.sliding_window is not None:
            assert cfg.sliding_window >= T, "the golden batch must fit the window"
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
    main(sys.argv[1], sys.argv[2:])
