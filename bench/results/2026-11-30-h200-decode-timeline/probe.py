#!/usr/bin/env python3
"""Where a split-keys decoding launch spends its time (issue 20: ~7 us per launch that a copy of the
same bytes does not pay, bench/results/2026-11-30-h200-decode-occupancy). On bench_merge_probe.py's
decoding rows: the generated kernel (BASE.so) and its stamped copy (STAMP.so, stamp.py) timed per
launch in CUDA graphs of 20 (median of 9 rounds, both in the same rounds), a torch copy of the same K
and V bytes the same way, then the stamped kernel's last launch of a graph replay read back: per
block (ns from the first block's start) its start, the producer's first copy, the first K tile's
arrival, the key loop's end and the block's end.

    python3 probe.py NAME=LIB.so [NAME=LIB.so ...]

Every library is timed in the same rounds; those that export qattn_stamps_read (stamp.py) are read
back too, with the prologue's points when the name contains "fine" (stamp.py --fine).
"""
import ctypes
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))
from qattn import _abi  # noqa: E402
from bench_merge_probe import ROWS  # noqa: E402

CALLS, ROUNDS = 20, 9


def graph_of(fn):
    s = torch.cuda.Stream()
    fn(s)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(CALLS):
                fn(s)
    return g


def main():
    libs, readers = {}, {}
    for arg in sys.argv[1:]:
        name, _, path = arg.partition("=")
        libs[name] = _abi.Kernel(path)
        lib = ctypes.CDLL(path)
        if hasattr(lib, "qattn_stamps_read"):
            readers[name] = lib.qattn_stamps_read
            readers[name].argtypes = [ctypes.c_void_p, ctypes.c_ulong]
    print(torch.cuda.get_device_name(), torch.__version__)
    g = torch.Generator(device="cuda").manual_seed(0)
    for row, (b, hq, hkv, sk, parts) in ROWS.items():
        q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(b, sk, hkv, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(b, sk, hkv, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        kv = torch.cat([k.flatten(), v.flatten()])
        dst = torch.empty_like(kv)
        graphs = {}
        for name, kern in libs.items():
            o = torch.empty(b * parts, 1, hq, 128, device="cuda", dtype=torch.bfloat16)
            p = kern.params(q, k, v, o, torch.empty(b * parts, hq, 1, device="cuda", dtype=torch.float32))
            p.splits = parts

            def call(s, kern=kern, o=o, p=p):
                st = kern(q, k, v, o, params=p, stream=s.cuda_stream)
                if st != 0:
                    sys.exit(f"{name}: status {st}: {kern.last_error()}")
            graphs[name] = graph_of(call)
        graphs["copy"] = graph_of(lambda s: dst.copy_(kv))
        times = {n: [] for n in graphs}
        order = list(graphs.items())
        for r in range(ROUNDS):  # rotating (calls 1-6 ran a fixed order: the README's caveat)
            for n, gr in order[r % len(order):] + order[:r % len(order)]:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                gr.replay()
                e1.record()
                torch.cuda.synchronize()
                times[n].append(e0.elapsed_time(e1) * 1000 / CALLS)
        med = {n: statistics.median(t) for n, t in times.items()}
        mb = kv.numel() * 2 / 1e6
        print(f"\n{row}: {parts} parts, K+V {mb:.1f} MB | " + " | ".join(f"{n} {med[n]:.1f} us" for n in libs) +
              f" | copy {med['copy']:.1f} us ({2 * mb / med['copy']:.2f} TB/s read + written)")
        for n, read in readers.items():
            timeline(n, graphs[n], read)


def timeline(name, graph, read):
    """The last launch of a replay of the stamped library's graph: its blocks' stamps (stamp.py)."""
    buf = (ctypes.c_ulonglong * (4096 * 16))()
    assert read(buf, ctypes.sizeof(buf)) == 0
    before = max(buf[i * 16 + 4] for i in range(4096))  # the latest stamp of earlier launches
    graph.replay()
    torch.cuda.synchronize()
    assert read(buf, ctypes.sizeof(buf)) == 0
    rows = [list(buf[i * 16:i * 16 + 16]) for i in range(4096)]
    rows = [r for r in rows if r[0] > before and r[4] >= r[0]]  # this replay's last launch: the whole grid
    t0 = min(r[0] for r in rows)

    def stat(xs):
        xs = sorted(xs)
        return f"min {xs[0] / 1e3:6.2f} med {xs[len(xs) // 2] / 1e3:6.2f} max {xs[-1] / 1e3:6.2f}"
    print(f"  {name}: blocks read {len(rows)}; us from the first block's start:")
    print(f"  block start            {stat([r[0] - t0 for r in rows])}")
    print(f"  Q copy issued          {stat([r[1] - t0 for r in rows if r[1]])}")
    print(f"  first K landed         {stat([r[2] - t0 for r in rows if r[2]])}")
    print(f"  key loop done          {stat([r[3] - t0 for r in rows if r[3]])}")
    print(f"  block end              {stat([r[4] - t0 for r in rows])}")
    print(f"  per block: start->K {stat([r[2] - r[0] for r in rows if r[2]])} | loop {stat([r[3] - r[2] for r in rows if r[3]])}"
          f" | epilogue {stat([r[4] - r[3] for r in rows if r[3]])}")
    print(f"  span (last end - first start) {(max(r[4] for r in rows) - t0) / 1e3:.2f} us; SMs {len(set(r[5] for r in rows))}")
    if "fine" in name:
        for i, what in ((6, "after __syncthreads"), (7, "producer setmaxnreg"), (8, "prefetch_maps"), (9, "producer Scope"),
                        (10, "consumer setmaxnreg"), (11, "consumer tile received"), (12, "consumer Scope"), (13, "consumer Q landed")):
            print(f"  per block: start->{what:24s} {stat([r[i] - r[0] for r in rows if r[i]])}")


if __name__ == "__main__":
    main()
