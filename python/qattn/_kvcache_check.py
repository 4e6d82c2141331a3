"""The GPU check of a forward library that reads a KV cache (its kernel info names "kv_cache"; docs/tl.md,
"KV caches"), used by qattn.verify: random key counts per sequence (the first full, one empty when
batch >= 3), a cache that is NaN wherever no key is (contiguous: past each count; paged: pages in
random order over a pool with spare pages, and the rows past the count in the last page), pages of
16 rows and of two key tiles; each sequence against an fp64 attention over its own keys, with
FlashAttention's rule (error at most twice a same-precision torch attention's, plus 1e-5). Paged
kernels also get a block table with entries outside the pool (they must read as zeros, not fault)
and bad page fields at the C ABI (QATTN_ERR_SHAPE). A kernel that splits the keys (info "splits") runs
with 1, 3 and 7 parts in turn, its parts merged by their LSE (qattn.verify.merge_parts). A kernel that
reads V as K's first d_v columns (info "v_from_k": absorbed MLA) gets v = k at the C ABI (pointer and
strides, with d_v its own) and the reference V = K[..., :d_v]."""
import torch

from . import verify as _v

CASES = [  # batch, heads_q, heads_kv, seqlen_q, capacity
    (3, 4, 1, 1, 1000),
    (4, 8, 2, 1, 777),
    (2, 2, 2, 5, 300),
    (3, 16, 4, 64, 2100),
]


