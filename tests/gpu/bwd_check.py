#!/usr/bin/env python3
"""Backward kernels on the GPU (issue 19): numerics against an fp32 autograd reference and timing
against PyTorch's SDPA backward (cuDNN and FlashAttention-2 backends), in one process.

  python3 tests/gpu/bwd_check.py KERNEL.so [KERNEL.so ...] [--csv OUT.csv] [--bench] [--planted NAME.so ...]

Each library is a `Kernel NAME backward` translated for this GPU (qattn_bwd, kernel info "pass":
"backward"). Numerics (FlashAttention's rule for gradients): for each of dQ, dK, dV,
max |dX - dX_ref| <= 2 * max |dX_torch - dX_ref| + 1e-4 * max(1, max |dX_ref|), dX_ref from fp32
autograd of the same inputs, dX_torch from autograd in the kernel's dtype. Fresh random inputs per
shape; dQ (and fp32 dK / dV) zeroed as the ABI asks, bf16 dK / dV poisoned with NaN. Shapes cross
every tile boundary (odd lengths, both length orders, GQA). --planted: libraries built from a TL
with a planted bug, which must FAIL. Exit status 1 when a check does not come out as expected.
"""
import argparse
import csv
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from qattn import _abi  # noqa: E402
from qattn._backward_check import SHAPES, WINDOWS, bench, random_shapes, repeat_identical, run_case  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--planted", nargs="*", default=[])
    ap.add_argument("--csv")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--random", type=int, default=0, help="random shapes per library after the fixed ones")
    ap.add_argument("--bench-shapes", default="4,16,16,4096,4096;2,16,16,8192,8192;4,32,8,4096,4096")
    ap.add_argument("--dq-heads-first", action="store_true",
                    help="--bench also with the fp32 dQ laid out (batch, heads, seqlen, d): every library timed both ways")
    ap.add_argument("--repeat", type=int, default=0,
                    help="launch each library RUNS times on the same inputs: a deterministic one must give the same bits")
    ap.add_argument("--repeat-shape", default="2,8,2,1030,2049")
    ap.add_argument("--shapes", help="instead of the fixed shapes: 'b,hq,hkv,sq,sk;...' (e.g. one small shape under "
                                     "compute-sanitizer)")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    bad = 0
    total = 0
    for path in args.libs + args.planted:
        planted = path in args.planted
        lib = _abi.BwdLibrary(path)
        name = os.path.basename(path)
        fails = 0
        fixed = [tuple(int(x) for x in sp.split(",")) for sp in args.shapes.split(";")] if args.shapes else SHAPES
        shapes = fixed + random_shapes(0 if planted else args.random, 1000 + total, gqa=lib.info["dk_dtype"] == "fp32")
        for i, shape in enumerate(shapes):
            window = WINDOWS[i % len(WINDOWS)] if lib.info["mask"] == "window" else (-1, -1)
            r = run_case(lib, shape, seed=100 + i, window=window)
            total += 1
            fails += not r["ok"]
            tag = "ok" if r["ok"] else "FAIL"
            detail = r["status"] if r["status"] != "ok" else " ".join(
                f"{n}={r[n + '_err']:.2e}/{r[n + '_bound']:.2e}" for n in ("dq", "dk", "dv"))
            print(f"{name} {shape} window={window}: {tag} {detail}")
        if planted:
            ok = fails > 0
            print(f"{name}: planted bug {'caught' if ok else 'NOT CAUGHT'} ({fails}/{len(shapes)} shapes fail)")
        else:
            ok = fails == 0
        bad += not ok
    print(f"numerics: {total} cases ({sum(1 for p in args.libs)} libraries x {len(fixed)} fixed + {args.random} random "
          f"shapes, planted ones on the fixed shapes), {bad} libraries not as expected")
    if args.repeat:
        shape = tuple(int(x) for x in args.repeat_shape.split(","))
        for path in args.libs:
            lib = _abi.BwdLibrary(path)
            if lib.info["dk_dtype"] != "fp32" and shape[1] != shape[2]:
                shape_l = (shape[0], shape[1], shape[1], shape[3], shape[4])
            else:
                shape_l = shape
            differ, status = repeat_identical(lib, shape_l, runs=args.repeat)
            det = lib.info.get("deterministic", False)
            ok = status == "ok" and (differ == 0 or not det)
            bad += not ok
            print(f"{os.path.basename(path)} {shape_l} x{args.repeat}: {differ} runs differ bitwise from the first "
                  f"({'deterministic' if det else 'atomic adds'}; {status}): {'ok' if ok else 'FAIL'}")
    if args.bench:
        rows = []
        for path in args.libs:
            lib = _abi.BwdLibrary(path)
            for spec in args.bench_shapes.split(";"):
                shape = tuple(int(x) for x in spec.split(","))
                if lib.info["dk_dtype"] != "fp32" and shape[1] != shape[2]:
                    continue  # a plain-store kernel serves MHA only
                bench(lib, shape, rows, os.path.basename(path))
                if args.dq_heads_first:
                    bench(lib, shape, rows, os.path.basename(path), dq_heads_first=True)
        if args.csv and rows:
            with open(args.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
                w.writeheader()
                w.writerows(rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
