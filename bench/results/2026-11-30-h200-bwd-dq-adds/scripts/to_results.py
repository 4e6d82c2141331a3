#!/usr/bin/env python3
"""results.csv (issue 19's columns) from the sixth call's kernel-to-kernel CSVs (tests/gpu/bwd_check.py
--bench --csv): one row per implementation and shape; impl qattn (this tree's lowering, variant
"v4"), qattn (the parent's CUDA of the same TL, variant "parent"), cudnn, fa2 (SDPA backends, timed
next to each library; the first timing of each shape is kept). d128 rows with "dq-heads-first" carry
that variant suffix.
  python3 to_results.py [--variant NAME] OUT.csv IN.csv [IN.csv ...]
NAME (default v4) names the rows of the libraries called new_*; an fp16_* config's rows are fp16.
(bench/results/2026-11-30-h200-bwd-tma-loads uses it with --variant tma-ring.)
"""
import csv
import re
import sys

args = sys.argv[1:]
variant = "v4"
if args[:1] == ["--variant"]:
    variant, args = args[1], args[2:]
out, ins = args[0], args[1:]
rows, seen = [], set()
for path in ins:
    for r in csv.DictReader(open(path)):
        m = re.match(r"b(\d+) h(\d+)/(\d+) s(\d+)x(\d+) d(\d+)(?:/(\d+))?", r["shape"])
        b, hq, hk, sq, sk, dqk = (int(x) for x in m.groups()[:6])
        dv = int(m.group(7) or dqk)
        kernel = r["kernel"]
        who, config = kernel.split(".so")[0].split("_", 1)
        suffix = " dq-heads-first" if "dq-heads-first" in kernel else ""
        base = dict(pass_="bwd", config=config, hq=hq, hkv=hk, d_qk=dqk, d_v=dv, dtype="fp16" if config.startswith("fp16") else "bf16",
                    causal=r["mask"].startswith("causal"), seqlen=sq, batch=b)
        rows.append(dict(impl="qattn", variant=(variant if who == "new" else "parent") + suffix, ms=r["qattn_ms"],
                         tflops=r["qattn_tflops"], **base))
        for impl in ("cudnn", "fa2"):
            key = (impl, config, sq, b, r["mask"])
            if key in seen or r[impl + "_ms"] in ("", "nan"):
                continue
            seen.add(key)
            rows.append(dict(impl=impl, variant="", ms=r[impl + "_ms"], tflops=r[impl + "_tflops"], **base))
cols = ["impl", "pass", "config", "variant", "hq", "hkv", "d_qk", "d_v", "dtype", "causal", "seqlen", "batch", "ms", "tflops"]
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(cols)
    for r in rows:
        w.writerow([r["pass_"] if c == "pass" else (f"{float(r[c]):.4f}" if c == "ms" else f"{float(r[c]):.1f}" if c == "tflops" else r[c]) for c in cols])
