#!/usr/bin/env python3
"""DeepSeek-V3's absorbed-MLA decoding (issue 20): 128 query heads of d_qk 576 (512 latent + 64 rotary)
over one latent KV cache whose first 512 columns are V, paged (pages of 64, shuffled) or contiguous.
qattn.attention_with_kvcache(q, k_cache, None, ..., head_dim_v=512) (= flash_mla_with_kvcache: the TL kernel
with `split columns` consumers and V a view of K's slots; the keys split in the TL where the tiles leave
SMs idle, impl qattn, and, on such rows, one launch, impl qattn-nosplit) against, in the same process and
on the same keys:
  - the copy bandwidth (a device-to-device copy of the cache's bytes, read + write / time), and
  - torch: the same attention in bf16 matmuls on the gathered cache (q K^T, softmax in fp32, P V:
    what a framework without an MLA kernel runs), timed without its gather;
  - cudnn / efficient: torch SDPA's cuDNN or memory-efficient backend on (batch, 128, seqlen_q, 576)
    against K and V = K[..., :512] broadcast over the heads, where torch accepts the head dims (it
    prints why not otherwise).
Each implementation is a CUDA graph of --calls calls, replayed in --rounds rounds, adjacent in time and
in rotating order; the median per call is kept. Before timing, every output is checked against an fp32
reference of the same keys (qattn's NaN-free and within 2e-2; the row is marked FAIL otherwise).

    python3 bench/bench_mla_decode.py OUT.csv [--rounds 7] [--calls 20] [--rows b64_s4k,...]

Columns: impl, batch, hq, hkv, d_qk, d_v, seqlen_q, seqlen_k, page_size (0 = contiguous), ms, gbs
(cache bytes read / time: seqlen_k x 576 x 2 per sequence), copy_gbs, frac_copy, tflops (2 x hq x
seqlen_q x seqlen_k x (576 + 512) per sequence / time), max_err (against fp32), vs_torch, gpu.
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import qattn  # noqa: E402
from qattn import _kvcache  # noqa: E402
from bench_runtimes import RUNTIMES, add_runtimes, check_runtimes, in_runtime  # noqa: E402
from bench_util import graphed, replay_rounds, write_csv  # noqa: E402

D_QK, D_V, HQ = 576, 512, 128
# name: (batch, seqlen_q, seqlen_k): FlashMLA's decoding shapes (batch 64-128, caches of 1k-16k) and two small batches
ROWS = {"b128_s4k": (128, 1, 4096), "b64_s8k": (64, 1, 8192), "b32_s16k": (32, 1, 16384), "b128_s1k": (128, 1, 1024),
        "b64_mtp2_s4k": (64, 2, 4096), "b8_s8k": (8, 1, 8192)}


def reference(q, kc, lens, causal):
    """fp32 attention of q (b, sq, hq, 576) over each sequence's first lens[b] keys of kc (b, sk, 1, 576); V = K[..., :512]."""
    out = torch.empty(q.shape[0], q.shape[1], HQ, D_V, device=q.device, dtype=torch.float32)
    lse = torch.empty(q.shape[0], HQ, q.shape[1], device=q.device, dtype=torch.float32)
    for b in range(q.shape[0]):
        n = int(lens[b])
        k = kc[b, :n, 0].float()
        s = torch.einsum("qhd,kd->hqk", q[b].float(), k) / math.sqrt(D_QK)
        if causal:
            sq = q.shape[1]
            qi = torch.arange(sq, device=q.device)[:, None] + n - sq
            s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > qi, float("-inf"))
        lse[b] = torch.logsumexp(s, -1)
        out[b] = torch.einsum("hqk,kd->qhd", torch.softmax(s, -1), k[:, :D_V])
    return out, lse


