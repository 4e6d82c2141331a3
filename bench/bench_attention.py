#!/usr/bin/env python3
"""qattn.attention() next to the attention kernels PyTorch users already have, in ONE process.

    python3 bench/bench_attention.py [--quick | --full] [--out DIR] [--e2e PRESET,...] [--deadline-s S]

Implementations (each only where importable and where it takes the shape; the log says why not):
  qattn      qattn.attention() (the python package; the sm90a path on Hopper, see docs/python.md)
  cudnn      torch SDPA, cuDNN backend            fa2   torch SDPA, FlashAttention-2 backend
  efficient  torch SDPA, memory-efficient backend flex  FlexAttention (torch.compile'd)
  fa3, fa4   FlashAttention-3 (flash_attn_interface) / -4 (flash_attn.cute), when installed
Configs: the paper's (Llama-2-7B MHA, Qwen2.5-72B GQA, Llama-3.1-405B GQA, MQA, DeepSeek-V3 MLA
prefill 192/128) and, with --full, anchors.md's d64 and d256 sweep; causal and not; bf16, BSHD;
batch * seqlen = --tokens (16k), seqlen 512..16k. FLOPs = 2 * B * Hq * S^2 * (d_qk + d_v), halved
for causal (FlashAttention's convention, as bench_sm80.py and anchors.md).
Timing: CUDA events around a batch of back-to-back calls, queued behind a GPU sleep so that host
overhead does not show; warm-up, then the median of --reps batches; fresh random inputs (normal,
never zeros) per point. Before timing, qattn's output is checked against cuDNN's (or FA2's).
--e2e times `qattn generate --preset P --gpu TARGET --no-cache` per preset (TARGET: the binding's choice
for this GPU, h100 on Hopper): the wall time from a spec
to a kernel verified (qattn.verify) and timed on this GPU.
Writes DIR/results.csv (impl,config,hq,hkv,d_qk,d_v,dtype,causal,seqlen,batch,tflops,ms,note),
DIR/e2e.csv and DIR/meta.json; bench/plot.py turns them into PNG plots and results.md.
"""
import argparse
import csv
import datetime
import json
import os
import re
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (label, heads_q, heads_kv, d_qk, d_v)
CONFIGS = {
    "llama2-7b": ("Llama-2-7B MHA 32/32 d128", 32, 32, 128, 128),
    "qwen2.5-72b": ("Qwen2.5-72B GQA 64/8 d128", 64, 8, 128, 128),
    "llama3.1-405b": ("Llama-3.1-405B GQA 128/8 d128", 128, 8, 128, 128),
    "mqa": ("MQA 32/1 d128", 32, 1, 128, 128),
    "mla": ("DeepSeek-V3 MLA prefill 128 heads d192/128", 128, 128, 192, 128),
    "mha-d64": ("MHA 32/32 d64", 32, 32, 64, 64),
    "mha-d256": ("MHA 16/16 d256", 16, 16, 256, 256),
}
QUICK = ["llama2-7b", "qwen2.5-72b", "llama3.1-405b", "mqa", "mla"]
FULL = QUICK + ["mha-d64", "mha-d256"]
FIELDS = ["impl", "config", "hq", "hkv", "d_qk", "d_v", "dtype", "causal", "seqlen", "batch", "tflops", "ms", "note"]


def kernel_specs(configs):
    """compile() specs of the qattn kernels the benchmark needs (heads are runtime: one per head
    dims and mask), for prebuilding them in parallel."""
    seen, out = set(), []
    for name in configs:
        _, hq, hkv, dqk, dv = CONFIGS[name]
        for causal in (False, True):
            key = (dqk, dv, causal)
            if key not in seen:
                seen.add(key)
                out.append({"heads_q": hq, "heads_kv": hkv, "head_dim_qk": dqk, "head_dim_v": dv, "dtype": "bf16",
                            "mask": "causal" if causal else "none"})
    return out


def log(*a):
    print(*a, flush=True)


# ---- timing ----------------------------------------------------------------------------------------

class CpuTimer:
    """--smoke-cpu only."""

    def __init__(self, reps):
        self.reps = reps

    def __call__(self, fn):
        fn()
        ts = []
        for _ in range(self.reps):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)


def smoke_implementations(torch):
    import torch.nn.functional as F

    def make(q, k, v, causal):
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        r = q.shape[2] // k.shape[2]
        kt, vt = kt.repeat_interleave(r, dim=1), vt.repeat_interleave(r, dim=1)
        return lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    def qmake(q, k, v, causal):
        run = make(q, k, v, causal)
        return lambda: run().transpose(1, 2)
    return {"qattn": qmake, "cudnn": make, "fa2": make}


