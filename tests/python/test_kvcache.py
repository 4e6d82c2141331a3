"""qattn.attention_with_kvcache (docs/python.md, "KV caches") on the GPU: random ragged key counts (0,
a full cache, partial last pages), pages in random order with every row no key occupies NaN (a
kernel that reads one as a value fails), contiguous and paged caches (pages of 16, 64 and 256 rows),
decoding (split over the keys and not) and chunked prefill (4 causal queries), MHA / GQA / MQA, fp16
and bf16, against an fp64 reference per sequence with FlashAttention's rule (error at most twice a
same-precision torch attention's, plus 1e-5); every split count equals no split within tolerance.
The argument checks run on the CPU too. Needs torch."""
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU CI installs none)")

import qattn  # noqa: E402
from conftest import gpu_skip_reason  # noqa: E402

GPU = gpu_skip_reason() is None
gpu = pytest.mark.skipif(not GPU, reason=gpu_skip_reason() or "")


def make_cache(g, b, cap, hkv, d, dt, page, lens):
    """qattn._kvcache_check.make_cache (NaN wherever no key is; shuffled pages) with a CPU generator."""
    from qattn._kvcache_check import make_cache as make
    return make(b, cap, hkv, d, d, dt, page, lens, g)


def reference(q, k, v, n, causal, dtype):
    """One sequence's first n keys: (fp64 o, fp64 lse, same-precision o) with q (sq, h, d)."""
    sq, h, d = q.shape
    hkv = k.shape[1]
    out = []
    for prec in (torch.float64, dtype):
        qd = q.to(prec).transpose(0, 1)
        kd = k[:n].to(prec).repeat_interleave(h // hkv, 1).transpose(0, 1)
        vd = v[:n].to(prec).repeat_interleave(h // hkv, 1).transpose(0, 1)
        s = (qd.float() @ kd.float().transpose(-1, -2)).to(torch.float64 if prec == torch.float64 else torch.float32)
        s = s * d ** -0.5
        if causal:
            i = torch.arange(sq, device=q.device)[:, None] + n - sq
            s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > i, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        if prec != torch.float64:
            p = p.to(prec).float()
            o = (p @ vd.float()).to(prec)
        else:
            o = p @ vd
        out.append((o.transpose(0, 1), lse))
    return out[0][0], out[0][1], out[1][0]


def check(o, lse, q, k, v, lens, causal, dt, lse_too=True):
    assert torch.isfinite(o).all()
    for i, n in enumerate(lens):
        if n == 0:
            assert (o[i] == 0).all() and (not lse_too or (torch.isinf(lse[i]).all() and (lse[i] < 0).all()))
            continue
        o_ref, l_ref, o_low = reference(q[i], k[i], v[i], n, causal, dt)
        rows = slice(None)
        if causal:  # queries with no key (n < seqlen_q) are 0 / -inf
            rows = slice(max(0, q.shape[1] - n), None)
        err = (o[i, rows].double() - o_ref[rows]).abs().max().item()
        base = (o_low[rows].double() - o_ref[rows]).abs().max().item()
        assert err <= 2 * base + 1e-5, f"sequence {i} ({n} keys): error {err:.3g} vs same-precision torch {base:.3g}"
        finite = torch.isfinite(l_ref)
        if not lse_too:
            continue
        assert torch.allclose(lse[i][finite].double(), l_ref[finite], atol=1e-3, rtol=1e-4)


CASES = [  # dtype, hq, hkv, d, seqlen_q, causal, capacity
    (torch.bfloat16, 8, 1, 128, 1, True, 3000),    # MQA decoding: the key split
    (torch.bfloat16, 8, 2, 128, 1, False, 1100),   # GQA decoding
    (torch.float16, 4, 4, 64, 1, True, 700),       # MHA fp16 d64
    (torch.bfloat16, 8, 2, 128, 4, True, 515),     # chunked prefill: 4 causal queries
    (torch.bfloat16, 4, 2, 64, 200, True, 1100),   # chunked prefill d64: on Hopper 3 consumer warpgroups (BM 192)
]


@gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{str(c[0])[6:]}_{c[1]}_{c[2]}_d{c[3]}_sq{c[4]}_{'c' if c[5] else 'n'}")
@pytest.mark.parametrize("page", [0, 16, 64, 256])
def test_kvcache_matches_reference(case, page):
    dt, hq, hkv, d, sq, causal, cap = case
    g = torch.Generator().manual_seed(hash((hq, hkv, d, sq, page)) % 1000)
    b = 5
    lens = [cap, 0, 1 + int(torch.randint(cap - 1, (1,), generator=g)), 17, cap - (page or 16) // 2]
    k, v, kc, vc, table = make_cache(g, b, cap, hkv, d, dt, page, lens)
    q = torch.randn(b, sq, hq, d, generator=g).to("cuda", dt)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    o, lse = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, causal=causal, return_lse=True)
    assert torch.isfinite(o).all()
    check(o, lse, q, k, v, lens, causal, dt)
    os.environ["QATTN_SPLIT_KV"] = "0"
    try:
        o1, lse1 = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, causal=causal, return_lse=True)
    finally:
        del os.environ["QATTN_SPLIT_KV"]
    assert (o1.float() - o.float()).abs().max().item() < 2e-2


@gpu
@pytest.mark.parametrize("page", [0, 16])
@pytest.mark.parametrize("sq,d_v", [(1, 128), (1, 256), (5, 128)])
def test_kvcache_with_v_wider_than_qk(page, sq, d_v):
    """head_dim_v > head_dim_qk over a cache (d_qk 64): decoding (its key split and combine) and a causal
    chunk, contiguous and paged; a split count of one gives the same rows."""
    from qattn._kvcache_check import make_cache as make
    g = torch.Generator().manual_seed(sq * 7 + d_v + page)
    b, cap, hq, hkv, d, dt = 4, 2100, 8, 2, 64, torch.bfloat16
    lens = [cap, 0, 1 + int(torch.randint(cap - 1, (1,), generator=g)), 17]
    k, v, kc, vc, table = make(b, cap, hkv, d, d_v, dt, page, lens, g)
    q = torch.randn(b, sq, hq, d, generator=g).to("cuda", dt)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    o, lse = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, causal=True, return_lse=True)
    assert o.shape == (b, sq, hq, d_v)
    check(o, lse, q, k, v, lens, True, dt)
    o1 = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, causal=True, num_splits=1)
    assert (o1.float() - o.float()).abs().max().item() < 2e-2


