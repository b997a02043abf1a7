#!/usr/bin/env python3
"""How much of an NCCL all-reduce hides under compute on this host (issue 18's "where the rest goes").

One process per GPU under torchrun. Each rank times (CUDA events, median of 5):
  compute: a train-step-like stream of bf16 GEMMs (4096 x 2048 x 8192 and its transposes);
  comm:    an all-reduce of --mb MiB of fp32 on a second stream (NCCL);
  both:    the two issued together on their own streams.
hidden = (compute + comm - both) / comm: 1 = the all-reduce is free under compute, 0 = it adds its
whole time. Prints one JSON line from rank 0.
  torchrun --standalone --nproc-per-node 2 overlap_probe.py --mb 4700
"""
import argparse
import json
import os

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=4700.0, help="all-reduce size in MiB (fp32)")
    ap.add_argument("--gemms", type=int, default=300)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    a = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    dt = torch.float32 if a.dtype == "f32" else torch.bfloat16
    n = int(a.mb * 2**20 / (4 if a.dtype == "f32" else 2))
    buf = torch.ones(n, dtype=dt, device="cuda")
    x = torch.randn(4096, 2048, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(8192, 2048, dtype=torch.bfloat16, device="cuda")
    comm_stream = torch.cuda.Stream(priority=-1)

    def compute():
        y = None
        for _ in range(a.gemms // 3):
            y = x @ w.t()          # forward
            dx = y @ w             # dX
            dw = y.t() @ x         # dW
        return y, dx, dw

    def comm():
        with torch.cuda.stream(comm_stream):
            dist.all_reduce(buf)

    def timed(fn):
        ts = []
        for _ in range(6):
            dist.barrier()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            torch.cuda.current_stream().wait_stream(comm_stream)
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        ts = sorted(ts[1:])
        return ts[len(ts) // 2]

    t_c = timed(compute)
    t_a = timed(comm)

    def both():
        comm_stream.wait_stream(torch.cuda.current_stream())
        comm()
        compute()

    t_b = timed(both)
    if dist.get_rank() == 0:
        print(json.dumps({"probe": "overlap", "device": torch.cuda.get_device_name(), "gpus": dist.get_world_size(),
                          "allreduce_mib": a.mb, "dtype": a.dtype, "compute_s": t_c, "comm_s": t_a, "both_s": t_b,
                          "hidden": (t_c + t_a - t_b) / t_a}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
