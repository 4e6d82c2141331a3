"""Training through context parallelism on GPUs (issues 19 and 22): qattn.distributed's Ulysses and
ring modes under autograd over NCCL (the ring also with sliding windows, prefix-LM and documents),
against single-GPU qattn and fp32 autograd.

    torchrun --nproc-per-node N tests/gpu/cp_train_check.py
    python3 tests/gpu/cp_train_check.py --warm I      # builds case I's kernels first (one process per case)

Every rank makes the same whole-sequence inputs and upstream gradient (one seed, on the CPU), shards
them, runs qcp.attention (mode='auto', which takes Ulysses for inputs that require grad, and
mode='ring', whose backward walks the ring with the global O and LSE) and backpropagates its shard
of dO. Its shard gradients are compared with the rows of (a) the gradients
of qattn.attention on the whole sequence on its own GPU and (b) fp32 autograd of the same attention.
Pass: error to fp32 at most 2x single-GPU qattn's error + 1e-3 for each of dQ, dK, dV. Exit 1 on any
failure.
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import qattn  # noqa: E402
import qattn.distributed as qcp  # noqa: E402

# (name, batch, n, heads_q, heads_kv, d, causal, sharding, mode[, variant arguments])
CASES = [
    ("gqa-causal-zigzag", 1, 2049, 8, 2, 128, True, "zigzag", "auto"),
    ("mha-full-contiguous", 2, 1001, 4, 4, 64, False, "contiguous", "auto"),
    ("ring-gqa-causal-zigzag", 1, 2049, 8, 2, 128, True, "zigzag", "ring"),
    ("ring-mqa-full-contiguous", 2, 1001, 4, 1, 64, False, "contiguous", "ring"),
    # the position-reading masks on the ring (qattn.distributed: per-block windows, sliced segment ids)
    ("ring-gqa-window-zigzag", 1, 2049, 8, 2, 128, False, "zigzag", "ring", {"window": (300, 0)}),
    ("ring-window-both-sides-contig", 1, 1501, 4, 4, 64, False, "contiguous", "ring", {"window": (200, 50)}),
    ("ring-prefix-lm-zigzag", 1, 2049, 8, 2, 128, False, "zigzag", "ring", {"prefix_lm": 500}),
    ("ring-documents-contig", 2, 1501, 4, 2, 64, False, "contiguous", "ring", {"document": 5}),
]


def variant_args(extra, b, n, g):
    """The case's variant arguments for qattn: documents become (query, key) segment ids of 5 random
    documents per batch row."""
    out = dict(extra)
    if "document" in out:
        seg = torch.zeros(b, n, dtype=torch.int32)
        for row in range(b):
            for e in sorted(torch.randint(1, n, (out["document"],), generator=g).tolist()):
                seg[row, e:] += 1
        out.pop("document")
        out["segment_ids"] = (seg.cuda(), seg.clone().cuda())
    return out


def visible(n, extra, device):
    """(batch or 1, n, n) keys each query sees under the variant arguments (square, bottom-right)."""
    qi = torch.arange(n, device=device)[:, None]
    kj = torch.arange(n, device=device)[None, :]
    vis = torch.ones(n, n, dtype=torch.bool, device=device)
    if extra.get("window") is not None:
        left, right = extra["window"]
        vis &= (kj >= qi - left) if left >= 0 else vis
        vis &= (kj <= qi + right) if right >= 0 else vis
    if extra.get("prefix_lm") is not None:
        vis = (kj <= qi) | (kj < extra["prefix_lm"])
    vis = vis[None]
    if extra.get("segment_ids") is not None:
        sq, sk = extra["segment_ids"]
        vis = vis & (sq[:, :, None] == sk[:, None, :]).to(device)
    return vis


def fp32_grads(q, k, v, dout, causal, extra=None):
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    hq, hk = q.shape[2], k.shape[2]
    qb, kb, vb = qf.transpose(1, 2), kf.transpose(1, 2).repeat_interleave(hq // hk, 1), vf.transpose(1, 2).repeat_interleave(hq // hk, 1)
    s = (qb @ kb.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        n = q.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if extra:
        s = s.masked_fill(~visible(q.shape[1], extra, q.device)[:, None], float("-inf"))
    o = (torch.softmax(s, -1) @ vb).transpose(1, 2)
    return torch.autograd.grad(o, (qf, kf, vf), dout.float())


def warm(i):
    """Builds case i's kernels (forward and backward, single GPU, 256 tokens): run one process per case
    in parallel before torchrun, and the ranks find them in the disk cache."""
    name, b, n, hq, hk, d, causal = CASES[i][:7]
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(b, 256, h, d, generator=g).to(torch.bfloat16).cuda().requires_grad_() for h in (hq, hk, hk))
    extra = variant_args(CASES[i][9] if len(CASES[i]) > 9 else {}, b, 256, g)
    qattn.attention(q, k, v, causal=causal, **extra).float().sum().backward()
    print(f"warm {name}: built", flush=True)
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--warm":
        return warm(int(sys.argv[2]))
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    fails = 0
    for case in CASES:
        name, b, n, hq, hk, d, causal, sharding, mode = case[:9]
        g = torch.Generator().manual_seed(11)
        q, k, v = (torch.randn(b, n, h, d, generator=g).to(torch.bfloat16).cuda() for h in (hq, hk, hk))
        dout = torch.randn(b, n, hq, d, generator=g).to(torch.bfloat16).cuda()
        extra = variant_args(case[9] if len(case) > 9 else {}, b, n, g)
        # single-GPU qattn on the whole sequence
        qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
        single = torch.autograd.grad(qattn.attention(qs, ks, vs, causal=causal, **extra), (qs, ks, vs), dout)
        ref = fp32_grads(q, k, v, dout, causal, extra)
        # context parallel: this rank's shards
        ql, kl, vl = (qcp.shard(x, seq_dim=1, sharding=sharding).clone().requires_grad_() for x in (q, k, v))
        o = qcp.attention(ql, kl, vl, causal=causal, sharding=sharding, seqlen=n, mode=mode, **extra)
        got = torch.autograd.grad(o, (ql, kl, vl), qcp.shard(dout, seq_dim=1, sharding=sharding))
        line = []
        for gname, gt, sg, rf in zip(("dq", "dk", "dv"), got, single, ref):
            sg_rows, rf_rows = (qcp.shard(x, seq_dim=1, sharding=sharding) for x in (sg, rf))
            err = (gt.float() - rf_rows).abs().max().item()
            bound = 2 * (sg_rows.float() - rf_rows).abs().max().item() + 1e-3
            ok = err <= bound
            fails += not ok
            line.append(f"{gname} {err:.2e}/{bound:.2e}{'' if ok else ' FAIL'}")
        print(f"[rank {rank}/{world}] {name}: {'; '.join(line)}", flush=True)
    total = torch.tensor([fails], device="cuda")
    dist.all_reduce(total)
    if rank == 0:
        print(f"cp_train_check: world {world}, {len(CASES)} cases, {int(total.item())} failures", flush=True)
    dist.destroy_process_group()
    return 1 if total.item() else 0


if __name__ == "__main__":
    sys.exit(main())
