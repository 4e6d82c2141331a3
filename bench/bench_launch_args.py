#!/usr/bin/env python3
"""Issue 21: the window and the softcap as launch arguments cost no speed. Same-process A/B of the
kernels the planner writes now (TL builtins window_left / window_right / softcap, read at launch)
against the same TL with the values written in as numbers (compile-time constants, the previous
form), on the GPU at hand.

    python3 bench/bench_launch_args.py KERNEL_DIR OUT.csv [--seqlens 2048,8192,16384] [--rounds 15]

KERNEL_DIR holds kernels built by tests/gpu/build_kernels.sh: <name>.so (launch arguments),
const_<name>.so (the same TL with constants) and optionally parent_<name>.so (the constants' TL
against the parent commit's device runtime: `--device`), <name> in the table below. For each (pair, seqlen), bf16, BSHD,
batch * seqlen = 16k tokens, fresh torch.randn inputs and NaN-poisoned outputs: both kernels run on
the same inputs and must agree with each other and with an fp32 reference of the same window /
softcap on two heads (FlashAttention's rule: max error at most 2x that of the naive bf16 computation,
P and O rounded to bf16, + 1e-5);
then they are timed by bench_sm90.timed_paired (15 rounds, each a ~6 ms batch of each kernel back to
back, median of the per-round ratios). Columns: impl (qattn = launch arguments, qattn_const,
qattn_parent), config, window, softcap, hq, hkv, d, seqlen, batch, ms, tflops, vs_baseline (this
speed / the baseline's: qattn_const, else qattn_parent), baseline.
"""
import argparse
import csv
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
from bench_sm90 import paired_ratio, timed_paired  # noqa: E402
from qattn_lib import Kernel  # noqa: E402
from qattn.verify import attention  # noqa: E402  (the package's fp64/fp32 reference)

# name: (hq, hkv, d, causal, window (left, right) or None, softcap or None); the kernels are built
# from the presets build_kernels.sh names (mistral-7b window, gemma2-9b softcap, llama3-8b softcap).
PAIRS = {
    "sm90_d128_window": (32, 8, 128, False, (256, 0), None),
    "sm90_d128_window4k": (32, 8, 128, False, (4096, 0), None),
    "sm90_d256_softcap": (16, 8, 256, True, None, 50.0),
    "sm90_d128_softcap": (32, 8, 128, True, None, 30.0),
    "sm80_d128_window": (32, 8, 128, False, (256, 0), None),
    "sm80_d128_causal": (32, 8, 128, True, None, None),  # the mask primitive's change (parent_ only)
    "sm80_d64_causal": (32, 8, 64, True, None, None),
    "sm80_d64_none": (32, 8, 64, False, None, None),
    # plain Hopper kernels: the same generated source against this and the parent's device runtime
    # (Params gained the launch arguments' fields)
    "sm90_d128_causal": (32, 8, 128, True, None, None),
    "sm90_d64_none": (32, 8, 64, False, None, None),
}


def reference(q, k, v, causal, window, softcap, acc, p_dtype=None, out_dtype=None):
    """O of attention with this mask / softcap, by qattn.verify's reference (P and O rounded when asked)."""
    sq, sk, off = q.shape[1], k.shape[1], k.shape[1] - q.shape[1]
    qi = torch.arange(sq, device=q.device)[:, None]
    ki = torch.arange(sk, device=q.device)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        keep &= ki <= qi + off
    if window:
        keep &= (ki >= qi + off - window[0]) & (ki <= qi + off + window[1])
    o, _ = attention(q, k, v, keep, q.shape[3] ** -0.5, acc, p_dtype=p_dtype, out_dtype=out_dtype, softcap=softcap)
    return o