def paged(kc, page, gen):
    b, sk, h, d = kc.shape
    n = sk // page
    perm = torch.randperm(b * n, generator=gen).cuda()
    pool = torch.empty(b * n, page, h, d, device="cuda", dtype=kc.dtype)
    pool[perm] = kc.reshape(b * n, page, h, d)
    return pool, perm.view(b, n).to(torch.int32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--pages", default="64,0")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DEVICE_DIR[:QATTN_BIN]",
                    help="the same qattn call (the first page size, qattn's split) with another runtime's kernels: impl qattn@NAME")
    a = ap.parse_args()
    add_runtimes(a.also, ap.error)
    gen = torch.Generator().manual_seed(0)
    gpu = torch.cuda.get_device_name()
    out_rows, failed = [], False
    for name in a.rows.split(","):
        bsz, sq, sk = ROWS[name]
        causal = sq > 1
        q = torch.randn(bsz, sq, HQ, D_QK, generator=gen).cuda().to(torch.bfloat16)
        kc = torch.randn(bsz, sk, 1, D_QK, generator=gen).cuda().to(torch.bfloat16)
        lens = torch.full((bsz,), sk, dtype=torch.int32, device="cuda")
        ref, ref_lse = reference(q[: min(bsz, 4)], kc[: min(bsz, 4)], lens, causal)
        cache_bytes = bsz * sk * D_QK * 2
        flops = 2.0 * bsz * HQ * sq * sk * (D_QK + D_V)
        graphs, errs, meta = {}, {}, {}
        splits = _kvcache.mla_splits(torch, q, sk, HQ, 1, sq)
        runs = [(int(p), 0) for p in a.pages.split(",")] + ([(int(a.pages.split(",")[0]), 1)] if splits > 1 else [])
        for page, n in runs:  # n: num_splits (0: qattn's choice, `splits` parts; 1: one launch)
            if page:
                pool, table = paged(kc, page, gen)
                fn = lambda pool=pool, table=table, n=n: qattn.attention_with_kvcache(q, pool, None, lens, table, causal=causal,
                                                                                       head_dim_v=D_V, num_splits=n)
            else:
                fn = lambda n=n: qattn.attention_with_kvcache(q, kc, None, lens, causal=causal, head_dim_v=D_V, num_splits=n)
            o = fn()
            err = float((o[: min(bsz, 4)].float() - ref).abs().max())
            bad = not torch.isfinite(o).all() or err > 2e-2
            failed |= bad
            tag = ("qattn-nosplit" if n == 1 else "qattn") + (f"-p{page}" if page else "")
            parts = 1 if n == 1 else splits
            graphs[tag], errs[tag] = graphed(fn, a.calls), err
            meta[tag] = ("FAIL " if bad else "") + f"{parts} part{'s' if parts > 1 else ''}, page {page}"
        for rt in RUNTIMES:  # --also: the first page size's call built by another runtime, timed in the same rounds
            page = int(a.pages.split(",")[0])
            pool, table = paged(kc, page, gen) if page else (kc, None)
            fn = in_runtime(rt, lambda pool=pool, table=table: qattn.attention_with_kvcache(q, pool, None, lens, table, causal=causal,
                                                                                              head_dim_v=D_V))
            o = fn()
            errs[f"qattn@{rt}"] = err = float((o[: min(bsz, 4)].float() - ref).abs().max())
            failed |= not torch.isfinite(o).all() or err > 2e-2
            graphs[f"qattn@{rt}"] = graphed(fn, a.calls)
            meta[f"qattn@{rt}"] = f"{splits} part{'s' if splits > 1 else ''}, page {page}"
        # torch's bf16 matmuls over the contiguous cache (no gather inside the timing)
        k2 = kc[:, :, 0]  # (b, sk, 576)

        def torch_mla():
            s = torch.matmul(q.reshape(bsz, sq * HQ, D_QK), k2.transpose(1, 2)).float() * (1 / math.sqrt(D_QK))
            if causal:
                s = s.view(bsz, sq, HQ, sk).masked_fill(
                    torch.arange(sk, device="cuda")[None, None, None, :] >
                    (torch.arange(sq, device="cuda") + sk - sq)[None, :, None, None], float("-inf")).view(bsz, sq * HQ, sk)
            p = torch.softmax(s, -1).to(torch.bfloat16)
            return torch.matmul(p, k2[:, :, :D_V]).view(bsz, sq, HQ, D_V)
        o = torch_mla()
        errs["torch"] = float((o[: min(bsz, 4)].float() - ref).abs().max())
        graphs["torch"], meta["torch"] = graphed(torch_mla, a.calls), "bf16 matmuls"
        for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            qs = q.transpose(1, 2)  # (b, 128, sq, 576)
            ks = kc.transpose(1, 2).expand(bsz, HQ, sk, D_QK)
            vs = ks[..., :D_V]

            def sdpa(backend=backend, qs=qs, ks=ks, vs=vs):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qs, ks, vs, is_causal=False).transpose(1, 2)
            try:
                if causal:
                    raise RuntimeError("bottom-right causal masks are not SDPA's is_causal")
                o = sdpa()
                errs[label] = float((o[: min(bsz, 4)].float() - ref).abs().max())
                graphs[label], meta[label] = graphed(sdpa, a.calls), "SDPA"
            except RuntimeError as e:
                print(f"{name}: {label} not run: {str(e).splitlines()[0][:160]}")
        copy_src = torch.empty(cache_bytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
        copy_dst = torch.empty_like(copy_src)
        graphs["copy"] = graphed(lambda: copy_dst.copy_(copy_src), a.calls)
        us = replay_rounds(graphs, a.rounds, a.calls)
        copy_gbs = 2 * cache_bytes / us.pop("copy") / 1e3
        for impl, t in us.items():
            page = int(meta[impl].split()[-1]) if "page" in meta[impl] else 0
            row = dict(impl=impl.split("-p")[0], batch=bsz, hq=HQ, hkv=1, d_qk=D_QK, d_v=D_V, seqlen_q=sq, seqlen_k=sk,
                       page_size=page, ms=round(t / 1e3, 5), gbs=round(cache_bytes / t / 1e3, 1), copy_gbs=round(copy_gbs, 1),
                       frac_copy=round(cache_bytes / t / 1e3 / copy_gbs, 3), tflops=round(flops / t / 1e6, 1),
                       max_err=f"{errs[impl]:.2e}", vs_torch=round(us["torch"] / t, 3), gpu=gpu, note=meta[impl])
            out_rows.append(row)
            print(f"{name:14s} {impl:10s} {t:9.1f} us  {row['gbs']:7.1f} GB/s ({row['frac_copy']:.2f} of copy)  "
                  f"{row['tflops']:6.1f} TFLOPS  err {errs[impl]:.1e}  x{row['vs_torch']:.2f} torch  {meta[impl]}", flush=True)
    for rt in RUNTIMES:  # each --also runtime's time over this tree's, same rows
        for r in out_rows:
            if r["impl"] == f"qattn@{rt}":
                mine = [x for x in out_rows if x["impl"] == "qattn" and x["page_size"] == r["page_size"] and x["batch"] == r["batch"]
                        and x["seqlen_k"] == r["seqlen_k"] and x["seqlen_q"] == r["seqlen_q"]]
                if mine:
                    print(f"b{r['batch']} sq{r['seqlen_q']} sk{r['seqlen_k']} page {r['page_size']}: {rt}'s time / this tree's = "
                          f"{r['ms'] / mine[0]['ms']:.3f}")
    check_runtimes()
    write_csv(a.out, out_rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
