#!/usr/bin/env python3
"""Times torch's scaled_dot_product_attention backends (flash, cuDNN, efficient) forward and
backward on Llama attention shapes, batch 1, causal, bf16, grouped-query via enable_gqa.
Prints one JSON line per (shape, backend): ms forward, ms backward, TFLOP/s (causal FLOPs)."""
import argparse, json, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F

def timeit(fn, reps):
    for _ in range(min(3, reps)):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / reps

def profile(fn, label):
    """GPU time per kernel over one call of fn (after the timed runs), with grid sizes."""
    from torch.profiler import ProfilerActivity, profile as tprofile
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = [(e.device_time_total, e.count, e.key) for e in prof.key_averages() if e.device_time_total > 0]
    print(f"# {label}: {sum(r[0] for r in rows) / 1e3:.3f} ms GPU time", flush=True)
    for t, n, k in sorted(rows, reverse=True):
        print(f"#   {t / 1e3:8.3f} ms {n:3d}  {k[:140]}", flush=True)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096:32:8:64,16384:32:8:64,8192:32:8:128")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--backends", default="flash,cudnn,efficient")
    ap.add_argument("--profile", action="store_true",
                    help="also print each backend's GPU time per kernel over one forward + backward (torch.profiler)")
    ap.add_argument("--layout", default="bhsd", choices=["bhsd", "bshd"],
                    help="bshd: q/k/v/dO are [B, H, T, D] views of [B, T, H, D] memory, like strata's")
    a = ap.parse_args()
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    for sh in a.shapes.split(","):
        T, H, KV, D = map(int, sh.split(":"))
        def mk(h, grad=True):
            if a.layout == "bshd":
                x = torch.randn(1, T, h, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
            else:
                x = torch.randn(1, h, T, D, device="cuda", dtype=torch.bfloat16)
            return x.detach().requires_grad_(grad)
        q, k, v, do = mk(H), mk(KV), mk(KV), mk(H, False)
        flops_fwd = 2 * 2 * T * T * D * H / 2
        for name, b in backends.items():
            if name not in a.backends.split(","):
                continue
            rec = {"T": T, "H": H, "KV": KV, "D": D, "backend": name, "layout": a.layout}
            try:
                with sdpa_kernel([b]):
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                    o = fwd()
                    t_f = timeit(fwd, a.reps)
                    def fb():
                        q.grad = k.grad = v.grad = None
                        fwd().backward(do)
                    t_fb = timeit(fb, a.reps)
                    if a.profile:
                        profile(fb, f"{name} T={T} H={H} KV={KV} D={D}")
                rec.update(fwd_ms=round(t_f, 3), bwd_ms=round(t_fb - t_f, 3),
                           fwd_tflops=round(flops_fwd / t_f / 1e9, 1),
                           bwd_tflops=round(2.5 * flops_fwd / (t_fb - t_f) / 1e9, 1))
            except Exception as ex:
                rec["error"] = str(ex).splitlines()[0][:200]
            print(json.dumps(rec), flush=True)

if __name__ == "__main__":
    main()
