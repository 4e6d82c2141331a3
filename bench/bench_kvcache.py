#!/usr/bin/env python3
"""Decoding against a KV cache: qattn.attention_with_kvcache on a contiguous cache (page_size 0) and on
paged caches (pages of 16, 64 and 256 rows in random order over a pool), against qattn.attention and
cuDNN (SDPA's cuDNN backend, enable_gqa) on the same keys as a plain (batch, seqlen_k, heads_kv, d)
tensor, and the copy bandwidth of the same run. One process, CUDA graphs.

    python3 bench/bench_kvcache.py OUT.csv [--rounds 7] [--calls 20] [--also NAME=DEVICE_DIR ...]

Rows: one query token per sequence, bf16, d 128, every sequence holding seqlen_k keys (so the three
compute the same thing; the outputs are compared first, max |diff| < 2e-2). Fresh torch.randn inputs.
Each implementation is a CUDA graph of --calls back-to-back calls replayed in --rounds rounds, the
implementations adjacent in time and in rotating order; the median per call is kept. copy_gbs: the
better of two device-to-device copies timed the same way (read + write bytes / time): one of a K-sized
tensor, and one of 256 MiB (on an H200, copies of 512 MiB and more ran at 2.7 TB/s where 128-256 MiB ran
at 4.1-4.2: a K-sized copy alone understated the copy bandwidth of the large rows). Columns (the
serving issue's): impl (qattn-kvcache, qattn, cudnn, fa2), batch, hq, hkv, d_qk, d_v, seqlen_q, seqlen_k,
page_size (0 = contiguous), ms, gbs (K and V bytes read / time), copy_gbs, frac_copy (gbs / copy_gbs),
vs_cudnn (cudnn time / this), vs_fa2 (fa2 time / this), vs_contiguous (the contiguous cache's time /
this), gpu. fa2 is torch SDPA's FLASH_ATTENTION backend (FlashAttention-2, built into torch; GQA
native) on the contiguous cache; where torch refuses it, a row has no fa2 line and an empty vs_fa2
(the reason printed).

--also NAME=DEVICE_DIR[:QATTN_BIN] (repeatable): the same qattn calls with kernels built against another copy
of the device runtime (e.g. the parent commit's device/) and, when given, by another qattn compiler (a
translation change), a cache folder of their own, captured into their
own CUDA graphs and timed in the same rounds (impl qattn@NAME / qattn-kvcache@NAME): a same-process A/B
of a runtime change. vs_contiguous compares each with the contiguous cache of its own runtime. The
line "speed vs NAME (its time / this runtime's)" under a row gives NAME's time over this tree's: above
1, this tree is faster (the same direction as vs_cudnn).

--varlen: the same decoding through qattn.attention_varlen over the cache (one query per sequence:
cu_seqlens_q = 0, 1, ..., batch): the ragged kernel on the decoding tile (impl qattn-varlen), and with
max_seqlen_q 2 (impl qattn-varlen-ragged: a speculative-decoding buffer of two rows a sequence, one
used), in the same rounds; the line under a row gives each one's time over the batched call's
(attention_with_kvcache, kv page N). (From 2026-11-30 to 2026-12-01 a max_seqlen_q 1 call ran as
attention_with_kvcache itself, and max_seqlen_q 2 took the 128-row ragged kernel.)

--fold: the same calls with the key split folded into the batch (QATTN_SPLIT_MODE=fold: the parts as
batch entries, the queries copied per part; the split before Hopper) as impl qattn@fold /
qattn-kvcache@fold, against the default on Hopper (the kernel that splits the keys in its TL, the
queries read in place), in the same rounds.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import qattn  # noqa: E402
from bench_runtimes import RUNTIMES, add_runtimes, check_runtimes, in_runtime  # noqa: E402
from bench_util import DECODE_ROWS, graphed, replay_rounds, write_csv  # noqa: E402

# name: (batch, hq, hkv, seqlen_k): every decoding row of bench_util, and a short cache (the 1k end)
ROWS = {**DECODE_ROWS, "gqa_32_8_b64_1k": (64, 32, 8, 1024)}
# not in the default table: more MHA decoding rows (--rows)
EXTRA_ROWS = {"mha_32_32_b32_8k": (32, 32, 32, 8192), "mha_16_16_b4_16k": (4, 16, 16, 16384)}
PAGES = (0, 16, 64, 256)
COPY_BYTES = 256 << 20  # the second copy of copy_gbs


def paged(k, v, page, gen, ordered=False):
    """k, v (b, sk, hkv, d) -> pools (num_pages, page, hkv, d) with the pages shuffled (ordered: each
    sequence's pages in order, one after the other: the contiguous cache's addresses), and the table."""
    b, sk, hkv, d = k.shape
    pages = sk // page
    perm = (torch.arange(b * pages) if ordered else torch.randperm(b * pages, generator=gen)).cuda()
    kp = torch.empty(b * pages, page, hkv, d, device="cuda", dtype=k.dtype)
    vp = torch.empty(b * pages, page, hkv, v.shape[3], device="cuda", dtype=v.dtype)
    kp[perm] = k.reshape(b * pages, page, hkv, d)
    vp[perm] = v.reshape(b * pages, page, hkv, v.shape[3])
    return kp, vp, perm.view(b, pages).to(torch.int32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rows", default=",".join(ROWS), help="default: the decoding rows; also " + ", ".join(EXTRA_ROWS))
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DEVICE_DIR[:QATTN_BIN]")
    ap.add_argument("--fold", action="store_true",
                    help="also the key split folded into the batch (QATTN_SPLIT_MODE=fold), as impl ...@fold")
    ap.add_argument("--pages", default=",".join(str(p) for p in PAGES),
                    help="the cache's page sizes (0: the contiguous cache, always timed), comma-separated (default %(default)s)")
    ap.add_argument("--varlen", action="store_true",
                    help="also the same decoding through qattn.attention_varlen over the cache (impl qattn-varlen: one query "
                         "per sequence; impl qattn-varlen-ragged: max_seqlen_q 2, one of two rows used), every page size")
    ap.add_argument("--ordered-pages", action="store_true",
                    help="each sequence's pages in order in the pool (what the addresses cost, against the shuffled pool)")
    a = ap.parse_args()
    try:
        pages = tuple(sorted({0} | {int(x) for x in a.pages.split(",") if x.strip()}))
    except ValueError:
        ap.error(f"--pages wants comma-separated page sizes, got {a.pages!r}")
    if any(p < 0 or (p and (p % 8 or (128 % p and p % 128))) for p in pages):
        ap.error(f"--pages: page sizes are multiples of 8 that divide 128 or are multiples of it (the Hopper kernel's "
                 f"key tile; 0: contiguous), got {a.pages!r}")
    ROWS.update(EXTRA_ROWS)
    unknown = [r for r in a.rows.split(",") if r not in ROWS]
    if unknown:
        ap.error(f"--rows: unknown {', '.join(unknown)}; the rows are {', '.join(ROWS)}")
    if any(p and ROWS[r][3] % p for r in a.rows.split(",") for p in pages):
        ap.error(f"--pages: every page size must divide the rows' key counts, got {a.pages!r}")
    add_runtimes(a.also, ap.error)
    if a.fold:
        RUNTIMES["fold"] = ({"QATTN_SPLIT_MODE": "fold"}, {}, {})
    gpu = torch.cuda.get_device_name()
    d = 128
    gen = torch.Generator().manual_seed(0)
    print(f"{gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; bf16, d {d}, one query token",
          flush=True)
    lines = []
    for name in a.rows.split(","):
        b, hq, hkv, sk = ROWS[name]
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        lens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        dst = torch.empty_like(k)
        src256 = torch.randn(COPY_BYTES // 2, device="cuda", dtype=torch.bfloat16)
        dst256 = torch.empty_like(src256)
        fns = {"cudnn": lambda: _cudnn(qt, kt, vt), "copy": lambda: dst.copy_(k), "copy256": lambda: dst256.copy_(src256)}
        try:
            _fa2(qt, kt, vt)
            fns["fa2"] = lambda: _fa2(qt, kt, vt)
        except RuntimeError as e:  # torch has no FlashAttention-2 kernel for this shape / GPU
            print(f"{name}: fa2 unavailable: {str(e).splitlines()[0] if str(e) else type(e).__name__}", flush=True)
        caches = {}
        for page in pages:
            caches[page] = (k, v, None) if page == 0 else paged(k, v, page, gen, a.ordered_pages)
        for rt in [None] + list(RUNTIMES):
            tag = f"@{rt}" if rt else ""
            fns["qattn" + tag] = in_runtime(rt, lambda: qattn.attention(q, k, v))
            for page in pages:
                kc, vc, tb = caches[page]
                fns[f"kv{page}{tag}"] = in_runtime(rt, lambda kc=kc, vc=vc, tb=tb: qattn.attention_with_kvcache(q, kc, vc, lens, tb))
                if a.varlen and rt is None:
                    qp, cq = q.view(b, hq, d), torch.arange(b + 1, dtype=torch.int32, device="cuda")
                    for mq, tag_v in ((1, "vl"), (2, "vr")):
                        fns[f"{tag_v}{page}"] = lambda kc=kc, vc=vc, tb=tb, mq=mq: qattn.attention_varlen(
                            qp, kc, vc, cq, None, mq, sk, cache_seqlens=lens, block_table=tb)[:, None].view(b, 1, hq, d)
        outs = {n: f() for n, f in fns.items() if not n.startswith("copy")}
        check_runtimes()
        for ref in ("cudnn", "fa2"):
            if ref in outs:
                outs[ref] = outs[ref].transpose(1, 2)
        for n in outs:
            diff = (outs["qattn"].float() - outs[n].float()).abs().max().item()
            assert diff < 2e-2, f"{name}: qattn and {n} differ by {diff}"
        graphs = {n: graphed(f, a.calls) for n, f in fns.items()}
        med = replay_rounds(graphs, a.rounds, a.calls)
        kv_bytes = 2 * b * sk * hkv * d * 2
        copy_gbs = max(2 * (kv_bytes / 2) / (med["copy"] * 1e-6) / 1e9, 2 * COPY_BYTES / (med["copy256"] * 1e-6) / 1e9)
        for n in [x for x in med if not x.startswith("copy")]:
            base, _, rt = n.partition("@")
            page = int(base[2:]) if base[:2] in ("kv", "vl", "vr") else 0
            impl = {"kv": "qattn-kvcache", "vl": "qattn-varlen", "vr": "qattn-varlen-ragged"}.get(base[:2], base) + \
                (f"@{rt}" if rt else "")
            contiguous = "kv0" + (f"@{rt}" if rt else "")
            gbs = kv_bytes / (med[n] * 1e-6) / 1e9
            lines.append(dict(impl=impl, config=name, batch=b, hq=hq, hkv=hkv, d_qk=d, d_v=d, seqlen_q=1, seqlen_k=sk,
                              page_size=page, ms=round(med[n] / 1e3, 5), gbs=round(gbs, 1), copy_gbs=round(copy_gbs, 1),
                              frac_copy=round(gbs / copy_gbs, 3), vs_cudnn=round(med["cudnn"] / med[n], 3),
                              vs_fa2=round(med["fa2"] / med[n], 3) if "fa2" in med else "",
                              vs_contiguous=round(med[contiguous] / med[n], 3) if base[:2] in ("kv", "vl", "vr") else "",
                              gpu=gpu))
        fa2 = f"fa2 {med['fa2']:7.1f} us | " if "fa2" in med else ""
        print(f"{name:18s} copy {copy_gbs:6.0f} GB/s | cudnn {med['cudnn']:7.1f} us | {fa2}qattn {med['qattn']:7.1f} us | "
              + " | ".join(f"kv page {p} {med[f'kv{p}']:7.1f} us ({kv_bytes / med[f'kv{p}'] / 1e3:5.0f} GB/s, "
                           f"{med['cudnn'] / med[f'kv{p}']:.2f}x cudnn)" for p in pages), flush=True)
        if a.varlen:
            print(f"{'':18s} attention_varlen (one query per sequence; time / the batched call's): " + " | ".join(
                f"page {p} {med[f'vl{p}']:7.1f} us ({kv_bytes / med[f'vl{p}'] / 1e3:5.0f} GB/s, "
                f"{med[f'vl{p}'] / med[f'kv{p}']:.3f}x), max_seqlen_q 2 {med[f'vr{p}']:7.1f} us "
                f"({med[f'vr{p}'] / med[f'kv{p}']:.3f}x)" for p in pages), flush=True)
        for rt in RUNTIMES:
            # a speed ratio: the other runtime's time over this one's (above 1: this runtime is faster)
            print(f"{'':18s} speed vs {rt} (its time / this runtime's): qattn {med[f'qattn@{rt}'] / med['qattn']:.3f}x | " +
                  " | ".join(f"kv page {p} {med[f'kv{p}@{rt}'] / med[f'kv{p}']:.3f}x" for p in pages), flush=True)
        del graphs, outs, fns, caches, q, k, v, qt, kt, vt, dst, src256, dst256
        torch.cuda.empty_cache()
    cols = ["impl", "config", "batch", "hq", "hkv", "d_qk", "d_v", "seqlen_q", "seqlen_k", "page_size", "ms", "gbs",
            "copy_gbs", "frac_copy", "vs_cudnn", "vs_fa2", "vs_contiguous", "gpu"]
    write_csv(a.out, lines, cols)


def _cudnn(q, k, v):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


def _fa2(q, k, v):
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


if __name__ == "__main__":
    main()
