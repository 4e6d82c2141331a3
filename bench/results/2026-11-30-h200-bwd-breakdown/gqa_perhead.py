#!/usr/bin/env python3
"""An experiment for GQA's dK, dV (issue 19): the generated GQA kernel (fp32 dK, dV added by the query
heads of a group, zeroed before and converted after: `atomic`) against the MHA form of the same TL
with dK, dV per query head (`Allocate dK ... with offset [b, head]`: bf16, stored once by TMA, no
zeroing) followed by a sum over each group's heads in torch (`perhead`: what cuDNN's fmha_reduce_head
does). Both whole steps (zeroing, kernel, conversions / sum) as CUDA graphs in rotating rounds; the
gradients of both against an fp64 reference on a small shape with the forward's real LSE.

    python3 gqa_perhead.py ATOMIC.so PERHEAD.so [--shapes 'b,hq,hkv,s;...']
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench"))
from qattn import _abi  # noqa: E402
from bench_util import graphed, replay_rounds  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("atomic")
ap.add_argument("perhead")
ap.add_argument("--shapes", default="8,64,8,2048;2,64,8,8192;8,32,8,2048;8,32,1,2048;2,32,1,8192")
a = ap.parse_args()
lib_a, lib_p = _abi.BwdLibrary(a.atomic), _abi.BwdLibrary(a.perhead)
assert lib_a.info["dk_dtype"] == "fp32" and lib_p.info["dk_dtype"] == "bf16", (lib_a.info["dk_dtype"], lib_p.info["dk_dtype"])
d = lib_a.info["d_qk"]
causal = lib_a.info["mask"] != "none"
assert lib_p.info["mask"] == lib_a.info["mask"]
bf = torch.bfloat16
print(f"{torch.cuda.get_device_name()}; mask {lib_a.info['mask']}, d {d}", flush=True)


def steps(q, k, v, o, dout, lse):
    b, sq, hq, _ = q.shape
    sk, hk = k.shape[1], k.shape[2]
    G = hq // hk
    dq = torch.zeros(b, sq, hq, d, device="cuda")
    dka = torch.zeros(b, sk, hk, d, device="cuda")
    dva = torch.zeros(b, sk, hk, d, device="cuda")
    dkh = torch.full((b, sk, hq, d), float("nan"), device="cuda", dtype=bf)
    dvh = torch.full((b, sk, hq, d), float("nan"), device="cuda", dtype=bf)
    pa = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dka, dva, scale=d ** -0.5)
    pp = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dkh, dvh, scale=d ** -0.5)
    wa, wp = _abi.bwd_workspace(torch, lib_a, pa, "cuda"), _abi.bwd_workspace(torch, lib_p, pp, "cuda")
    out = {}

    def atomic(wa=wa):  # noqa: ARG001
        dq.zero_(), dka.zero_(), dva.zero_()
        assert lib_a.bwd(pa, torch.cuda.current_stream().cuda_stream) == 0, lib_a.last_error()
        out["atomic"] = (dq.to(bf), dka.to(bf), dva.to(bf))

    def perhead(wp=wp):  # noqa: ARG001
        dq.zero_()
        assert lib_p.bwd(pp, torch.cuda.current_stream().cuda_stream) == 0, lib_p.last_error()
        out["perhead"] = (dq.to(bf), dkh.view(b, sk, hk, G, d).sum(3), dvh.view(b, sk, hk, G, d).sum(3))
    return {"atomic": atomic, "perhead": perhead}, out


# numerics: a small shape with the forward's real LSE, against fp64
g = torch.Generator(device="cuda").manual_seed(5)
b, hq, hk, s = 2, 8, 2, 777
q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=bf, generator=g) for h in (hq, hk, hk, hq))
q64, k64, v64 = (x.double().requires_grad_() for x in (q, k, v))
kk, vv = (x.repeat_interleave(hq // hk, dim=2) for x in (k64, v64))
sc = torch.einsum("bqhd,bkhd->bhqk", q64, kk) * d ** -0.5
if causal:
    sc = sc.masked_fill(torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
lse = torch.logsumexp(sc, -1)
o64 = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(sc, -1), vv)
ref = torch.autograd.grad(o64, (q64, k64, v64), dout.double())
fns, out = steps(q, k, v, o64.to(bf), dout, lse.float().contiguous())
for n, f in fns.items():
    f()
    torch.cuda.synchronize()
    errs = [((x.double() - r).abs().max() / r.abs().max()).item() for x, r in zip(out[n], ref)]
    print(f"  {n}: max |dX - dX_fp64| / max |dX_fp64|: dQ {errs[0]:.2e}, dK {errs[1]:.2e}, dV {errs[2]:.2e}", flush=True)

for spec in a.shapes.split(";"):
    b, hq, hk, s = (int(x) for x in spec.split(","))
    g = torch.Generator(device="cuda").manual_seed(s + hq)
    q, o, dout = (torch.randn(b, s, hq, d, device="cuda", dtype=bf, generator=g) for _ in range(3))
    k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=bf, generator=g) for _ in range(2))
    lse = torch.rand(b, hq, s, device="cuda", generator=g) * 4 + 8
    fns, out = steps(q, k, v, o, dout, lse)
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(out["atomic"], out["perhead"]))
    graphs = {n: graphed(f, 3) for n, f in fns.items()}
    t = replay_rounds(graphs, 9, 3)
    print(f"b{b} h{hq}/{hk} s{s}: atomic {t['atomic']:.1f} us, perhead {t['perhead']:.1f} us "
          f"({t['atomic'] / t['perhead']:.3f}x), max diff {diff:.2e}", flush=True)
    del graphs, fns, out
    torch.cuda.empty_cache()
