# Can a memory-bound optimizer update hide under compute-bound GEMMs on another stream?
# Times, on one GPU: a loop of bf16 GEMMs (the 8B's forward projection shapes at 4096 tokens) alone,
# a fused bf16 AdamW over N parameters alone, and both launched together on two streams; then the same
# with cuBLASLt told to leave SMs free (torch's sm carveout), when this torch has it.
import sys, time, torch
torch.manual_seed(0)
dev = torch.device("cuda")
T, H, F, KV = 4096, 4096, 14336, 1024
x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
xf = torch.randn(T, F, device=dev, dtype=torch.bfloat16)
Wq = torch.randn(H, H, device=dev, dtype=torch.bfloat16)
Wkv = torch.randn(2 * KV, H, device=dev, dtype=torch.bfloat16)
Wgu = torch.randn(2 * F, H, device=dev, dtype=torch.bfloat16)
Wd = torch.randn(H, F, device=dev, dtype=torch.bfloat16)

def layer_gemms(n):
    for _ in range(n):
        x @ Wq.t(); x @ Wkv.t(); x @ Wq.t(); x @ Wgu.t(); xf @ Wd.t()

layers = 32
params_per_layer = 218_112_000  # 8B layer
N = int(sys.argv[1]) if len(sys.argv) > 1 else layers * params_per_layer
chunks = 32
p = [torch.zeros(N // chunks, device=dev, dtype=torch.bfloat16).requires_grad_() for _ in range(chunks)]
for t in p:
    t.grad = torch.randn_like(t) * 1e-3
opt = torch.optim.AdamW(p, lr=1e-5, fused=True)
opt.step()
sa, sb = torch.cuda.Stream(), torch.cuda.Stream()

def timed(fn, reps=3):
    best = 1e9
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3

def gemm_only():
    with torch.cuda.stream(sa): layer_gemms(layers)
def adam_only():
    with torch.cuda.stream(sb): opt.step()
def both():
    with torch.cuda.stream(sb): opt.step()
    with torch.cuda.stream(sa): layer_gemms(layers)
gemm_flops = layers * 2 * T * H * (H + 2 * KV + H + 2 * F + F)
for label in ["default"] + ([f"carveout{c}" for c in (8, 16, 24, 32)] if hasattr(torch._C, "_set_sm_carveout_experimental") else []):
    if label.startswith("carveout"):
        torch._C._set_sm_carveout_experimental(int(label[8:]))
    layer_gemms(2); torch.cuda.synchronize()
    g = timed(gemm_only); a = timed(adam_only); b = timed(both)
    print(f"{label}: gemms {g:.2f} ms ({gemm_flops / g / 1e9:.0f} TFLOP/s), adamw {a:.2f} ms over {N/1e9:.2f}G params, "
          f"together {b:.2f} ms; serial {g + a:.2f}; hidden {(g + a - b) / a * 100:.0f}% of the adamw", flush=True)
if hasattr(torch._C, "_set_sm_carveout_experimental"):
    torch._C._set_sm_carveout_experimental(None)
else:
    print("this torch has no _set_sm_carveout_experimental", flush=True)
