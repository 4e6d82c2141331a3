#!/usr/bin/env python3
"""The first call of a decoding step whose keys are split, from an empty kernel cache: the forward
kernel (with its LSE) and the combine library are built on this call. With the combine's build
started beside the forward's (qattn._combine.prefetch, the default) and without (prefetch disabled),
each in a fresh process with its own empty cache, alternating, --reps times.

    python3 bench/bench_first_split.py OUT.csv [--reps 3]

Columns: variant (prefetch, sequential), rep, first_call_s (wall time of the first attention() call,
builds included), second_call_ms, gpu.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from bench_util import write_csv

CHILD = r"""
import os, sys, time, torch
sys.path.insert(0, os.environ["QATTN_REPO"] + "/python")
import qattn
from qattn import _combine
if os.environ["VARIANT"] == "sequential":
    _combine.prefetch = lambda *a, **k: None
g = torch.Generator(device="cuda").manual_seed(0)
b, hq, hkv, sk = 8, 16, 1, 16384
q = torch.randn(b, 1, hq, 128, device="cuda", generator=g).to(torch.bfloat16)
k = torch.randn(b, sk, hkv, 128, device="cuda", generator=g).to(torch.bfloat16)
v = torch.randn(b, sk, hkv, 128, device="cuda", generator=g).to(torch.bfloat16)
torch.cuda.synchronize()
t = time.perf_counter()
o = qattn.attention(q, k, v, causal=True)
torch.cuda.synchronize()
first = time.perf_counter() - t
t = time.perf_counter()
o2 = qattn.attention(q, k, v, causal=True)
torch.cuda.synchronize()
second = (time.perf_counter() - t) * 1e3
assert torch.equal(o, o2) and not torch.isnan(o).any()
print(f"{first:.3f} {second:.3f} {torch.cuda.get_device_name()}")
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    for rep in range(a.reps):
        for variant in ("prefetch", "sequential") if rep % 2 == 0 else ("sequential", "prefetch"):
            with tempfile.TemporaryDirectory(prefix="qattn-first-") as cache:
                env = dict(os.environ, QATTN_CACHE_DIR=cache, VARIANT=variant, QATTN_REPO=repo, QATTN_COMBINE="auto")
                r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                print(r.stdout, r.stderr, file=sys.stderr)
                return 1
            first, second, gpu = r.stdout.split(maxsplit=2)
            rows.append({"variant": variant, "rep": rep, "first_call_s": first, "second_call_ms": second, "gpu": gpu.strip()})
            print(f"{variant:10s} rep {rep}: first call {first} s, second {second} ms", flush=True)
    write_csv(a.out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
