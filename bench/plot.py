#!/usr/bin/env python3
"""Plots and a markdown report from a bench_attention.py run (made here, not on the GPU machine).

    python3 bench/plot.py bench/results/<date>-<gpu> [--out DIR]

Reads DIR/results.csv (and DIR/meta.json, DIR/e2e.csv when present) and writes into DIR (or --out):
  headline.png     TFLOPS vs seqlen, one panel per config and mask, one line per implementation
  <config>.png     the same for one config (non-causal and causal side by side)
  results.md       tables of TFLOPS with each implementation's ratio to cuDNN, the spec -> verified
                   kernel wall times, and what was skipped
Needs matplotlib (pip install matplotlib); the markdown alone needs nothing (--no-plots).
"""
import argparse
import collections
import csv
import json
import os
import sys

ORDER = ["qattn", "cudnn", "fa2", "efficient", "flex", "fa3", "fa4"]
NAMES = {"qattn": "qattn", "cudnn": "cuDNN (SDPA)", "fa2": "FA2 (SDPA flash)", "efficient": "SDPA efficient",
         "flex": "FlexAttention", "fa3": "FlashAttention-3", "fa4": "FlashAttention-4"}
STYLE = {"qattn": dict(color="#d62728", linewidth=2.6, marker="o"), "cudnn": dict(color="#1f77b4", marker="s"),
         "fa2": dict(color="#2ca02c", marker="^"), "efficient": dict(color="#7f7f7f", marker="v"),
         "flex": dict(color="#9467bd", marker="D"), "fa3": dict(color="#ff7f0e", marker="P"),
         "fa4": dict(color="#8c564b", marker="X")}


def load(d):
    rows = []
    with open(os.path.join(d, "results.csv")) as f:
        for r in csv.DictReader(f):
            for k in ("hq", "hkv", "d_qk", "d_v", "causal", "seqlen", "batch"):
                r[k] = int(r[k])
            r["tflops"] = float(r["tflops"])
            rows.append(r)
    meta, e2e = {}, []
    if os.path.exists(os.path.join(d, "meta.json")):
        with open(os.path.join(d, "meta.json")) as f:
            meta = json.load(f)
    if os.path.exists(os.path.join(d, "e2e.csv")):
        with open(os.path.join(d, "e2e.csv")) as f:
            e2e = list(csv.DictReader(f))
    return rows, meta, e2e


def impl_order(rows):
    seen = {r["impl"] for r in rows}
    return [i for i in ORDER if i in seen] + sorted(seen - set(ORDER))


def configs_of(rows):
    out = []
    for r in rows:
        if r["config"] not in out:
            out.append(r["config"])
    return out


def label(cfg, meta, rows):
    if cfg in meta.get("configs", {}):
        return meta["configs"][cfg]
    r = next(r for r in rows if r["config"] == cfg)
    return f"{cfg} {r['hq']}/{r['hkv']} d{r['d_qk']}" + (f"/{r['d_v']}" if r["d_v"] != r["d_qk"] else "")


def table(rows):
    """(config, causal, seqlen) -> {impl: tflops}"""
    t = collections.defaultdict(dict)
    for r in rows:
        t[(r["config"], r["causal"], r["seqlen"])][r["impl"]] = r["tflops"]
    return t


def fmt_k(s):
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


# ---- plots -------------------------------------------------------------------------------------------

def plot_panel(ax, rows, cfg, causal, impls):
    for impl in impls:
        pts = sorted((r["seqlen"], r["tflops"]) for r in rows
                     if r["config"] == cfg and r["causal"] == causal and r["impl"] == impl)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=NAMES.get(impl, impl), **STYLE.get(impl, {}))
    ax.set_xscale("log", base=2)
    xs = sorted({r["seqlen"] for r in rows if r["config"] == cfg})
    ax.set_xticks(xs)
    ax.set_xticklabels([fmt_k(x) for x in xs])
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)


