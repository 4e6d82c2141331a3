#!/usr/bin/env python3
"""Issue 19's training benchmark: qattn.attention's backward (and forward + backward) through autograd,
against torch SDPA's cuDNN and FlashAttention-2 backends and FlexAttention, in one process.

    python3 bench/bench_backward.py OUT.csv [--seqlens 2048,8192] [--configs NAME,...] [--no-variants]
                                    [--variants softcap,window,document] [--also NAME=DEVICE_DIR[:QATTN_BIN] ...]
                                    [--timing synced,queued]
    python3 bench/bench_backward.py --warm I      # builds job I's kernels first (one process per job)
    python3 bench/bench_backward.py --jobs        # how many --warm jobs there are

Shapes follow the anchors (shared/reference/anchors.md): batch * seqlen = 16k tokens, bf16. Passes:
`bwd` times torch.autograd.grad of a recorded graph (retain_graph: the backward alone, as a training
step pays it, zeroing and dtype conversions included); `fwd+bwd` the forward and that backward.
FLOPs: forward 2 * b * hq * sq * sk * (d_qk + d_v), backward 2 * b * hq * sq * sk * (3 d_qk + 2 d_v)
(2.5x the forward's when d_qk = d_v), both scaled by the fraction of (query, key) pairs the mask keeps
(1/2 + 1/(2 s) for causal; counted exactly for windows and documents). The variants (softcap, sliding
window, documents; forward + backward) compare with FlexAttention compiled with the same functions.
Implementations that refuse a shape (FA2 at d_v != d_qk, ...) are skipped with their reason. The
variants also time the forward alone (pass `fwd`, no grad). --also (bench_runtimes.py): the variants
with the kernels of another runtime too (e.g. the parent commit's device/ and qattn compiler), as impl
qattn@NAME, in the same process. Timing (--timing, both by default, a row each): `synced` times each
call alone on an idle GPU (CUDA events around it, synchronised after it; the median of 10), so the
host time before and between its kernels shows as idle GPU; `queued` issues 10 calls back to back, as
a training step issues its work, and divides their span by 10 (the median of 3 rounds). Columns:
impl, pass, config, variant, hq, hkv, d_qk, d_v, dtype, causal, seqlen, batch, ms, tflops, timing.
"""
import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qattn  # noqa: E402
from bench_runtimes import RUNTIMES, add_runtimes, check_runtimes, in_runtime  # noqa: E402
from bench_util import write_csv  # noqa: E402

TOKENS = 16384
# name, heads_q, heads_kv, d_qk, d_v (the anchors' configurations; MLA prefill with 16 heads)
CONFIGS = [("llama2-7b-mha", 32, 32, 128, 128), ("qwen2.5-72b-gqa", 64, 8, 128, 128), ("mqa", 32, 1, 128, 128),
           ("mha-d64", 32, 32, 64, 64), ("mha-d256", 16, 16, 256, 256), ("mla-prefill", 16, 16, 192, 128)]
# not in the default table (issue 19's geomean is over the configs above): V wider than Q and K
EXTRA_CONFIGS = [("gqa-64-128", 32, 8, 64, 128), ("mha-128-256", 16, 16, 128, 256)]
# variant name, qattn keyword arguments (built from the shape), the same as FlexAttention functions
VARIANTS = ["softcap", "window", "document"]
COLS = ["impl", "pass", "config", "variant", "hq", "hkv", "d_qk", "d_v", "dtype", "causal", "seqlen", "batch", "ms", "tflops",
        "timing"]


def timeit(fn, reps=10):
    """Synced: the median of reps calls, each timed alone on an idle GPU (its host time before and
    between its kernels shows as GPU idle): timeit_queued with one call a round."""
    return timeit_queued(fn, reps=1, rounds=reps)


