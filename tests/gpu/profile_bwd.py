#!/usr/bin/env python3
"""One launch of each named backward library (a `Kernel NAME backward` translated for this GPU) and
of cuDNN SDPA's backward on the same inputs, for Nsight Compute: where a backward's time goes (L2
and DRAM throughput, stall reasons), measured for ours and cuDNN's under the same settings.

    ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        -k 'regex:bwd|cudnn|dgrad' python3 tests/gpu/profile_bwd.py LIB.so [LIB2.so ...] [--shape B,HQ,HKV,S]

The libraries are bf16 kernels of one config without auxiliary inputs (the first one's head dims and
mask are used for all; a document-mask kernel is refused by its own check). Fresh random inputs (the
forward's O from SDPA and its LSE, top-left causal on these square shapes, so the work is the real
one); dQ (and fp32 dK / dV) zeroed as the ABI asks. Each library's status is checked; nothing is timed.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from qattn import _abi  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--shape", default="2,32,8,8192", help="batch,heads_q,heads_kv,seqlen")
    ap.add_argument("--no-cudnn", action="store_true")
    args = ap.parse_args()
    b, hq, hk, s = (int(x) for x in args.shape.split(","))
    libs = [_abi.BwdLibrary(p) for p in args.libs]
    info = libs[0].info
    d, dv = info["d_qk"], info["d_v"]
    causal = info["mask"] in ("causal", "causal_top_left")
    q = torch.randn(b, s, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hk, dv, device="cuda", dtype=torch.bfloat16)
    dout = torch.randn(b, s, hq, dv, device="cuda", dtype=torch.bfloat16)
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=hq != hk)
    with torch.no_grad():  # LSE from a blockwise logsumexp (no (s, s) matrix for long rows)
        lse = torch.empty(b, hq, s, device="cuda", dtype=torch.float32)
        kr = kt.detach().repeat_interleave(hq // hk, dim=1).float()
        for r0 in range(0, s, 1024):
            scores = qt.detach()[:, :, r0:r0 + 1024].float() @ kr.transpose(-1, -2) * d ** -0.5
            if causal:
                rows = torch.arange(r0, min(s, r0 + 1024), device="cuda")[:, None]
                scores.masked_fill_(torch.arange(s, device="cuda")[None, :] > rows, float("-inf"))
            lse[:, :, r0:r0 + 1024] = torch.logsumexp(scores, dim=-1)
        del scores, kr
    ob = o.detach().transpose(1, 2).contiguous()
    for lib, path in zip(libs, args.libs):
        dk_dt = torch.float32 if lib.info["dk_dtype"] == "fp32" else torch.bfloat16
        dq = torch.zeros(b, s, hq, d, device="cuda", dtype=torch.float32)
        dk = torch.zeros(b, s, hk, d, device="cuda", dtype=dk_dt)
        dvv = torch.zeros(b, s, hk, dv, device="cuda", dtype=dk_dt)
        p = _abi.fill_bwd_params(q, k, v, ob, dout, lse, dq, dk, dvv, scale=d ** -0.5)
        ws = _abi.bwd_workspace(torch, lib, p, "cuda")  # noqa: F841 (alive for the launch)
        st = lib.bwd(p, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        print(f"{os.path.basename(path)}: status {st}{'' if st == 0 else ' ' + lib.last_error()}, "
              f"|dQ| max {dq.abs().max().item():.3e}")
        if st != 0:
            return 1
    if not args.no_cudnn:
        torch.autograd.grad(o, (qt, kt, vt), dout.transpose(1, 2))
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
