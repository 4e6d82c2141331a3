#!/usr/bin/env python3
"""Issue 19's backward table from a bench_backward.py results.csv: per config the qattn / cuDNN and
qattn / FA2 ratios of every (seqlen, causal) row, min-max and geometric mean, for the backward and for
forward + backward; then the geometric mean over the head dims (d64, d128, d256, MLA), each the
geometric mean of its rows (FA2 without MLA, which it has no kernel for).
Usage: summarize.py results.csv [parent_results.csv]  (with a parent: this run's qattn over the parent's)
QATTN_TIMING=queued: the rows of that timing (bench_backward.py's `timing` column; a row without one
is synced, the only timing before it had the column)."""
import csv
import math
import os
import sys
from collections import defaultdict

NAMES = {"llama2-7b-mha": "llama2-7b MHA 32, d128", "qwen2.5-72b-gqa": "qwen2.5-72b GQA 64/8, d128", "mqa": "MQA 32/1, d128",
         "mha-d64": "MHA 32, d64", "mha-d256": "MHA 16, d256", "mla-prefill": "MLA 192/128, 16 heads"}
GROUP = {"llama2-7b-mha": "d128", "qwen2.5-72b-gqa": "d128", "mqa": "d128", "mha-d64": "d64", "mha-d256": "d256",
         "mla-prefill": "mla"}


def load(path):
    t = {}
    timing = os.environ.get("QATTN_TIMING", "synced")
    for r in csv.DictReader(open(path)):
        if r["variant"] or (r.get("timing") or "synced") != timing:
            continue
        t[(r["impl"], r["pass"], r["config"], r["causal"], int(r["seqlen"]))] = float(r["tflops"])
    return t


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def ratios(t, num, den, ps, cfg, base=None):
    out = []
    for (impl, p, c, causal, s), v in t.items():
        if impl == num and p == ps and c == cfg:
            ref = (base or t).get((den, p, c, causal, s))
            if ref:
                out.append(v / ref)
    return out


def main():
    t = load(sys.argv[1])
    parent = load(sys.argv[2]) if len(sys.argv) > 2 else None
    cols = ["vs cuDNN", "vs FA2", "fwd+bwd vs cuDNN", "fwd+bwd vs FA2"] + (["bwd vs parent", "fwd+bwd vs parent"] if parent else [])
    print("| config | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    groups = defaultdict(lambda: defaultdict(list))
    for cfg, name in NAMES.items():
        cells = []
        for ps, den, key in (("bwd", "cudnn", "bc"), ("bwd", "fa2", "bf"), ("fwd+bwd", "cudnn", "fc"), ("fwd+bwd", "fa2", "ff")):
            r = ratios(t, "qattn", den, ps, cfg)
            groups[key][GROUP[cfg]] += r
            cells.append(f"{min(r):.2f}-{max(r):.2f} ({gmean(r):.3f})" if r else "—")
        if parent:
            for ps in ("bwd", "fwd+bwd"):
                r = ratios(t, "qattn", "qattn", ps, cfg, base=parent)
                cells.append(f"{min(r):.2f}-{max(r):.2f} ({gmean(r):.3f})" if r else "—")
        print(f"| {name} | " + " | ".join(cells) + " |")
    for key, label in (("bc", "backward vs cuDNN"), ("bf", "backward vs FA2"), ("fc", "fwd+bwd vs cuDNN"), ("ff", "fwd+bwd vs FA2")):
        per = {g: gmean(v) for g, v in groups[key].items() if v}
        print(f"{label}: {gmean(list(per.values())):.3f} over {', '.join(f'{g} {x:.3f}' for g, x in sorted(per.items()))}")


if __name__ == "__main__":
    main()