def make_cache(b, cap, hkv, d_qk, d_v, dt, page, lens, gen):
    """Fresh random keys / values (b, cap, hkv, d) on the generator's device, and a cache holding each
    sequence's first lens[i] rows of them with NaN everywhere else: contiguous (page 0), or paged,
    a shuffled pool of b * pages + 2 pages and its block table. Returns (k, v, k_cache, v_cache,
    block_table or None)."""
    dev = gen.device
    k = torch.randn(b, cap, hkv, d_qk, device=dev, generator=gen).to("cuda", dt)
    v = torch.randn(b, cap, hkv, d_v, device=dev, generator=gen).to("cuda", dt)
    if page == 0:
        kc, vc = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
        for i, n in enumerate(lens):
            kc[i, :n], vc[i, :n] = k[i, :n], v[i, :n]
        return k, v, kc, vc, None
    pages = -(-cap // page)
    num = b * pages + 2
    kc = torch.full((num, page, hkv, d_qk), float("nan"), device="cuda", dtype=dt)
    vc = torch.full((num, page, hkv, d_v), float("nan"), device="cuda", dtype=dt)
    table = torch.randperm(num, device=dev, generator=gen)[: b * pages].view(b, pages).to("cuda", torch.int32)
    for i, n in enumerate(lens):
        for r0 in range(0, n, page):
            r1 = min(n, r0 + page)
            kc[table[i, r0 // page], : r1 - r0] = k[i, r0:r1]
            vc[table[i, r0 // page], : r1 - r0] = v[i, r0:r1]
    return k, v, kc, vc, table


def run_case(kern, case, page, gen, corrupt=False, parts=1):
    """(ok, detail) for one case: page 0 = a contiguous cache. corrupt: two block-table entries of the
    first (full) sequence point outside the pool (num_pages + 7, -3): those pages must read as zeros,
    not fault (the reference zeroes their keys and values)."""
    info = kern.info
    roles = info["kv_cache"]
    b, hq, hkv, sq, cap = case
    lens = [cap] + [int(x) for x in torch.randint(0, cap + 1, (b - 1,), device="cuda", generator=gen)]
    if b >= 3:
        lens[1] = 0
    dt = _v.DTYPES[info["dtype"]]
    k, v, kc, vc, table = make_cache(b, cap, hkv, info["d_qk"], info["d_v"], dt, page, lens, gen)
    if info.get("v_from_k"):  # V is the cache's first d_v columns
        v, vc = k[..., :info["d_v"]], kc
    if corrupt and table is not None and table.shape[1] >= 3:
        table[0, 1], table[0, 2] = int(kc.shape[0]) + 7, -3
        for pg in (1, 2):
            k[0, pg * page:(pg + 1) * page] = 0
            if not info.get("v_from_k"):  # (else a view of k)
                v[0, pg * page:(pg + 1) * page] = 0
    q = torch.randn(b, sq, hq, info["d_qk"], device="cuda", generator=gen).to(dt)
    o = torch.full((b * parts, sq, hq, info["d_v"]), float("nan"), device="cuda", dtype=dt)
    lse = torch.full((b * parts, hq, sq), float("nan"), device="cuda") if info["lse"] else None
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    given = {roles.get("lengths"): seqlens, roles.get("block_table"): table}
    scale = info["d_qk"] ** -0.5
    window, softcap = _v.launch_values(info, 0)
    p = kern.params(q, kc, vc, o, lse, scale, aux=[given[a["name"]] for a in info["aux"]], window=window, softcap=softcap)
    p.d_v = info["d_v"]  # (v_from_k: v is k, whose last dim is d_qk)
    p.seqlen_k = cap
    if table is not None:
        p.page_size, p.pages, p.num_pages = page, int(table.shape[1]), int(kc.shape[0])
    p.splits = parts
    om, lm = _v.poisoned_merge(p, info, b, hq, sq)
    st = kern(q, kc, vc, o, params=p)
    torch.cuda.synchronize()
    if st != 0:
        return False, f"status {st}: {kern.last_error()}"
    if om is not None:  # the kernel's own merge is what is checked
        o, lse = om, lm
    elif parts > 1:
        o, lse = _v.merge_parts(o, lse, parts)
    worst, worst_naive, ok = 0.0, 0.0, True
    for i, n in enumerate(lens):
        if n == 0:
            ok = ok and bool((o[i] == 0).all()) and (lse is None or bool(torch.isneginf(lse[i]).all()))
            continue
        vis = _v.visible(info, sq, n, q.device, window)
        args = (q[i:i + 1].float(), k[i:i + 1, :n].float(), v[i:i + 1, :n].float(), vis, scale)
        o_ref, l_ref = _v.attention(*args, torch.float64, softcap=softcap)
        o_low, _ = _v.attention(*args, torch.float32, p_dtype=dt, out_dtype=dt, softcap=softcap)
        err, naive = _v.max_abs(o[i:i + 1].double(), o_ref), _v.max_abs(o_low.double(), o_ref)
        ok = ok and not torch.isnan(o[i]).any().item() and err <= 2 * naive + 1e-5
        if lse is not None:
            fin = torch.isfinite(l_ref)
            ok = ok and bool(((lse[i:i + 1] == float("-inf")) == ~fin).all()) and \
                _v.max_abs(lse[i:i + 1].double()[fin], l_ref[fin]) <= 1e-3
        worst, worst_naive = max(worst, err), max(worst_naive, naive)
    return ok, f"lens {lens}: err {worst:.2e} naive {worst_naive:.2e}" + (f", {parts} parts" if parts > 1 else "")


def check_library(kern, gen):
    """[(case text, ok, detail)] over CASES x the cache layouts the kernel reads."""
    info = kern.info
    bn = int(info.get("tiles", {}).get("BN", 64))
    pages = [16, 2 * bn] if "block_table" in info["kv_cache"] else [0]
    out = []
    for ci, case in enumerate(CASES):
        for pi, page in enumerate(pages):
            parts = _v.split_count(info, ci + pi)
            ok, detail = run_case(kern, case, page, gen, parts=parts)
            b, hq, hkv, sq, cap = case
            out.append((f"kv b{b} h{hq}/{hkv} s{sq}/{cap} page {page}" + (f" {parts} parts" if parts > 1 else ""), ok, detail))
    if "block_table" in info["kv_cache"]:  # a corrupt block table reads as zeros, no fault
        ok, detail = run_case(kern, CASES[0], 16, gen, corrupt=True)
        out.append(("kv block table entries outside the pool", ok, detail))
    if "block_table" in info["kv_cache"]:  # the C ABI refuses bad page fields (QATTN_ERR_SHAPE)
        for what, field, value in (("page_size 0", "page_size", 0), ("seqlen_k past the table", "seqlen_k", 10 ** 6)):
            dt = _v.DTYPES[info["dtype"]]
            q = torch.randn(1, 1, 2, info["d_qk"], device="cuda").to(dt)
            kc = torch.randn(4, 16, 1, info["d_qk"], device="cuda").to(dt)
            vc = kc if info.get("v_from_k") else torch.randn(4, 16, 1, info["d_v"], device="cuda").to(dt)
            o = torch.empty(1, 1, 2, info["d_v"], device="cuda", dtype=dt)
            given = {info["kv_cache"].get("lengths"): torch.tensor([20], dtype=torch.int32, device="cuda"),
                     info["kv_cache"]["block_table"]: torch.arange(2, dtype=torch.int32, device="cuda")[None]}
            window, softcap = _v.launch_values(info, 0)
            p = kern.params(q, kc, vc, o, None, None, aux=[given[a["name"]] for a in info["aux"]], window=window,
                            softcap=softcap)
            p.seqlen_k, p.page_size, p.pages, p.num_pages, p.d_v = 32, 16, 2, 4, info["d_v"]
            setattr(p, field, value)
            out.append((f"abi: {what}", kern(q, kc, vc, o, params=p) == 2, ""))
    return out
