#!/usr/bin/env python3
"""The kernels of a variant's forward and backward, timed alone: torch.profiler device times of every
CUDA kernel that qattn.attention (no grad) and its backward launch, for this tree and the --also
runtimes (bench_runtimes.py: e.g. the parent commit's device/ and qattn compiler), in rounds that
alternate the runtimes, medians over the rounds. A package-level time (bench_backward.py) also holds
the host's argument checks (the document ids' order is checked on the host: a sync per call), which
vary by more than a kernel change; this isolates the kernels.

    python3 bench/bench_variant_kernels.py OUT.csv [--variants document,window] [--rounds 7] [--reps 5]
                                           [--also NAME=DEVICE_DIR[:QATTN_BIN] ...]

Shapes: bench_backward.py's variant configuration (llama2-7b MHA 32 heads, d128, s4096, batch 4,
bf16). Kernels are grouped as fwd (the no-grad forward: `flash_fwd*`), fwd_lse (the forward with its
LSE, under grad), bwd (the backward's main kernel: `flash_bwd*` but not its Phase), phase
(`*dot_do_o*`) and fwd_other / bwd_other (the rest: conversions, zeroing). Outputs and
gradients of each runtime are compared with this tree's first (max |diff|). Columns: impl, variant,
kernel, us, calls (kernels of that group per call), vs_this (its time / this
tree's: above 1, this tree is faster).
"""
import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import qattn  # noqa: E402
from bench_backward import CONFIGS, VARIANTS, inputs, variant_setup  # noqa: E402
from bench_runtimes import RUNTIMES, add_runtimes, check_runtimes, in_runtime  # noqa: E402
from bench_util import kernel_times, write_csv  # noqa: E402

COLS = ["impl", "variant", "kernel", "us", "calls", "vs_this", "gpu"]


def group(name):
    if "dot_do_o" in name:
        return "phase"
    if "flash_bwd" in name:
        return "bwd"
    if "flash_fwd" in name:
        return "fwd"
    return "other"


def profile_groups(fn, reps):
    """{group: (us per call, kernels per call)} over `reps` calls of fn."""
    total, count = {}, {}
    for name, times in kernel_times(fn, reps).items():
        g = group(name)
        total[g] = total.get(g, 0.0) + sum(times)
        count[g] = count.get(g, 0) + len(times)
    return {g: (total[g] / reps, count[g] / reps) for g in total}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--variants", default="document")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DEVICE_DIR[:QATTN_BIN]")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    if not variants or any(v not in VARIANTS for v in variants):
        ap.error(f"--variants: one or more of {', '.join(VARIANTS)}, got {a.variants!r}")
    add_runtimes(a.also, ap.error)
    gpu = torch.cuda.get_device_name()
    print(f"device: {gpu}, torch {torch.__version__}", flush=True)
    name, hq, hk, dqk, dv = CONFIGS[0]
    s = 4096
    b = 16384 // s
    rows = []
    for var in variants:
        q, k, v, dout = inputs(b, s, hq, hk, dqk, dv, 11)
        kw, causal, _, _, _ = variant_setup(var, b, s)
        runtimes = [None] + list(RUNTIMES)
        calls = {}
        for rt in runtimes:
            qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))

            def fwd(q_=q, k_=k, v_=v):
                with torch.no_grad():
                    return qattn.attention(q_, k_, v_, causal=causal, **kw)

            def both(qs=qs, ks=ks, vs=vs):
                o = qattn.attention(qs, ks, vs, causal=causal, **kw)
                return (o,) + torch.autograd.grad(o, (qs, ks, vs), dout)
            calls[rt] = (in_runtime(rt, fwd), in_runtime(rt, both))
        outs = {rt: calls[rt][1]() for rt in runtimes}
        check_runtimes()
        for rt in runtimes[1:]:
            diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(outs[rt], outs[None]))
            print(f"{var}: max |(o, dq, dk, dv)@{rt} - this tree's| = {diff:.3e}", flush=True)
        del outs
        samples = {(rt, pas): [] for rt in runtimes for pas in ("fwd", "fwd+bwd")}
        for r in range(a.rounds):
            order = runtimes[r % len(runtimes):] + runtimes[:r % len(runtimes)]
            for rt in order:
                samples[(rt, "fwd")].append(profile_groups(calls[rt][0], a.reps))
                samples[(rt, "fwd+bwd")].append(profile_groups(calls[rt][1], a.reps))
        med = {}
        for (rt, pas), runs in samples.items():
            for g in sorted({g for run in runs for g in run}):
                us = statistics.median(run.get(g, (0.0, 0))[0] for run in runs)
                n = statistics.median(run.get(g, (0.0, 0))[1] for run in runs)
                med[(rt, pas, g)] = (us, n)
        for (rt, pas, g), (us, n) in sorted(med.items(), key=lambda x: (x[0][1], x[0][2], str(x[0][0]))):
            this = med.get((None, pas, g))
            vs = this[0] and us / this[0] if this else float("nan")
            impl = "qattn" if rt is None else f"qattn@{rt}"
            kern = ({"other": "fwd_other"} if pas == "fwd" else {"fwd": "fwd_lse", "other": "bwd_other"}).get(g, g)
            rows.append({"impl": impl, "variant": var, "kernel": kern, "us": f"{us:.1f}", "calls": f"{n:g}",
                         "vs_this": f"{vs:.3f}", "gpu": gpu})
            print(f"{var} {impl:16} {kern:10} {us:9.1f} us ({n:g} a call)  its time / this tree's {vs:.3f}", flush=True)
        write_csv(a.out, rows, COLS)
        del q, k, v, dout
    return 0


if __name__ == "__main__":
    sys.exit(main())
