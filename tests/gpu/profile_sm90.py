#!/usr/bin/env python3
"""One launch of each named qattn kernel and of cuDNN SDPA on the same inputs, for Nsight Compute:
where the time goes in a row that trails cuDNN (tensor-pipe and shared-memory utilisation, stall
reasons), measured on both kernels under the same profiler settings.

    ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \\
        -k 'regex:fwd|cudnn|fmha|flash' python3 tests/gpu/profile_sm90.py KERNEL.so [KERNEL2.so ...] \\
        [--shape B,S,HQ,HKV] [--causal]

Each kernel runs twice (both launches are profiled; the second is warm) after a check against cuDNN,
on fresh random bf16 inputs.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qattn_lib import Kernel  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernels", nargs="+")
    ap.add_argument("--shape", default="2,8192,32,32", help="batch,seqlen,heads_q,heads_kv")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--no-cudnn", action="store_true")
    args = ap.parse_args()
    b, s, hq, hkv = (int(x) for x in args.shape.split(","))
    ks = [Kernel(p) for p in args.kernels]
    dqk, dv = ks[0].info["d_qk"], ks[0].info["d_v"]
    q = torch.randn(b, s, hq, dqk, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hkv, dqk, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hkv, dv, device="cuda", dtype=torch.bfloat16)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal, enable_gqa=hq != hkv)
    torch.cuda.synchronize()
    for kern, path in zip(ks, args.kernels):
        o = torch.full((b, s, hq, dv), float("nan"), device="cuda", dtype=torch.bfloat16)
        params = kern.params(q, k, v, o)
        for _ in range(2):
            if kern(q, k, v, o, params=params) != 0:
                print(f"{path}: {kern.last_error()}", file=sys.stderr)
                return 1
        torch.cuda.synchronize()
        err = (o.float() - ref.transpose(1, 2).float()).abs().max().item()
        print(f"{os.path.basename(path)}: max |O - cuDNN| = {err:.3e}")
        if not err < 2e-2:
            return 1
    if not args.no_cudnn:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(2):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal, enable_gqa=hq != hkv)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
