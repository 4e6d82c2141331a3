#!/usr/bin/env python3
"""One-process benchmark of qattn variant kernels against FlexAttention with the same mask / score
function (issue 8): sliding window (several windows, and a sequence sweep at one window) and logit
softcapping (causal), bf16, head dim 128, 16k tokens per batch, 32 query heads / 8 kv heads.

    python3 bench/bench_variants.py WORK_DIR OUT.csv [--also LABEL=DIR ...]

WORK_DIR holds kernels written by `qattn generate ... --no-verify` (tests/gpu/variants_suite.sh):
window_<W>/ (window(W, 0)) and softcap/ (causal, softcap 30); they are the `qattn` rows. `--also
LABEL=DIR` times DIR's kernel of the same name on the same inputs in the same process (impl
`qattn_LABEL`, e.g. the sm80 path next to the sm90 one). Timing: CUDA events around 20 launches
after 5 warmups, median of 5 such runs; the implementations of one row are timed in 3 interleaved
rounds and each reports its median; fresh random inputs per configuration (never zeros).
FLOPs count the visible (query, key) pairs exactly: 4 * d * pairs per head (so window rows are
credited only for the keys they see); TFLOPS is that over the median time.
Columns: impl, config, hq, hkv, d_qk, d_v, dtype, causal, window, seqlen, batch, ms, tflops.
"""
import csv
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))
from qattn_lib import Kernel  # noqa: E402

HQ, HKV, D = 32, 8, 128
TOKENS = 16384


def timeit(fn, reps=20, runs=5):
    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / reps)
    return statistics.median(times)


def visible_pairs(s, window):  # per (batch, head): keys k with q - window <= k <= q
    if window is None:
        return s * (s + 1) / 2
    w = min(window, s - 1)
    return s * (w + 1) - w * (w + 1) / 2


def main():
    import argparse
    ap = argparse.ArgumentParser(description="qattn variant kernels vs FlexAttention, one process")
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=DIR",
                    help="also time DIR/<kernel> as impl qattn_LABEL")
    args = ap.parse_args()
    work, out = args.work, args.out
    also = []
    for a in args.also:
        label, _, d = a.partition("=")
        if not label or not os.path.isdir(d):
            sys.exit(f"--also {a!r}: expected LABEL=DIR with an existing DIR")
        also.append((label, d))
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    import torch._dynamo
    torch._dynamo.config.recompile_limit = 64  # one compile per (shape, mask, score) configuration
    torch._dynamo.config.cache_size_limit = 64
    flex = torch.compile(flex_attention, dynamic=False)
    rows = []

    def run(config, kern_dir, seqlen, window, softcap):
        batch = max(1, TOKENS // seqlen)
        g = torch.Generator(device="cuda").manual_seed(seqlen * 7 + (window or 0))
        q = torch.randn(batch, seqlen, HQ, D, generator=g, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, seqlen, HKV, D, generator=g, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, seqlen, HKV, D, generator=g, device="cuda", dtype=torch.bfloat16)
        o = torch.full_like(q, float("nan"))
        impls = [("qattn", kern_dir)] + [("qattn_" + lb, os.path.join(d, os.path.basename(kern_dir))) for lb, d in also]
        fns, errs = {}, {}
        for name, kd in impls:
            so = os.path.join(kd, "libqattn_kernel.so")
            if not os.path.exists(so):
                print(f"  {name}: no kernel at {so}: skipped", flush=True)
                continue
            kern = Kernel(so)
            ok_ = torch.full_like(q, float("nan"))
            p = kern.params(q, k, v, ok_, scale=D ** -0.5, window=(window, 0) if window is not None else None,
                            softcap=softcap)  # launch arguments (ignored by a kernel with them compiled in)
            assert kern(q, k, v, ok_, params=p) == 0, kern.last_error()
            fns[name] = (lambda kern=kern, ok_=ok_, p=p: kern(q, k, v, ok_, params=p))
            errs[name] = ok_
        o = errs["qattn"]

        if window is None:
            def mask_mod(b, h, qi, ki):
                return ki <= qi
        else:
            def mask_mod(b, h, qi, ki):
                return (ki <= qi) & (qi - ki <= window)
        bm = create_block_mask(mask_mod, None, None, seqlen, seqlen, device="cuda")
        score_mod = None
        if softcap:
            def score_mod(score, b, h, qi, ki):
                return softcap * torch.tanh(score / softcap)
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        ref = flex(qt, kt, vt, score_mod=score_mod, block_mask=bm, enable_gqa=True)
        err = max((ref.transpose(1, 2).float() - x.float()).abs().max().item() for x in errs.values())
        fns["flex"] = lambda: flex(qt, kt, vt, score_mod=score_mod, block_mask=bm, enable_gqa=True)
        samples = {n: [] for n in fns}
        order = list(fns)
        for r in range(3):  # interleaved rounds in rotating order: drift hits every implementation alike
            for n in order[r % len(order):] + order[:r % len(order)]:
                samples[n].append(timeit(fns[n]))
        times = {n: statistics.median(v) for n, v in samples.items()}
        t_q, t_f = times["qattn"], times["flex"]
        flops = 4 * D * visible_pairs(seqlen, window) * batch * HQ
        for impl, t in times.items():
            rows.append({"impl": impl, "config": config, "hq": HQ, "hkv": HKV, "d_qk": D, "d_v": D, "dtype": "bf16",
                         "causal": True, "window": window if window is not None else "", "seqlen": seqlen,
                         "batch": batch, "ms": f"{t:.4f}", "tflops": f"{flops / t / 1e9:.1f}"})
        extra = "".join(f", {n} {t:.3f} ms ({t_f / t:.2f}x)" for n, t in times.items() if n not in ("qattn", "flex"))
        print(f"{config:<16} seqlen {seqlen:>6} batch {batch:>2}: qattn {t_q:.3f} ms, flex {t_f:.3f} ms, "
              f"qattn/flex speedup {t_f / t_q:.2f}x{extra}, max|qattn - flex| {err:.2e}", flush=True)
        del q, k, v, o, errs, fns

    windows = sorted(int(d.split("_")[1]) for d in os.listdir(work) if d.startswith("window_") and os.path.isdir(os.path.join(work, d)))
    for w in windows:  # time vs window at 16k
        run(f"window_{w}", os.path.join(work, f"window_{w}"), 16384, w, None)
    if 1024 in windows:  # time vs seqlen at one window
        for s in (2048, 4096, 8192):
            run("window_1024", os.path.join(work, "window_1024"), s, 1024, None)
    if os.path.isdir(os.path.join(work, "softcap")):
        for s in (2048, 4096, 8192, 16384):
            run("softcap_causal", os.path.join(work, "softcap"), s, None, 30.0)
    with open(out, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(rows)
    print(f"wrote {out} ({len(rows)} rows); device {torch.cuda.get_device_name()}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
