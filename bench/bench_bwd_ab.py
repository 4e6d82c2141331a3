#!/usr/bin/env python3
"""Backward libraries (qattn_bwd: `qattn_translate --build` or tests/gpu/build_bwd_kernels.sh) timed
against each other in one process, kernel to kernel: the same fresh random inputs for every library,
the gradients compared with the first library's, CUDA graphs of --calls launches (dQ zeroed, the
launch with its Phases) replayed in --rounds rotating rounds, medians. The libraries must agree on
dtype, head dims, mask and auxiliary inputs (the A/B of one TL through two translators or runtimes).

    python3 bench/bench_bwd_ab.py A.so B.so [C.so ...] [--shapes 'b,hq,hkv,sq,sk;...'] [--csv F.csv]

A library whose dK / dV are bf16 (an MHA kernel) skips shapes with hq != hkv. Columns: shape, mask,
then per library its name, us, tflops and its speed over the first library's (over_first: above 1,
faster), max |dX - dX_first| over dQ, dK, dV, and gpu.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from qattn import _abi  # noqa: E402
from qattn._backward_check import DT, document_aux  # noqa: E402
from bench_util import graphed, replay_rounds, write_csv  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--shapes", default="8,32,8,2048,2048;2,32,8,8192,8192;8,32,32,2048,2048")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--csv")
    a = ap.parse_args()
    if len(a.libs) < 2:
        sys.exit("bench_bwd_ab.py: two or more libraries to compare")
    libs = [(os.path.basename(p).removesuffix(".so"), _abi.BwdLibrary(p)) for p in a.libs]
    keys = ("dtype", "d_qk", "d_v", "mask")
    info0 = libs[0][1].info
    for n, lib in libs[1:]:
        if any(lib.info[k] != info0[k] for k in keys) or len(lib.info.get("aux", [])) != len(info0.get("aux", [])):
            sys.exit(f"bench_bwd_ab.py: {n} differs from {libs[0][0]} in {', '.join(keys)} or its auxiliary inputs")
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}; {', '.join(n for n, _ in libs)}", flush=True)
    dt, d, dv_ = DT[info0["dtype"]], info0["d_qk"], info0["d_v"]
    rows = []
    for spec in a.shapes.split(";"):
        b, hq, hk, sq, sk = (int(x) for x in spec.split(","))
        use = [(n, lib) for n, lib in libs if hq == hk or lib.info["dk_dtype"] == "fp32"]
        if len(use) < 2:
            print(f"b{b} h{hq}/{hk} s{sq}x{sk}: skipped (fewer than two libraries take GQA)", flush=True)
            continue
        g = torch.Generator(device="cuda").manual_seed(b * 7919 + sq)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt, generator=g)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=dt, generator=g)
        v = torch.randn(b, sk, hk, dv_, device="cuda", dtype=dt, generator=g)
        o = torch.randn(b, sq, hq, dv_, device="cuda", dtype=dt, generator=g)
        dout = torch.randn(b, sq, hq, dv_, device="cuda", dtype=dt, generator=g)
        lse = torch.rand(b, hq, sq, device="cuda", generator=g) * 4 + 8  # ~ log(sk) + a spread: P in (0, 1)
        aux, keep = document_aux(info0, b, sq, sk, "cuda")
        kept = keep.float().mean().item() if keep is not None else 1.0
        if info0["mask"] in ("causal", "causal_top_left"):
            kept *= 0.5  # (about: the TFLOPS are for comparing libraries on one shape)
        calls, outs = {}, {}
        for n, lib in use:
            dk_dt = DT[lib.info["dk_dtype"]]
            dq = torch.full((b, sq, hq, d), float("nan"), device="cuda")
            dk = torch.full((b, sk, hk, d), float("nan"), device="cuda", dtype=dk_dt)
            dv = torch.full((b, sk, hk, dv_), float("nan"), device="cuda", dtype=dk_dt)
            p = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dv, scale=d ** -0.5, aux=aux)
            ws = _abi.bwd_workspace(torch, lib, p, "cuda")

            def call(lib=lib, p=p, dq=dq, dk=dk, dv=dv, fp32=dk_dt == torch.float32, ws=ws):  # noqa: ARG001 (ws kept alive)
                dq.zero_()
                if fp32:
                    dk.zero_()
                    dv.zero_()
                st = lib.bwd(p, torch.cuda.current_stream().cuda_stream)
                if st != 0:
                    raise RuntimeError(f"qattn_bwd returned {st}: {lib.last_error()}")
            call()
            torch.cuda.synchronize()
            calls[n], outs[n] = call, (dq, dk, dv)
        first = use[0][0]
        diff = {n: max((x.float() - y.float()).abs().max().item() for x, y in zip(outs[n], outs[first])) for n in outs}
        for n, (dq, dk, dv) in outs.items():
            if not all(torch.isfinite(t).all().item() for t in (dq, dk, dv)):
                sys.exit(f"{n}: non-finite gradients on b{b} h{hq}/{hk} s{sq}x{sk} (a poisoned element not written)")
        graphs = {n: graphed(f, a.calls) for n, f in calls.items()}
        med = replay_rounds(graphs, a.rounds, a.calls)
        flops = 2 * b * hq * sq * sk * (3 * d + 2 * dv_) * kept
        shape = f"b{b} h{hq}/{hk} s{sq}x{sk}"
        line = f"{shape} {info0['mask']}:"
        for n in calls:
            rows.append(dict(shape=shape, mask=info0["mask"], lib=n, us=round(med[n], 1), tflops=round(flops / med[n] / 1e6, 1),
                             over_first=round(med[first] / med[n], 3), max_diff=f"{diff[n]:.2e}", gpu=gpu))
            line += f" {n} {med[n]:8.1f} us ({med[first] / med[n]:.3f}x, diff {diff[n]:.1e}) |"
        print(line, flush=True)
        del graphs, calls, outs, q, k, v, o, dout
        torch.cuda.empty_cache()
    if a.csv:
        write_csv(a.csv, rows, ["shape", "mask", "lib", "us", "tflops", "over_first", "max_diff", "gpu"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
