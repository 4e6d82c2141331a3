#!/usr/bin/env python3
"""The host's share of a backward pass: how long one torch.autograd.grad call of qattn (and of torch
SDPA's cuDNN backend, the baseline) keeps the CPU, against the GPU time of the same call, and where
qattn's host time goes (cProfile, the top functions by their own time).

    python3 bench/host_backward.py [--config llama2-7b-mha] [--seqlen 4096] [--causal] [--reps 50]

CPU time: --reps calls queued back to back with no synchronisation between them, divided by --reps
(each call's kernels run while the next one is being queued, so this is the host's cost a call when
the GPU keeps up); GPU time: the same calls timed by CUDA events end to end, divided by --reps.
Fresh random bf16 inputs, batch * seqlen = 16k tokens (bench_backward.py's shapes).
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_backward as bb  # noqa: E402
import qattn  # noqa: E402


def measure(fn, q, k, v, dout, reps):
    """(host us a call, GPU us a call) of reps back-to-back autograd.grad calls through fn."""
    qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o = fn(qs, ks, vs)

    def step():
        torch.autograd.grad(o, (qs, ks, vs), dout, retain_graph=True)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    host = (time.perf_counter() - t0) / reps * 1e6
    b.record()
    b.synchronize()
    return host, a.elapsed_time(b) * 1e3 / reps, step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="llama2-7b-mha", choices=[c[0] for c in bb.CONFIGS])
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.reps < 1 or args.seqlen < 1:
        sys.exit("--reps and --seqlen: at least 1")
    from torch.nn.attention import SDPBackend
    name, hq, hk, dqk, dv = next(c for c in bb.CONFIGS if c[0] == args.config)
    b = max(1, bb.TOKENS // args.seqlen)
    q, k, v, dout = bb.inputs(b, args.seqlen, hq, hk, dqk, dv, 11)
    impls = [("qattn", lambda q_, k_, v_: qattn.attention(q_, k_, v_, causal=args.causal)),
             ("cudnn", bb.sdpa_fn(SDPBackend.CUDNN_ATTENTION, args.causal, hq, hk))]
    print(f"{name} s{args.seqlen} b{b} causal={args.causal}, {args.reps} calls queued back to back:", flush=True)
    steps = {}
    for impl, fn in impls:
        host, gpu, step = measure(fn, q, k, v, dout, args.reps)
        steps[impl] = step
        print(f"  {impl}: host {host:.1f} us a call, GPU {gpu:.1f} us a call", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.reps):
        steps["qattn"]()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(args.top)
    print(f"qattn's host time by function (cProfile, {args.reps} calls; its own overhead inflates the totals):")
    print(s.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
