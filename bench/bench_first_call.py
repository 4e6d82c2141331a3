#!/usr/bin/env python3
"""Issue 21: how long the first call of a new attention variant takes, qattn against FlexAttention
with the same functions in the same process, and the first call of a kernel from a kernel pack.

    python3 bench/bench_first_call.py OUT.csv [--variants 5] [--pack DIR]

Each variant is a mask_mod and a score_mod never built before (a random constant per run in both;
QATTN_CACHE_DIR should be an empty folder): qattn_s is the wall time of the first
`qattn.attention(...)` call with them (plan, TL interpretation, translation, nvcc, load, launch,
synchronise), flex_s that of `create_block_mask` + the compiled `flex_attention` with the same two
functions in Python (torch.compile recompiles for each new function), both on fresh bf16 inputs,
batch 1, 8/2 heads, 1024 tokens, d 64; the outputs are compared with each other. The first
FlexAttention call of the process (torch.compile's own start-up) is made before the timed rows.
With --pack DIR (a pack holding the bf16 d128 causal kernel, `python -m qattn.pack build DIR
llama3-8b`): a fresh Python process with QATTN_PACKS=DIR and no compiler (QATTN_BIN names nothing)
times its first qattn.attention(causal=True) call, import excluded (row `pack:llama3-8b`).
Columns: variant, qattn_s, flex_s, nvcc_s, max_diff.
"""
import argparse
import csv
import os
import random
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import qattn  # noqa: E402


def flex_first_call(q, k, v, mask_fn, score_fn):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    fn = torch.compile(flex_attention)
    t0 = time.perf_counter()
    bm = create_block_mask(mask_fn, None, None, q.shape[2], k.shape[2], device="cuda")
    o = fn(q, k, v, score_mod=score_fn, block_mask=bm, enable_gqa=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, o


PACK_CHILD = r"""
import time, torch, qattn
q = torch.randn(1, 1024, 8, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 1024, 2, 128, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t0 = time.perf_counter()
o = qattn.attention(q, k, k, causal=True)
torch.cuda.synchronize()
t = time.perf_counter() - t0
ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(4, 1),
                                                       k.transpose(1, 2).repeat_interleave(4, 1), is_causal=True)
print("first_call_s", t, "max_diff", (o.transpose(1, 2).float() - ref.float()).abs().max().item())
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--variants", type=int, default=5)
    ap.add_argument("--pack", default=None)
    a = ap.parse_args()
    rows = []
    g = torch.Generator(device="cuda").manual_seed(7)
    rnd = random.Random(time.time_ns())
    # torch.compile's own first use, untimed (both sides then compile only the new functions)
    q0 = torch.randn(1, 8, 256, 64, device="cuda", dtype=torch.bfloat16)
    k0 = torch.randn(1, 2, 256, 64, device="cuda", dtype=torch.bfloat16)
    flex_first_call(q0, k0, k0, lambda b, h, i, j: j <= i, lambda s, b, h, i, j: s)
    for n in range(a.variants):
        band, mod, scale = rnd.randint(16, 400), rnd.randint(3, 9), round(rnd.uniform(0.5, 1.5), 3)
        mask_tl = f"kv_idx <= q_idx + seqlen_k - seqlen_q and (kv_idx >= q_idx + seqlen_k - seqlen_q - {band} or kv_idx % {mod} == 0)"
        score_tl = f"score * {scale}"
        q = torch.randn(1, 1024, 8, 64, device="cuda", generator=g).to(torch.bfloat16)
        k = torch.randn(1, 1024, 2, 64, device="cuda", generator=g).to(torch.bfloat16)
        v = torch.randn(1, 1024, 2, 64, device="cuda", generator=g).to(torch.bfloat16)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        o = qattn.attention(q, k, v, mask_mod=mask_tl, score_mod=score_tl)
        torch.cuda.synchronize()
        t_q = time.perf_counter() - t0
        b = [x for x in qattn._build._BUILDS.values() if x.spec.get("variants", {}).get("mask_mod") == mask_tl]
        nvcc = b[0].nvcc_seconds if b else None

        # new code objects with the constants in their text (as a user writes a new mask): closures or
        # default arguments over one code object let torch.compile reuse its graph (stale results)
        ns = {}
        exec(f"def mask_fn(b, h, i, j):\n    return (j <= i) & ((j >= i - {band}) | (j % {mod} == 0))\n"
             f"def score_fn(s, b, h, i, j):\n    return s * {scale}\n", ns)
        mask_fn, score_fn = ns["mask_fn"], ns["score_fn"]

        t_f, of = flex_first_call(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask_fn, score_fn)
        diff = (o.float() - of.transpose(1, 2).float()).abs().max().item()
        rows.append({"variant": f"band{band}_mod{mod}_x{scale}", "qattn_s": f"{t_q:.2f}", "flex_s": f"{t_f:.2f}",
                     "nvcc_s": "" if nvcc is None else f"{nvcc:.1f}", "max_diff": f"{diff:.2e}"})
        print(rows[-1], flush=True)
    if a.pack:
        env = dict(os.environ, QATTN_PACKS=os.path.abspath(a.pack), QATTN_BIN="/nonexistent/qattn",
                   QATTN_CACHE_DIR=os.path.abspath(a.out) + ".cache-unused")
        r = subprocess.run([sys.executable, "-c", PACK_CHILD], capture_output=True, text=True, env=env, timeout=300)
        print(r.stdout.strip(), r.stderr.strip()[-2000:], flush=True)
        words = r.stdout.split()
        if r.returncode == 0 and "first_call_s" in words:
            t = float(words[words.index("first_call_s") + 1])
            rows.append({"variant": "pack:llama3-8b", "qattn_s": f"{t:.3f}", "flex_s": "", "nvcc_s": "0",
                         "max_diff": words[words.index("max_diff") + 1]})
        else:
            rows.append({"variant": "pack:llama3-8b", "qattn_s": "failed", "flex_s": "", "nvcc_s": "", "max_diff": ""})
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    qs = sorted(float(r["qattn_s"]) for r in rows if not r["variant"].startswith("pack:"))
    fs = sorted(float(r["flex_s"]) for r in rows if r["flex_s"])
    print(f"{torch.cuda.get_device_name()}: first call of a new variant, median of {len(qs)}: qattn {qs[len(qs) // 2]:.2f} s, "
          f"FlexAttention {fs[len(fs) // 2]:.2f} s; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