def plots(rows, meta, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    impls = impl_order(rows)
    cfgs = configs_of(rows)
    causals = sorted({r["causal"] for r in rows})
    gpu = meta.get("gpu", "")
    written = []
    fig, axes = plt.subplots(len(causals), len(cfgs), figsize=(3.6 * len(cfgs), 3.3 * len(causals)),
                             squeeze=False, sharey=True)
    for ci, causal in enumerate(causals):
        for j, cfg in enumerate(cfgs):
            ax = axes[ci][j]
            plot_panel(ax, rows, cfg, causal, impls)
            ax.set_title(f"{label(cfg, meta, rows)}\n{'causal' if causal else 'non-causal'}", fontsize=8.5)
            if j == 0:
                ax.set_ylabel("TFLOPS (bf16 forward)")
            if ci == len(causals) - 1:
                ax.set_xlabel("seqlen (batch x seqlen = 16k)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.90))
    fig.suptitle(f"qattn vs PyTorch attention kernels on {gpu}", y=0.995, fontsize=12)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.955), ncol=len(impls), frameon=False,
               fontsize=9.5)
    path = os.path.join(out, "headline.png")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    written.append(path)
    for cfg in cfgs:
        fig, axes = plt.subplots(1, len(causals), figsize=(5.2 * len(causals), 3.8), squeeze=False, sharey=True)
        for ci, causal in enumerate(causals):
            ax = axes[0][ci]
            plot_panel(ax, rows, cfg, causal, impls)
            ax.set_title("causal" if causal else "non-causal", fontsize=10)
            ax.set_xlabel("seqlen (batch x seqlen = 16k)")
            if ci == 0:
                ax.set_ylabel("TFLOPS (bf16 forward)")
        axes[0][-1].legend(fontsize=8, loc="lower right")
        fig.suptitle(f"{label(cfg, meta, rows)} on {gpu}", fontsize=11)
        fig.tight_layout()
        path = os.path.join(out, f"{cfg}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


# ---- markdown ----------------------------------------------------------------------------------------

def ratio(t, impl, base="cudnn"):
    if impl in t and base in t and t[base] > 0:
        return t[impl] / t[base]
    return None


def markdown(rows, meta, e2e, src_dir):
    impls = impl_order(rows)
    cfgs = configs_of(rows)
    t = table(rows)
    seqlens = sorted({r["seqlen"] for r in rows})
    L = []
    L.append(f"# qattn vs PyTorch attention kernels: {meta.get('gpu', '?')}, {meta.get('date', '')}")
    L.append("")
    L.append(f"torch {meta.get('torch', '?')}, CUDA {meta.get('cuda', '?')}, cuDNN {meta.get('cudnn', '?')}; "
             f"bf16 forward, BSHD, batch x seqlen = {meta.get('tokens', 16384)} tokens; {meta.get('mode', '')} mode, "
             f"median of {meta.get('reps', '?')} timed batches (CUDA events). TFLOPS with FLOPs = "
             f"{meta.get('flops', '2*B*Hq*S^2*(d_qk+d_v), halved for causal')}. One process for all implementations.")
    if meta.get("qattn_target"):
        L.append("")
        L.append(f"qattn code path: {meta['qattn_target']}.")
    L.append("")
    L.append("Reproduce: `bash tests/gpu/python_suite.sh OUT` on the GPU machine (or "
             "`python3 bench/bench_attention.py --e2e llama3-8b,deepseek-v3-mla-prefill`), then "
             f"`python3 bench/plot.py {src_dir}`.")
    # headline: the longest seqlen (and 4k) per config and mask
    picks = [s for s in (4096, seqlens[-1] if seqlens else None) if s in seqlens]
    picks = sorted(set(picks))
    L.append("")
    L.append("## Headline: TFLOPS (ratio to cuDNN)")
    L.append("")
    L.append("| config | causal | seqlen | " + " | ".join(NAMES.get(i, i) for i in impls) + " |")
    L.append("|---|---|---|" + "---|" * len(impls))
    for cfg in cfgs:
        for causal in (0, 1):
            for s in picks:
                row = t.get((cfg, causal, s))
                if not row:
                    continue
                cells = []
                for i in impls:
                    if i not in row:
                        cells.append("-")
                        continue
                    r = ratio(row, i)
                    cells.append(f"{row[i]:.0f}" + (f" ({r:.2f})" if r is not None and i != "cudnn" else ""))
                L.append(f"| {label(cfg, meta, rows)} | {'yes' if causal else 'no'} | {fmt_k(s)} | " +
                         " | ".join(cells) + " |")
    # qattn summary ratios
    L.append("")
    L.append("## qattn relative to each implementation (min-max over seqlens)")
    L.append("")
    others = [i for i in impls if i != "qattn"]
    L.append("| config | causal | " + " | ".join(f"qattn / {NAMES.get(i, i)}" for i in others) + " |")
    L.append("|---|---|" + "---|" * len(others))
    for cfg in cfgs:
        for causal in (0, 1):
            cells, any_ = [], False
            for i in others:
                rs = [ratio(t[(cfg, causal, s)], "qattn", i) for s in seqlens if (cfg, causal, s) in t]
                rs = [r for r in rs if r is not None]
                any_ = any_ or bool(rs)
                cells.append(f"{min(rs):.2f}-{max(rs):.2f}" if rs else "-")
            if any_:
                L.append(f"| {label(cfg, meta, rows)} | {'yes' if causal else 'no'} | " + " | ".join(cells) + " |")
    # full tables
    L.append("")
    L.append("## All points: TFLOPS (ratio to cuDNN)")
    for cfg in cfgs:
        L.append("")
        L.append(f"### {label(cfg, meta, rows)}")
        L.append("")
        L.append("| causal | seqlen | batch | " + " | ".join(NAMES.get(i, i) for i in impls) + " |")
        L.append("|---|---|---|" + "---|" * len(impls))
        for causal in (0, 1):
            for s in seqlens:
                row = t.get((cfg, causal, s))
                if not row:
                    continue
                b = next(r["batch"] for r in rows if r["config"] == cfg and r["seqlen"] == s)
                cells = []
                for i in impls:
                    r = ratio(row, i)
                    cells.append("-" if i not in row else f"{row[i]:.1f}" + (f" ({r:.2f})" if r is not None and i != "cudnn" else ""))
                L.append(f"| {'yes' if causal else 'no'} | {fmt_k(s)} | {b} | " + " | ".join(cells) + " |")
    notes = sorted({(r["impl"], r["note"]) for r in rows if r.get("note")})
    if notes:
        L.append("")
        L.append("Notes: " + "; ".join(f"{i}: {n}" for i, n in notes) + ".")
    if e2e:
        L.append("")
        L.append("## From spec to verified kernel (wall time, cold: `qattn generate --preset P --gpu a100 --no-cache`)")
        L.append("")
        L.append("Plan (rules engine) + TL check and CPU interpretation + translation + nvcc + qattn.verify "
                 "(numerics on the GPU) + qattn.timing, one command:")
        L.append("")
        L.append("| preset | target | wall time | of which nvcc | checks | TFLOPS | status |")
        L.append("|---|---|---|---|---|---|---|")
        for r in e2e:
            L.append(f"| {r['preset']} | {r['target']} | {r['wall_s']} s | {r['nvcc_s'] or '-'} s | {r['checks'] or '-'} "
                     f"| {r['tflops'] or '-'} | {r['status']} |")
    if meta.get("skipped"):
        L.append("")
        L.append("## Not measured")
        L.append("")
        for s in meta["skipped"]:
            L.append(f"- {s}")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--out", default="")
    ap.add_argument("--no-plots", action="store_true")
    a = ap.parse_args()
    out = a.out or a.dir
    os.makedirs(out, exist_ok=True)
    rows, meta, e2e = load(a.dir)
    if not rows:
        print(f"no rows in {a.dir}/results.csv", file=sys.stderr)
        return 1
    md = markdown(rows, meta, e2e, os.path.relpath(a.dir))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    written = [os.path.join(out, "results.md")]
    if not a.no_plots:
        written += plots(rows, meta, out)
    for w in written:
        print("wrote", w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
