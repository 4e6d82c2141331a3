"""TFLOPS of one generated kernel next to torch SDPA's FlashAttention-2 and cuDNN backends, in one
process (the timing half of the last step of `qattn generate`).

    python3 -m qattn.timing ARTIFACTS_DIR [--seqlen 4096] [--tokens 16384]   # or tests/gpu/time_kernel.py

Reads ARTIFACTS_DIR/spec.json (heads, variants) and libqattn_kernel.so (qattn_kernel_info: head dims,
mask, dtype). Kernels with variants (softcap, ALiBi, document, ...) or a window are skipped: SDPA has
no baseline for them (bench/bench_variants.py times them against FlexAttention). Shapes: batch * seqlen = --tokens, BSHD. Checks the output against SDPA once (fresh random
inputs, poisoned output) before timing; timing is triton's do_bench median. FLOPs =
2 * B * Hq * S^2 * (d_qk + d_v), halved for causal masks. A backward library (`qattn generate
--backward`) is timed against SDPA's backward (cuDNN and FlashAttention-2 backends) by
qattn._backward_check.bench.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from qattn._abi import Kernel

DT = {"fp16": torch.float16, "bf16": torch.bfloat16}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("artifacts")
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=16384)
    a = ap.parse_args()
    spec = json.load(open(os.path.join(a.artifacts, "spec.json")))
    so = os.path.join(a.artifacts, "libqattn_kernel.so")
    from qattn.verify import is_backward_library, is_combine_library
    if is_combine_library(so):  # `qattn generate --combine`: timed in decoding, next to cuDNN
        print("time_kernel: a combine library is timed inside the decoding it serves: bench/bench_split_kv.py")
        return 0
    if is_backward_library(so):  # `qattn generate --backward`: next to SDPA's backward
        from qattn import _abi
        from qattn._backward_check import bench
        lib = _abi.BwdLibrary(so)
        s = a.seqlen
        hkv = spec["heads_kv"] if lib.info["dk_dtype"] == "fp32" else spec["heads_q"]
        bench(lib, (max(1, a.tokens // s), spec["heads_q"], hkv, s, s), [], "qattn")
        return 0
    k = Kernel(so)
    info = k.info
    if info.get("splits"):  # decoding's kernel: its parts (and its merge) need the key split's shapes
        print("time_kernel: skipped (split keys: bench/bench_kvcache.py and bench/bench_split_kv.py time these kernels "
              "in decoding)")
        return 0
    if "varlen" in info or "kv_cache" in info:  # their baselines need ragged batches / caches
        print("time_kernel: skipped (" + ("ragged batches: bench/bench_varlen.py" if "varlen" in info
                                           else "a KV cache: bench/bench_kvcache.py") + " times these kernels)")
        return 0
    if info["dtype"] not in DT or info["mask"] not in ("none", "causal"):
        print(f"time_kernel: skipped ({info['dtype']}, mask {info['mask']}: no SDPA baseline here)")
        return 0
    variants = sorted(k for k, x in (spec.get("variants") or {}).items() if x not in (None, False))
    if variants or info.get("aux") or info.get("args"):
        # SDPA computes none of them (bench/bench_variants.py times variants against FlexAttention)
        print(f"time_kernel: skipped (variants {', '.join(variants) or info.get('args')}: no SDPA baseline here)")
        return 0
    dt, s = DT[info["dtype"]], a.seqlen
    b, hq, hkv = max(1, a.tokens // s), spec["heads_q"], spec["heads_kv"]
    dqk, dv, causal = info["d_qk"], info["d_v"], info["mask"] == "causal"
    torch.manual_seed(0)
    q = torch.randn(b, s, hq, dqk, device="cuda", dtype=dt)
    kk = torch.randn(b, s, hkv, dqk, device="cuda", dtype=dt)
    v = torch.randn(b, s, hkv, dv, device="cuda", dtype=dt)
    o = torch.full((b, s, hq, dv), float("nan"), device="cuda", dtype=dt)
    st = k(q, kk, v, o)
    if st != 0:
        print("qattn_fwd failed:", st, k.last_error())
        return 1
    torch.cuda.synchronize()
    qt, kt, vt = (x.transpose(1, 2) for x in (q, kk, v))
    ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=hq != hkv).transpose(1, 2)
    err = (o.float() - ref.float()).abs().max().item()
    if not (err < 0.05):
        print(f"qattn output differs from SDPA: max abs err {err}")
        return 1
    from triton.testing import do_bench
    flops = 2.0 * b * hq * s * s * (dqk + dv) * (0.5 if causal else 1.0)
    rows = [("qattn", lambda: k(q, kk, v, o))]
    for name, be in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def run(be=be):
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=hq != hkv)
        try:
            run()
            rows.append((name, run))
        except RuntimeError as e:  # a backend that does not take this shape
            print(f"{name}: unavailable ({str(e).splitlines()[0][:80]})")
    print(f"{torch.cuda.get_device_name()} b{b} h{hq}/{hkv} s{s} d{dqk}/{dv} {info['dtype']} causal={causal} "
          f"(max abs err vs SDPA {err:.2e})")
    for name, fn in rows:
        ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
        print(f"  {name:6s} {flops / ms / 1e9:7.1f} TFLOPS  ({ms:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
