# Would fusing the 8B layer's q/k/v projections into one GEMM, and gate/up into one, speed the step's GEMMs?
# Times one layer's forward and backward projection GEMMs (bf16, cuBLASLt through torch), 32 layers back to back
# so the card runs at its power cap, separate (as strata and Hugging Face run them) against fused.
import sys, time, torch
dev = torch.device("cuda"); bf = torch.bfloat16
H, KV, F = 4096, 1024, 14336

def run(T, fused, layers=32, reps=3):
    x = torch.randn(T, H, device=dev, dtype=bf) * 0.1
    s = torch.randn(T, F, device=dev, dtype=bf) * 0.1
    dq = torch.randn(T, H, device=dev, dtype=bf); dkv = torch.randn(T, KV, device=dev, dtype=bf)
    dgu = torch.randn(T, F, device=dev, dtype=bf); dd = torch.randn(T, H, device=dev, dtype=bf)
    Wq, Wk, Wv, Wo = (torch.randn(n, H, device=dev, dtype=bf) * 0.02 for n in (H, KV, KV, H))
    Wg, Wu = (torch.randn(F, H, device=dev, dtype=bf) * 0.02 for _ in range(2))
    Wd = torch.randn(H, F, device=dev, dtype=bf) * 0.02
    Wqkv = torch.cat([Wq, Wk, Wv]); Wgu = torch.cat([Wg, Wu])
    dqkv = torch.cat([dq, dkv, dkv], 1); dgu2 = torch.cat([dgu, dgu], 1)
    gqkv = torch.empty_like(Wqkv); ggu = torch.empty_like(Wgu)
    gq, gk, gv = torch.empty_like(Wq), torch.empty_like(Wk), torch.empty_like(Wv)
    gg, gu = torch.empty_like(Wg), torch.empty_like(Wu)
    go, gd = torch.empty_like(Wo), torch.empty_like(Wd)
    dx = torch.empty(T, H, device=dev, dtype=bf); ds = torch.empty(T, F, device=dev, dtype=bf)
    def layer():
        # forward
        if fused:
            x @ Wqkv.t(); x @ Wgu.t()
        else:
            x @ Wq.t(); x @ Wk.t(); x @ Wv.t(); x @ Wg.t(); x @ Wu.t()
        x @ Wo.t(); s @ Wd.t()
        # backward: input and weight gradients
        torch.mm(dd, Wd, out=ds); torch.mm(dd.t(), s, out=gd)
        torch.mm(dq, Wo, out=dx); torch.mm(dq.t(), x, out=go)
        if fused:
            torch.mm(dgu2, Wgu, out=dx); torch.mm(dgu2.t(), x, out=ggu)
            torch.mm(dqkv, Wqkv, out=dx); torch.mm(dqkv.t(), x, out=gqkv)
        else:
            torch.mm(dgu, Wg, out=dx); dx.addmm_(dgu, Wu); torch.mm(dgu.t(), x, out=gg); torch.mm(dgu.t(), x, out=gu)
            torch.mm(dq, Wq, out=dx); dx.addmm_(dkv, Wk); dx.addmm_(dkv, Wv)
            torch.mm(dq.t(), x, out=gq); torch.mm(dkv.t(), x, out=gk); torch.mm(dkv.t(), x, out=gv)
    for _ in range(2): layer()
    best = 1e9
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(layers): layer()
        torch.cuda.synchronize(); best = min(best, time.perf_counter() - t0)
    flops = layers * 3 * 2 * T * H * (2 * H + 2 * KV + 3 * F)
    return best * 1e3, flops / best / 1e12

for T in (4096, 8192, 16384):
    a = run(T, False); b = run(T, True); a2 = run(T, False); b2 = run(T, True)
    print(f"T {T}: separate {a[0]:.1f} / {a2[0]:.1f} ms ({a[1]:.0f} / {a2[1]:.0f} TFLOP/s), fused {b[0]:.1f} / {b2[0]:.1f} ms "
          f"({b[1]:.0f} / {b2[1]:.0f} TFLOP/s): fused/separate time {min(b[0], b2[0]) / min(a[0], a2[0]):.3f}", flush=True)
