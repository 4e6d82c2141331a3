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

DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}


def make_aux(info, batch, hq, sq, sk, gen):
    """The auxiliary tensors the kernel reads, by name (see docs/spec.md, "Variants")."""
    dev = "cuda"
    out = {}
    for a in info.get("aux", []):
        n = a["name"]
        if n == "alibi_slopes":  # the standard ALiBi slopes 2^(-8 (h + 1) / H)
            out[n] = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)], device=dev, dtype=torch.float32)
        elif n in ("seg_q", "seg_k"):
            length = sq if n == "seg_q" else sk
            out[n] = packed_ids(batch, length, gen)
        elif n == "rel_bias":
            nb = int(info["tiles"].get("NB", 32))
            out[n] = torch.randn(hq, nb, generator=gen, device=dev, dtype=torch.float32)
        else:
            raise SystemExit(f"unknown auxiliary tensor {n} (shape {a['shape']})")
    return out


def packed_ids(batch, length, gen):
    """Nondecreasing segment ids per batch row (documents of random lengths), int32."""
    ids = torch.zeros(batch, length, dtype=torch.int32, device="cuda")
    for b in range(batch):
        pos, seg = 0, 0
        while pos < length:
            n = int(torch.randint(1, max(2, length // 3), (1,), generator=gen, device="cuda").item())
            ids[b, pos:pos + n] = seg
            pos, seg = pos + n, seg + 1
    return ids


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


def variant_fns(spec, extra, aux, sq, sk, window=None, softcap=None):
    """(score(s, b, h, q, k), keep(b, h, q, k)) on broadcast index grids; None when absent. window /
    softcap: the launch values (else the spec's)."""
    off = sk - sq
    m = dict(spec.get("mask", {})) if isinstance(spec.get("mask", {}), dict) else spec.get("mask")
    if window is not None:
        m["left"], m["right"] = window
    spec = dict(spec.get("variants", {}))  # docs/spec.md, "Variants"
    mods = []
    if spec.get("alibi"):
        slopes = aux["alibi_slopes"]
        mods.append(lambda s, b, h, q, k: s - slopes[h] * (q + off - k).abs())
    if spec.get("relative_bias"):
        nb = int(spec["relative_bias"])
        table = aux["rel_bias"]
        mods.append(lambda s, b, h, q, k: s + table[h, (k - q - off).clamp(-(nb // 2), nb // 2 - 1) + nb // 2])
    if extra.get("score"):  # the planner's order: alibi, relative bias, score_mod, softcap
        mods.append(eval("lambda s, b, h, q, k: " + extra["score"], {"torch": torch, "off": off}))
    if spec.get("softcap"):
        c = float(softcap if softcap is not None else spec["softcap"])
        mods.append(lambda s, b, h, q, k: c * torch.tanh(s / c))
    keeps = []
    kind = m.get("kind", "none") if isinstance(m, dict) else m
    if kind == "causal":
        keeps.append(lambda b, h, q, k: k <= q + off)
    if kind == "window":
        lo, hi = m["left"], m["right"]  # -1: unbounded
        keeps.append(lambda b, h, q, k: ((k >= q + off - lo) | (lo < 0)) & ((k <= q + off + hi) | (hi < 0)))
    if spec.get("prefix_lm") is not None:
        pl = int(spec["prefix_lm"])
        keeps.append(lambda b, h, q, k: (k <= q + off) | (k < pl))
    if spec.get("document"):
        sgq, sgk = aux["seg_q"].long(), aux["seg_k"].long()
        keeps.append(lambda b, h, q, k: sgq[b, q] == sgk[b, k])
    if extra.get("keep"):
        keeps.append(eval("lambda b, h, q, k: " + extra["keep"], {"torch": torch, "off": off}))
    score = None
    if mods:
        def score(s, b, h, q, k):
            for f in mods:
                s = f(s, b, h, q, k)
            return s
    keep = None
    if keeps:
        def keep(b, h, q, k):
            r = keeps[0](b, h, q, k)
            for f in keeps[1:]:
                r = r & f(b, h, q, k)
            return r
    return score, keep


def attention(q, k, v, scale, score, keep, acc, p_dtype=None, out_dtype=None):
    B, Sq, Hq, _ = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    qd = q.to(acc).permute(0, 2, 1, 3)
    kd = k.to(acc).permute(0, 2, 1, 3).repeat_interleave(Hq // Hkv, dim=1)
    vd = v.to(acc).permute(0, 2, 1, 3).repeat_interleave(Hq // Hkv, dim=1)
    s = (qd @ kd.transpose(-1, -2)) * scale
    bi = torch.arange(B, device="cuda")[:, None, None, None]
    hi = torch.arange(Hq, device="cuda")[None, :, None, None]
    qi = torch.arange(Sq, device="cuda")[None, None, :, None]
    ki = torch.arange(Sk, device="cuda")[None, None, None, :]
    if score is not None:
        s = score(s, bi, hi, qi, ki).to(acc)
    if keep is not None:
        s = s.masked_fill(~keep(bi, hi, qi, ki).expand(B, Hq, Sq, Sk), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    if p_dtype is not None:
        p = p.to(p_dtype).to(acc)
    o = (p @ vd).permute(0, 2, 1, 3)
    if out_dtype is not None:
        o = o.to(out_dtype)
    return o


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
    score, keep = variant_fns(spec, extra, aux, Sq, Sk, window, softcap)
    qr, kr, vr = (q.double() * ds[0], k.double() * ds[1], v.double() * ds[2]) if fp8 else (q, k, v)
    ref = attention(qr, kr, vr, scale, score, keep, torch.float64)
    naive = attention(qr, kr, vr, scale, score, keep, torch.float32, p_dtype=dt, out_dtype=out_dt)
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
