#!/usr/bin/env python3
"""Prefill on packed ragged batches (flash_attn_varlen_func's layout): qattn.attention_varlen (one
launch of the TL kernel that reads cu_seqlens, docs/tl.md "Ragged batches") against the same tokens
padded into a (batch, max_len) batch (qattn.attention and cuDNN through SDPA, enable_gqa), and against
the path flash_attn_varlen_func took before (one packed row with qattn's document mask, segment ids
from cu_seqlens: the parent implementation). One process, CUDA graphs.

    python3 bench/bench_varlen.py OUT.csv [--rounds 5] [--calls 4] [--rows NAME,...] [--also NAME=DEVICE_DIR[:QATTN_BIN]]

Rows: causal, bf16, d 128, GQA 32/8 (Llama 3 8B), fresh torch.randn inputs; equal lengths (where
padding wastes nothing: the ragged kernel should match the padded batch) and realistic mixes (where
padding computes the pads). The outputs are compared first (every sequence's rows, max |diff| < 2e-2
against the padded qattn.attention). tflops counts the useful work of each sequence (the causal
triangle: 4 d h sum_b sq_b (sq_b + 1) / 2), the same for every implementation, so a padded batch's
figure shows what padding costs. Each implementation is a CUDA graph of --calls calls replayed in
--rounds rounds, adjacent in time and in rotating order; the median per call is kept. Columns: impl
(qattn-varlen, qattn-docmask, qattn-padded, cudnn-padded), row, batch, hq, hkv, d, tokens,
max_seqlen, pad_frac (padded tokens / tokens - 1), ms, tflops, vs_padded (qattn-padded time / this),
vs_cudnn (cudnn-padded time / this), gpu.

Serving rows (serve_*, --rows): one continuous-batching step over a paged KV cache (pages of 16, in a
shuffled pool): N decoding sequences of one query each and one prefill chunk of C queries, every
sequence with L keys cached (its queries the last of them), causal, through qattn.attention_varlen(q,
k_cache, v_cache, cu_seqlens_q, None, C, L, cache_seqlens=, block_table=) as flash_attn_varlen_func
with a block table calls it; checked per sequence against fp32 first; tflops counts q_len x L x 4 d h
per sequence (the keys each query row reads); vs_padded is the ratio to this tree's qattn-varlen there;
qattn-varlen-nosplit is the same call with the key split off (QATTN_SPLIT_KV=0).
`--also` runtimes time the same qattn-varlen call with their kernels (impl qattn-varlen@NAME) on every row.
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
from bench_runtimes import add_runtimes, check_runtimes, in_runtime, RUNTIMES  # noqa: E402
from bench_util import graphed, replay_rounds, write_csv  # noqa: E402


def lengths(name, gen):
    """Each row's sequence lengths."""
    if name.startswith("eq_"):  # eq_BxL
        b, n = name[3:].split("x")
        return [int(n.replace("k", "")) * (1024 if n.endswith("k") else 1)] * int(b)
    if name == "mix_lognormal_32":  # chat-like prompts: median ~1k, a long tail to 8k
        x = torch.empty(32).log_normal_(mean=6.9, std=0.8, generator=gen)
        return [int(v) for v in x.clamp(32, 8192)]
    if name == "mix_uniform_128":  # many short requests
        return [int(v) for v in torch.randint(16, 1025, (128,), generator=gen)]
    if name == "mix_one_long":  # one long document among short ones
        return [16384] + [256] * 31
    raise ValueError(name)


ROWS = ["eq_8x2k", "eq_4x8k", "eq_32x512", "mix_lognormal_32", "mix_uniform_128", "mix_one_long"]
SERVE = {  # name: (hq, hkv, decoding sequences, chunk queries, keys cached per sequence)
    "serve_gqa_64x4k+512": (32, 8, 64, 512, 4096),
    "serve_gqa_128x2k+2k": (32, 8, 128, 2048, 2048),
    "serve_gqa64_32x8k+1k": (64, 8, 32, 1024, 8192),
    "serve_mqa_32x8k+1k": (16, 1, 32, 1024, 8192),
    # few long sequences: the launch leaves SMs idle, the keys split (_varlen.ragged_splits)
    "serve_mqa_4x32k+256": (16, 1, 4, 256, 32768),
    "serve_gqa_2x64k+1k": (32, 8, 2, 1024, 65536),
}


