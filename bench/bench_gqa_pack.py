#!/usr/bin/env python3
"""GQA packing on Hopper: qattn's sm90 kernel with the TL `{pack: heads_q / heads_kv}` (a tile holds the
query heads of one kv head) against the same schedule without packing, cuDNN and FlashAttention-2, in
one process, for short query sequences over a long KV cache (decoding, chunked prefill).

    python3 bench/bench_gqa_pack.py KERNEL_DIR [--seqlens-q 1,16,64,128,512] [--seqlens-k 4096,16384]
                                     [--batch 8] [--out bench/results]

KERNEL_DIR holds the libraries of tests/gpu/build_kernels.sh: sm90pk_d128_none / sm90pk_d64_none (the
planner's TL for a spec with a short `problem.seqlen_q`, which packs) and sm90_d128_none /
sm90_d64_none (no `problem`: one query head per tile). Non-causal: every query sees the whole cache
(torch's SDPA aligns a causal mask top-left, which is not the chunked-prefill mask, so the baselines
would compute another function). Inputs bf16, BSHD, fresh torch.randn per shape; each implementation
is checked against SDPA before it is timed; timing as bench_sm90.py `--method paired` (15 rounds of
~6 ms batches, adjacent in time; ratios are medians of per-round ratios). Writes
<out>/<date>-<gpu>-gqa-pack/results.csv (impl, config, hq, hkv, d, seqlen_q, seqlen_k, batch, us,
tflops) and summary.md.
"""
import argparse
import csv
import datetime
import math
import os
import re
import sys

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sm80 import find_kernels  # noqa: E402
from bench_sm90 import paired_ratio, sdpa, timed_paired  # noqa: E402

