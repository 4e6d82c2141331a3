#!/usr/bin/env python3
"""What the operator costs: torch.ops.qattn.attention (python/qattn/_op.py, what torch.compile puts
in a graph) and qattn.attention (which calls the operator only under torch.compile) against the eager
path the operator wraps (qattn._attention.eager_attention), in one process, on shapes from decode-like to prefill. Each shape: both paths checked to
give the same output, then timed in alternating rounds (CUDA events around N back-to-back calls,
median over rounds): the per-call wall time includes the Python and dispatch overhead the host adds
before each launch, which is what small shapes expose.

    python3 bench/bench_op_overhead.py [--out DIR] [--rounds 15] [--calls 200]

Writes DIR/results.csv (shape, impl, us_per_call) and prints the table.
"""
import argparse
import csv
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import qattn  # noqa: E402
from qattn import _op  # noqa: E402
from qattn._attention import eager_attention  # noqa: E402

OP = _op.register(torch)

SHAPES = [  # batch, seqlen_q, seqlen_k, heads_q, heads_kv, d
    (1, 1, 512, 8, 2, 128),
    (1, 128, 128, 8, 2, 128),
    (4, 1024, 1024, 32, 8, 128),
    (1, 4096, 4096, 32, 8, 128),
]


def per_call_us(fn, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    g = torch.Generator(device="cuda")
    g.manual_seed(0)
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; us per call (median of {a.rounds} rounds "
          f"of {a.calls} calls)")
    print(f"{'shape':<28} {'operator':>10} {'attention':>10} {'eager':>10} {'op/eager':>9}")
    for b, sq, sk, hq, hkv, d in SHAPES:
        q = torch.randn(b, sq, hq, d, device="cuda", generator=g).bfloat16()
        k = torch.randn(b, sk, hkv, d, device="cuda", generator=g).bfloat16()
        v = torch.randn(b, sk, hkv, d, device="cuda", generator=g).bfloat16()
        args = ("bottom_right", None, None, None, False, "bshd", None, None, None, None, None, None, None)
        impls = {"operator": lambda: OP(q, k, v, *args)[0], "attention": lambda: qattn.attention(q, k, v, causal=True),
                 "eager": lambda: eager_attention(q, k, v, causal=True)}
        ref = impls["eager"]()
        for name, f in impls.items():
            assert torch.equal(f(), ref), f"{name} and the eager path disagree"
            per_call_us(f, 10)  # warm-up
        t = {name: [] for name in impls}
        order = list(impls)
        for r in range(a.rounds):
            for name in order[r % 3:] + order[:r % 3]:
                t[name].append(per_call_us(impls[name], a.calls))
        shape = f"b{b} s{sq}/{sk} h{hq}/{hkv} d{d}"
        med = {k: statistics.median(x) for k, x in t.items()}
        print(f"{shape:<28} {med['operator']:>10.1f} {med['attention']:>10.1f} {med['eager']:>10.1f} "
              f"{med['operator'] / med['eager']:>9.3f}")
        rows += [(shape, k, round(x, 2)) for k, x in med.items()]
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "results.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["shape", "impl", "us_per_call"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
