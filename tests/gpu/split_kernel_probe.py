#!/usr/bin/env python3
"""Launches one split-keys kernel library (a .so exporting qattn_fwd, kernel info "splits": true)
directly, without the qattn package's call path, and checks the merged parts against an fp32
reference. The launch is waited for by polling a CUDA event against a deadline, never by a blocking
synchronisation, so a kernel that does not finish is reported ("HANG") and the process exits
(os._exit) instead of holding the GPU session.

    python3 tests/gpu/split_kernel_probe.py LIB.so [CAUSAL=0|1] [DEADLINE_S]
One line per case: batch 4, MQA 8/1 (and GQA 8/2), d 128, bf16, seqlen_q 1 and 5, seqlen_k 2048
and 3000, 1 / 2 / 5 parts (ONLY="HKV,SQ,SK,SPLITS" runs that one case). CAUSAL=1: the reference is
bottom-right causal."""
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from qattn import _abi, verify  # noqa: E402

lib_path = sys.argv[1]
causal = len(sys.argv) > 2 and sys.argv[2] == "1"
deadline = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
lib = _abi.Library(lib_path)
name = os.path.basename(lib_path)


def reference(q, k, v, scale):
    """fp32 attention (batch, sq, hq, d) with GQA and optional bottom-right causal mask; O and LSE."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    kk = k.float().repeat_interleave(g, dim=2)
    vv = v.float().repeat_interleave(g, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), kk) * scale
    if causal:
        qi = torch.arange(sq, device=q.device)[:, None]
        ki = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(ki > qi + (sk - sq), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # (b, hq, sq)
    o = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), vv)
    return o, lse


def wait(ev, what):
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > deadline:
            print(f"{name} causal={int(causal)} {what}: HANG (not finished after {deadline:.0f} s)", flush=True)
            os._exit(3)
        time.sleep(0.001)


g = torch.Generator(device="cuda").manual_seed(0)
fails = 0
for hkv in (1, 2):
    for sq in (1, 5):
        for sk in (2048, 3000):
            for splits in (1, 2, 5):
                if os.environ.get("ONLY") and os.environ["ONLY"] != f"{hkv},{sq},{sk},{splits}":
                    continue
                b, hq, d = 4, 8, 128
                q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
                k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
                v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
                o = torch.full((b * splits, sq, hq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
                lse = torch.full((b * splits, hq, sq), float("nan"), device="cuda", dtype=torch.float32)
                scale = d ** -0.5
                p = _abi.fill_params(q, k, v, o, lse, scale, window=(-1, 0) if causal else None, splits=splits)
                what = f"hkv {hkv} sq {sq} sk {sk} splits {splits}"
                torch.cuda.synchronize()
                st = lib.fwd(p, torch.cuda.current_stream().cuda_stream)
                if st != 0:
                    print(f"{name} {what}: status {st}: {lib.last_error()}", flush=True)
                    fails += 1
                    continue
                ev = torch.cuda.Event()
                ev.record()
                wait(ev, what)
                om, lm = verify.merge_parts(o, lse, splits)  # fp64; a part's NaN (unwritten) stays NaN
                ro, rl = reference(q, k, v, scale)
                eo = (om - ro).abs().max().item()
                el = (lm - rl).abs().max().item()
                ok = eo < 0.02 and el < 1e-3 and math.isfinite(eo) and math.isfinite(el)
                fails += not ok
                print(f"{name} causal={int(causal)} {what}: max|O-ref| {eo:.2e} max|LSE-ref| {el:.2e} "
                      f"{'ok' if ok else 'FAIL'}", flush=True)
print(f"{name}: {'all ok' if fails == 0 else f'{fails} FAILED'}", flush=True)
sys.exit(1 if fails else 0)
