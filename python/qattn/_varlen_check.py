"""The GPU check of a forward library over packed ragged batches (its kernel info names "varlen";
docs/tl.md, "Ragged batches"), used by qattn.verify: random sequence lengths (an empty sequence, one
query, lengths that cross the tiles, more keys than queries and fewer), packed q / k / v with NaN
rows past the last sequence, NaN-filled outputs; each sequence against an fp64 attention over its
own keys with FlashAttention's rule (error at most twice a same-precision torch attention's, plus
1e-5), the LSE (heads_q, total_q) against the fp64 one, and the output rows past the last sequence
still NaN (a store that ran past its sequence fails). The C ABI refuses negative packed row counts
(QATTN_ERR_SHAPE). A kernel whose keys sit in a KV cache (info "kv_cache" too: ragged queries over
the cache, chunked prefill) gets packed queries over caches made by qattn._kvcache_check (NaN
wherever no key is; contiguous, or pages of 16 rows and of two key tiles in random order); one that
also splits the keys (info "splits") is launched with 1, 3 and 7 parts in turn (verify.split_count:
part s of row r at row s x total_q + r, LSE (parts, heads_q, total_q), every part NaN-filled first),
whose fp64 LSE merge (verify.merge_parts) is what is checked."""
import torch

from . import _kvcache_check as _kv
from . import verify as _v

CASES = [  # heads_q, heads_kv, lens_q, lens_k (None: the same)
    (4, 2, [300, 0, 1, 129, 1000, 64], None),
    (4, 4, [77, 513, 5, 256], [200, 40, 5, 1024]),
    (8, 1, [17, 128, 700], [30, 100, 1500]),
]
SPARE = 3  # NaN rows past the last sequence of every packed tensor


def _sequence(info, o, lse, a, e, q, ks, vs, dt, scale, window, softcap):
    """(ok, err, naive) for rows a..e of the packed o / lse: the queries q[a:e] over keys ks, values vs
    (n, heads_kv, d) against the fp64 attention (no key: O = 0, LSE = -inf)."""
    if ks.shape[0] == 0:
        return bool((o[a:e] == 0).all()) and (lse is None or bool(torch.isneginf(lse[:, a:e]).all())), 0.0, 0.0
    vis = _v.visible(info, e - a, int(ks.shape[0]), q.device, window)
    args = (q[None, a:e].float(), ks[None].float(), vs[None].float(), vis, scale)
    o_ref, l_ref = _v.attention(*args, torch.float64, softcap=softcap)
    o_low, _ = _v.attention(*args, torch.float32, p_dtype=dt, out_dtype=dt, softcap=softcap)
    err, naive = _v.max_abs(o[None, a:e].double(), o_ref), _v.max_abs(o_low.double(), o_ref)
    ok = not torch.isnan(o[a:e]).any().item() and err <= 2 * naive + 1e-5
    if lse is not None:
        fin = torch.isfinite(l_ref[0])
        got = lse[:, a:e]
        ok = ok and bool(((got == float("-inf")) == ~fin).all()) and _v.max_abs(got.double()[fin], l_ref[0][fin]) <= 1e-3
    return ok, err, naive


