"""Context parallelism on GPUs: qattn.distributed over NCCL against single-GPU qattn.

    python3 tests/gpu/cp_check.py --warm                      # build the kernels once (parallel nvcc)
    torchrun --nproc-per-node N tests/gpu/cp_check.py [--csv F]

Every rank makes the same whole-sequence inputs (one seed, on the CPU), shards them, runs
qattn.distributed.attention and compares its rows with (a) qattn.attention on the whole sequence on
its own GPU (single-GPU qattn) and (b) an fp32 reference of those rows. Pass (ring): error to fp32 at
most 2x single-GPU qattn's error + 2e-3, and the LSE within 1e-3 of single-GPU qattn's. Ulysses runs
the same kernel on whole sequences, so its rows must equal single-GPU qattn's (differences <= 1e-6).
Lengths are odd and do not divide 2W; MHA, GQA, MQA, MLA 192/128, causal, cross lengths, fp16/bf16,
both shardings, BSHD/BHSD; on the ring also windows, prefix-LM and documents. A planted bug (a K/V shard skipped) must fail. Exit 1 on any failure.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import qattn  # noqa: E402
import qattn.distributed as qcp  # noqa: E402
from qattn import verify as qv  # noqa: E402

# (name, batch, n_q, n_k, heads_q, heads_kv, d_qk, d_v, dtype, causal, mode, sharding, layout, kwargs)
CASES = [
    ("mha-causal-zigzag", 1, 4099, 4099, 8, 8, 128, 128, "bf16", True, "ring", "zigzag", "bshd", {}),
    ("gqa-full-contig", 2, 3001, 3001, 8, 2, 128, 128, "bf16", False, "ring", "contiguous", "bshd", {}),
    ("mqa-causal-fp16-bhsd", 1, 1001, 1001, 8, 1, 64, 64, "fp16", True, "ring", "zigzag", "bhsd", {}),
    ("gqa-causal-softcap-contig", 1, 2049, 2049, 16, 4, 128, 128, "bf16", True, "ring", "contiguous", "bshd",
     {"softcap": 30.0}),
    ("mla-causal", 1, 1503, 1503, 8, 8, 192, 128, "bf16", True, "ring", "zigzag", "bshd", {}),
    ("cross-full", 2, 1029, 3000, 8, 4, 128, 128, "bf16", False, "ring", "zigzag", "bshd", {}),
    ("ring-gqa-window-zigzag", 1, 4099, 4099, 8, 2, 128, 128, "bf16", False, "ring", "zigzag", "bshd",
     {"window": (700, 0)}),
    ("ring-window-cross-contig", 2, 1029, 3000, 8, 4, 128, 128, "bf16", False, "ring", "contiguous", "bshd",
     {"window": (500, 100)}),
    ("ring-prefix-lm", 1, 2501, 2501, 8, 2, 128, 128, "bf16", False, "ring", "zigzag", "bshd", {"prefix_lm": 700}),
    ("ring-document-causal", 1, 3001, 3001, 8, 2, 128, 128, "bf16", True, "ring", "zigzag", "bshd", {"document": True}),
    ("u-mha-causal", 1, 3001, 3001, 8, 8, 128, 128, "bf16", True, "ulysses", "zigzag", "bshd", {}),
    ("u-gqa-window", 1, 2500, 2500, 8, 2, 128, 128, "bf16", False, "ulysses", "contiguous", "bshd",
     {"window": (256, 0)}),
    ("u-alibi-causal", 1, 1999, 1999, 8, 4, 128, 128, "bf16", True, "ulysses", "zigzag", "bshd", {"alibi": True}),
    ("u-document", 1, 2100, 2100, 8, 8, 128, 128, "bf16", False, "ulysses", "zigzag", "bshd", {"document": True}),
    ("u-causal-cross", 1, 777, 2000, 8, 1, 128, 128, "bf16", True, "ulysses", "contiguous", "bhsd", {}),
]
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make(case, seed=0):
    name, b, nq, nk, hq, hkv, dqk, dv, dt, causal, mode, sharding, layout, kw = case
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, nq, hq, dqk, generator=g).to(DT[dt])
    k = torch.randn(b, nk, hkv, dqk, generator=g).to(DT[dt])
    v = torch.randn(b, nk, hkv, dv, generator=g).to(DT[dt])
    extra = {}
    for key, val in kw.items():
        if key == "alibi":
            extra["alibi_slopes"] = torch.rand(hq, generator=g) * 0.1
        elif key == "document":
            ends = sorted(torch.randint(1, nq, (5,), generator=g).tolist())
            seg = torch.zeros(b, nq, dtype=torch.int32)
            for e in ends:
                seg[:, e:] += 1
            extra["segment_ids"] = (seg, seg.clone())
        else:
            extra[key] = val
    return q, k, v, extra


def to_dev(extra, dev):
    out = {}
    for key, val in extra.items():
        if key == "segment_ids":
            out[key] = tuple(t.to(dev) for t in val)
        elif torch.is_tensor(val):
            out[key] = val.to(dev)
        else:
            out[key] = val
    return out


def warm():
    """Builds every kernel the cases use in one process, 8 nvcc at a time (the ranks then hit the cache)."""
    from concurrent.futures import ThreadPoolExecutor
    dev = torch.device("cuda", 0)
    calls = []
    for case in CASES:
        q, k, v, extra = make(case)
        _, b, nq, nk, hq, hkv, dqk, dv, dt, causal, mode, sharding, layout, kw = case
        extra = to_dev(extra, dev)
        q, k, v = q[:, :256].to(dev), k[:, :256].to(dev), v[:, :256].to(dev)
        if "segment_ids" in extra:
            extra["segment_ids"] = tuple(t[:, :256].contiguous() for t in extra["segment_ids"])
        calls.append((q, k, v, dict(causal=causal, return_lse=True, **extra)))  # single-GPU qattn
        if mode == "ring":
            calls.append((q, k, v, dict(causal="top_left" if causal else False, return_lse=True,
                                        softcap=extra.get("softcap"), segment_ids=extra.get("segment_ids"),
                                        window=extra.get("window", (-1, 0) if "prefix_lm" in extra else None))))
    t0 = time.time()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda c: qattn.attention(c[0], c[1], c[2], **c[3]), calls))
    print(f"warm: {len(calls)} calls, kernels ready in {time.time() - t0:.0f} s", flush=True)


def rows_of(n, world, rank, sharding):
    return torch.cat([torch.arange(a, b) for a, b in qcp.rank_intervals(n, world, rank, sharding)])


def reference_rows(q, k, v, rows, causal, extra, scale):
    """fp32 attention of query rows `rows` (global indices) against all keys, on the GPU."""
    nq, nk = q.shape[1], k.shape[1]
    qi = rows.to(q.device)[:, None]
    kj = torch.arange(nk, device=q.device)[None, :]
    vis = (kj <= qi + (nk - nq)) if causal else None
    if extra.get("window") is not None:  # bottom-right aligned, -1 unbounded
        left, right = extra["window"]
        w = ((kj >= qi + (nk - nq) - left) | (left < 0)) & ((kj <= qi + (nk - nq) + right) | (right < 0))
        vis = w if vis is None else vis & w
    if extra.get("prefix_lm") is not None:  # keys k <= q + off or k < P
        vis = (kj <= qi + (nk - nq)) | (kj < extra["prefix_lm"])
    if extra.get("segment_ids") is not None:  # documents: (batch, rows, keys), a batch dimension
        seg_q, seg_k = extra["segment_ids"]
        d = seg_q[:, rows.to(q.device)][:, :, None] == seg_k[:, None, :]
        vis = (d if vis is None else vis[None] & d)[:, None]  # (batch, 1, rows, keys) against (batch, heads, ...)
    return qv.attention(q[:, rows.to(q.device)], k, v, vis, scale, torch.float32, softcap=extra.get("softcap"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--csv")
    ap.add_argument("--plant", action="store_true", help="skip one K/V shard in the ring: every ring case must fail")
    a = ap.parse_args()
    if a.warm:
        warm()
        return 0
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    world, rank = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda", local)
    if a.plant:
        real = qcp.ring_schedule

        def planted(*args, **kw):
            steps = real(*args, **kw)
            return steps[:-1] + [(steps[-1][0], [])] if len(steps) > 1 else [(steps[0][0], [])]
        qcp.ring_schedule = planted
    fails, rows_out = 0, []
    for case in CASES:
        name, b, nq, nk, hq, hkv, dqk, dv, dt, causal, mode, sharding, layout, kw = case
        if mode == "ulysses" and (hq % world or (hkv % world and world % hkv)):
            continue
        q, k, v, extra = make(case)
        q, k, v, extra = q.to(dev), k.to(dev), v.to(dev), to_dev(extra, dev)
        scale = dqk ** -0.5
        with torch.no_grad():
            single, single_lse = qattn.attention(q, k, v, causal=causal, return_lse=True, **extra)

            def lay(t):
                return t if layout == "bshd" else t.transpose(1, 2).contiguous()
            sd = 1 if layout == "bshd" else 2
            ql, kl, vl = (qcp.shard(lay(t), seq_dim=sd, sharding=sharding) for t in (q, k, v))
            o, lse = qcp.attention(ql, kl, vl, causal=causal, return_lse=True, mode=mode, sharding=sharding,
                                   layout=layout, seqlen=nq, seqlen_k=nk, **extra)
            if layout == "bhsd":
                o = o.transpose(1, 2)
            rows = rows_of(nq, world, rank, sharding).to(dev)
            s_rows, s_lse = single[:, rows].float(), single_lse[:, :, rows]
            d_single = (o.float() - s_rows).abs().max().item()
            d_lse = (lse - s_lse).abs().nan_to_num(0.0).max().item()
            if mode == "ring":
                ref, ref_lse = reference_rows(q, k, v, rows.cpu(), causal, extra, scale)
                e_cp = (o.float() - ref).abs().max().item()
                e_single = (s_rows - ref).abs().max().item()
                ok = e_cp <= 2 * e_single + 2e-3 and d_lse <= 1e-3
            else:
                e_cp = e_single = float("nan")
                ok = d_single <= 1e-6 and d_lse <= 1e-6
        flag = torch.tensor([0 if ok else 1], device=dev)
        dist.all_reduce(flag)
        fails += int(flag.item() > 0)
        if rank == 0 or not ok:
            print(f"[rank {rank}/{world}] {name:28s} {mode:8s} {sharding:10s} n={nq}x{nk} h={hq}/{hkv} d={dqk}/{dv} {dt} "
                  f"causal={causal}: |cp-single| {d_single:.2e} |lse| {d_lse:.2e} err cp {e_cp:.2e} single {e_single:.2e} "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
        rows_out.append((name, mode, sharding, world, nq, nk, hq, hkv, dqk, dv, dt, causal, d_single, d_lse, e_cp, e_single,
                         "pass" if flag.item() == 0 else "fail"))
    if rank == 0:
        print(f"cp_check world {world}: {len(rows_out) - fails}/{len(rows_out)} cases pass"
              + (" (planted bug)" if a.plant else ""), flush=True)
        if a.csv:
            new = not os.path.exists(a.csv)
            with open(a.csv, "a") as f:
                if new:
                    f.write("case,mode,sharding,world_size,seqlen_q,seqlen_k,heads_q,heads_kv,d_qk,d_v,dtype,causal,"
                            "max_diff_vs_single,max_lse_diff_vs_single,err_cp_vs_fp32,err_single_vs_fp32,result\n")
                for r in rows_out:
                    f.write(",".join(str(x) for x in r) + "\n")
    dist.destroy_process_group()
    if a.plant:  # every ring case must fail (Ulysses has no ring to plant the bug in)
        ring = sum(1 for r in rows_out if r[1] == "ring")
        ring_failed = sum(1 for r in rows_out if r[1] == "ring" and r[-1] == "fail")
        if rank == 0:
            print(f"planted bug: {ring_failed}/{ring} ring cases fail", flush=True)
        return 0 if ring_failed == ring else 1
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
