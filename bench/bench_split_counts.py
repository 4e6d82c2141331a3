#!/usr/bin/env python3
"""How many parts the key split should cut decoding into: qattn.attention with the number of parts
forced (qattn._attention.split_keys replaced) against the count split_keys chooses and cuDNN (SDPA's
cuDNN backend), one process, CUDA graphs of --calls calls replayed in --rounds rotating rounds,
medians; outputs compared with the chosen count's first (max |diff| < 2e-2). Fresh torch.randn inputs.

    python3 bench/bench_split_counts.py OUT.csv [--counts 1,2,4,8,16,24,32] [--rows NAME,...]

Rows: one query token, bf16, d 128 (bench_kvcache.py's decoding rows that split). Columns: impl
(qattn-S<n>, qattn-auto, cudnn), config, batch, hq, hkv, seqlen_k, splits, us, vs_cudnn, vs_auto, gpu.
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
from qattn import _attention  # noqa: E402
from bench_util import DECODE_ROWS, graphed, replay_rounds, write_csv  # noqa: E402

# the rows that split (name: (batch, hq, hkv, seqlen_k))
ROWS = {n: DECODE_ROWS[n] for n in ("mqa_32_1_b32_8k", "mqa_16_1_b8_16k", "gqa_64_8_b8_32k", "gqa_32_8_b1_64k", "gqa_32_8_b4_16k")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--counts", default="1,2,4,8,16,24,32")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    auto = _attention.split_keys
    print(f"{gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; bf16, d 128, one query token; "
          f"split in TL: {_attention.tl_split(torch, torch.device('cuda'))}", flush=True)
    lines = []
    for name in a.rows.split(","):
        b, hq, hkv, sk = ROWS[name]
        q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, sk, hkv, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(b, sk, hkv, 128, device="cuda", dtype=torch.bfloat16)
        chosen = auto(torch, q.device, q, k, {"mask": {"kind": "none"}}, {}, {})

        def forced(s):
            def run():
                _attention.split_keys = lambda *x, **y: s
                try:
                    return qattn.attention(q, k, v)
                finally:
                    _attention.split_keys = auto
            return run
        fns = {"qattn-auto": lambda: qattn.attention(q, k, v)}
        for s in (int(x) for x in a.counts.split(",")):
            fns[f"qattn-S{s}"] = forced(s)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=hq != hkv).transpose(1, 2)
        fns["cudnn"] = cudnn
        ref = fns["qattn-auto"]().float()
        for n, f in fns.items():
            diff = (f().float() - ref).abs().max().item()
            assert diff < 2e-2, f"{name}: {n} differs by {diff}"
        med = replay_rounds({n: graphed(f, a.calls) for n, f in fns.items()}, a.rounds, a.calls)
        for n, us in med.items():
            s = chosen if n == "qattn-auto" else int(n[7:]) if n.startswith("qattn-S") else 0
            lines.append(dict(impl=n, config=name, batch=b, hq=hq, hkv=hkv, seqlen_k=sk, splits=s, us=round(us, 2),
                              vs_cudnn=round(med["cudnn"] / us, 3), vs_auto=round(med["qattn-auto"] / us, 3), gpu=gpu))
        print(f"{name:18s} cudnn {med['cudnn']:7.1f} us | auto (S={chosen}) {med['qattn-auto']:7.1f} us | " +
              " | ".join(f"S={n[7:]} {us:7.1f}" for n, us in med.items() if n.startswith("qattn-S")), flush=True)
    write_csv(a.out, lines)


if __name__ == "__main__":
    main()
