"""results.csv (issue 19's columns + tl / build) from the bwd_check CSVs of this folder."""
import csv
import re

COLS = ["impl", "pass", "config", "run", "build", "hq", "hkv", "d_qk", "d_v", "dtype", "causal", "seqlen", "batch", "tflops"]
out = []
for path, build_of in (("results_raw.csv", lambda k: "compute_80->sm_90" if k.startswith(("base_mla", "ord_mla", "base_d256", "ord_d256")) else "compute_90->sm_90"),
                       ("results_d256.csv", lambda k: "compute_90->sm_90" if k.startswith("a_") else "compute_80->sm_90"),
                       ("flags/results_flags.csv", lambda k: "compute_%s->sm_90" % k[-2:])):
    for r in csv.DictReader(open(path)):
        k = r["kernel"].replace(".so", "")
        m = re.match(r"b(\d+) h(\d+)/(\d+) s(\d+)x\d+ d(\d+)(?:/(\d+))?", r["shape"])
        b, hq, hkv, s, dqk, dv = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), m.group(6) or m.group(5)
        base = {"pass": "bwd", "config": k, "run": {"results_raw.csv": "variants", "results_d256.csv": "d256", "flags/results_flags.csv": "flags"}[path], "hq": hq, "hkv": hkv, "d_qk": dqk, "d_v": dv,
                "dtype": "bf16", "causal": r["mask"] == "causal", "seqlen": s, "batch": b}
        out.append(dict(base, impl="qattn", build=build_of(k), tflops=r["qattn_tflops"]))
        for impl in ("cudnn", "fa2"):
            if r[impl + "_tflops"] not in ("nan", ""):
                out.append(dict(base, impl=impl, build="torch", tflops=r[impl + "_tflops"]))
with open("results.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=COLS)
    w.writeheader()
    w.writerows(out)
print(len(out), "rows")
