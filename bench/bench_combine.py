#!/usr/bin/env python3
"""The combine kernel alone (qattn_combine libraries built from TL programs that differ only in their
schedule, e.g. `Const BM = 4, WARPS = 4` against `BM = 1, WARPS = 1`) against the same merge written
with torch operations (qattn._combine.merge_torch), one process, CUDA graphs.

    python3 bench/bench_combine.py OUT.csv NAME=LIB.so [NAME=LIB.so ...] [--rounds 7] [--calls 20]

Rows: the partial results of decoding's key split (one query row per sequence: the serving issue's
shapes and their split counts) and a long-query merge (ring attention's shape). Fresh random parts
(finite LSEs); every library's output is compared with the torch merge first (max |diff| <= 2 bf16
ulps of the largest value). Each implementation is captured as a CUDA graph of --calls launches and
replayed in --rounds rounds, adjacent in time and in rotating order; the median per call is kept.
Columns: impl, batch, splits, seqlen_q, heads_q, d_v, us, gbs (bytes read and written / time),
vs_torch (the torch merge's time / this one's: > 1 is faster), gpu.
"""
import argparse
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from qattn import _combine  # noqa: E402
from bench_util import write_csv  # noqa: E402

# (batch, splits, seqlen_q, heads_q, d_v)
ROWS = [(32, 4, 1, 32, 128), (8, 2, 1, 64, 128), (8, 16, 1, 16, 128), (4, 4, 1, 32, 128), (1, 16, 1, 32, 128),
        (128, 8, 1, 32, 128), (1, 8, 4096, 32, 128)]


def graph_of(fn, calls):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            for _ in range(calls):
                fn()
    torch.cuda.synchronize()
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("libs", nargs="+", help="NAME=path/to/libqattn_kernel.so (a qattn_combine library, bf16, d_v 128)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    libs = []
    for spec in a.libs:
        name, path = spec.split("=", 1)
        lib = _combine.CombineLibrary(path)
        libs.append((name, lib, lib.info.get("tiles", {})))
    print(f"{gpu}, torch {torch.__version__}; combine of bf16 parts, d_v 128; " +
          ", ".join(f"{n} {t}" for n, _, t in libs), flush=True)
    rows = []
    for b, s, sq, hq, dv in ROWS:
        torch.manual_seed(b * 1000 + s)
        op = torch.randn(b, s, sq, hq, dv, device="cuda", dtype=torch.bfloat16)
        lp = 4.0 + 3.0 * torch.randn(b, s, hq, sq, device="cuda")
        ref, _ = _combine.merge_torch(torch, op, lp, False, torch.bfloat16)
        tol = 2 * 2.0 ** -8 * ref.float().abs().max().item()
        impls = [("torch", lambda: _combine.merge_torch(torch, op, lp, True, torch.bfloat16))]
        for name, lib, _ in libs:
            o = torch.full((b, sq, hq, dv), float("nan"), device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(b, hq, sq, device="cuda")
            p = _combine.fill_combine_params(op, lp, o, lse)
            stream = torch.cuda.current_stream().cuda_stream

            def run(lib=lib, p=p):
                st = lib.combine(p, torch.cuda.current_stream().cuda_stream)
                assert st == 0, lib.last_error()
            run()
            torch.cuda.synchronize()
            err = (o.float() - ref.float()).abs().max().item()
            assert err <= tol, f"{name}: max |diff| {err} > {tol} at {(b, s, sq, hq)}"
            impls.append((name, run))
            del stream
        graphs = [(n, graph_of(fn, a.calls)) for n, fn in impls]
        times = {n: [] for n, _ in graphs}
        for r in range(a.rounds):
            order = graphs[r % len(graphs):] + graphs[:r % len(graphs)]
            for n, g in order:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                g.replay()
                end.record()
                end.synchronize()
                times[n].append(start.elapsed_time(end) * 1000 / a.calls)
        moved = b * s * sq * hq * (dv * 2 + 4) + b * sq * hq * (dv * 2 + 4)
        base = statistics.median(times["torch"])
        line = f"b{b:<4d} S{s:<3d} sq{sq:<5d} hq{hq:<3d}:"
        for n, _ in graphs:
            us = statistics.median(times[n])
            rows.append({"impl": n, "batch": b, "splits": s, "seqlen_q": sq, "heads_q": hq, "d_v": dv, "us": f"{us:.2f}",
                         "gbs": f"{moved / us / 1e3:.0f}", "vs_torch": f"{base / us:.2f}", "gpu": gpu})
            line += f"  {n} {us:7.2f} us ({moved / us / 1e3:5.0f} GB/s)"
        print(line, flush=True)
    write_csv(a.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
