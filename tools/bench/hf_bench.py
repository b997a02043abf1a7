#!/usr/bin/env python3
"""Hugging Face transformers + PyTorch baseline for strata-bench, same shapes, same GPU, same run.

Method (as in shared/ANCHORS.md): random-init LlamaForCausalLM (Qwen3ForCausalLM for Qwen3 shapes) in bf16, sdpa attention, fused
AdamW, gradient clipping at --max-grad-norm (1.0, the default of both Hugging Face's Trainer and
strata; 0 turns it off), batch 1, random tokens; median step time of --steps after --warmup; peak is
torch.cuda.max_memory_allocated over the timed steps. Prints one JSON line.
  python3 hf_bench.py --shape Llama-3.2-1B --seq 4096 --mode full --plan keep|gc|gc+offload
Data parallel (issue 18's baseline), one process per GPU under torchrun, --seq tokens a rank:
  torchrun --nproc-per-node 4 hf_bench.py --dp ddp|fsdp2 ...   (tokens_per_s counts every rank's; rank 0 prints)
ddp: DistributedDataParallel (bucketed all-reduce overlapped with backward, in the bf16 parameter dtype);
fsdp2: fully_shard per decoder layer and the root (parameters, gradients and AdamW state sharded).
"""
import os
import argparse
import json
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "Llama-3.2-1B": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True),
    "Llama-3.2-3B": dict(hidden_size=3072, num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
                         intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True),
    "Llama-3-8B": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                       intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False),
    # Qwen3: per-head q/k norms, head_dim 128 (not hidden / heads), rope theta 1e6, eps 1e-6.
    "Qwen3-8B": dict(_arch="qwen3", hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, intermediate_size=12288, vocab_size=151936,
                     tie_word_embeddings=False, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "Qwen3-1.7B": dict(_arch="qwen3", hidden_size=2048, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, intermediate_size=6144, vocab_size=151936,
                       tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "tiny": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=512, vocab_size=1000, tie_word_embeddings=False),
}


def train_step(model, ids, params, opt, a):
    if a.plan == "gc+offload":
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            out = model(input_ids=ids, labels=ids)
    else:
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    if a.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(params, a.max_grad_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out


def profile_step(step):
    """GPU time per kernel over one step (torch.profiler), the 30 largest, to stderr."""
    import sys
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    rows = [(e.device_time_total, e.count, e.key) for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(r[0] for r in rows)
    print(f"hf profile: {total / 1e3:.2f} ms GPU time in {len(rows)} kernels", file=sys.stderr)
    for t, n, k in sorted(rows, reverse=True)[:30]:
        print(f"  {t / 1e3:9.3f} ms {100 * t / total:5.1f}% {n:5d}  {k[:110]}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="Llama-3.2-1B")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--mode", default="full", choices=["full", "frozen"])
    ap.add_argument("--plan", default="keep", choices=["keep", "gc", "gc+offload"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--dp", default="none", choices=["none", "ddp", "fsdp2"])
    ap.add_argument("--profile", action="store_true",
                    help="after the timed steps, profile one more step and print its GPU time per kernel to stderr")
    a = ap.parse_args()
    rank, world = 0, 1
    if a.dp != "none":
        import torch.distributed as dist
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    shape = dict(SHAPES[a.shape])
    arch = shape.pop("_arch", "llama")
    shape.setdefault("rms_norm_eps", 1e-5)
    if arch == "qwen3":
        Config, Model = transformers.Qwen3Config, transformers.Qwen3ForCausalLM
    else:
        Config, Model = LlamaConfig, LlamaForCausalLM
    kw = dict(shape, max_position_embeddings=max(a.seq, 8192), attn_implementation="sdpa")
    theta = kw.pop("rope_theta", None)
    if theta is None:
        cfg = Config(**kw)
    else:
        try:  # transformers 5: rope_parameters
            cfg = Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": theta})
        except TypeError:
            cfg = Config(**kw, rope_theta=theta)
    with torch.device("cuda"):
        model = Model(cfg).to(torch.bfloat16)
    if a.mode == "frozen":
        for n, p in model.named_parameters():
            p.requires_grad_("norm" in n)
    if a.plan != "keep":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    if a.dp == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()], gradient_as_bucket_view=True)
    elif a.dp == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
    torch.manual_seed(rank + 1)  # each rank its own rows
    ids = torch.randint(0, cfg.vocab_size, (1, a.seq), device="cuda")
    times, loss = [], None
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = train_step(model, ids, params, opt, a)
        torch.cuda.synchronize()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
        loss = float(out.loss.detach())
    if a.profile:
        profile_step(lambda: train_step(model, ids, params, opt, a))
    times.sort()
    med = times[len(times) // 2]
    if a.dp != "none":
        import torch.distributed as dist
        t = torch.tensor([med], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's median sets the pace
        med = float(t)
        dist.destroy_process_group()
        if rank:
            return
    print(json.dumps({"engine": "hf", "device": torch.cuda.get_device_name(), "shape": a.shape, "seq": a.seq,
                      "dp": a.dp, "gpus": world,
                      "mode": a.mode, "plan": a.plan, "max_grad_norm": a.max_grad_norm, "step_s": med,
                      "tokens_per_s": a.seq * world / med,
                      "peak_allocated_bytes": torch.cuda.max_memory_allocated(), "loss": loss,
                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
