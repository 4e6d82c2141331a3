#!/usr/bin/env python3
"""logs/call4/ab.txt (bench/bench_bwd_ab.py of run4.sh: libraries CONFIG_p = the parent's unit, CONFIG_n =
this tree's) -> results.csv in issue 19's columns (impl qattn@parent / qattn, pass bwd: the backward
kernel alone with dQ's zeroing and the Phase) plus over_parent; logs/call7/ab.txt (run7.sh: CONFIG_n =
79a2218's unit, CONFIG_x = the same with the XOR2 stage order) -> results_xor2.csv (impl qattn@parent /
qattn-xor2). Usage: python3 to_results.py"""
import csv
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = {  # name in ab.txt: (config, d_qk, d_v, causal)
    "c128": ("d128-causal", 128, 128, True), "n128": ("d128", 128, 128, False), "gqa128": ("d128-gqa-causal", 128, 128, True),
    "ngqa128": ("d128-gqa", 128, 128, False), "c64": ("d64-causal", 64, 64, True), "gqa64": ("d64-gqa-causal", 64, 64, True),
    "c256": ("d256-causal", 256, 256, True), "mla": ("mla-causal", 192, 128, True),
    "soft128": ("d128-causal-softcap30", 128, 128, True), "win128": ("d128-window256", 128, 128, True),
    "doc128": ("d128-causal-documents", 128, 128, True), "det128": ("d128-gqa-causal-deterministic", 128, 128, True),
    "a100_c128": ("d128-causal-sm80-form-ptx", 128, 128, True)}
ENTRY = re.compile(r"(\w+?)_([pnx])\s+([\d.]+) us \(([\d.]+)x")


def convert(call, base, new, new_impl, out):
    rows = []
    for line in open(os.path.join(HERE, "logs", call, "ab.txt")):
        m = re.match(r"b(\d+) h(\d+)/(\d+) s(\d+)x(\d+) (\w+):", line)
        if not m:
            continue
        b, hq, hkv, sq, sk = (int(x) for x in m.groups()[:5])
        for name, kind, us, over in ENTRY.findall(line):
            config, d_qk, d_v, causal = CONFIGS[name]
            # bench_bwd_ab.py's count: half the pairs under a causal mask, all of them for the window (TFLOPS
            # compare libraries on one shape); the documents' rows take its CSV's figure (their kept pairs)
            kept = 0.5 if causal and name not in ("win128", "doc128") else 1.0
            flops = 2 * b * hq * sq * sk * (3 * d_qk + 2 * d_v) * kept
            tf = flops / (float(us) * 1e-6) / 1e12
            csv_path = os.path.join(HERE, "logs", call, f"ab_{name}.csv")
            if os.path.exists(csv_path):
                tf = next(float(r["tflops"]) for r in csv.DictReader(open(csv_path)) if r["lib"] == f"{name}_{kind}" and
                          r["shape"] == f"b{b} h{hq}/{hkv} s{sq}x{sk}")
            rows.append({"impl": "qattn@parent" if kind == base else new_impl, "pass": "bwd", "config": config, "hq": hq,
                         "hkv": hkv, "d_qk": d_qk, "d_v": d_v, "dtype": "bf16", "causal": causal, "seqlen": sq, "batch": b,
                         "ms": round(float(us) / 1e3, 4), "tflops": round(tf, 1), "over_parent": over})
    with open(os.path.join(HERE, out), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"{out}: {len(rows)} rows")


convert("call4", "p", "n", "qattn", "results.csv")
convert("call7", "n", "x", "qattn-xor2", "results_xor2.csv")