def pairs_seen(sq, sk, causal, window):
    qi = torch.arange(sq, device="cuda")[:, None]
    ki = torch.arange(sk, device="cuda")[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool, device="cuda")
    if causal:
        keep &= ki <= qi
    if window:
        keep &= (ki >= qi - window[0]) & (ki <= qi + window[1])
    return int(keep.sum().item())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel_dir")
    ap.add_argument("out")
    ap.add_argument("--seqlens", default="2048,8192,16384")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tokens", type=int, default=16384)
    a = ap.parse_args()
    rows, ratios, failed = [], [], 0
    dev = torch.cuda.get_device_name()
    for name, (hq, hkv, d, causal, window, softcap) in PAIRS.items():
        paths = {"qattn": os.path.join(a.kernel_dir, name + ".so"), "qattn_const": os.path.join(a.kernel_dir, "const_" + name + ".so"),
                 "qattn_parent": os.path.join(a.kernel_dir, "parent_" + name + ".so")}
        paths = {impl: p for impl, p in paths.items() if os.path.exists(p)}
        if "qattn" not in paths or len(paths) < 2:
            print(f"{name}: kernels missing, skipped", flush=True)
            continue
        kerns = {impl: Kernel(p) for impl, p in paths.items()}
        if window or softcap:
            assert kerns["qattn"].info.get("args"), f"{name}: the launch-argument kernel reads no launch argument"
        for impl in ("qattn_const", "qattn_parent"):
            assert impl not in kerns or not kerns[impl].info.get("args"), f"{name}: {impl} reads launch arguments"
        for s in (int(x) for x in a.seqlens.split(",")):
            b = max(1, a.tokens // s)
            g = torch.Generator(device="cuda").manual_seed(s * 31 + d)
            q = torch.randn(b, s, hq, d, generator=g, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, s, hkv, d, generator=g, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, s, hkv, d, generator=g, device="cuda", dtype=torch.bfloat16)
            outs, fns = {}, {}
            for impl, kern in kerns.items():
                o = torch.full_like(q, float("nan"))
                p = kern.params(q, k, v, o, window=window, softcap=softcap)
                st = kern(q, k, v, o, params=p)
                torch.cuda.synchronize()
                assert st == 0, f"{name} {impl}: status {st}: {kern.last_error()}"
                outs[impl] = o
                fns[impl] = (lambda kern=kern, o=o, p=p: kern(q, k, v, o, params=p))
            # numerics on the first batch element's first two query heads (both read kv head 0; the
            # fp32 scores of 2 x 16k x 16k fit)
            qs, ks, vs = q[:1, :, :2], k[:1, :, :1], v[:1, :, :1]
            ref = reference(qs, ks, vs, causal, window, softcap, torch.float32)
            naive = reference(qs, ks, vs, causal, window, softcap, torch.float32, torch.bfloat16, torch.bfloat16)
            tol = 2 * (naive - ref).abs().max().item() + 1e-5 * max(1.0, ref.abs().max().item())
            for impl, o in outs.items():
                err = (o[:1, :, :2].float() - ref).abs().max().item()
                if not (math.isfinite(err) and err <= tol):
                    failed += 1
                    print(f"FAIL {name} {impl} s{s}: max err {err:.3e} > {tol:.3e}", flush=True)
            base = "qattn_const" if "qattn_const" in kerns else "qattn_parent"
            diff = max((outs["qattn"].float() - o.float()).abs().max().item() for o in outs.values())
            ms, ts = timed_paired(fns, a.rounds)
            rel = {impl: paired_ratio(ts, impl, base) for impl in kerns}  # speed relative to the baseline
            ratios.append(rel["qattn"])
            flops = 4 * d * pairs_seen(s, s, causal, window) * b * hq
            for impl in kerns:
                rows.append({"impl": impl, "config": name, "window": "" if window is None else f"{window[0]},{window[1]}",
                             "softcap": "" if softcap is None else softcap, "hq": hq, "hkv": hkv, "d": d, "seqlen": s,
                             "batch": b, "ms": f"{ms[impl]:.4f}", "tflops": f"{flops / ms[impl] / 1e9:.1f}",
                             "vs_baseline": f"{rel[impl]:.4f}", "baseline": base})
            print(f"{name:<20} s{s:>6} b{b:>2}: " + ", ".join(f"{impl} {ms[impl]:.3f} ms ({rel[impl]:.3f})" for impl in kerns) +
                  f" [speed / {base}], max |qattn - other| {diff:.2e}", flush=True)
    if not rows:
        print("no kernel pairs found", file=sys.stderr)
        return 1
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    print(f"{dev}: qattn vs the baseline (constants, else the parent) over {len(ratios)} rows: geomean {gm:.4f}, min {min(ratios):.4f}, "
          f"max {max(ratios):.4f}; numerics failures {failed}; wrote {a.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
