#!/usr/bin/env python3
"""Where a backward pass's time goes: the GPU kernels of one torch.autograd.grad call of qattn, torch
SDPA's cuDNN backend and (for the variants) FlexAttention, each under torch.profiler, in one process.

    python3 bench/profile_backward.py OUT.csv [--cases CONFIG:SEQLEN:MASK,...] [--reps 5]

CONFIG is one of bench_backward.py's configs, MASK one of none, causal, softcap, window, document (the
variants run llama2-7b-mha's shape as bench_backward.py does). batch * seqlen = 16k tokens, bf16, fresh
random inputs. Per implementation it prints the backward's wall time (CUDA events around the call,
median of --reps), the sum of its kernels' GPU time and each kernel's mean time a call; the gap
between the two is launch and host time. OUT.csv: case, impl, kernel, calls_per_bwd, us_per_bwd,
share, wall_us.
"""
import argparse
import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_backward as bb  # noqa: E402
import qattn  # noqa: E402  (bench_backward put python/ on the path)
from bench_util import write_csv  # noqa: E402

COLS = ["case", "impl", "kernel", "calls_per_bwd", "us_per_bwd", "share", "wall_us"]
DEFAULT = ("llama2-7b-mha:4096:causal,llama2-7b-mha:4096:window,llama2-7b-mha:4096:document,"
           "qwen2.5-72b-gqa:2048:none,qwen2.5-72b-gqa:2048:causal,mha-d256:2048:causal,mla-prefill:2048:causal")


def short(name, width=90):
    name = name.replace("void ", "")
    return name if len(name) <= width else name[:width - 3] + "..."


def profile(fn, q, k, v, dout, reps):
    """(wall us per call, {kernel: (calls, us)} per call) of torch.autograd.grad through fn."""
    qs, ks, vs = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o = fn(qs, ks, vs)

    def step():
        torch.autograd.grad(o, (qs, ks, vs), dout, retain_graph=True)
    wall = bb.timeit(step, reps) * 1e3  # (synced: each call alone, as bench_backward.py's default timing)
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile
    with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            step()
        torch.cuda.synchronize()
    kernels = defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            e = kernels[short(ev.name)]
            e[0] += 1
            e[1] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
    per = {n: (c / reps, us / reps) for n, (c, us) in kernels.items()}
    return wall, per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cases", default=DEFAULT)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.reps < 1:
        sys.exit("--reps: at least 1")
    from torch.nn.attention import SDPBackend
    configs = {c[0]: c for c in bb.CONFIGS}
    rows = []
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}",
          flush=True)
    for case in args.cases.split(","):
        try:
            cname, s, mask = case.split(":")
            cfg, s = configs[cname], int(s)
        except (ValueError, KeyError):
            sys.exit(f"--cases: CONFIG:SEQLEN:MASK with CONFIG one of {', '.join(configs)}, got {case!r}")
        if mask not in ("none", "causal") + tuple(bb.VARIANTS):
            sys.exit(f"--cases: MASK one of none, causal, {', '.join(bb.VARIANTS)}, got {mask!r}")
        name, hq, hk, dqk, dv = cfg
        b = max(1, bb.TOKENS // s)
        q, k, v, dout = bb.inputs(b, s, hq, hk, dqk, dv, s + 3)
        impls = []
        if mask in ("none", "causal"):
            causal = mask == "causal"
            impls.append(("qattn", lambda q_, k_, v_, c=causal: qattn.attention(q_, k_, v_, causal=c)))
            impls.append(("cudnn", bb.sdpa_fn(SDPBackend.CUDNN_ATTENTION, causal, hq, hk)))
        else:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            flex = torch.compile(flex_attention, dynamic=False)
            kw, causal, score_mod, mask_mod, _ = bb.variant_setup(mask, b, s)
            bm = create_block_mask(mask_mod, b if mask == "document" else None, None, s, s, device="cuda")
            impls.append(("qattn", lambda q_, k_, v_, kw=kw, c=causal: qattn.attention(q_, k_, v_, causal=c, **kw)))
            impls.append(("flex", lambda q_, k_, v_, sm=score_mod, bm=bm: flex(
                q_.transpose(1, 2), k_.transpose(1, 2), v_.transpose(1, 2), score_mod=sm, block_mask=bm).transpose(1, 2)))
        for impl, fn in impls:
            try:
                wall, per = profile(fn, q, k, v, dout, args.reps)
            except (RuntimeError, qattn.QattnError) as e:
                print(f"{case} {impl}: skipped ({str(e).splitlines()[0][:100]})", flush=True)
                continue
            total = sum(us for _, us in per.values())
            print(f"{case} (b{b}) {impl}: wall {wall:.1f} us, kernels {total:.1f} us", flush=True)
            for kname, (calls, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
                print(f"    {us:9.1f} us {100 * us / max(total, 1e-9):5.1f}%  x{calls:g}  {kname}", flush=True)
                rows.append({"case": case, "impl": impl, "kernel": kname, "calls_per_bwd": f"{calls:g}",
                             "us_per_bwd": f"{us:.1f}", "share": f"{us / max(total, 1e-9):.4f}", "wall_us": f"{wall:.1f}"})
            write_csv(args.out, rows, COLS)
        del q, k, v, dout
    return 0


if __name__ == "__main__":
    sys.exit(main())
