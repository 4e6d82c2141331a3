#!/usr/bin/env python3
"""Two builds of the same forward kernel (e.g. the device runtime before and after a change) timed
against each other in one process: the same fresh bf16 inputs, outputs compared (max |diff|),
CUDA graphs of --calls launches replayed in --rounds rotating rounds, medians.

    python3 bench/bench_ab.py A_DIR B_DIR [--shapes 4x4096,16x1024,1x16384] [--heads 32/8] [--out F.csv]

A_DIR / B_DIR: `qattn generate` artifacts folders (libqattn_kernel.so); the kernels must take plain
(batch, seqlen, heads, d) tensors (no aux inputs, no varlen / KV cache). Columns: shape, hq, hkv,
a_us, b_us, b_over_a, max_diff, gpu.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from qattn._abi import Kernel  # noqa: E402
from bench_util import graphed, replay_rounds, write_csv  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--shapes", default="4x4096,16x1024,1x16384")
    ap.add_argument("--heads", default="32/8")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--out")
    a = ap.parse_args()
    ka, kb = (Kernel(os.path.join(d, "libqattn_kernel.so")) for d in (a.a, a.b))
    hq, hkv = (int(x) for x in a.heads.split("/"))
    d = ka.info["d_qk"]
    gpu = torch.cuda.get_device_name()
    rows = []
    for shp in a.shapes.split(","):
        bsz, s = (int(x) for x in shp.split("x"))
        q = torch.randn(bsz, s, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(bsz, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(bsz, s, hkv, d, device="cuda", dtype=torch.bfloat16)
        oa, ob = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
        stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
        fa = lambda: ka(q, k, v, oa, stream=stream())  # noqa: E731
        fb = lambda: kb(q, k, v, ob, stream=stream())  # noqa: E731
        assert fa() == 0 and fb() == 0, (ka.last_error(), kb.last_error())
        torch.cuda.synchronize()
        diff = (oa.float() - ob.float()).abs().max().item()
        assert diff == diff and diff < 2e-2, f"{shp}: the builds differ by {diff}"
        med = replay_rounds({"a": graphed(fa, a.calls), "b": graphed(fb, a.calls)}, a.rounds, a.calls)
        rows.append(dict(shape=shp, hq=hq, hkv=hkv, a_us=round(med["a"], 2), b_us=round(med["b"], 2),
                         b_over_a=round(med["b"] / med["a"], 4), max_diff=diff, gpu=gpu))
        print(f"{shp:10s} h{hq}/{hkv}: A {med['a']:8.1f} us  B {med['b']:8.1f} us  B/A {med['b'] / med['a']:.4f}  "
              f"max|diff| {diff:.2e}", flush=True)
    if a.out:
        write_csv(a.out, rows)


if __name__ == "__main__":
    main()
