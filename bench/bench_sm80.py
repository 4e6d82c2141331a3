#!/usr/bin/env python3
"""qattn's sm80 kernels vs torch SDPA (FlashAttention-2 backend, cuDNN backend), in one process.

    python3 bench/bench_sm80.py KERNEL_DIR [--seqlens 1024,2048,4096,8192,16384] [--tokens 16384]
                                [--heads 32] [--reps 1] [--out bench/results]

KERNEL_DIR holds the libraries of tests/gpu/build_kernels.sh; the kernel for each (head dim, causal)
row is found through qattn_kernel_info() among the files --match selects (bf16, sm80, no LSE
preferred). Shapes: batch * seqlen =
--tokens, heads_q = heads_kv = --heads, BSHD. Timing: triton.testing.do_bench median (ms). FLOPs =
4 * batch * heads * seqlen^2 * d (halved for causal). Each config is checked against SDPA once before
it is timed. Writes <out>/<date>-<gpu>/results.csv (impl,config,hq,hkv,d_qk,d_v,dtype,causal,seqlen,
batch,tflops) and prints the ratio qattn / FA2 per row.
"""
import argparse
import csv
import datetime
import glob
import os
import re
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
from qattn_lib import Kernel  # noqa: E402

try:
    from triton.testing import do_bench
except ImportError:  # fallback: CUDA events, median of 50
    def do_bench(fn, warmup=25, rep=100):
        for _ in range(5):
            fn()
        ts = []
        for _ in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        return sorted(ts)[len(ts) // 2]


def find_kernels(kdir, match, arch="sm80", same_dims=True):
    """{(d_qk, d_v, causal) or (d, causal): Kernel} of the bf16 libraries in kdir named by `match`."""
    found = {}
    for path in sorted(glob.glob(os.path.join(kdir, "*.so"))):
        if not re.search(match, os.path.basename(path)):  # e.g. neg_* (broken TL), other tile choices
            continue
        k = Kernel(path)
        i = k.info
        if i["arch"] != arch or i["dtype"] != "bf16" or (same_dims and i["d_qk"] != i["d_v"]) or \
                i["mask"] not in ("causal", "none"):
            continue
        key = (i["d_qk"], i["mask"] == "causal") if same_dims else (i["d_qk"], i["d_v"], i["mask"] == "causal")
        if key not in found or (found[key].info["lse"] and not i["lse"]):
            found[key] = k
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel_dir")
    ap.add_argument("--seqlens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--no-cudnn", action="store_true")
    ap.add_argument("--match", default=r"^sm80_d(64|128)_(causal|none)(_lse)?\.so$",
                    help="regex on the library file names to benchmark (default: the planner's sm80 configs)")
    args = ap.parse_args()
    kernels = find_kernels(args.kernel_dir, args.match)
    if not kernels:
        print(f"no sm80 bf16 kernels in {args.kernel_dir}", file=sys.stderr)
        return 1
    gpu = torch.cuda.get_device_name()
    tag = datetime.date.today().isoformat() + "-" + re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_").lower()
    out_dir = os.path.join(args.out, tag)
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    print(f"{gpu}, torch {torch.__version__}; TFLOPS (do_bench median)")
    print(f"{'d':>4} {'causal':>6} {'seqlen':>6} {'batch':>5} {'qattn':>7} {'fa2':>7} {'cudnn':>7} {'qattn/fa2':>9}")
    h = args.heads
    for (d, causal), kern in sorted(kernels.items()):
        for s in (int(x) for x in args.seqlens.split(",")):
            b = max(1, args.tokens // s)
            q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
            o = torch.empty_like(q)
            params = kern.params(q, k, v, o)
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            st = kern(q, k, v, o, params=params)
            torch.cuda.synchronize()
            if st != 0:
                print(f"qattn failed: {kern.last_error()}", file=sys.stderr)
                return 1
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
            diff = (o.float() - ref.float()).abs().max().item()
            if not diff < 2e-2:
                print(f"d{d} causal={causal} s{s}: qattn differs from SDPA by {diff:.3e}", file=sys.stderr)
                return 1
            res = {}
            res["qattn"] = do_bench(lambda: kern(q, k, v, o, params=params))
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                res["fa2"] = do_bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
            if not args.no_cudnn:
                try:
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        res["cudnn"] = do_bench(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
                except RuntimeError:
                    pass
            tf = {impl: flops / (ms * 1e-3) / 1e12 for impl, ms in res.items()}
            for impl, t in tf.items():
                rows.append([impl, f"mha_d{d}", h, h, d, d, "bf16", int(causal), s, b, f"{t:.1f}"])
            print(f"{d:>4} {str(causal):>6} {s:>6} {b:>5} {tf['qattn']:7.1f} {tf['fa2']:7.1f} {tf.get('cudnn', float('nan')):7.1f} "
                  f"{tf['qattn'] / tf['fa2']:9.3f}", flush=True)
            del q, k, v, o, qt, kt, vt, ref
    path = os.path.join(out_dir, "results.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["impl", "config", "hq", "hkv", "d_qk", "d_v", "dtype", "causal", "seqlen", "batch", "tflops"])
        w.writerows(rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