def run_case(kern, case, gen):
    """(ok, detail) for one case."""
    info = kern.info
    roles = info["varlen"]
    hq, hkv, lq, lk = case
    lk = lk if lk is not None else lq
    dt = _v.DTYPES[info["dtype"]]
    cq = torch.tensor([0] + lq, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
    ck = torch.tensor([0] + lk, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
    tq, tk = int(cq[-1]) + SPARE, int(ck[-1]) + SPARE
    dev = gen.device
    q = torch.randn(tq, hq, info["d_qk"], device=dev, generator=gen).to("cuda", dt)
    k = torch.randn(tk, hkv, info["d_qk"], device=dev, generator=gen).to("cuda", dt)
    v = torch.randn(tk, hkv, info["d_v"], device=dev, generator=gen).to("cuda", dt)
    k[tk - SPARE:], v[tk - SPARE:] = float("nan"), float("nan")
    o = torch.full((tq, hq, info["d_v"]), float("nan"), device="cuda", dtype=dt)
    lse = torch.full((hq, tq), float("nan"), device="cuda") if info["lse"] else None
    given = {roles.get("cu_seqlens_q"): cq, roles.get("cu_seqlens_k"): ck}
    scale = info["d_qk"] ** -0.5
    window, softcap = _v.launch_values(info, 0)
    p = kern.params(q[None], k[None], v[None], o[None], lse, scale, aux=[given[a["name"]] for a in info["aux"]],
                    window=window, softcap=softcap)
    p.batch, p.seqlen_q, p.seqlen_k, p.total_q, p.total_k = len(lq), max(lq), max(lk), tq, tk
    st = kern(q[None], k[None], v[None], o[None], params=p)
    torch.cuda.synchronize()
    if st != 0:
        return False, f"status {st}: {kern.last_error()}"
    ok = bool(torch.isnan(o[tq - SPARE:]).all()) and (lse is None or bool(torch.isnan(lse[:, tq - SPARE:]).all()))
    why = "" if ok else "rows past the last sequence were written; "
    worst, worst_naive = 0.0, 0.0
    cql, ckl = cq.tolist(), ck.tolist()
    for b in range(len(lq)):
        a, e, c, f = cql[b], cql[b + 1], ckl[b], ckl[b + 1]
        if e > a:
            good, err, naive = _sequence(info, o, lse, a, e, q, k[c:f], v[c:f], dt, scale, window, softcap)
            ok, worst, worst_naive = ok and good, max(worst, err), max(worst_naive, naive)
    return ok, f"{why}lens {lq} / {lk}: err {worst:.2e} naive {worst_naive:.2e}"


CACHE_CASES = [  # heads_q, heads_kv, lens_q, cache_seqlens, capacity
    (4, 2, [5, 0, 1, 200, 33], [300, 0, 40, 200, 33], 320),
    (8, 1, [128, 64, 3], [1000, 64, 2], 1024),
]


def run_cache_case(kern, case, page, gen, parts=1):
    """(ok, detail) for packed queries over a KV cache (page 0: contiguous), the keys in `parts` parts
    (a kernel that splits them: info "splits")."""
    info = kern.info
    roles = dict(info["kv_cache"])
    roles.update(info["varlen"])
    hq, hkv, lq, lk, cap = case
    dt = _v.DTYPES[info["dtype"]]
    k, v, kc, vc, table = _kv.make_cache(len(lq), cap, hkv, info["d_qk"], info["d_v"], dt, page, lk, gen)
    cq = torch.tensor([0] + lq, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
    tq = int(cq[-1]) + SPARE
    q = torch.randn(tq, hq, info["d_qk"], device=gen.device, generator=gen).to("cuda", dt)
    o = torch.full((parts, tq, hq, info["d_v"]), float("nan"), device="cuda", dtype=dt)  # part s of row r: o[s, r]
    lse = torch.full((parts, hq, tq), float("nan"), device="cuda") if info["lse"] else None
    given = {roles.get("cu_seqlens_q"): cq, roles.get("lengths"): torch.tensor(lk, dtype=torch.int32, device="cuda"),
             roles.get("block_table"): table}
    scale = info["d_qk"] ** -0.5
    window, softcap = _v.launch_values(info, 0)
    p = kern.params(q[None], kc, vc, o[:1], lse, scale, aux=[given[a["name"]] for a in info["aux"]], window=window,
                    softcap=softcap)
    p.batch, p.seqlen_q, p.seqlen_k, p.total_q, p.total_k = len(lq), max(lq), cap, tq, 0
    if table is not None:
        p.page_size, p.pages, p.num_pages = page, int(table.shape[1]), int(kc.shape[0])
    if info.get("splits"):
        p.splits = parts
    st = kern(q[None], kc, vc, o[:1], params=p)
    torch.cuda.synchronize()
    if st != 0:
        return False, f"status {st}: {kern.last_error()}"
    ok = bool(torch.isnan(o[:, tq - SPARE:]).all()) and (lse is None or bool(torch.isnan(lse[:, :, tq - SPARE:]).all()))
    if parts > 1:  # the parts merged by their LSE in fp64 (a part left unwritten stays NaN)
        o, lse = (x[0] for x in _v.merge_parts(o, lse, parts))
    else:
        o, lse = o[0], lse[0] if lse is not None else None
    worst, worst_naive = 0.0, 0.0
    cql = cq.tolist()
    for b, n in enumerate(lk):
        a, e = cql[b], cql[b + 1]
        if e > a:
            good, err, naive = _sequence(info, o, lse, a, e, q, k[b, :n], v[b, :n], dt, scale, window, softcap)
            ok, worst, worst_naive = ok and good, max(worst, err), max(worst_naive, naive)
    return ok, f"queries {lq} over keys {lk}" + (f" in {parts} parts" if parts > 1 else "") + f": err {worst:.2e} naive {worst_naive:.2e}"


def check_library(kern, gen):
    """[(case text, ok, detail)] over CASES (or CACHE_CASES x the cache layouts the kernel reads), and
    the C ABI's refusal of negative packed row counts."""
    out = []
    info = kern.info
    if "kv_cache" in info:
        bn = int(info.get("tiles", {}).get("BN", 64))
        pages = [16, 2 * bn] if "block_table" in info["kv_cache"] else [0]
        runs = [(case, page) for case in CACHE_CASES for page in pages]
        for i, (case, page) in enumerate(runs):
            parts = _v.split_count(info, i)
            ok, detail = run_cache_case(kern, case, page, gen, parts)
            out.append((f"varlen over a cache h{case[0]}/{case[1]} {len(case[2])} sequences page {page}" +
                        (f" {parts} parts" if parts > 1 else ""), ok, detail))
        return out
    for case in CASES:
        ok, detail = run_case(kern, case, gen)
        out.append((f"varlen h{case[0]}/{case[1]} {len(case[2])} sequences", ok, detail))
    dt = _v.DTYPES[info["dtype"]]
    q = torch.randn(1, 8, 2, info["d_qk"], device="cuda").to(dt)
    kv = torch.randn(1, 8, 1, info["d_qk"], device="cuda").to(dt)
    o = torch.empty(1, 8, 2, info["d_v"], device="cuda", dtype=dt)
    cu = torch.tensor([0, 8], dtype=torch.int32, device="cuda")
    window, softcap = _v.launch_values(info, 0)
    p = kern.params(q, kv, kv, o, None, None, aux=[cu for _ in info["aux"]], window=window, softcap=softcap)
    p.total_q, p.total_k = -1, 8
    out.append(("abi: total_q -1", kern(q, kv, kv, o, params=p) == 2, ""))
    return out