def timeit_queued(fn, reps=10, rounds=3):
    """Queued: reps calls issued back to back (no synchronisation between them, as a training step
    issues its work) timed end to end, divided by reps; the median of rounds."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / reps)
    return statistics.median(ts)


TIMERS = {"synced": timeit, "queued": timeit_queued}


def inputs(b, s, hq, hk, dqk, dv, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, s, hq, dqk, generator=g, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hk, dqk, generator=g, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hk, dv, generator=g, device="cuda", dtype=torch.bfloat16)
    dout = torch.randn(b, s, hq, dv, generator=g, device="cuda", dtype=torch.bfloat16)
    return q, k, v, dout


def document_ids(b, s):
    """4 documents per row at fixed boundaries (s/8, s/2, 3s/4): the same for qattn and Flex."""
    seg = torch.zeros(b, s, dtype=torch.int32, device="cuda")
    for e in (s // 8, s // 2, 3 * s // 4):
        seg[:, e:] += 1
    return seg


def variant_setup(name, b, s):
    """(qattn kwargs, causal, flex score_mod, flex mask_mod, kept fraction of (q, k) pairs)."""
    qi = torch.arange(s, device="cuda")[:, None]
    ki = torch.arange(s, device="cuda")[None, :]
    if name == "softcap":
        def score_mod(score, bb, h, q_idx, kv_idx):
            return 30.0 * torch.tanh(score / 30.0)

        def mask_mod(bb, h, q_idx, kv_idx):
            return kv_idx <= q_idx
        return {"softcap": 30.0}, True, score_mod, mask_mod, (ki <= qi).float().mean().item()
    if name == "window":
        w = 1024

        def mask_mod(bb, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (q_idx - kv_idx <= w)
        return {"window": (w, 0)}, False, None, mask_mod, ((ki <= qi) & (qi - ki <= w)).float().mean().item()
    seg = document_ids(b, s)

    def mask_mod(bb, h, q_idx, kv_idx):
        return (seg[bb, q_idx] == seg[bb, kv_idx]) & (kv_idx <= q_idx)
    keep = ((seg[0][:, None] == seg[0][None, :]) & (ki <= qi)).float().mean().item()
    return {"segment_ids": (seg, seg)}, True, None, mask_mod, keep


def jobs(seqlens, configs, variants):
    """The kernel builds the benchmark needs, one warm job each: (config, causal, variant or None)."""
    out = [(c, causal, None) for c in configs for causal in (False, True)]
    out += [(CONFIGS[0], None, v) for v in variants]
    return out


def warm(job):
    """One small forward + backward of the job's kernels (the disk cache keeps them for the bench)."""
    (name, hq, hk, dqk, dv), causal, var = job
    q, k, v, dout = inputs(1, 256, hq, hk, dqk, dv, 0)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    if var is None:
        kw, c = {}, causal
    else:
        kw, c, _, _, _ = variant_setup(var, 1, 256)
    o = qattn.attention(q, k, v, causal=c, **kw)
    torch.autograd.grad(o, (q, k, v), dout)
    print(f"warm {name} causal={causal} variant={var}: built", flush=True)


def flops(b, hq, s, dqk, dv, keep):
    fwd = 2.0 * b * hq * s * s * (dqk + dv) * keep
    bwd = 2.0 * b * hq * s * s * (3 * dqk + 2 * dv) * keep
    return fwd, bwd


def time_impl(fwd_fn, q, k, v, dout, timer=timeit):
    """(bwd ms, fwd+bwd ms) of an autograd forward fwd_fn(q, k, v) -> o."""
    qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o = fwd_fn(qs, ks, vs)
    t_bwd = timer(lambda: torch.autograd.grad(o, (qs, ks, vs), dout, retain_graph=True))

    def both():
        o2 = fwd_fn(qs, ks, vs)
        torch.autograd.grad(o2, (qs, ks, vs), dout)
    return t_bwd, timer(both)


