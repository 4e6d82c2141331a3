#!/usr/bin/env python3
"""logs/ab3_*.csv (bench/bench_bwd_ab.py of run3.sh: libraries CONFIG_p = the parent's program, CONFIG_n =
the heads-first one) -> results.csv in issue 19's columns (impl qattn@parent / qattn, pass bwd: the
backward kernel alone with dQ's zeroing and the Phase). Usage: python3 to_results.py"""
import csv
import glob
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
DIMS = {"c128": (128, 128), "soft128": (128, 128), "c64": (64, 64), "c256": (256, 256), "mla": (192, 128)}
NAMES = {"c128": "d128-causal", "soft128": "d128-causal-softcap30", "c64": "d64-causal", "c256": "d256-causal", "mla": "mla-causal"}
rows = []
for path in sorted(glob.glob(os.path.join(HERE, "logs", "ab3_*.csv"))):
    for r in csv.DictReader(open(path)):
        b, hq, hkv, sq, _ = (int(x) for x in re.match(r"b(\d+) h(\d+)/(\d+) s(\d+)x(\d+)", r["shape"]).groups())
        config, kind = r["lib"].rsplit("_", 1)
        rows.append({"impl": "qattn@parent" if kind == "p" else "qattn", "pass": "bwd", "config": NAMES[config], "hq": hq,
                     "hkv": hkv, "d_qk": DIMS[config][0], "d_v": DIMS[config][1], "dtype": "bf16", "causal": True, "seqlen": sq,
                     "batch": b, "ms": round(float(r["us"]) / 1e3, 4), "tflops": r["tflops"], "over_parent": r["over_first"]})
with open(os.path.join(HERE, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
print(f"{len(rows)} rows")
