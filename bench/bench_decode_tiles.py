#!/usr/bin/env python3
"""Decoding kernels' tiles on Hopper: the packed short-query kernel (sm90pk_d128_none_lse, the
planner's BM 128 / BN 128 / 2 stages / 2 consumer warpgroups) against the same TL with other tiles
(`qattn plan --tiles BM,BN,WARPS,STAGES`: sm90pkt_d128_*), launched as decoding's key split launches
them (the keys folded into the batch, qattn._attention.split_keys' count), one process.

    python3 bench/bench_decode_tiles.py KERNEL_DIR OUT.csv [--rounds 7]

KERNEL_DIR: tests/gpu/build_kernels.sh DIR --run-sm 90 --only '^sm90pkt?_d128_(none_lse|64x|128x)'.
One query token, bf16, d 128, the rows of bench_split_kv.py; fresh torch.randn inputs; every
variant's output checked against the planner's kernel (< 2e-2) and the planner's kernel against an
fp32 reference first; each captured as a CUDA graph of 20 launches, replayed in interleaved rounds;
median per launch (the kernel only: the merge is the same for all). Columns: impl, config, splits,
us, tb_s (K and V bytes / time), vs_planner (speed ratio), gpu.
"""
import argparse
import glob
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from qattn_lib import Kernel  # noqa: E402
from qattn import _attention  # noqa: E402
from bench_split_kv import ROWS, replay_rounds  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel_dir")
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    libs = {"planner": os.path.join(a.kernel_dir, "sm90pk_d128_none_lse.so")}
    for p in sorted(glob.glob(os.path.join(a.kernel_dir, "sm90pkt_d128_*.so"))):
        libs[os.path.basename(p)[len("sm90pkt_d128_"):-3]] = p
    kernels = {n: Kernel(p) for n, p in libs.items()}
    gpu = torch.cuda.get_device_name()
    d, rows = 128, []
    fields, args = _attention.split_launch_args(_attention.variant_fields(False, None, None, None, None, None))
    print(f"{gpu}; variants: {', '.join(kernels)}", flush=True)
    for name, (b, hq, hkv, sk) in ROWS.items():
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        S = _attention.split_keys(torch, q.device, q, k, fields, args, {})
        c = sk // S
        qf = q[:, None].expand(b, S, 1, hq, d).reshape(b * S, 1, hq, d)
        kf, vf = k[:, :c * S].reshape(b * S, c, hkv, d), v[:, :c * S].reshape(b * S, c, hkv, d)
        outs = {}
        for n, kern in kernels.items():
            o = torch.full((b * S, 1, hq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
            lse = torch.full((b * S, hq, 1), float("nan"), device="cuda", dtype=torch.float32)
            st = kern(qf, kf, vf, o, lse, scale=d ** -0.5, stream=torch.cuda.current_stream().cuda_stream)
            assert st == 0, f"{n}: status {st}"
            outs[n] = (o, lse)
        torch.cuda.synchronize()
        # the planner's kernel against fp32 (one part of one row), the variants against it
        kk, vv = kf[0].float().transpose(0, 1), vf[0].float().transpose(0, 1)  # (hkv, c, d)
        s_ = torch.einsum("hd,hcd->hc", qf[0, 0].float(), kk.repeat_interleave(hq // hkv, 0)) * d ** -0.5
        ref = torch.einsum("hc,hcd->hd", torch.softmax(s_, -1), vv.repeat_interleave(hq // hkv, 0))
        err = (outs["planner"][0][0, 0].float() - ref).abs().max().item()
        assert err < 2e-2, f"{name}: planner kernel vs fp32 {err}"
        for n in kernels:
            diff = (outs[n][0].float() - outs["planner"][0].float()).abs().max().item()
            assert diff < 2e-2, f"{name}: {n} differs from the planner's kernel by {diff}"
        graphs = {}
        for n, kern in kernels.items():
            o, lse = outs[n]
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(a.calls):
                    kern(qf, kf, vf, o, lse, scale=d ** -0.5, stream=torch.cuda.current_stream().cuda_stream)
            graphs[n] = g
        names = list(graphs)
        med = replay_rounds(graphs, a.rounds, a.calls)
        kv_bytes = 2 * b * c * S * hkv * d * 2
        for n in names:
            rows.append(dict(impl=n, config=name, splits=S, us=round(med[n], 2),
                             tb_s=round(kv_bytes / (med[n] * 1e-6) / 1e12, 3),
                             vs_planner=round(med["planner"] / med[n], 3), gpu=gpu))
        print(f"{name:18s} S={S:2d} " + "  ".join(f"{n} {med[n]:.1f}us ({kv_bytes / med[n] / 1e6:.2f} TB/s)"
                                                 for n in names), flush=True)
        del graphs, outs
        torch.cuda.empty_cache()
    cols = ["impl", "config", "splits", "us", "tb_s", "vs_planner", "gpu"]
    with open(a.out, "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join(str(r[c_]) for c_ in cols) + "\n")


if __name__ == "__main__":
    main()
