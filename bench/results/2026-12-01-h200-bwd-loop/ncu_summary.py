#!/usr/bin/env python3
"""Summarise Nsight Compute source pages (`ncu -i X.ncu-rep --page source --csv --print-source sass`):
per file the stall reasons' shares, the shared-memory instructions (executions, wavefronts against the
ideal: bank conflicts) and the stall samples by opcode.

    python3 ncu_summary.py NAME=FILE.csv [NAME=FILE.csv ...]
"""
import csv
import sys
from collections import Counter


def opcode(src):
    parts = src.strip().split()
    if not parts:
        return ""
    op = parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]
    return op


def summary(name, path):
    rows = list(csv.reader(open(path)))
    hdr, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(hdr)}
    si, ie = col["Warp Stall Sampling (All Samples)"], col["Instructions Executed"]
    wf, wfi = col["L1 Wavefronts Shared"], col["L1 Wavefronts Shared Ideal"]
    total = sum(int(r[si]) for r in data) or 1
    print(f"## {name}: {sum(int(r[ie]) for r in data)} warp instructions, {total} stall samples")
    reasons = [(i, h[6:]) for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    share = sorted(((sum(int(r[i]) for r in data) / total, h) for i, h in reasons), reverse=True)
    print("stall reasons: " + ", ".join(f"{h} {s * 100:.1f}%" for s, h in share if s >= 0.01))
    ex, w, wi, st = Counter(), Counter(), Counter(), Counter()
    for r in data:
        op = opcode(r[1])
        ex[op] += int(r[ie])
        w[op] += int(r[wf])
        wi[op] += int(r[wfi])
        st[op.split(".")[0]] += int(r[si])
    print("shared memory: " + "; ".join(f"{op} {ex[op]} executed, {w[op]} wavefronts (ideal {wi[op]})"
                                        for op in sorted(ex) if op.startswith(("STS", "LDS", "STSM", "LDSM")) and ex[op]))
    print("stall samples by opcode: " + ", ".join(f"{op} {n / total * 100:.1f}%" for op, n in st.most_common(12)))
    print()


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        n, p = arg.split("=", 1)
        summary(n, p)