@gpu
@pytest.mark.parametrize("page", [0, 16, 256])
@pytest.mark.parametrize("splits", [2, 3, 7, 16])
def test_split_in_tl_any_count_matches_reference_and_the_fold(page, splits, monkeypatch):
    """The kernel that splits in its TL (Hopper, QATTN_SPLIT_MODE=tl; spec split_keys): any number of
    parts, more parts than a short sequence has key tiles (empty parts: O 0, LSE -inf, ignored by the
    merge), ragged key counts (0, 1, a partial page); against the fp64 reference, the unsplit call and
    the fold (the default). MQA 8/1 and GQA 8/2 decoding, bf16 d128."""
    from qattn import _attention
    monkeypatch.setenv("QATTN_SPLIT_MODE", "tl")
    if not _attention.tl_split(torch, torch.device("cuda")):
        pytest.skip("the split in TL is lowered for Hopper (sm90) only")
    monkeypatch.setattr(_attention, "split_keys", lambda *a, **k: splits)
    for hkv in (1, 2):
        g = torch.Generator().manual_seed(splits * 100 + page + hkv)
        b, hq, d, cap = 5, 8, 128, 2048
        lens = [cap, 0, 1, 300, cap - 1 - (page or 16) // 2]
        k, v, kc, vc, table = make_cache(g, b, cap, hkv, d, torch.bfloat16, page, lens)
        q = torch.randn(b, 1, hq, d, generator=g).to("cuda", torch.bfloat16)
        seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        o, lse = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, causal=True, return_lse=True)
        check(o, lse, q, k, v, lens, True, torch.bfloat16)
        monkeypatch.setenv("QATTN_SPLIT_MODE", "fold")
        of = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, causal=True)  # (S lowered to divide the pages)
        assert (of.float() - o.float()).abs().max().item() < 2e-2
        monkeypatch.setenv("QATTN_SPLIT_MODE", "tl")
        monkeypatch.setenv("QATTN_SPLIT_KV", "0")
        o1 = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, causal=True)
        monkeypatch.delenv("QATTN_SPLIT_KV")
        assert (o1.float() - o.float()).abs().max().item() < 2e-2
        if page == 0:  # qattn.attention on the full sequences: the same kernel family without a cache
            full = torch.full((b,), cap, dtype=torch.int32, device="cuda")
            kf, vf = kc.nan_to_num(0.0), vc.nan_to_num(0.0)
            oa = qattn.attention(q, kf, vf)
            ok = qattn.attention_with_kvcache(q, kf, vf, full, None)
            assert (oa.float() - ok.float()).abs().max().item() < 2e-2


