#!/usr/bin/env python3
"""Forward libraries with a document Mask (kernel info "aux": seg_q, seg_k) timed against each other in
one process, kernel to kernel, and checked against an fp32 reference on random documents.

    python3 fwd_doc_ab.py A.so B.so [...] [--shapes 'b,h,s;...'] [--csv F.csv]

Timing: bench_backward's documents (4 a row at s/8, s/2, 3s/4), causal, the same fresh bf16 inputs for
every library, NaN-poisoned outputs, CUDA graphs of --calls launches in --rounds rotating rounds,
medians; outputs compared with the first library's. Numerics: random documents (about 5 a row, empty
rows and odd lengths), each library against fp32 attention of the same bf16 inputs: max |o - ref| <=
2 * max |o_bf16 - ref| + 1e-3 (o_bf16: the same attention in bf16 by torch). Exit 1 on a failure.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))
from qattn import _abi  # noqa: E402
from qattn._backward_check import document_aux  # noqa: E402
from bench_util import graphed, replay_rounds, write_csv  # noqa: E402


def reference(q, k, v, keep, dtype):
    """(b, s, h, d) causal attention within the documents, in `dtype`; rows with no key give 0."""
    qf, kf, vf = (t.to(dtype).transpose(1, 2) for t in (q, k, v))
    s = (qf @ kf.transpose(-1, -2)) * q.shape[-1] ** -0.5
    sq, sk = q.shape[1], k.shape[1]
    causal = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
    m = keep & causal
    s = s.masked_fill(~m, float("-inf"))
    p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(dtype)
    return (p @ vf).transpose(1, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--shapes", default="4,32,4096;2,32,8192;8,32,2048")
    ap.add_argument("--check-shapes", default="2,4,1500;1,4,4099;3,2,700")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--csv")
    a = ap.parse_args()
    libs = [(os.path.basename(p).removesuffix(".so"), _abi.Kernel(p)) for p in a.libs]
    info = libs[0][1].info
    d = info["d_qk"]
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    bad = 0
    for i, spec in enumerate(a.check_shapes.split(";")):
        b, h, s = (int(x) for x in spec.split(","))
        g = torch.Generator(device="cuda").manual_seed(7 + i)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        aux, keep = document_aux(info, b, s, s, "cuda", generator=g)
        ref = reference(q, k, v, keep, torch.float32)
        tol = 2 * (reference(q, k, v, keep, torch.bfloat16).float() - ref).abs().max().item() + 1e-3
        for n, lib in libs:
            o = torch.full_like(q, float("nan"))
            assert lib(q, k, v, o, stream=stream(), aux=aux) == 0, lib.last_error()
            torch.cuda.synchronize()
            err = (o.float() - ref).abs().max().item()
            ok = err == err and err <= tol
            bad += not ok
            print(f"check {n} b{b} h{h} s{s}: max err {err:.2e} (bound {tol:.2e}) {'ok' if ok else 'FAIL'}", flush=True)
    rows = []
    gpu = torch.cuda.get_device_name()
    for spec in a.shapes.split(";"):
        b, h, s = (int(x) for x in spec.split(","))
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        aux, _ = document_aux(info, b, s, s, "cuda")
        outs, fns = {}, {}
        for n, lib in libs:
            outs[n] = torch.full_like(q, float("nan"))
            fns[n] = (lambda lib=lib, o=outs[n]: lib(q, k, v, o, stream=stream(), aux=aux))
            assert fns[n]() == 0, lib.last_error()
        torch.cuda.synchronize()
        first = libs[0][0]
        med = replay_rounds({n: graphed(f, a.calls) for n, f in fns.items()}, a.rounds, a.calls)
        line = f"b{b} h{h} s{s}:"
        for n, _ in libs:
            diff = (outs[n].float() - outs[first].float()).abs().max().item()
            over = med[first] / med[n]
            rows.append(dict(pass_="fwd", shape=f"{b},{h},{s}", lib=n, us=round(med[n], 1), over_first=round(over, 4),
                             max_diff=diff, gpu=gpu))
            line += f"  {n} {med[n]:8.1f} us ({over:.3f}, diff {diff:.1e})"
        print(line, flush=True)
    if a.csv:
        write_csv(a.csv, rows)
    print(f"numerics: {bad} failures")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
