#!/usr/bin/env python3
"""Times the decoding kernel variants of bench/decode_tiles.sh (one .so per TL edit) on the launches
the key split makes (the keys of each sequence folded into the batch, qattn._attention.split_keys on
this GPU), one process, CUDA graphs of --calls launches replayed in --rounds rounds, variants adjacent
in time and in rotating order; outputs compared with the planner's kernel ('base') first.

    python3 bench/bench_decode_tiles.py SO_DIR OUT.csv [--rounds 7] [--rows NAME,...]

--rows: bench_util.DECODE_ROWS names (default: the five below).

Columns: variant, config, batch, hq, hkv, seqlen_k (per sequence), splits, us (per launch), tb_s
(K + V bytes / time), vs_base (base time / this: > 1 is faster), gpu."""
import argparse
import glob
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from qattn import _attention  # noqa: E402
from qattn._abi import Kernel  # noqa: E402
from bench_util import DECODE_ROWS, graphed, replay_rounds, write_csv  # noqa: E402

ROWS = {n: DECODE_ROWS[n] for n in ("mqa_32_1_b32_8k", "gqa_32_8_b32_8k", "gqa_64_8_b8_32k", "mqa_16_1_b8_16k",
                                    "gqa_32_8_b1_64k")}  # name: (batch, hq, hkv, seqlen_k)




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("so_dir")
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rows", default=",".join(ROWS), help="bench_util.DECODE_ROWS names")
    a = ap.parse_args()
    rows = {n: DECODE_ROWS[n] for n in a.rows.split(",")}
    kerns = {os.path.basename(p)[:-3]: Kernel(p) for p in sorted(glob.glob(os.path.join(a.so_dir, "*.so")))}
    assert "base" in kerns, "no base.so"
    gpu = torch.cuda.get_device_name()
    d = 128
    lines = []
    print(f"{gpu}: variants {', '.join(kerns)}", flush=True)
    for name, (b, hq, hkv, sk) in rows.items():
        q0 = torch.randn(b, 1, hq, d, device="cuda", dtype=torch.bfloat16)
        k0 = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
        fields, args = _attention.split_launch_args(_attention.variant_fields(False, None, None, None, None, None))
        s = _attention.split_keys(torch, q0.device, q0, k0, fields, args, {})
        bf, skf = b * s, sk // s
        q = q0[:, None].expand(b, s, 1, hq, d).reshape(bf, 1, hq, d).contiguous()
        k = k0.reshape(bf, skf, hkv, d)
        v = torch.randn_like(k)
        outs, fns = {}, {}
        for n, kern in kerns.items():
            o = torch.full((bf, 1, hq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
            lse = torch.full((bf, hq, 1), float("nan"), device="cuda")
            p = kern.params(q, k, v, o, lse)
            assert kern(q, k, v, o, params=p) == 0, (n, kern.last_error())
            outs[n] = (o, lse)
            fns[n] = (lambda kern=kern, p=p: kern._lib.fwd(p, torch.cuda.current_stream().cuda_stream))
        torch.cuda.synchronize()
        for n in kerns:
            diff = (outs[n][0].float() - outs["base"][0].float()).abs().max().item()
            assert diff < 2e-2, f"{name}: {n} differs from base by {diff}"
        graphs = {n: graphed(f, a.calls) for n, f in fns.items()}
        names = list(graphs)
        med = replay_rounds(graphs, a.rounds, a.calls)
        kv_bytes = 2 * b * sk * hkv * d * 2
        for n in names:
            lines.append(dict(variant=n, config=name, batch=b, hq=hq, hkv=hkv, seqlen_k=sk, splits=s, us=round(med[n], 2),
                              tb_s=round(kv_bytes / med[n] / 1e6, 3), vs_base=round(med["base"] / med[n], 3), gpu=gpu))
        print(f"{name:18s} S={s:2d}: " + "  ".join(f"{n} {med[n]:.1f}us ({med['base'] / med[n]:.2f}x)" for n in names),
              flush=True)
    cols = ["variant", "config", "batch", "hq", "hkv", "seqlen_k", "splits", "us", "tb_s", "vs_base", "gpu"]
    write_csv(a.out, lines, cols)


if __name__ == "__main__":
    main()