@gpu
@pytest.mark.parametrize("splits", [3, 7])
@pytest.mark.parametrize("page", [0, 64])
def test_split_in_tl_under_masks_and_variants(page, splits, monkeypatch):
    """The split in TL (Hopper) with a mask: 4 causal queries (speculative decoding, chunked prefill),
    a sliding window, a softcap; each part applies them to its own key tiles (parts past the causal
    diagonal or before the window hold no key: O 0, LSE -inf). Against the fp64 reference (causal) and
    the unsplit call of the same variant (all). The causal split kernel once hung and then computed a
    negative loop bound: ptxas miscompiled cdiv (tests/gpu/intmath_check.cu)."""
    from qattn import _attention
    if not _attention.tl_split(torch, torch.device("cuda")):
        pytest.skip("the split in TL is lowered for Hopper (sm90) only")
    g = torch.Generator().manual_seed(splits * 10 + page)
    b, hq, hkv, d, cap, sq = 5, 8, 2, 128, 2048, 4
    lens = [cap, 0, 1, 300, cap - 5]
    k, v, kc, vc, table = make_cache(g, b, cap, hkv, d, torch.bfloat16, page, lens)
    q = torch.randn(b, sq, hq, d, generator=g).to("cuda", torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for kw in ({"causal": True}, {"causal": True, "window": (300, 0)}, {"causal": True, "softcap": 30.0},
               {"window": (700, 700)}):
        monkeypatch.setattr(_attention, "split_keys", lambda *a, **k_: splits)
        o, lse = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, return_lse=True, **kw)
        monkeypatch.undo()
        if kw == {"causal": True}:
            check(o, lse, q, k, v, lens, True, torch.bfloat16)
        monkeypatch.setenv("QATTN_SPLIT_KV", "0")
        o1, lse1 = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, return_lse=True, **kw)
        monkeypatch.delenv("QATTN_SPLIT_KV")
        assert torch.isfinite(o).all(), kw
        assert (o1.float() - o.float()).abs().max().item() < 2e-2, kw
        fin = torch.isfinite(lse1)
        assert torch.equal(fin, torch.isfinite(lse)), kw
        assert (lse1[fin] - lse[fin]).abs().max().item() < 1e-3, kw
    if page == 0:  # qattn.attention: the same split over plain (batch, seqlen, heads, d) tensors
        kf, vf = kc.nan_to_num(0.0), vc.nan_to_num(0.0)
        monkeypatch.setattr(_attention, "split_keys", lambda *a, **k_: splits)
        o, lse = qattn.attention(q, kf, vf, causal=True, return_lse=True)
        monkeypatch.undo()
        for i in range(b):
            o_ref, l_ref, o_low = reference(q[i], kf[i], vf[i], cap, True, torch.bfloat16)
            err = (o[i].double() - o_ref).abs().max().item()
            assert err <= 2 * (o_low.double() - o_ref).abs().max().item() + 1e-5, (i, err)
            assert torch.allclose(lse[i].double(), l_ref, atol=1e-3, rtol=1e-4), i


@gpu
def test_num_splits_is_honoured_and_changes_nothing_but_the_schedule():
    """attention_with_kvcache(num_splits=N) / flash_attn_with_kvcache(num_splits=N): 1 (no split) and
    5 parts give the fp64 reference's result on a paged cache with ragged counts; a bad value is PY0105."""
    from qattn import _kvcache
    from qattn.errors import SpecError
    g = torch.Generator().manual_seed(11)
    b, hq, hkv, d, cap = 4, 8, 1, 128, 2048
    lens = [cap, 0, 700, 1]
    k, v, kc, vc, table = make_cache(g, b, cap, hkv, d, torch.bfloat16, 64, lens)
    q = torch.randn(b, 1, hq, d, generator=g).to("cuda", torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    seen = []
    real = _kvcache._splits
    _kvcache._splits = lambda *x: seen.append(real(*x)) or seen[-1]
    try:
        for n in (1, 5):
            o, lse = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, causal=True, return_lse=True, num_splits=n)
            check(o, lse, q, k, v, lens, True, torch.bfloat16)
    finally:
        _kvcache._splits = real
    assert seen[0] == 1 and seen[1] in (5, 4)  # (the fold: a divisor of the table's 32 pages)
    for bad in (-1, 1.5, True, 70000):
        with pytest.raises(SpecError):
            qattn.attention_with_kvcache(q, kc, vc, seqlens, table, num_splits=bad)


