#!/usr/bin/env python3
"""qattn's Hopper (sm90a: TMA + wgmma, warp-specialised) kernels vs cuDNN and FlashAttention-2, in one
process, over the configurations of ../shared/reference/anchors.md.

    python3 bench/bench_sm90.py KERNEL_DIR [--seqlens 512,1024,2048,4096,8192,16384] [--tokens 16384]
                                [--configs mha_d128,gqa_64_8,...] [--out bench/results]

KERNEL_DIR holds the sm90 libraries of tests/gpu/build_kernels.sh (one per head dims and causal; heads
are a launch parameter, so one kernel serves MHA, GQA and MQA). Inputs: bf16, BSHD, batch * seqlen =
--tokens, fresh torch.randn per shape. Every (config, seqlen) is first checked against SDPA (cuDNN for
MLA, whose head dims differ) and then timed with triton.testing.do_bench (median); FLOPs =
2 * batch * hq * s^2 * (d_qk + d_v), halved for causal. The bf16 GEMM ceiling (8192^3 torch.matmul)
is measured in the same process. Timing (--method): `paired` (default) runs, in each of 15 rounds, a
~6 ms batch of launches of every implementation back to back (rotating order) and reports median
times and the median of the per-round ratios (both sides of a ratio saw the same clocks); `rounds`
times every implementation with do_bench 3 times, interleaved: single do_bench timings of one kernel
drift by up to 10% on a lent H100, and ratios of rows measured seconds apart by +-5%. Writes <out>/<date>-<gpu>/results.csv (impl, config, hq, hkv, d_qk,
d_v, dtype, causal, seqlen, batch, tflops) and summary.md (the table, ratios, geometric means).
"""
import argparse
import csv
import datetime
import math
import os
import re
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sm80 import do_bench, find_kernels  # noqa: E402

# name: (hq, hkv, d_qk, d_v) as in anchors.md
CONFIGS = {
    "mha_d128": (32, 32, 128, 128),      # Llama-2-7B
    "gqa_64_8": (64, 8, 128, 128),       # Qwen2.5-72B
    "gqa_128_8": (128, 8, 128, 128),     # Llama-3.1-405B
    "mqa_32_1": (32, 1, 128, 128),
    "mha_d64": (32, 32, 64, 64),
    "mha_d256": (16, 16, 256, 256),
    "mla_192_128": (128, 128, 192, 128),  # DeepSeek-V3 MLA prefill
}


def sdpa(backend, q, k, v, causal, gqa):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def median_ms(fn):
    try:
        return do_bench(fn, return_mode="median")  # triton: the median, not the mean, of its runs
    except TypeError:
        return do_bench(fn)  # the CUDA-event fallback of bench_sm80 (a median already)


