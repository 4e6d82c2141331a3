#!/usr/bin/env python3
"""GPU numerics of attention-variant kernels (Score / Mask declarations, issue 8).

    python3 tests/gpu/verify_variants.py WORK_DIR [--seed N]

WORK_DIR holds one folder per kernel, each written by `qattn generate ... --no-verify`
(libqattn_kernel.so, spec.json, code.tl). The variant each kernel computes is read from its
spec.json (softcap, alibi, prefix_lm, document, relative_bias, window, causal) and re-implemented
here in torch, independently of the TL: the reference is fp64 attention with that score
modification and mask; the tolerance is FlashAttention's rule (2x the error of a naive
same-precision attention + atol). Kernels whose spec has a custom score_mod / mask_mod carry a
Python transcription of the expression in variants.json next to spec.json ({"score": "...",
"keep": "..."} evaluated with torch on index grids). Auxiliary inputs (ALiBi slopes, segment ids,
bias table) are made here with fresh random values, passed through the ABI's aux[] in the order
qattn_kernel_info() lists them. Outputs are poisoned (NaN) before every launch. Exits 1 on any
failure.
"""
import argparse
import glob
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qattn_lib import Kernel  # noqa: E402
from qattn.verify import attention, make_aux, variant_fns  # noqa: E402  (the package's variant formulas)

DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}


def launch_values(info, spec, i):
    """(window, softcap) of check i: the kernel takes them at launch (info "args"), so the checks
    cycle through windows that cut tiles and unbounded sides (-1), and several caps; the spec's own
    values first. None for what the kernel does not read."""
    args = info.get("args", [])
    m = spec.get("mask", {})
    window = softcap = None
    if "window_left" in args or "window_right" in args:
        windows = [(m.get("left", 256), m.get("right", 0)), (37, 0), (-1, 19), (150, -1), (5, 3), (0, 0)]
        window = windows[i % len(windows)]
    if "softcap" in args:
        caps = [float(spec.get("variants", {}).get("softcap", 30.0)), 5.0, 50.0, 1.5]
        softcap = caps[i % len(caps)]
    return window, softcap


def check(kern, spec, extra, shape, seed, i=0):
    B, Hq, Hkv, Sq, Sk = shape
    info = kern.info
    dt = DT[info["dtype"]]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dq, dv = info["d_qk"], info["d_v"]
    q = torch.randn(B, Sq, Hq, dq, generator=gen, device="cuda").to(dt)
    k = torch.randn(B, Sk, Hkv, dq, generator=gen, device="cuda").to(dt)
    v = torch.randn(B, Sk, Hkv, dv, generator=gen, device="cuda").to(dt)
    out_dt = DT[info.get("out_dtype", info["dtype"])]
    o = torch.full((B, Sq, Hq, dv), float("nan"), device="cuda", dtype=out_dt)
    aux = make_aux(info, B, Hq, Sq, Sk, gen)
    scale = dq ** -0.5
    # fp8 kernels: per-tensor descale factors (not 1, so that a variant applied before the descale
    # would show); the reference multiplies the fp8 values by them.
    fp8 = info["dtype"].startswith("fp8")
    ds = (0.5, 1.25, 0.75) if fp8 else None
    descale = tuple(torch.tensor([x], device="cuda", dtype=torch.float32) for x in ds) if fp8 else None
    window, softcap = launch_values(info, spec, i)
    p = kern.params(q, k, v, o, scale=scale, descale=descale, window=window, softcap=softcap)
    for i, a in enumerate(info.get("aux", [])):
        p.aux[i] = aux[a["name"]].data_ptr()
    st = kern(q, k, v, o, params=p)
    torch.cuda.synchronize()
    if st != 0:
        return False, f"status {st}: {kern.last_error()}"
    score, keep = variant_fns(spec, aux, Sq, Sk, window, softcap, extra)
    qr, kr, vr = (q.double() * ds[0], k.double() * ds[1], v.double() * ds[2]) if fp8 else (q, k, v)
    ref = attention(qr, kr, vr, None, scale, torch.float64, score=score, keep=keep)[0]
    naive = attention(qr, kr, vr, None, scale, torch.float32, p_dtype=dt, out_dtype=out_dt, score=score, keep=keep)[0]
    err = (o.double() - ref).abs().max().item()
    nerr = (naive.double() - ref).abs().max().item()
    tol = 2 * nerr + (1e-3 if fp8 else 1e-5) * max(1.0, ref.abs().max().item())
    ok = math.isfinite(err) and err <= tol
    at = (f" window={window}" if window is not None else "") + (f" softcap={softcap:g}" if softcap is not None else "")
    return ok, (f"max_abs_err {err:.3e} <= {tol:.3e}" if ok else f"max_abs_err {err:.3e} > {tol:.3e}") + at


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    shapes = [(1, 4, 4, 128, 128), (2, 8, 2, 333, 333), (1, 4, 1, 200, 517), (2, 4, 2, 517, 200), (1, 2, 2, 1, 77),
              (1, 8, 8, 1024, 1024)]
    failed = total = 0
    for d in sorted(glob.glob(os.path.join(a.work, "*"))):
        so = os.path.join(d, "libqattn_kernel.so")
        if not os.path.exists(so):
            continue
        spec = json.load(open(os.path.join(d, "spec.json")))
        extra_path = os.path.join(d, "variants.json")
        extra = json.load(open(extra_path)) if os.path.exists(extra_path) else {}
        kern = Kernel(so)
        for i, shp in enumerate(shapes):
            total += 1
            ok, msg = check(kern, spec, extra, shp, a.seed + 17 * i, i)
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'}  {os.path.basename(d):<18} B,Hq,Hkv,Sq,Sk={shp}  {msg}", flush=True)
    print(f"variants: {total - failed}/{total} checks pass")
    sys.exit(1 if failed or total == 0 else 0)


if __name__ == "__main__":
    main()