@gpu
def test_kvcache_cuda_graph_replays_the_eager_result():
    g = torch.Generator().manual_seed(3)
    b, hq, hkv, d, cap = 4, 8, 1, 128, 2048
    lens = [2048, 700, 1, 1500]
    k, v, kc, vc, table = make_cache(g, b, cap, hkv, d, torch.bfloat16, 64, lens)
    q = torch.randn(b, 1, hq, d, generator=g).to("cuda", torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    eager = qattn.attention_with_kvcache(q, kc, vc, seqlens, table)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        qattn.attention_with_kvcache(q, kc, vc, seqlens, table)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = qattn.attention_with_kvcache(q, kc, vc, seqlens, table)
    new = [5, 700, 0, 64]  # new key counts (within the rows the cache holds), the same graph
    seqlens.copy_(torch.tensor(new, dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    check(out, torch.full((b, hq, 1), float("inf"), device="cuda"), q, k, v, new, False, torch.bfloat16, lse_too=False)
    want = qattn.attention_with_kvcache(q, kc, vc, seqlens, table)
    assert torch.equal(out, want)
    seqlens.copy_(torch.tensor(lens, dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_kvcache_argument_checks():
    q = torch.zeros(2, 1, 4, 64)
    cache = torch.zeros(2, 32, 2, 64)
    lens = torch.zeros(2, dtype=torch.int32)
    cases = [
        (dict(q=q[0], k_cache=cache, v_cache=cache, cache_seqlens=lens), "PY0101"),
        (dict(q=q, k_cache=cache, v_cache=cache[:, :16], cache_seqlens=lens), "PY0105"),
        (dict(q=q, k_cache=cache, v_cache=cache, cache_seqlens=lens[:1]), "PY0105"),
        (dict(q=q, k_cache=cache, v_cache=cache, cache_seqlens=lens.float()), "PY0105"),
        (dict(q=q, k_cache=cache[:1], v_cache=cache[:1], cache_seqlens=lens), "PY0105"),
        (dict(q=q, k_cache=cache, v_cache=cache, cache_seqlens=lens, block_table=torch.zeros(3, 2, dtype=torch.int32)),
         "PY0105"),
        (dict(q=q, k_cache=cache, v_cache=cache, cache_seqlens=lens), "PY0103"),  # a CPU tensor
    ]
    for kw, code in cases:
        with pytest.raises(qattn.QattnError) as e:
            qattn.attention_with_kvcache(**kw)
        assert e.value.code == code, (kw.keys(), e.value)


@gpu
@pytest.mark.parametrize("page", [0, 16])
def test_k_new_v_new_are_appended_then_attended(page):
    """attention_with_kvcache(k_new=, v_new=) = writing the rows at each sequence's end, then the call
    with cache_seqlens + new (flash_attn_with_kvcache's semantics); cache_seqlens is not changed;
    rows that would not fit are PY0105."""
    g = torch.Generator(device="cuda").manual_seed(11)
    b, cap, hq, hkv, d, new = 3, 96, 4, 2, 64, 3
    lens = [40, 0, 94]
    _, _, kc, vc, table = make_cache(g, b, cap, hkv, d, torch.bfloat16, page, lens)
    kn = torch.randn(b, new, hkv, d, device="cuda", generator=g).to(torch.bfloat16)
    vn = torch.randn(b, new, hkv, d, device="cuda", generator=g).to(torch.bfloat16)
    q = torch.randn(b, 2, hq, d, device="cuda", generator=g).to(torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    with pytest.raises(qattn.SpecError) as e:  # 94 + 3 > 96 does not fit
        qattn.attention_with_kvcache(q, kc, vc, seqlens, table, k_new=kn, v_new=vn)
    assert e.value.code == "PY0105"
    lens[2] = 60
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    kc2, vc2 = kc.clone(), vc.clone()
    o = qattn.attention_with_kvcache(q, kc, vc, seqlens, table, k_new=kn, v_new=vn, causal=True)
    assert seqlens.tolist() == lens
    for i, n in enumerate(lens):  # the same rows written by hand
        for r in range(new):
            pos = n + r
            if table is None:
                kc2[i, pos], vc2[i, pos] = kn[i, r], vn[i, r]
            else:
                pg = int(table[i, pos // page])
                kc2[pg, pos % page], vc2[pg, pos % page] = kn[i, r], vn[i, r]
    same = lambda a, b: torch.equal(a.nan_to_num(nan=7.0), b.nan_to_num(nan=7.0)) and torch.equal(a.isnan(), b.isnan())  # noqa: E731
    assert same(kc, kc2) and same(vc, vc2)
    want = qattn.attention_with_kvcache(q, kc2, vc2, seqlens + new, table, causal=True)
    assert torch.equal(o, want)