def timed_rounds(fns, rounds):
    """{impl: ms}: each implementation timed `rounds` times (do_bench, median of its runs), the
    implementations interleaved in a rotating order so that clock and thermal drift during a row
    does not favour one of them; the median over the rounds."""
    names = list(fns)
    ts = {n: [] for n in names}
    for r in range(max(1, rounds)):
        for n in names[r % len(names):] + names[:r % len(names)]:
            ts[n].append(median_ms(fns[n]))
    return {n: sorted(v)[len(v) // 2] for n, v in ts.items()}


def timed_paired(fns, rounds, target_ms=6.0):
    """({impl: ms}, {impl: [ms per round]}): R rounds; in each, every implementation runs a batch of
    back-to-back launches (about target_ms long) between two CUDA events, the implementations
    adjacent in time and in rotating order, all enqueued before one synchronisation. A ratio of two
    implementations is then taken per round (both saw the same clocks) and its median reported:
    the lent H100's clocks move by several percent between do_bench calls a second apart."""
    names = list(fns)
    per = {}
    for n in names:  # warm-up, and the batch size from one timed launch
        fns[n]()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fns[n]()
        b.record()
        torch.cuda.synchronize()
        per[n] = max(1, min(200, int(target_ms / max(a.elapsed_time(b), 1e-3))))
    evs = {n: [] for n in names}
    for r in range(max(1, rounds)):
        for n in names[r % len(names):] + names[:r % len(names)]:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(per[n]):
                fns[n]()
            b.record()
            evs[n].append((a, b))
    torch.cuda.synchronize()
    ts = {n: [a.elapsed_time(b) / per[n] for a, b in evs[n]] for n in names}
    return {n: sorted(v)[len(v) // 2] for n, v in ts.items()}, ts


def paired_ratio(ts, num, den):
    """Median over rounds of ts[den][r] / ts[num][r] (speed of num relative to den)."""
    if num not in ts or den not in ts:
        return float("nan")
    xs = sorted(d / n for n, d in zip(ts[num], ts[den]))
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel_dir")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--match", default=r"^sm90_(d\d+|mla)_(causal|none)(_lse)?\.so$")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=REGEX",
                    help="also time the kernels matching REGEX in the same process, as impl qattn_NAME "
                         "(e.g. persistent=^sm90p_...): an A/B of two TL schedules")
    ap.add_argument("--method", choices=("paired", "rounds"), default="paired",
                    help="paired (default): batches of launches of every implementation adjacent in time, ratios "
                         "per round, median; rounds: one do_bench median per implementation and round")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds (default 15 paired, 3 with --method rounds), implementations interleaved in rotating order")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    kernels = find_kernels(args.kernel_dir, args.match, arch="sm90", same_dims=False)
    if not kernels:
        print(f"no sm90 bf16 kernels in {args.kernel_dir}", file=sys.stderr)
        return 1
    also = {}
    for spec in args.also:
        name, _, rx = spec.partition("=")
        if not name or not rx:
            print(f"--also wants NAME=REGEX, got {spec!r}", file=sys.stderr)
            return 2
        also["qattn_" + name] = find_kernels(args.kernel_dir, rx, arch="sm90", same_dims=False)
    gpu = torch.cuda.get_device_name()
    tag = datetime.date.today().isoformat() + "-" + re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_").lower() + "-sm90"
    out_dir = os.path.join(args.out, tag)
    os.makedirs(out_dir, exist_ok=True)

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    gemm = 2 * 8192 ** 3 / (do_bench(lambda: a @ b) * 1e-3) / 1e12
    del a, b
    head = (f"{gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; bf16 GEMM 8192^3: {gemm:.0f} TFLOPS; "
            + ("timing: paired batches, %d rounds, ratios = median of per-round ratios" % (args.rounds or 15)
               if args.method == "paired" else "timing: do_bench medians, %d interleaved rounds" % (args.rounds or 3)))
    print(head, flush=True)
    print(f"{'config':>12} {'causal':>6} {'seqlen':>6} {'qattn':>7} {'cudnn':>7} {'fa2':>7} {'q/cudnn':>7} {'q/fa2':>6}"
          + "".join(f" {n:>16}" for n in also), flush=True)
    rows, table = [], []
    for name in args.configs.split(","):
        hq, hkv, dqk, dv = CONFIGS[name]
        for causal in (bool(int(c)) for c in args.causal.split(",")):
            kern = kernels.get((dqk, dv, causal))
            if kern is None:
                print(f"{name}: no kernel for d {dqk}/{dv} causal={causal}", file=sys.stderr)
                continue
            for s in (int(x) for x in args.seqlens.split(",")):
                bt = max(1, args.tokens // s)
                q = torch.randn(bt, s, hq, dqk, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(bt, s, hkv, dqk, device="cuda", dtype=torch.bfloat16)
                v = torch.randn(bt, s, hkv, dv, device="cuda", dtype=torch.bfloat16)
                o = torch.full((bt, s, hq, dv), float("nan"), device="cuda", dtype=torch.bfloat16)
                params = kern.params(q, k, v, o)
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                gqa = hq != hkv
                st = kern(q, k, v, o, params=params)
                torch.cuda.synchronize()
                if st != 0:
                    print(f"qattn failed: {kern.last_error()}", file=sys.stderr)
                    return 1
                ref_backend = SDPBackend.CUDNN_ATTENTION if dqk != dv else SDPBackend.FLASH_ATTENTION
                ref = sdpa(ref_backend, qt, kt, vt, causal, gqa).transpose(1, 2)
                diff = (o.float() - ref.float()).abs().max().item()
                if not diff < 2e-2:
                    print(f"{name} causal={causal} s{s}: qattn differs from SDPA by {diff:.3e}", file=sys.stderr)
                    return 1
                flops = 2 * bt * hq * s * s * (dqk + dv) / (2 if causal else 1)
                fns = {"qattn": lambda: kern(q, k, v, o, params=params)}
                for impl, ks in also.items():
                    alt = ks.get((dqk, dv, causal))
                    if alt is None:
                        continue
                    o2 = torch.full_like(o, float("nan"))
                    p2 = alt.params(q, k, v, o2)
                    if alt(q, k, v, o2, params=p2) != 0 or not (o2.float() - ref.float()).abs().max().item() < 2e-2:
                        print(f"{impl} {name} causal={causal} s{s}: failed or differs from SDPA", file=sys.stderr)
                        return 1
                    fns[impl] = (lambda alt, o2, p2: lambda: alt(q, k, v, o2, params=p2))(alt, o2, p2)
                for impl, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                    if impl == "fa2" and dqk != dv:
                        continue  # FA2 has no 192/128 kernel
                    try:
                        sdpa(backend, qt, kt, vt, causal, gqa)
                        fns[impl] = (lambda backend: lambda: sdpa(backend, qt, kt, vt, causal, gqa))(backend)
                    except RuntimeError as e:
                        print(f"{impl} unavailable for {name}: {str(e).splitlines()[0]}", file=sys.stderr)
                if args.method == "paired":
                    res, per_round = timed_paired(fns, args.rounds or 15)
                    ratio = lambda a, b: paired_ratio(per_round, a, b)  # noqa: E731
                else:
                    res = timed_rounds(fns, args.rounds or 3)
                    ratio = lambda a, b: res[b] / res[a] if a in res and b in res else float("nan")  # noqa: E731
                tf = {impl: flops / (ms * 1e-3) / 1e12 for impl, ms in res.items()}
                for impl, t in tf.items():
                    rows.append([impl, name, hq, hkv, dqk, dv, "bf16", int(causal), s, bt, f"{t:.1f}"])
                rc = ratio("qattn", "cudnn")
                rf = ratio("qattn", "fa2")
                alt_r = [ratio(n, "cudnn") for n in also]
                table.append((name, causal, s, tf["qattn"], tf.get("cudnn", float("nan")), tf.get("fa2", float("nan")), rc, rf,
                              alt_r))
                print(f"{name:>12} {str(causal):>6} {s:>6} {tf['qattn']:7.1f} {tf.get('cudnn', float('nan')):7.1f} "
                      f"{tf.get('fa2', float('nan')):7.1f} {rc:7.3f} {rf:6.3f}" + "".join(f" {x:16.3f}" for x in alt_r), flush=True)
                del q, k, v, o, qt, kt, vt, ref
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["impl", "config", "hq", "hkv", "d_qk", "d_v", "dtype", "causal", "seqlen", "batch", "tflops"])
        w.writerows(rows)

    def geo(xs):
        xs = [x for x in xs if x == x]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    lines = [f"# qattn sm90 vs cuDNN and FA2 ({datetime.date.today().isoformat()})", "", head, "",
             "| config | causal | seqlen | qattn | cuDNN | FA2 | qattn/cuDNN | qattn/FA2 |" + "".join(f" {n}/cuDNN |" for n in also),
             "|---|---|---|---|---|---|---|---|" + "---|" * len(also)]
    for r in table:
        lines.append(f"| {r[0]} | {'yes' if r[1] else 'no'} | {r[2]} | {r[3]:.0f} | {r[4]:.0f} | {r[5]:.0f} | {r[6]:.3f} | {r[7]:.3f} |"
                     + "".join(f" {x:.3f} |" for x in r[8]))
    d128 = [r[6] for r in table if CONFIGS[r[0]][2] == 128 and CONFIGS[r[0]][3] == 128 and r[2] >= 2048]
    lines += ["", f"- geometric mean qattn/cuDNN over the sweep: {geo([r[6] for r in table]):.3f}",
              f"- geometric mean qattn/FA2 over the sweep: {geo([r[7] for r in table]):.3f}",
              f"- head dim 128, seqlen >= 2k: min qattn/cuDNN {min(d128) if d128 else float('nan'):.3f}, "
              f"geomean {geo(d128):.3f}"]
    for i, n in enumerate(also):
        d128a = [r[8][i] for r in table if CONFIGS[r[0]][2] == 128 and CONFIGS[r[0]][3] == 128 and r[2] >= 2048]
        lines.append(f"- {n}: geometric mean /cuDNN over the sweep {geo([r[8][i] for r in table]):.3f}; head dim 128, "
                     f"seqlen >= 2k: min {min(d128a) if d128a else float('nan'):.3f}, geomean {geo(d128a):.3f}")
    lines.append("")
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines[-4 - len(also):]))
    print(f"wrote {out_dir}/results.csv and summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
