#!/usr/bin/env python3
"""Where a decoding call's time goes: every CUDA kernel that one qattn.attention /
qattn.attention_with_kvcache call launches, with its duration (torch.profiler, median of --reps
calls), next to cuDNN SDPA's kernels for the same one-token problem, for the rows of
bench/bench_kvcache.py. The sum of the kernels against the call's CUDA-graph time (bench_kvcache.py)
says how much is launch gaps; the kernels' own times say whether the attention kernel or the split's
other work (query copy, combine, key-count arithmetic) trails cuDNN.

    python3 tests/gpu/decode_profile.py [--rows mqa_32_1_b32_8k,...] [--pages 0,16] [--reps 20]

`--pages` entries are page sizes (0: the contiguous cache); a trailing `o` (e.g. `256o`) keeps each
sequence's pages in order in the pool (the contiguous cache's addresses), otherwise they are shuffled.

With `--ncu-row NAME`, runs only that row's calls (qattn, cuDNN and every `--pages` cache) twice each
(for `ncu -k regex:...`): fresh random bf16 inputs, outputs compared first.
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import qattn  # noqa: E402
from bench_kvcache import ROWS, paged  # noqa: E402
from bench_util import kernel_times  # noqa: E402


def cudnn(q, k, v):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              enable_gqa=q.shape[2] != k.shape[2]).transpose(1, 2)


def kernels(fn, reps):
    """{kernel name: median us} and the per-call kernel count over `reps` profiled calls."""
    return {n: (statistics.median(t), len(t) / reps) for n, t in kernel_times(fn, reps).items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--pages", default="0,16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--ncu-row", default="")
    a = ap.parse_args()
    d = 128
    gen = torch.Generator().manual_seed(1)
    rows = [a.ncu_row] if a.ncu_row else a.rows.split(",")
    for name in rows:
        b, hq, hkv, sk = ROWS[name]
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        ref = cudnn(q, k, v)
        fns = {"cudnn": lambda: cudnn(q, k, v), "qattn": lambda: qattn.attention(q, k, v)}
        lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        for spec in (p for p in a.pages.split(",") if p):
            page, ordered = int(spec.rstrip("o")), spec.endswith("o")
            kc, vc, tb = (k, v, None) if page == 0 else paged(k, v, page, gen, ordered=ordered)
            fns[f"kv{spec}"] = (lambda kc=kc, vc=vc, tb=tb: qattn.attention_with_kvcache(q, kc, vc, lens, tb))
        for n, f in fns.items():
            diff = (f().float() - ref.float()).abs().max().item()
            assert diff < 2e-2, f"{name}: {n} differs from cuDNN by {diff}"
        if a.ncu_row:
            for n, f in fns.items():
                f()
                f()
            torch.cuda.synchronize()
            return
        print(f"== {name}: batch {b}, heads {hq}/{hkv}, {sk} keys ({2 * b * sk * hkv * d * 2 / 1e6:.0f} MB of K+V)")
        for n, f in fns.items():
            ks = kernels(f, a.reps)
            total = sum(t * c for t, c in ks.values())
            print(f"  {n:6s} kernels {total:7.1f} us: " +
                  "; ".join(f"{kn[:60]} {t:.1f} us x{c:g}" for kn, (t, c) in sorted(ks.items(), key=lambda x: -x[1][0])))


if __name__ == "__main__":
    main()
