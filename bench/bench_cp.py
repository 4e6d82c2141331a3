#!/usr/bin/env python3
"""Issue 22: context-parallel scaling. qattn's ring and Ulysses modes against torch's
context_parallel with cuDNN SDPA, and against qattn's own kernel on one GPU at the per-GPU length,
in one torchrun job (one process per GPU, NCCL).

    torchrun --nproc-per-node N bench/bench_cp.py OUT.csv [--seqlens 131072,262144] [--heads 16] [--rounds 3]
        [--passes fwd,fwd+bwd]

For each (seqlen, causal): bf16, d 128, batch 1, heads_q = heads_kv = --heads (MHA: torch's
context_parallel takes no GQA), fresh torch.randn inputs. Each implementation runs once to warm up;
then --rounds rounds run every implementation and the single-GPU kernel back to back, each timed over
>= 0.25 s between barriers (the slowest rank's time: a barrier closes each timed run); the median
over the rounds is kept (interleaving keeps clocks and power the same for all). tflops_per_gpu = the whole problem's FLOPs / world size / time (causal: half; the forward's
FLOPs, and 3.5x them for --passes fwd+bwd: the backward's 5 GEMMs are 2.5x the forward's 2; one
fwd+bwd is torch.autograd.grad of the output for a random upstream gradient, of every input);
single_gpu_tflops = qattn.attention on one GPU at the per-GPU length (seqlen / N, same mask), run
on every GPU at once in the same rounds. ratio = tflops_per_gpu / single_gpu_tflops.
qattn-ring merges the partial outputs with the TL combine kernel (one launch at the end);
qattn-ring-torch-merge (--impls) with merge_partial's fp32 torch operations after every launch;
qattn-ring-mN (--impls, e.g. qattn-ring-m8) the ring with sm_margin=N (a step's kernel leaves N SMs to
the transfer in flight; qattn-ring uses the default, qattn.distributed.RING_SM_MARGIN).
torch-cp: torch.distributed.tensor.experimental.context_parallel (its default rotate method,
allgather; its head-tail load balancing for causal, none otherwise, which it refuses) around F.scaled_dot_product_attention with only the
cuDNN backend enabled. A cp result is checked against the others (same inputs) before timing:
qattn ring and torch-cp outputs must agree to 2e-2 (bf16).
"""
import argparse
import contextlib
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import qattn  # noqa: E402
import qattn.distributed as qcp  # noqa: E402
from bench_util import with_env, write_csv  # noqa: E402


def timed(fn, reps):
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    return (time.perf_counter() - t0) / reps



def grads_of(fn, leaves, dout):
    """One forward + backward: torch.autograd.grad of fn(*leaves) for the upstream gradient dout."""
    def run():
        with torch.enable_grad():
            return torch.autograd.grad(fn(*leaves), leaves, dout)
    return run


