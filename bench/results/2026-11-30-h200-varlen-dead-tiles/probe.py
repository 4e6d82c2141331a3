#!/usr/bin/env python3
"""What the ragged kernel's dead tiles cost: the Grid is sized by max_seqlen_q (cdiv(max_seqlen_q x G,
BM) query tiles per sequence and kv head), and a sequence shorter than that leaves its extra tiles
dead: fetched from the persistent scheduler's counter and skipped one by one. The same serving step
(N decoding sequences of one query and one of two, so the call stays on the ragged path, over a paged
cache of L keys each; GQA 32/8, d128, bf16, causal) timed with max_seqlen_q = 2 (no dead tile) and
larger values (the outputs must not change: same attention), CUDA graphs, medians of rotating rounds.

    python3 probe.py [--rounds 9]
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))
import qattn  # noqa: E402
from bench_util import graphed, replay_rounds  # noqa: E402
from qattn._kvcache_check import make_cache  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__)
    for hq, hkv, ndec, ctx in ((32, 8, 128, 2048), (32, 8, 64, 4096), (16, 1, 32, 8192)):
        g = torch.Generator(device="cuda").manual_seed(3)
        lq = [1] * ndec + [2]
        b = len(lq)
        k, v, kc, vc, table = make_cache(b, ctx, hkv, 128, 128, torch.bfloat16, 16, [ctx] * b, g)
        cq = torch.tensor([0] + lq, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
        q = torch.randn(int(cq[-1]), hq, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
        fns = {}
        for mq in (2, 64, 512, 2048):
            fns[f"max_q {mq}"] = (lambda mq=mq: qattn.attention_varlen(q, kc, vc, cq, None, mq, ctx, causal=True,
                                                                      cache_seqlens=lens, block_table=table))
        outs = {n: f() for n, f in fns.items()}
        torch.cuda.synchronize()
        for n, o in outs.items():
            assert torch.equal(o, outs["max_q 2"]), n
        med = replay_rounds({n: graphed(f, 4) for n, f in fns.items()}, a.rounds, 4)
        kv_gb = b * ctx * hkv * 128 * 2 * 2 / 1e9
        print(f"GQA {hq}/{hkv}, {ndec} decoding + 1 of two queries, {ctx} keys (K+V {kv_gb:.2f} GB): " +
              " | ".join(f"{n} {med[n]:.1f} us ({kv_gb / med[n] * 1e3:.2f} TB/s)" for n in fns), flush=True)


if __name__ == "__main__":
    main()