def sdpa_fn(backend, causal, hq, hk):
    from torch.nn.attention import sdpa_kernel

    def fn(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal,
                                                  enable_gqa=hq != hk).transpose(1, 2)
    return fn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--seqlens", default="2048,8192")
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS))
    ap.add_argument("--no-variants", action="store_true")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DEVICE_DIR[:QATTN_BIN]")
    ap.add_argument("--timing", default="synced,queued",
                    help="synced (each call alone on an idle GPU), queued (calls back to back), or both")
    ap.add_argument("--warm", type=int)
    ap.add_argument("--jobs", action="store_true")
    args = ap.parse_args()
    seqlens = [int(x) for x in args.seqlens.split(",")]
    names = [n for n in args.configs.split(",") if n]  # (--configs '': the variants alone)
    known = CONFIGS + EXTRA_CONFIGS
    unknown = [n for n in names if n not in [c[0] for c in known]]
    if unknown:
        sys.exit(f"unknown config {unknown[0]!r}: one of {', '.join(c[0] for c in known)}")
    configs = [c for c in known if c[0] in names]
    variants = [v for v in args.variants.split(",") if v]
    timings = [t for t in args.timing.split(",") if t]
    if not timings or any(t not in TIMERS for t in timings):
        sys.exit(f"--timing: one or more of {', '.join(TIMERS)}, got {args.timing!r}")
    if any(v not in VARIANTS for v in variants):
        sys.exit(f"--variants: one or more of {', '.join(VARIANTS)}, got {args.variants!r}")
    add_runtimes(args.also, sys.exit)
    todo = jobs(seqlens, configs, [] if args.no_variants else variants)
    if args.jobs:
        print(len(todo))
        return 0
    if args.warm is not None:
        warm(todo[args.warm])
        return 0
    if not args.out:
        sys.exit("usage: bench_backward.py OUT.csv [--seqlens ...] (or --warm I / --jobs)")
    from torch.nn.attention import SDPBackend
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}",
          flush=True)
    rows = []

    def record(impl, pas, cfg, variant, causal, s, b, ms, fl, timing):
        name, hq, hk, dqk, dv = cfg
        rows.append({"impl": impl, "pass": pas, "config": name, "variant": variant, "hq": hq, "hkv": hk, "d_qk": dqk,
                     "d_v": dv, "dtype": "bf16", "causal": causal, "seqlen": s, "batch": b, "ms": f"{ms:.4f}",
                     "tflops": f"{fl / ms / 1e9:.1f}", "timing": timing})
        write_csv(args.out, rows, COLS)  # after every row: a timeout keeps what was measured

    for cfg in configs:
        name, hq, hk, dqk, dv = cfg
        for s in seqlens:
            b = max(1, TOKENS // s)
            for causal in (False, True):
                q, k, v, dout = inputs(b, s, hq, hk, dqk, dv, s + causal)
                keep = 0.5 + 0.5 / s if causal else 1.0
                f_fwd, f_bwd = flops(b, hq, s, dqk, dv, keep)
                impls = [("qattn", lambda q_, k_, v_: qattn.attention(q_, k_, v_, causal=causal))]
                impls += [(lb, sdpa_fn(be, causal, hq, hk)) for lb, be in
                          (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION))]
                for timing in timings:
                    line = []
                    for impl, fn in impls:
                        try:
                            tb, tfb = time_impl(fn, q, k, v, dout, TIMERS[timing])
                        except (RuntimeError, qattn.QattnError) as e:
                            line.append(f"{impl} skipped ({str(e).splitlines()[0][:80]})")
                            continue
                        record(impl, "bwd", cfg, "", causal, s, b, tb, f_bwd, timing)
                        record(impl, "fwd+bwd", cfg, "", causal, s, b, tfb, f_fwd + f_bwd, timing)
                        line.append(f"{impl} bwd {f_bwd / tb / 1e9:.1f} fwd+bwd {(f_fwd + f_bwd) / tfb / 1e9:.1f}")
                    print(f"{name} s{s} b{b} causal={causal} ({timing}): " + "; ".join(line), flush=True)
                del q, k, v, dout
    if not args.no_variants:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
        cfg = CONFIGS[0]
        name, hq, hk, dqk, dv = cfg
        s = 4096
        b = TOKENS // s
        for var in variants:
            q, k, v, dout = inputs(b, s, hq, hk, dqk, dv, 7)
            kw, causal, score_mod, mask_mod, keep = variant_setup(var, b, s)
            bm = create_block_mask(mask_mod, b if var == "document" else None, None, s, s, device="cuda")
            f_fwd, f_bwd = flops(b, hq, s, dqk, dv, keep)

            def q_fn(q_, k_, v_, kw=kw, causal=causal):
                return qattn.attention(q_, k_, v_, causal=causal, **kw)

            def f_fn(q_, k_, v_, score_mod=score_mod, bm=bm):
                return flex(q_.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2), score_mod=score_mod,
                            block_mask=bm).transpose(1, 2)
            impls = [("qattn", q_fn)] + [(f"qattn@{rt}", lambda q_, k_, v_, rt=rt: in_runtime(rt, lambda: q_fn(q_, k_, v_))())
                                         for rt in RUNTIMES]
            impls.append(("flex", f_fn))
            with torch.no_grad():
                ref = f_fn(q, k, v).float()
                errs = {impl: (fn(q, k, v).float() - ref).abs().max().item() for impl, fn in impls[:-1]}
            check_runtimes()
            for timing in timings:
                timer, times = TIMERS[timing], {}
                for impl, fn in impls:
                    with torch.no_grad():
                        tf = timer(lambda fn=fn: fn(q, k, v))
                    tb, tfb = time_impl(fn, q, k, v, dout, timer)
                    times[impl] = (tf, tb, tfb)
                    record(impl, "fwd", cfg, var, causal, s, b, tf, f_fwd, timing)
                    record(impl, "bwd", cfg, var, causal, s, b, tb, f_bwd, timing)
                    record(impl, "fwd+bwd", cfg, var, causal, s, b, tfb, f_fwd + f_bwd, timing)
                line = ", ".join(f"{impl} {t[0]:.3f} / {t[1]:.3f} / {t[2]:.3f}" for impl, t in times.items())
                print(f"{name} s{s} b{b} {var} ({timing}): fwd / bwd / fwd+bwd ms: {line}; fwd+bwd qattn "
                      f"{times['flex'][2] / times['qattn'][2]:.2f}x flex; max|o - o_flex| " +
                      ", ".join(f"{impl} {e:.2e}" for impl, e in errs.items()), flush=True)
                for rt in RUNTIMES:
                    t, p = times["qattn"], times[f"qattn@{rt}"]
                    print(f"  speed vs {rt} (its time / this tree's): fwd {p[0] / t[0]:.3f}, bwd {p[1] / t[1]:.3f}, "
                          f"fwd+bwd {p[2] / t[2]:.3f}", flush=True)
            del q, k, v, dout
    return 0


if __name__ == "__main__":
    sys.exit(main())
