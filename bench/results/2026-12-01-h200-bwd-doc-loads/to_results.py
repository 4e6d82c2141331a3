#!/usr/bin/env python3
"""logs/call6/ab_*.csv (bench/bench_bwd_ab.py of run6.sh: CONFIG_p = the parent's unit, CONFIG_n = this
tree's) -> results.csv in issue 19's columns (impl qattn@parent / qattn, pass bwd: the backward kernel
with dQ's zeroing and the Phase) and over_parent. Usage: python3 to_results.py"""
import csv
import glob
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
CFG = {  # name: (config, d_qk, d_v, dtype, causal)
    "doc": ("d128-causal-documents", 128, 128, "bf16", True), "gdoc": ("d128-gqa-causal-documents", 128, 128, "bf16", True),
    "doc64n": ("d64-documents-no-causal", 64, 64, "bf16", False), "plm": ("d128-prefix-lm-64", 128, 128, "bf16", False),
    "docfp16": ("d128-causal-documents", 128, 128, "fp16", True),
    "a100doc": ("d128-causal-documents-sm80-form-as-ptx", 128, 128, "bf16", True)}
rows = []
for path in sorted(glob.glob(os.path.join(HERE, "logs", "call6", "ab_*.csv"))):
    for r in csv.DictReader(open(path)):
        b, hq, hkv, sq, _ = (int(x) for x in re.match(r"b(\d+) h(\d+)/(\d+) s(\d+)x(\d+)", r["shape"]).groups())
        name, kind = r["lib"].rsplit("_", 1)
        config, dqk, dv, dt, causal = CFG[name]
        rows.append({"impl": "qattn@parent" if kind == "p" else "qattn", "pass": "bwd", "config": config, "hq": hq, "hkv": hkv,
                     "d_qk": dqk, "d_v": dv, "dtype": dt, "causal": causal, "seqlen": sq, "batch": b,
                     "ms": round(float(r["us"]) / 1e3, 4), "tflops": r["tflops"], "over_parent": r["over_first"]})
with open(os.path.join(HERE, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
print(f"{len(rows)} rows")