def serve(name, rounds, calls, gpu):
    """One serving step (the module's docstring): qattn-varlen and the --also runtimes' calls."""
    from qattn._kvcache_check import make_cache
    hq, hkv, ndec, chunk, ctx = SERVE[name]
    d, dt, page = 128, torch.bfloat16, 16
    g = torch.Generator(device="cuda").manual_seed(1)
    lq = [1] * ndec + [chunk]
    b = len(lq)
    k, v, kc, vc, table = make_cache(b, ctx, hkv, d, d, dt, page, [ctx] * b, g)
    cq = torch.tensor([0] + lq, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
    q = torch.randn(int(cq[-1]), hq, d, device="cuda", dtype=dt, generator=g)
    lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    call = lambda: qattn.attention_varlen(q, kc, vc, cq, None, chunk, ctx, causal=True, cache_seqlens=lens, block_table=table)  # noqa: E731
    fns = {"qattn-varlen": call}

    def unsplit():  # the same call with the key split off (QATTN_SPLIT_KV=0), this tree's kernels
        old = os.environ.get("QATTN_SPLIT_KV")
        os.environ["QATTN_SPLIT_KV"] = "0"
        try:
            return call()
        finally:
            if old is None:
                del os.environ["QATTN_SPLIT_KV"]
            else:
                os.environ["QATTN_SPLIT_KV"] = old
    fns["qattn-varlen-nosplit"] = unsplit
    for rt in RUNTIMES:  # (unsplit: a parent before the split of ragged rows refuses its spec, SPEC0219)
        fns[f"qattn-varlen@{rt}"] = in_runtime(rt, unsplit)
    outs = {n: f() for n, f in fns.items()}
    torch.cuda.synchronize()
    check_runtimes()
    cql = cq.tolist()
    for bi in (0, ndec // 2, b - 1):  # decoding sequences and the chunk, against fp32
        a, e = cql[bi], cql[bi + 1]
        qf = q[a:e].float().transpose(0, 1)
        kf, vf = (t[bi, :ctx].float().repeat_interleave(hq // hkv, 1).transpose(0, 1) for t in (k, v))
        s = qf @ kf.transpose(1, 2) / d ** 0.5
        s.masked_fill_(torch.ones(e - a, ctx, device="cuda", dtype=torch.bool).triu(ctx - (e - a) + 1), float("-inf"))
        ref = (s.softmax(-1) @ vf).transpose(0, 1)
        for n, o in outs.items():
            err = (o[a:e].float() - ref).abs().max().item()
            assert err < 2e-2, f"{name}: {n} sequence {bi} differs from fp32 by {err}"
    graphs = {n: graphed(f, calls) for n, f in fns.items()}
    med = replay_rounds(graphs, rounds, calls)
    flops = sum(4.0 * d * hq * n * ctx for n in lq)
    rows, line = [], f"{name:22s} b{b:<4d} tokens {len(cql) and cql[-1]:6d} keys {ctx} |"
    for n in fns:
        tf = flops / (med[n] * 1e-6) / 1e12
        rows.append(dict(impl=n, row=name, batch=b, hq=hq, hkv=hkv, d=d, tokens=cql[-1], max_seqlen=chunk, pad_frac="",
                         ms=round(med[n] / 1e3, 5), tflops=round(tf, 1), vs_padded=round(med["qattn-varlen"] / med[n], 3),
                         vs_cudnn="", gpu=gpu))
        line += f" {n} {med[n] / 1e3:7.3f} ms {tf:5.0f} TF |"
    print(line, flush=True)
    return rows


def cudnn(q, k, v):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DEVICE_DIR[:QATTN_BIN]",
                    help="the serving rows' call also with another runtime's kernels (bench_runtimes.py)")
    a = ap.parse_args()
    add_runtimes(a.also, ap.error)
    gpu = torch.cuda.get_device_name()
    hq, hkv, d, dt = 32, 8, 128, torch.bfloat16
    print(f"{gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; causal bf16 d{d} GQA {hq}/{hkv}", flush=True)
    gen = torch.Generator().manual_seed(0)
    out_rows = []
    for name in a.rows.split(","):
        if name in SERVE:
            out_rows += serve(name, a.rounds, a.calls, gpu)
            continue
        lens = lengths(name, gen)
        b, tot, mx = len(lens), sum(lens), max(lens)
        cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
        q = torch.randn(tot, hq, d, device="cuda", dtype=dt)
        k = torch.randn(tot, hkv, d, device="cuda", dtype=dt)
        v = torch.randn(tot, hkv, d, device="cuda", dtype=dt)
        qp, kp, vp = (t.new_zeros((b, mx) + t.shape[1:]) for t in (q, k, v))
        for i, (s, n) in enumerate(zip(cu.tolist()[:-1], lens)):
            qp[i, :n], kp[i, :n], vp[i, :n] = q[s:s + n], k[s:s + n], v[s:s + n]
        qt, kt, vt = (t.transpose(1, 2) for t in (qp, kp, vp))
        seg = torch.repeat_interleave(torch.arange(b, device="cuda", dtype=torch.int32), torch.tensor(lens, device="cuda"))[None]
        fns = {
            "qattn-varlen": lambda: qattn.attention_varlen(q, k, v, cu, cu, mx, mx, causal=True),
            "qattn-docmask": lambda: qattn.attention(q[None], k[None], v[None], causal=True, segment_ids=(seg, seg)),
            "qattn-padded": lambda: qattn.attention(qp, kp, vp, causal=True),
            "cudnn-padded": lambda: cudnn(qt, kt, vt),
        }
        for rt in RUNTIMES:  # the same ragged call with another runtime's kernels
            fns[f"qattn-varlen@{rt}"] = in_runtime(rt, fns["qattn-varlen"])
        outs = {n: f() for n, f in fns.items()}
        torch.cuda.synchronize()
        check_runtimes()
        ref = outs["qattn-padded"]
        for n, o in outs.items():
            o = o.transpose(1, 2) if n == "cudnn-padded" else o
            o = o[0] if n == "qattn-docmask" else o
            worst = 0.0
            for i, (s, ln) in enumerate(zip(cu.tolist()[:-1], lens)):
                got = o[s:s + ln] if n.startswith("qattn-varlen") or n == "qattn-docmask" else o[i, :ln]
                worst = max(worst, (got.float() - ref[i, :ln].float()).abs().max().item())
            assert worst < 2e-2, f"{name}: {n} differs from the padded qattn.attention by {worst}"
        graphs = {n: graphed(f, a.calls) for n, f in fns.items()}
        med = replay_rounds(graphs, a.rounds, a.calls)
        del graphs, outs
        flops = sum(4.0 * d * hq * n * (n + 1) / 2 for n in lens)
        line = f"{name:18s} b{b:<4d} tokens {tot:6d} max {mx:6d} pad {b * mx / tot - 1:5.2f} |"
        for n in fns:
            tf = flops / (med[n] * 1e-6) / 1e12
            out_rows.append(dict(impl=n, row=name, batch=b, hq=hq, hkv=hkv, d=d, tokens=tot, max_seqlen=mx,
                                 pad_frac=round(b * mx / tot - 1, 3), ms=round(med[n] / 1e3, 5), tflops=round(tf, 1),
                                 vs_padded=round(med["qattn-padded"] / med[n], 3), vs_cudnn=round(med["cudnn-padded"] / med[n], 3),
                                 gpu=gpu))
            line += f" {n} {med[n] / 1e3:7.3f} ms {tf:5.0f} TF |"
        print(line, flush=True)
        q = k = v = qp = kp = vp = qt = kt = vt = None
        torch.cuda.empty_cache()
    write_csv(a.out, out_rows, ["impl", "row", "batch", "hq", "hkv", "d", "tokens", "max_seqlen", "pad_frac", "ms", "tflops",
                                "vs_padded", "vs_cudnn", "gpu"])


if __name__ == "__main__":
    main()
