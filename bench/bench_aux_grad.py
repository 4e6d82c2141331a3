#!/usr/bin/env python3
"""The backward with learnable ALiBi slopes and a relative-bias table (TL `Compute Gradient`), in one
process: qattn.attention's backward when the slopes and the table require grad (impl qattn-learn)
against the same call with them constant (impl qattn: the same kernel without `Compute Gradient`),
and FlexAttention with the same score_mod over captured tensors that require grad (impl flex-learn;
torch.compile'd flex_attention, causal block mask), on the same fresh random inputs.

    python3 bench/bench_aux_grad.py OUT.csv [--seqlens 1024,4096] [--tokens 16384] [--rounds 5]
                                        [--configs 32/8/128,16/16/64]

Rows: bf16, causal (bottom-right), --configs heads_q/heads_kv/head_dim (default 32/8/128: Llama-3
8B's GQA), NB = 32 buckets, batch = tokens / seqlen. Timing: the backward alone (torch.autograd.grad of the output with a fixed
upstream gradient; the forward runs once outside the timed region), CUDA events around 10 calls
after 3 warmups, median of --rounds rounds, the implementations interleaved per round. Every
implementation's gradients of q and of the slopes and table are first compared with fp32 autograd of
the formulas (docs/spec.md), max |diff| printed. Columns: impl, pass, config, hq, hkv, d_qk, d_v,
dtype, causal, seqlen, batch, nb, ms, vs_constant (the constant-bias backward's time / this one's),
dslopes_err, dtable_err, gpu.
"""
import argparse
import csv
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import qattn  # noqa: E402

NB = 32


def bias_terms(sq, sk, device):
    off = sk - sq
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return off, (i + off - j).abs().float(), (j - i - off).clamp(-(NB // 2), NB // 2 - 1) + NB // 2, j > i + off


def reference_grads(q, k, v, slopes, table, do):
    """fp32 autograd of the formulas: (dq, dslopes, dtable)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    _, dist, bucket, hidden = bias_terms(sq, sk, q.device)
    qs, ks, vs, s_, t_ = (x.detach().float().clone().requires_grad_() for x in (q, k, v, slopes, table))
    qd, kd, vd = (x.transpose(1, 2) for x in (qs, ks, vs))
    kd, vd = (x.repeat_interleave(hq // hkv, dim=1) for x in (kd, vd))
    scores = (qd @ kd.transpose(-1, -2)) * d ** -0.5 - s_[:, None, None] * dist + t_[:, bucket]
    out = torch.softmax(scores.masked_fill(hidden, float("-inf")), -1) @ vd
    dq, ds, dt = torch.autograd.grad(out.transpose(1, 2), (qs, s_, t_), do.float())
    return dq, ds, dt


def timed(fn, rounds_out, calls=10):
    for _ in range(3):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    rounds_out.append(a.elapsed_time(b) / calls)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seqlens", default="1024,4096")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--configs", default="32/8/128")
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    flex = None
    if not a.no_flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            flex = (torch.compile(flex_attention), create_block_mask)
        except Exception as e:  # noqa: BLE001 (reported, the row goes without flex)
            print(f"flex_attention unavailable: {e}")
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for hq, hkv, d in (tuple(int(x) for x in c.split("/")) for c in a.configs.split(",")):
        for sq in (int(x) for x in a.seqlens.split(",")):
            b = max(1, a.tokens // sq)
            q, k, v, do = (torch.randn(b, sq, h, d, device="cuda", generator=gen).to(torch.bfloat16)
                           for h in (hq, hkv, hkv, hq))
            slopes = (torch.rand(hq, device="cuda", generator=gen) * 0.1).requires_grad_()
            table = torch.randn(hq, NB, device="cuda", generator=gen).requires_grad_()
            ref = reference_grads(q, k, v, slopes, table, do)
            qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
            impls = {}

            def qattn_call(learn):
                s, t = (slopes, table) if learn else (slopes.detach(), table.detach())
                o = qattn.attention(qg, kg, vg, causal=True, alibi_slopes=s, relative_bias=t)
                wrt = (qg, kg, vg, s, t) if learn else (qg, kg, vg)
                return lambda: torch.autograd.grad(o, wrt, do, retain_graph=True)

            impls["qattn"] = qattn_call(False)
            impls["qattn-learn"] = qattn_call(True)
            if flex is not None:
                fa, cbm = flex
                off, dist, bucket, _ = bias_terms(sq, sq, q.device)

                def score_mod(score, bb, h, qi, ki):
                    return score - slopes[h] * (qi + off - ki).abs() + table[h, (ki - qi - off).clamp(-(NB // 2), NB // 2 - 1) + NB // 2]

                mask = cbm(lambda bb, h, qi, ki: ki <= qi + off, None, None, sq, sq, device="cuda")
                qt, kt, vt = (x.transpose(1, 2) for x in (qg, kg, vg))
                try:
                    of = fa(qt, kt, vt, score_mod=score_mod, block_mask=mask, enable_gqa=hq != hkv).transpose(1, 2)
                    impls["flex-learn"] = lambda of=of: torch.autograd.grad(of, (qg, kg, vg, slopes, table), do, retain_graph=True)
                except Exception as e:  # noqa: BLE001
                    print(f"flex-learn {hq}/{hkv} d{d} s{sq}: {type(e).__name__}: {str(e)[:200]}")
            errs = {}
            for name, fn in list(impls.items()):
                try:
                    g = fn()
                except Exception as e:  # noqa: BLE001 (FlexAttention's backward may find no kernel config: reported)
                    print(f"{name} {hq}/{hkv} d{d} s{sq}: {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
                    del impls[name]
                    continue
                errs[name] = ((g[0].float() - ref[0]).abs().max().item(),
                              (g[3].float() - ref[1]).abs().max().item() if len(g) > 3 else float("nan"),
                              (g[4].float() - ref[2]).abs().max().item() if len(g) > 3 else float("nan"))
            times = {n: [] for n in impls}
            for _ in range(a.rounds):
                for n, fn in impls.items():
                    timed(fn, times[n])
            base = statistics.median(times["qattn"])
            cfg = f"b{b} s{sq} {hq}/{hkv} d{d}"
            line = [f"{cfg:22s} ref max|dslopes| {ref[1].abs().max().item():.3g} max|dtable| {ref[2].abs().max().item():.3g}"]
            for n in impls:
                ms = statistics.median(times[n])
                e = errs[n]
                line.append(f"{n} {ms:.3f} ms ({base / ms:.3f}x constant; dq {e[0]:.2e} dslopes {e[1]:.2e} dtable {e[2]:.2e})")
                rows.append({"impl": n, "pass": "bwd", "config": cfg, "hq": hq, "hkv": hkv, "d_qk": d, "d_v": d, "dtype": "bf16",
                             "causal": True, "seqlen": sq, "batch": b, "nb": NB, "ms": f"{ms:.4f}", "vs_constant": f"{base / ms:.4f}",
                             "dslopes_err": f"{e[1]:.3e}", "dtable_err": f"{e[2]:.3e}", "gpu": gpu})
            print(" | ".join(line), flush=True)
            del q, k, v, do, qg, kg, vg, impls
            torch.cuda.empty_cache()
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
