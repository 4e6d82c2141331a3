#!/usr/bin/env python3
"""Times a backward library and its stamped copy (stamp.py) in one process (CUDA graphs, rotating
rounds), then launches the stamped one once per shape and reads its blocks' %globaltimer stamps:
the medians of each phase of a block, the gaps between consecutive blocks on one SM, and the tail.

    python3 probe.py PLAIN.so STAMPED.so [--shapes 'b,hq,hkv,sq,sk;...']
"""
import argparse
import ctypes
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))
from qattn import _abi  # noqa: E402
from qattn._backward_check import DT  # noqa: E402
from bench_util import graphed, replay_rounds  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("plain")
ap.add_argument("stamped")
ap.add_argument("--shapes", default="16,32,32,1024,1024;8,32,32,2048,2048;2,32,32,8192,8192")
a = ap.parse_args()
libs = {"plain": _abi.BwdLibrary(a.plain), "stamped": _abi.BwdLibrary(a.stamped)}
raw = ctypes.CDLL(a.stamped)
raw.qattn_stamps_read.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
info = libs["plain"].info
dt, d, dv_ = DT[info["dtype"]], info["d_qk"], info["d_v"]
bn = info["tiles"]["BN"]
print(f"{torch.cuda.get_device_name()}; {os.path.basename(a.plain)} (mask {info['mask']}, BN {bn})", flush=True)
med = statistics.median
for spec in a.shapes.split(";"):
    b, hq, hk, sq, sk = (int(x) for x in spec.split(","))
    g = torch.Generator(device="cuda").manual_seed(sq)
    q, o, dout = (torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=g) for _ in range(3))
    k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=dt, generator=g) for _ in range(2))
    lse = torch.rand(b, hq, sq, device="cuda", generator=g) * 4 + 8
    calls = {}
    for n, lib in libs.items():
        dk_dt = DT[lib.info["dk_dtype"]]
        dq = torch.zeros(b, sq, hq, d, device="cuda")
        dk = torch.zeros(b, sk, hk, d, device="cuda", dtype=dk_dt)
        dv = torch.zeros(b, sk, hk, dv_, device="cuda", dtype=dk_dt)
        p = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dv, scale=d ** -0.5)
        ws = _abi.bwd_workspace(torch, lib, p, "cuda")

        def call(lib=lib, p=p, dq=dq, dk=dk, dv=dv, ws=ws):  # noqa: ARG001
            dq.zero_()
            if dk.dtype == torch.float32:
                dk.zero_()
                dv.zero_()
            assert lib.bwd(p, torch.cuda.current_stream().cuda_stream) == 0, lib.last_error()
        calls[n] = call
    graphs = {n: graphed(f, 3) for n, f in calls.items()}
    t = replay_rounds(graphs, 9, 3)
    calls["stamped"]()
    torch.cuda.synchronize()
    nblk = -(-sk // bn) * hq * b
    buf = (ctypes.c_ulonglong * (8192 * 8))()
    assert raw.qattn_stamps_read(ctypes.addressof(buf), ctypes.sizeof(buf)) == 0
    s = [[buf[i * 8 + j] for j in range(8)] for i in range(min(nblk, 8192))]
    t0 = min(r[0] for r in s)
    end = max(r[5] for r in s)
    ph = {k: [] for k in ("prologue", "first ring", "loop", "per iteration", "epilogue", "exit wait")}
    for r in s:
        ph["prologue"].append(r[1] - r[0])
        ph["first ring"].append(r[2] - r[1])
        ph["loop"].append(r[3] - r[2])
        if r[6] > 0:
            ph["per iteration"].append((r[3] - r[2]) / r[6])
        ph["epilogue"].append(r[4] - r[3])
        ph["exit wait"].append(r[5] - r[4])
    per_sm = {}
    for r in s:
        per_sm.setdefault(r[7], []).append(r)
    gaps, idle_tail, busy = [], [], 0
    for sm, rs in per_sm.items():
        rs.sort(key=lambda r: r[0])
        gaps += [rs[i + 1][0] - rs[i][5] for i in range(len(rs) - 1)]
        idle_tail.append(end - rs[-1][5])
        busy += sum(r[5] - r[0] for r in rs)
    span = end - t0
    print(f"b{b} h{hq}/{hk} s{sq}x{sk}: plain {t['plain']:.1f} us, stamped {t['stamped']:.1f} us per call (dq zeroing and the "
          f"Phase included); stamped launch: {nblk} blocks on {len(per_sm)} SMs, {len(s) / len(per_sm):.1f} a SM, kernel span "
          f"{span / 1e3:.1f} us, SMs busy {busy / (span * len(per_sm)):.3f}", flush=True)
    print("  median us: " + ", ".join(f"{k} {med(v) / 1e3:.2f}" for k, v in ph.items()) +
          f"; iterations a block {med([r[6] for r in s]):.0f}", flush=True)
    print(f"  gap between blocks on an SM: median {med(gaps) / 1e3:.2f} us, 90th pct {sorted(gaps)[int(0.9 * len(gaps))] / 1e3:.2f} us; "
          f"tail (an SM's last block end to the kernel's end): median {med(idle_tail) / 1e3:.1f} us, max {max(idle_tail) / 1e3:.1f} us",
          flush=True)
    fixed = med(ph["prologue"]) + med(ph["first ring"]) + med(ph["epilogue"]) + med(ph["exit wait"]) + med(gaps)
    print(f"  a block's fixed cost (prologue + first ring + epilogue + exit + gap): {fixed / 1e3:.2f} us against "
          f"{med(ph['loop']) / 1e3:.1f} us of loop", flush=True)
    del graphs, calls
    torch.cuda.empty_cache()
