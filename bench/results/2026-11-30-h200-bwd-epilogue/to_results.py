#!/usr/bin/env python3
"""ab.csv (bench/bench_bwd_ab.py: shape, mask, lib, us, tflops, ...) -> results.csv in issue 19's columns
(impl, pass, config, hq, hkv, d_qk, d_v, dtype, causal, seqlen, batch, ms, tflops): impl qattn@parent for
par_ libraries, qattn for new_; the backward kernel alone (pass bwd, dQ zeroing and the Phase included).

    python3 to_results.py ab.csv results.csv
"""
import csv
import re
import sys

DIMS = {"d64": (64, 64), "d128": (128, 128), "d256": (256, 256), "mla": (192, 128)}
rows = []
for r in csv.DictReader(open(sys.argv[1])):
    m = re.match(r"b(\d+) h(\d+)/(\d+) s(\d+)x(\d+)", r["shape"])
    b, hq, hkv, sq, _ = (int(x) for x in m.groups())
    kind, config = r["lib"].split("_", 1)
    dqk, dv = DIMS[config.split("_")[0]]
    rows.append({"impl": "qattn@parent" if kind == "par" else "qattn", "pass": "bwd", "config": config, "hq": hq, "hkv": hkv,
                 "d_qk": dqk, "d_v": dv, "dtype": "bf16", "causal": r["mask"] == "causal", "seqlen": sq, "batch": b,
                 "ms": round(float(r["us"]) / 1e3, 4), "tflops": r["tflops"]})
with open(sys.argv[2], "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
