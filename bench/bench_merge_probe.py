#!/usr/bin/env python3
"""The split-keys kernel alone, library by library (no package call path): each LIB.so exporting
qattn_fwd with kernel info "splits" is launched on the decoding shapes below with the given part
count, o_merged / lse_merged set when its info says "merge" (TL Merge, ABI 10); CUDA events over
CUDA graphs of 20 launches, median of 7 rounds, all libraries in the same rounds in a rotating
order (bench_util.replay_rounds: the first graph of a round runs 0.3-0.5 us slower). For the kernel-level
A/B of the in-kernel merge and its variants (bench/results/2026-11-30-h200-merge).

    python3 bench/bench_merge_probe.py NAME=LIB.so[@xF] [NAME=LIB.so[@xF] ...] [--rounds 7]

@xF launches that library with F times the row's part count (a kernel whose blocks are smaller or
share an SM: bench/results/2026-11-30-h200-decode-occupancy).
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from qattn import _abi  # noqa: E402
from bench_util import replay_rounds  # noqa: E402

ROWS = {  # name: (batch, heads_q, heads_kv, seqlen_k, parts) -- the parts qattn chooses on 132 SMs
    "mqa_32_1_b32_8k": (32, 32, 1, 8192, 4),
    "mqa_16_1_b8_16k": (8, 16, 1, 16384, 16),
    "gqa_32_8_b1_64k": (1, 32, 8, 65536, 16),
    "gqa_32_8_b4_16k": (4, 32, 8, 16384, 4),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    libs = []
    for spec in a.libs:
        name, _, path = spec.partition("=")
        path, _, factor = path.partition("@x")
        libs.append((name, _abi.Kernel(path), int(factor or 1)))
    g = torch.Generator(device="cuda").manual_seed(0)
    for row, (b, hq, hkv, sk, base_parts) in ROWS.items():
        q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(b, sk, hkv, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(b, sk, hkv, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        graphs, outs = [], []
        for name, kern, factor in libs:
            parts = base_parts * factor
            o = torch.empty(b * parts, 1, hq, 128, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(b * parts, hq, 1, device="cuda", dtype=torch.float32)
            p = kern.params(q, k, v, o, lse)
            p.splits = parts
            om = torch.full((b, 1, hq, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
            if kern.info.get("merge"):
                p.o_merged = om.data_ptr()
                p.om_batch_stride, p.om_row_stride, p.om_head_stride = om.stride()[:3]
            st = kern(q, k, v, o, params=p)
            torch.cuda.synchronize()
            if st != 0:
                sys.exit(f"{name}: status {st}: {kern.last_error()}")
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=s):
                    for _ in range(a.calls):
                        kern(q, k, v, o, params=p, stream=s.cuda_stream)
            graphs.append(graph)
            outs.append((om, o, p))
        med = replay_rounds({name: graph for (name, _, _), graph in zip(libs, graphs)}, a.rounds, a.calls)
        line = f"{row:18s} {base_parts:2d} parts"
        for name, _, _ in libs:
            line += f" | {name} {med[name]:7.1f} us"
        print(line, flush=True)


if __name__ == "__main__":
    main()