# name: (hq, hkv, d)
CONFIGS = {
    "llama3_8b": (32, 8, 128),     # GQA 4
    "qwen2.5_72b": (64, 8, 128),   # GQA 8
    "mqa_16_1": (16, 1, 128),      # MQA (a group of 16)
    "llama3.2_1b": (32, 8, 64),    # GQA 4, d 64
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel_dir")
    ap.add_argument("--seqlens-q", default="1,16,64,128,512")
    ap.add_argument("--seqlens-k", default="4096,16384")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    packed = find_kernels(args.kernel_dir, r"^sm90pk_d(64|128)_none\.so$", arch="sm90", same_dims=False)
    plain = find_kernels(args.kernel_dir, r"^sm90_d(64|128)_none\.so$", arch="sm90", same_dims=False)
    if not packed or not plain:
        print(f"need sm90pk_d*_none.so and sm90_d*_none.so in {args.kernel_dir} (tests/gpu/build_kernels.sh)",
              file=sys.stderr)
        return 1
    gpu = torch.cuda.get_device_name()
    tag = datetime.date.today().isoformat() + "-" + re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_").lower() + "-gqa-pack"
    out_dir = os.path.join(args.out, tag)
    os.makedirs(out_dir, exist_ok=True)
    head = (f"{gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; bf16, non-causal, batch {args.batch}; "
            f"timing: paired batches, {args.rounds} rounds, ratios = median of per-round ratios")
    print(head, flush=True)
    print(f"{'config':>12} {'sq':>4} {'sk':>6} {'packed us':>9} {'plain us':>9} {'cudnn us':>9} {'fa2 us':>8} "
          f"{'pk/plain':>8} {'pk/cudnn':>8} {'pk/fa2':>7}", flush=True)
    rows, table = [], []
    for name in args.configs.split(","):
        hq, hkv, d = CONFIGS[name]
        kp, ku = packed.get((d, d, False)), plain.get((d, d, False))
        if kp is None or ku is None:
            print(f"{name}: no d{d} kernels", file=sys.stderr)
            continue
        for sk in (int(x) for x in args.seqlens_k.split(",")):
            for sq in (int(x) for x in args.seqlens_q.split(",")):
                bt = args.batch
                q = torch.randn(bt, sq, hq, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(bt, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
                v = torch.randn(bt, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                ref = sdpa(SDPBackend.MATH, qt.float(), kt.float(), vt.float(), False, True).transpose(1, 2)
                fns = {}
                for impl, kern in (("qattn_packed", kp), ("qattn", ku)):
                    o = torch.full((bt, sq, hq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
                    p = kern.params(q, k, v, o)
                    if kern(q, k, v, o, params=p) != 0:
                        print(f"{impl} failed: {kern.last_error()}", file=sys.stderr)
                        return 1
                    torch.cuda.synchronize()
                    diff = (o.float() - ref).abs().max().item()
                    if not diff < 2e-2:
                        print(f"{impl} {name} sq{sq} sk{sk}: differs from the fp32 reference by {diff:.3e}", file=sys.stderr)
                        return 1
                    fns[impl] = (lambda kern, o, p: lambda: kern(q, k, v, o, params=p))(kern, o, p)
                for impl, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                    try:
                        out = sdpa(backend, qt, kt, vt, False, True).transpose(1, 2)
                        if not (out.float() - ref).abs().max().item() < 2e-2:
                            raise RuntimeError("differs from the fp32 reference")
                        fns[impl] = (lambda backend: lambda: sdpa(backend, qt, kt, vt, False, True))(backend)
                    except RuntimeError as e:
                        print(f"{impl} unavailable for {name} sq{sq} sk{sk}: {str(e).splitlines()[0]}", file=sys.stderr)
                res, per = timed_paired(fns, args.rounds)
                flops = 4 * bt * hq * sq * sk * d
                for impl, ms in res.items():
                    rows.append([impl, name, hq, hkv, d, sq, sk, bt, f"{ms * 1e3:.1f}", f"{flops / (ms * 1e-3) / 1e12:.2f}"])
                r = {den: paired_ratio(per, "qattn_packed", den) for den in ("qattn", "cudnn", "fa2")}
                us = {impl: res.get(impl, float("nan")) * 1e3 for impl in ("qattn_packed", "qattn", "cudnn", "fa2")}
                table.append((name, sq, sk, us, r))
                print(f"{name:>12} {sq:>4} {sk:>6} {us['qattn_packed']:9.1f} {us['qattn']:9.1f} {us['cudnn']:9.1f} "
                      f"{us['fa2']:8.1f} {r['qattn']:8.2f} {r['cudnn']:8.2f} {r['fa2']:7.2f}", flush=True)
                del q, k, v, qt, kt, vt, ref, fns
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["impl", "config", "hq", "hkv", "d", "seqlen_q", "seqlen_k", "batch", "us", "tflops"])
        w.writerows(rows)

    def geo(xs):
        xs = [x for x in xs if x == x]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    lines = [f"# qattn GQA packing (sm90) vs one head per tile, cuDNN and FA2 ({datetime.date.today().isoformat()})", "",
             head, "", "Times in microseconds (median of rounds); ratios = speed of the packed kernel over the other.", "",
             "| config | seqlen_q | seqlen_k | packed | unpacked | cuDNN | FA2 | packed/unpacked | packed/cuDNN | packed/FA2 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, sq, sk, us, r in table:
        lines.append(f"| {name} | {sq} | {sk} | {us['qattn_packed']:.1f} | {us['qattn']:.1f} | {us['cudnn']:.1f} | "
                     f"{us['fa2']:.1f} | {r['qattn']:.2f} | {r['cudnn']:.2f} | {r['fa2']:.2f} |")
    lines += [""]
    for lo, hi, what in ((1, 64, "seqlen_q <= 64"), (65, 1 << 30, "seqlen_q > 64")):
        sel = [t for t in table if lo <= t[1] <= hi]
        lines.append(f"- {what}: geometric mean packed/unpacked {geo([t[4]['qattn'] for t in sel]):.2f}, "
                     f"packed/cuDNN {geo([t[4]['cudnn'] for t in sel]):.2f}, packed/FA2 {geo([t[4]['fa2'] for t in sel]):.2f}")
    lines.append("")
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines[-3:]))
    print(f"wrote {out_dir}/results.csv and summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
