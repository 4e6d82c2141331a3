#!/usr/bin/env python3
"""Decoding with the keys split over the GPU (qattn._attention.split_keys): qattn.attention with and
without the split against cuDNN (SDPA's cuDNN backend, enable_gqa), one process, CUDA graphs; the
split's merge by the TL combine kernel (qattn._combine, QATTN_COMBINE=tl) and by torch operations
(QATTN_COMBINE=torch: softmax of the LSEs, weighted sum, logsumexp) side by side.

    python3 bench/bench_split_kv.py OUT.csv [--rounds 7]

Rows: one query token per sequence (decoding), bf16, d 128, a cache of seqlen_k keys per sequence
(MQA, GQA 4 and 8; the serving issue's rows: batch 32 / 8k MQA 32/1 and GQA 32/8, batch 8 / 32k GQA
64/8). Fresh torch.randn inputs. The three outputs are compared first (max |diff| < 2e-2). Each
implementation is captured as a CUDA graph of `--calls` back-to-back calls (so host overhead, which a
serving engine removes with graphs, does not count) and replayed in --rounds rounds, the
implementations adjacent in time and in rotating order; the median per call is kept. Columns: impl
(qattn = split merged by the TL combine kernel, qattn_torch_merge = the same split merged by torch
operations, qattn_nosplit, cudnn, qattn_sN = N parts forced with --sweep, TL combine), config, batch,
hq, hkv, seqlen_k, splits, us, tb_s (K and V bytes read / time), vs_cudnn, vs_nosplit (speed ratios:
> 1 is faster), gpu, vs_torch_merge (the torch merge's time / this one's: > 1 is faster). Rows where
the call does not split (splits 1) have no torch-merge row (the two would run the same kernels).
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
from bench_util import graphed, replay_rounds, with_env, write_csv  # noqa: E402
from qattn import _attention  # noqa: E402

# name: (batch, hq, hkv, seqlen_k)
ROWS = {
    "mqa_32_1_b32_8k": (32, 32, 1, 8192),
    "gqa_32_8_b32_8k": (32, 32, 8, 8192),
    "gqa_64_8_b8_32k": (8, 64, 8, 32768),
    "mqa_16_1_b8_16k": (8, 16, 1, 16384),
    "gqa_32_8_b4_16k": (4, 32, 8, 16384),
    "gqa_32_8_b1_128k": (1, 32, 8, 131072),
}



def nosplit(fn):
    return with_env("QATTN_SPLIT_KV", "0", fn)


def tl_merge(fn):
    return with_env("QATTN_COMBINE", "tl", fn)  # the TL kernel, built if the cache lacks it


def torch_merge(fn):
    return with_env("QATTN_COMBINE", "torch", fn)


def forced(splits, fn):
    def run():
        real = _attention.split_keys
        _attention.split_keys = lambda *a_, **k_: splits
        try:
            return fn()
        finally:
            _attention.split_keys = real
    return run






def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--sweep", default="", help="also time qattn with these split counts forced (e.g. 2,4,8,16)")
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    d = 128
    lines = []
    print(f"{gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; bf16, d {d}, one query token",
          flush=True)
    for name, (b, hq, hkv, sk) in ROWS.items():
        q = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # SDPA's (b, h, s, d) views
        fields, args = _attention.split_launch_args(_attention.variant_fields(False, None, None, None, None, None))
        splits = _attention.split_keys(torch, q.device, q, k, fields, args, {})
        fns = {
            "qattn": tl_merge(lambda: qattn.attention(q, k, v)),
            "qattn_nosplit": nosplit(lambda: qattn.attention(q, k, v)),
            "cudnn": lambda: _cudnn(qt, kt, vt),
        }
        if splits > 1:
            fns["qattn_torch_merge"] = torch_merge(lambda: qattn.attention(q, k, v))
        for s_ in (int(x) for x in a.sweep.split(",") if x):
            if sk % s_ == 0 and s_ != splits:
                fns[f"qattn_s{s_}"] = tl_merge(forced(s_, lambda: qattn.attention(q, k, v)))
        outs = {n: f() for n, f in fns.items()}
        outs["cudnn"] = outs["cudnn"].transpose(1, 2)
        for n in [x for x in outs if x != "qattn"]:
            diff = (outs["qattn"].float() - outs[n].float()).abs().max().item()
            assert diff < 2e-2, f"{name}: qattn and {n} differ by {diff}"
        graphs = {n: graphed(f, a.calls) for n, f in fns.items()}
        names = list(graphs)
        med = replay_rounds(graphs, a.rounds, a.calls)
        kv_bytes = 2 * b * sk * hkv * d * 2
        tm = med.get("qattn_torch_merge")
        for n in names:
            lines.append(dict(impl=n, config=name, batch=b, hq=hq, hkv=hkv, seqlen_k=sk,
                              splits=splits if n in ("qattn", "qattn_torch_merge") else int(n[7:]) if n.startswith(
                                  "qattn_s") else 1,
                              us=round(med[n], 2),
                              tb_s=round(kv_bytes / (med[n] * 1e-6) / 1e12, 3),
                              vs_cudnn=round(med["cudnn"] / med[n], 3), vs_nosplit=round(med["qattn_nosplit"] / med[n], 3),
                              gpu=gpu, vs_torch_merge=round(tm / med[n], 3) if tm else ""))
        print(f"{name:18s} splits {splits:2d}: qattn {med['qattn']:7.1f} us ({kv_bytes / med['qattn'] / 1e6:.2f} TB/s)  "
              f"no split {med['qattn_nosplit']:7.1f} us ({kv_bytes / med['qattn_nosplit'] / 1e6:.2f})  cudnn "
              f"{med['cudnn']:7.1f} us ({kv_bytes / med['cudnn'] / 1e6:.2f})  split/cudnn "
              f"{med['cudnn'] / med['qattn']:.2f}x  split/nosplit {med['qattn_nosplit'] / med['qattn']:.2f}x"
              + (f"  torch merge {tm:7.1f} us (TL combine {tm / med['qattn']:.2f}x)" if tm else "")
              + "".join(f"  {n[6:]} {med[n]:.1f}" for n in names if n.startswith("qattn_s")), flush=True)
        del graphs, outs, q, k, v
        torch.cuda.empty_cache()
    cols = ["impl", "config", "batch", "hq", "hkv", "seqlen_k", "splits", "us", "tb_s", "vs_cudnn", "vs_nosplit", "gpu",
            "vs_torch_merge"]
    write_csv(a.out, lines, cols)


def _cudnn(q, k, v):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])


if __name__ == "__main__":
    main()