def leaves(*ts):
    return tuple(t.detach().clone().requires_grad_() for t in ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seqlens", default="131072,262144,524288,1048576")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-per-gpu", type=int, default=262144, help="skip seqlens longer than this per GPU (time)")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--passes", default="fwd", help="fwd, fwd+bwd or both (comma-separated)")
    ap.add_argument("--impls", default="qattn-ring,qattn-ulysses,torch-cp",
                    help="also qattn-ring-torch-merge: the ring with its partial outputs merged by torch operations "
                         "(QATTN_COMBINE=torch) instead of the TL combine kernel, for an A/B in the same run")
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    world, rank = dist.get_world_size(), dist.get_rank()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.distributed.tensor.experimental._attention import _cp_options
    mesh = init_device_mesh("cuda", (world,))
    gpu = torch.cuda.get_device_name(dev)
    impls = a.impls.split(",")
    passes = a.passes.split(",")
    if not set(passes) <= {"fwd", "fwd+bwd"}:
        raise SystemExit(f"--passes {a.passes}: expected fwd, fwd+bwd or both")
    rows = []
    h, d = a.heads, 128
    cases = [(n, causal, p) for n in (int(x) for x in a.seqlens.split(",") if int(x) // world <= a.max_per_gpu)
             for causal in (bool(int(c)) for c in a.causal.split(",")) for p in passes]
    for n, causal, pass_ in cases:
        train = pass_ == "fwd+bwd"
        # a forward + backward does the forward's FLOPs and 2.5x them (5 GEMMs) again
        flops = qcp.flops(1, h, n, n, d, d, causal) * (3.5 if train else 1.0)
        torch.manual_seed(1234)  # the same whole tensors on every rank (torch-cp shards them itself)
        q, k, v, dout = (torch.randn(1, n, h, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
        m = n // world
        with torch.no_grad():
            qs, ks, vs, dos = (t[:, :m].contiguous() for t in (q, k, v, dout))
            ql, kl, vl, dol = (qcp.shard(t) for t in (q, k, v, dout))

            def ring(qq, kk, vv, sm_margin=None):
                return qcp.attention(qq, kk, vv, causal=causal, mode="ring", seqlen=n, sm_margin=sm_margin)

            def ulysses(qq, kk, vv):
                return qcp.attention(qq, kk, vv, causal=causal, mode="ulysses", seqlen=n)

            def single(qq, kk, vv):
                return qattn.attention(qq, kk, vv, causal=causal)
            fns = {}
            run = (lambda f, ts, g: grads_of(f, leaves(*ts), g)) if train else (lambda f, ts, g: lambda: f(*ts))
            fns["single"] = run(single, (qs, ks, vs), dos)
            if "qattn-ring" in impls:
                fns["qattn-ring"] = run(ring, (ql, kl, vl), dol)
            for name in impls:
                if re.fullmatch(r"qattn-ring-m\d+", name):
                    fns[name] = run(lambda qq, kk, vv, m_=int(name[12:]): ring(qq, kk, vv, m_), (ql, kl, vl), dol)
            if "qattn-ring-torch-merge" in impls:
                fns["qattn-ring-torch-merge"] = with_env("QATTN_COMBINE", "torch", run(ring, (ql, kl, vl), dol))
            if "qattn-ulysses" in impls and h % world == 0:
                fns["qattn-ulysses"] = run(ulysses, (ql, kl, vl), dol)
            outs = {name: fn() for name, fn in fns.items()}  # warm-up (the first call builds the kernel)
            ctx = None
            if "torch-cp" in impls:
                qt, kt, vt, dot = (t.transpose(1, 2).contiguous() for t in (q, k, v, dout))  # SDPA's (b, h, s, d)
                # torch refuses load balancing without a causal mask: head-tail (zigzag) for causal only
                _cp_options.enable_load_balance = causal
                ctx = contextlib.ExitStack()
                ctx.enter_context(sdpa_kernel([SDPBackend.CUDNN_ATTENTION]))
                ctx.enter_context(context_parallel(mesh, buffers=[qt, kt, vt, dot], buffer_seq_dims=[2, 2, 2, 2],
                                                   no_restore_buffers={qt, kt, vt, dot}))

                def sdpa(qq, kk, vv):
                    return F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal)
                # the buffers are sharded in place above; they become leaves that require grad after it
                fns["torch-cp"] = grads_of(sdpa, tuple(t.requires_grad_() for t in (qt, kt, vt)), dot) if train \
                    else (lambda: sdpa(qt, kt, vt))
                o_t = fns["torch-cp"]()
                if not train and "qattn-ring" in outs:
                    # torch's load balancer shards causal inputs head-tail (= zigzag), else contiguously
                    sh = "zigzag" if causal else "contiguous"
                    mine = qcp.shard(qcp.unshard(outs["qattn-ring"], n), sharding=sh)
                    diff = (mine.float() - o_t.transpose(1, 2).float()).abs().max().item()
                    if not diff < 2e-2:
                        print(f"[rank {rank}] n={n} causal={causal}: qattn ring and torch-cp differ by {diff}",
                              flush=True)
                        raise SystemExit(1)
                del o_t
            del outs
            # rounds: every implementation (and the single-GPU kernel, on every GPU at once) back to
            # back, each timed over >= 0.25 s; the median over the rounds of each one's time
            reps = {}
            for name, fn in fns.items():
                t1 = timed(fn, 1)
                reps[name] = max(1, min(50, math.ceil(0.25 / t1)))
            times = {name: [] for name in fns}
            for _ in range(a.rounds):
                for name, fn in fns.items():
                    times[name].append(timed(fn, reps[name]))
            if ctx is not None:
                ctx.close()
            res = {name: statistics.median(ts) for name, ts in times.items()}
            single_tf = qcp.flops(1, h, m, m, d, d, causal) * (3.5 if train else 1.0) / res.pop("single") / 1e12
            del qs, ks, vs, dos, ql, kl, vl, dol, q, k, v, dout, fns
            if "torch-cp" in impls:
                del qt, kt, vt, dot
            torch.cuda.empty_cache()
        if rank == 0:
            for impl, t in res.items():
                tf = flops / world / t / 1e12
                rows.append(dict(impl=impl, world_size=world, seqlen=n, causal=int(causal), **{"pass": pass_},
                                 tflops_per_gpu=round(tf, 1), single_gpu_tflops=round(single_tf, 1),
                                 ratio=round(tf / single_tf, 3), ms=round(t * 1e3, 2), heads=h, d=d, gpu=gpu))
                print(f"{impl:14s} W={world} n={n:8d} causal={int(causal)} {pass_:7s}: {t * 1e3:9.1f} ms  "
                      f"{tf:6.1f} TFLOPS/GPU  single-GPU {single_tf:6.1f}  ratio {tf / single_tf:.3f}", flush=True)
    if rank == 0:
        write_csv(a.out, rows, ["impl", "world_size", "seqlen", "causal", "pass", "tflops_per_gpu", "single_gpu_tflops",
                                "ratio", "ms", "heads", "d", "gpu"], append=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