class Timer:
    def __init__(self, torch, reps, warmup):
        self.torch, self.reps, self.warmup = torch, reps, warmup
        self.sleep = getattr(torch.cuda, "_sleep", None)
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        khz = getattr(props, "clock_rate", 0) or 1_700_000
        self.cycles_per_ms = khz  # kHz = cycles per ms

    def __call__(self, fn):
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        b.synchronize()
        est = max(a.elapsed_time(b), 1e-3)
        n = max(1, min(50, int(2.0 / est)))  # batches of >= ~2 ms
        times = []
        for _ in range(self.reps):
            if self.sleep is not None:  # keep the GPU busy while the host queues the batch
                self.sleep(int(min(20.0, 0.1 * n + 0.5) * self.cycles_per_ms))
            a.record()
            for _ in range(n):
                fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / n)
        return statistics.median(times)


# ---- implementations -------------------------------------------------------------------------------

def implementations(torch, args):
    """name -> make(q, k, v, causal) returning a no-argument callable (or raising when unsupported).
    q, k, v are BSHD tensors."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import qattn

    impls = {}

    def qattn_make(q, k, v, causal):
        return lambda: qattn.attention(q, k, v, causal=causal)
    impls["qattn"] = qattn_make

    def sdpa(backend):
        def make(q, k, v, causal):
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            gqa = q.shape[2] != k.shape[2]

            def run(kt=kt, vt=vt, gqa=gqa):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=gqa)
            try:
                run()
                return run
            except RuntimeError:
                if not gqa:
                    raise
            # this backend does not take GQA natively: K/V expanded once, outside the timing
            r = q.shape[2] // k.shape[2]
            ke, ve = (x.repeat_interleave(r, dim=1) for x in (kt, vt))
            run2 = lambda: run(ke, ve, False)  # noqa: E731
            run2()
            run2.note = "kv expanded"
            return run2
        return make
    impls["cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    impls["fa2"] = sdpa(SDPBackend.FLASH_ATTENTION)
    impls["efficient"] = sdpa(SDPBackend.EFFICIENT_ATTENTION)

    if not args.no_flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                         "accumulated_recompile_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, 256)
            flex = torch.compile(flex_attention)
            masks = {}

            def causal_mod(b, h, qi, kvi):
                return qi >= kvi

            def flex_make(q, k, v, causal):
                s = q.shape[1]
                bm = None
                if causal:
                    if s not in masks:
                        masks[s] = create_block_mask(causal_mod, None, None, s, s, device=q.device)
                    bm = masks[s]
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                gqa = q.shape[2] != k.shape[2]
                run = lambda: flex(qt, kt, vt, block_mask=bm, enable_gqa=gqa)  # noqa: E731
                run()
                return run
            impls["flex"] = flex_make
        except Exception as e:  # noqa: BLE001
            log(f"flex: unavailable ({type(e).__name__}: {str(e).splitlines()[0][:100]})")

    def fa_func(mod_name, attr):
        try:
            mod = __import__(mod_name, fromlist=[attr])
            fn = getattr(mod, attr)
        except Exception as e:  # noqa: BLE001
            return None, f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"

        def make(q, k, v, causal):
            run = lambda: fn(q, k, v, causal=causal)  # noqa: E731
            run()
            return run
        return make, None
    for name, mod, attr in (("fa3", "flash_attn_interface", "flash_attn_func"), ("fa4", "flash_attn.cute", "flash_attn_func")):
        make, why = fa_func(mod, attr)
        if make:
            impls[name] = make
        else:
            log(f"{name}: not importable ({why})")
    return impls


# ---- spec -> verified kernel ----------------------------------------------------------------------

def e2e(presets, out_dir):
    """Wall time of `qattn generate --preset P --gpu TARGET --no-cache` (plan, translate, nvcc, qattn.verify,
    qattn.timing on this GPU), one preset after the other; TARGET is the binding's choice for this GPU
    (qattn.target_for_capability: h100 on Hopper)."""
    import torch
    import qattn
    from qattn import _cli
    target = qattn.target_for_capability(torch.cuda.get_device_capability(), torch.cuda.get_device_name())[0]
    rows = []
    for p in presets:
        tmp = tempfile.mkdtemp(prefix=f"qattn-e2e-{p}-")
        t0 = time.perf_counter()
        r = _cli.run(["generate", "--preset", p, "--gpu", target, "--no-cache", "--out", tmp])
        wall = time.perf_counter() - t0
        text = r.stdout + "\n" + r.stderr
        nv = re.search(r"nvcc done in ([0-9.]+) s", text)
        checks = re.search(r"(\d+)/(\d+) passed", text)
        tf = re.search(r"qattn\s+([0-9.]+) TFLOPS", text)
        verified = r.rc == 0 and checks is not None and checks.group(1) == checks.group(2)
        row = {"preset": p, "target": target, "wall_s": f"{wall:.1f}", "nvcc_s": nv.group(1) if nv else "",
               "checks": f"{checks.group(1)}/{checks.group(2)}" if checks else "", "tflops": tf.group(1) if tf else "",
               "status": "verified" if verified else f"FAILED (exit {r.rc})"}
        rows.append(row)
        log(f"e2e {p}: {row['status']} in {wall:.1f} s (nvcc {row['nvcc_s']} s, checks {row['checks']}, "
            f"{row['tflops']} TFLOPS)")
        if not verified:
            log(text[-3000:])
    with open(os.path.join(out_dir, "e2e.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["preset", "target", "wall_s", "nvcc_s", "checks", "tflops", "status"])
        w.writeheader()
        w.writerows(rows)
    return rows


# ---- main ------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="paper configs, 5 reps (default)")
    g.add_argument("--full", action="store_true", help="also anchors.md's d64/d256 sweep, 15 reps")
    ap.add_argument("--configs", default="", help="comma-separated subset of: " + ", ".join(CONFIGS))
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--impls", default="", help="comma-separated subset (default: all available)")
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--flex-budget-s", type=float, default=0,
                    help="stop timing flex after this much time in it, compiles included (default 60, --full 300)")
    ap.add_argument("--e2e", default="", help="presets for the spec -> verified kernel timing (e.g. llama3-8b)")
    ap.add_argument("--deadline-s", type=float, default=0, help="stop starting new points after this many seconds")
    ap.add_argument("--out", default="", help="output folder (default bench/results/<date>-<gpu>)")
    ap.add_argument("--jobs", type=int, default=0, help="parallel kernel builds (default: cores / 2)")
    ap.add_argument("--smoke-cpu", action="store_true",
                    help="test this script without a GPU: tiny shapes on the CPU, torch's math SDPA standing in "
                         "for every implementation (numbers meaningless)")
    args = ap.parse_args()
    args.flex_budget_s = args.flex_budget_s or (300 if args.full else 60)
    t_start = time.perf_counter()

    import torch
    import qattn
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cpu" if args.smoke_cpu else "cuda"
    if dev == "cuda" and not torch.cuda.is_available():
        print("bench_attention.py: no CUDA device visible to torch (--smoke-cpu tests the script without one)",
              file=sys.stderr)
        return 2
    gpu = "cpu smoke test" if args.smoke_cpu else torch.cuda.get_device_name()
    tag = datetime.date.today().isoformat() + "-" + re.sub(r"[^A-Za-z0-9]+", "_", gpu).strip("_").lower()
    out_dir = args.out or os.path.join(ROOT, "bench", "results", tag)
    os.makedirs(out_dir, exist_ok=True)
    configs = [c for c in args.configs.split(",") if c] or (FULL if args.full else QUICK)
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown config {c}; one of {', '.join(CONFIGS)}")
    reps = args.reps or (15 if args.full else 5)
    seqlens = [int(x) for x in args.seqlens.split(",")]
    causals = [bool(int(x)) for x in args.causal.split(",")]
    meta = {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "date": datetime.date.today().isoformat(),
            "mode": "full" if args.full else "quick", "reps": reps, "tokens": args.tokens, "dtype": "bf16",
            "configs": {c: CONFIGS[c][0] for c in configs}, "skipped": [],
            "qattn_target": None, "flops": "2*B*Hq*S^2*(d_qk+d_v), halved for causal"}
    log(f"{gpu}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {meta['cudnn']}; {meta['mode']} mode, "
        f"{reps} reps")

    if args.e2e and not args.smoke_cpu:
        meta["e2e"] = e2e([p for p in args.e2e.split(",") if p], out_dir)

    if args.smoke_cpu:
        impls, timer = smoke_implementations(torch), CpuTimer(reps)
    else:
        t0 = time.perf_counter()
        kerns = qattn.compile_many(kernel_specs(configs), jobs=args.jobs or None)
        meta["qattn_target"] = f"{kerns[0].target}: {kerns[0].target_reason}"
        meta["qattn_prebuild_s"] = round(time.perf_counter() - t0, 1)
        log(f"qattn kernels ready in {meta['qattn_prebuild_s']} s: {', '.join(k.name for k in kerns)}")
        log(f"qattn target: {meta['qattn_target']}")
        impls, timer = implementations(torch, args), Timer(torch, reps, warmup=2)
    if args.impls:
        impls = {k: v for k, v in impls.items() if k in args.impls.split(",")}
    meta["impls"] = list(impls)
    flex_spent = 0.0
    csv_path = os.path.join(out_dir, "results.csv")
    f = open(csv_path, "w", newline="")
    w = csv.DictWriter(f, fieldnames=FIELDS)
    w.writeheader()
    names = list(impls)
    log(f"\n{'config':<14} {'c':>1} {'seqlen':>6} {'batch':>5} " + " ".join(f"{n:>9}" for n in names) +
        "   qattn/cudnn  check")
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    stopped = False
    for cname in configs:
        label, hq, hkv, dqk, dv = CONFIGS[cname]
        for causal in causals:
            for s in seqlens:
                if args.deadline_s and time.perf_counter() - t_start > args.deadline_s:
                    if not stopped:
                        log(f"deadline of {args.deadline_s:.0f} s reached: remaining points not run")
                        meta["skipped"].append(f"deadline reached before {cname} causal={int(causal)} seqlen {s}")
                    stopped = True
                    break
                b = max(1, args.tokens // s)
                q = torch.randn(b, s, hq, dqk, device=dev, dtype=torch.bfloat16, generator=gen)
                k = torch.randn(b, s, hkv, dqk, device=dev, dtype=torch.bfloat16, generator=gen)
                v = torch.randn(b, s, hkv, dv, device=dev, dtype=torch.bfloat16, generator=gen)
                flops = 2.0 * b * hq * s * s * (dqk + dv) * (0.5 if causal else 1.0)
                res, notes = {}, {}
                ref_out, ref_name, o_qattn = None, None, None
                for name, make in impls.items():
                    if name == "flex" and flex_spent > args.flex_budget_s:
                        notes[name] = "flex time budget spent"
                        continue
                    t_impl = time.perf_counter()
                    try:
                        fn = make(q, k, v, causal)
                        out = fn()
                        out = out[0] if isinstance(out, tuple) else out
                        if name == "qattn":
                            o_qattn = out
                        elif name in ("cudnn", "fa2") and ref_out is None:  # SDPA: (B, H, S, D)
                            ref_out, ref_name = out.transpose(1, 2), name
                        ms = timer(fn)
                        res[name] = ms
                        if getattr(fn, "note", ""):
                            notes[name] = fn.note
                    except Exception as e:  # noqa: BLE001 - a backend that does not take this shape
                        msg = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
                        notes[name] = f"unsupported: {msg}"
                        key = f"{name} {cname} d{dqk}/{dv}: {msg}"
                        if key not in meta["skipped"]:
                            meta["skipped"].append(key)
                    finally:
                        if name == "flex":
                            flex_spent += time.perf_counter() - t_impl
                check = ""
                if o_qattn is not None and ref_out is not None:
                    diff = (o_qattn.float() - ref_out.float()).abs().max().item()
                    check = f"{diff:.1e} vs {ref_name}" + ("" if diff < 2e-2 else " MISMATCH")
                    if diff >= 2e-2:
                        notes["qattn"] = (notes.get("qattn", "") + f" output differs from {ref_name} by {diff:.2e}").strip()
                for name, ms in res.items():
                    w.writerow({"impl": name, "config": cname, "hq": hq, "hkv": hkv, "d_qk": dqk, "d_v": dv,
                                "dtype": "bf16", "causal": int(causal), "seqlen": s, "batch": b,
                                "tflops": f"{flops / ms / 1e9:.2f}", "ms": f"{ms:.4f}", "note": notes.get(name, "")})
                f.flush()
                tf = {n: flops / ms / 1e9 for n, ms in res.items()}
                ratio = f"{tf['qattn'] / tf['cudnn']:.3f}" if "qattn" in tf and "cudnn" in tf else "-"
                log(f"{cname:<14} {int(causal):>1} {s:>6} {b:>5} " +
                    " ".join(f"{tf[n]:9.1f}" if n in tf else f"{'-':>9}" for n in names) + f"   {ratio:>11}  {check}")
                del q, k, v, ref_out, o_qattn
            if stopped:
                break
        if stopped:
            break
    f.close()
    meta["wall_s"] = round(time.perf_counter() - t_start, 1)
    with open(os.path.join(out_dir, "meta.json"), "w") as mf:
        json.dump(meta, mf, indent=2, default=str)
    log(f"\nwrote {csv_path} ({meta['wall_s']} s); skipped: {len(meta['skipped'])}")
    for s in meta["skipped"]:
        log(f"  skipped: {s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
