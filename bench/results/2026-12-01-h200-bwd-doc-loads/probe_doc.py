#!/usr/bin/env python3
"""Where a document-mask backward block spends its time: a library stamped by
../2026-11-30-h200-bwd-timeline/stamp.py launched once on bench_backward's documents (4 a row at s/8,
s/2, 3s/4), its blocks' %globaltimer stamps read back. The loop's visits per block are counted on the
host from the documents (the `{skip}` loop visits fewer tiles than hi - lo); a library without aux
inputs (plain causal) counts hi - lo (the stamp's own slot 6).

    python3 probe_doc.py STAMPED.so [--shape b,h,s] [--grid-key-first 1|0]
"""
import argparse
import ctypes
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
from qattn import _abi  # noqa: E402
from qattn._backward_check import DT, document_aux  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("stamped")
ap.add_argument("--shape", default="4,32,4096")
ap.add_argument("--key-first", type=int, default=1, help="1: the Grid's first axis is the key tile (else the head)")
a = ap.parse_args()
lib = _abi.BwdLibrary(a.stamped)
raw = ctypes.CDLL(a.stamped)
raw.qattn_stamps_read.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
info = lib.info
dt, d = DT[info["dtype"]], info["d_qk"]
BM, BN = info["tiles"]["BM"], info["tiles"]["BN"]
b, h, s = (int(x) for x in a.shape.split(","))
q, k, v, o, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(5))
lse = torch.rand(b, h, s, device="cuda") * 4 + 8
aux, _ = document_aux(info, b, s, s, "cuda")
dk_dt = DT[info["dk_dtype"]]
dq = torch.zeros(b, s, h, d, device="cuda")
dk, dv = (torch.zeros(b, s, h, d, device="cuda", dtype=dk_dt) for _ in range(2))
p = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dv, scale=d ** -0.5, aux=aux)
ws = _abi.bwd_workspace(torch, lib, p, "cuda")
for _ in range(3):  # warm, then the stamped launch is the last
    dq.zero_()
    assert lib.bwd(p, torch.cuda.current_stream().cuda_stream) == 0, lib.last_error()
torch.cuda.synchronize()
nt = -(-s // BN)
nblk = nt * h * b
buf = (ctypes.c_ulonglong * (8192 * 8))()
assert raw.qattn_stamps_read(ctypes.addressof(buf), ctypes.sizeof(buf)) == 0
rows = [[buf[i * 8 + j] for j in range(8)] for i in range(min(nblk, 8192))]
if aux:
    sq_ids = aux[0][0].tolist()
    sk_ids = aux[1][0].tolist()

    def visits(n):
        lo, hi = max(0, (n * BN) // BM), -(-s // BM)
        c = 0
        for i in range(lo, hi):
            q_lo, q_hi = i * BM, min(i * BM + BM - 1, s - 1)
            k_lo, k_hi = n * BN, min(n * BN + BN - 1, s - 1)
            c += not (sq_ids[q_hi] < sk_ids[k_lo] or sk_ids[k_hi] < sq_ids[q_lo])
        return c
    vis = [visits(n) for n in range(nt)]
    nb = [(i % nt) if a.key_first else (i // h) % nt for i in range(len(rows))]
    for r, n in zip(rows, nb):
        r[6] = vis[n]
med = statistics.median
ph = {k: [] for k in ("prologue", "first ring", "loop", "per visit", "epilogue", "exit wait")}
for r in rows:
    ph["prologue"].append(r[1] - r[0])
    ph["first ring"].append(r[2] - r[1])
    ph["loop"].append(r[3] - r[2])
    if r[6] > 0:
        ph["per visit"].append((r[3] - r[2]) / r[6])
    ph["epilogue"].append(r[4] - r[3])
    ph["exit wait"].append(r[5] - r[4])
per_sm = {}
for r in rows:
    per_sm.setdefault(r[7], []).append(r)
t0, end = min(r[0] for r in rows), max(r[5] for r in rows)
gaps, tails, busy = [], [], 0
for rs in per_sm.values():
    rs.sort(key=lambda r: r[0])
    gaps += [rs[i + 1][0] - rs[i][5] for i in range(len(rs) - 1)]
    tails.append(end - rs[-1][5])
    busy += sum(r[5] - r[0] for r in rs)
span = end - t0
tot = {k: sum(v) for k, v in ph.items() if k != "per visit"}
print(f"{torch.cuda.get_device_name()}; {os.path.basename(a.stamped)} b{b} h{h} s{s}: {len(rows)} blocks on {len(per_sm)} SMs, "
      f"span {span / 1e3:.1f} us, SMs busy {busy / (span * len(per_sm)):.3f}; visits a block median {med([r[6] for r in rows]):.0f}, "
      f"total {sum(r[6] for r in rows)}")
print("  median us: " + ", ".join(f"{k} {med(v) / 1e3:.2f}" for k, v in ph.items()))
print("  share of the blocks' time: " + ", ".join(f"{k} {v / busy:.3f}" for k, v in tot.items()) +
      f"; gaps {sum(gaps) / busy:.3f}; tail median {med(tails) / 1e3:.1f} us, max {max(tails) / 1e3:.1f} us")
if hasattr(raw, "qattn_iters_read"):  # stamp_iter.py: each visit's duration by its place in the block
    raw.qattn_iters_read.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
    it = (ctypes.c_ulonglong * (8192 * 16))()
    assert raw.qattn_iters_read(ctypes.addressof(it), ctypes.sizeof(it)) == 0
    by_pos, by_back = {}, {}
    for bi, r in enumerate(rows):
        nv = int(it[bi * 16 + 15])
        ts = [it[bi * 16 + j] for j in range(min(nv, 15))] + ([r[3]] if nv <= 15 else [])
        for j in range(len(ts) - 1):
            by_pos.setdefault(j, []).append(ts[j + 1] - ts[j])
            if nv <= 15:
                by_back.setdefault(nv - 1 - j, []).append(ts[j + 1] - ts[j])
    print("  visit duration by place (median us, first visits): " +
          ", ".join(f"#{j} {med(v) / 1e3:.2f}" for j, v in sorted(by_pos.items()) if j < 12))
    print("  by place from the end (blocks of <= 15 visits): " +
          ", ".join(f"last-{j} {med(v) / 1e3:.2f}" for j, v in sorted(by_back.items()) if j < 8))
