"""qattn.flash_attn_interface against FlashAttention's documented semantics, computed here per
sequence in fp64 (causal and windows aligned to each sequence's last key, ALiBi -slope * |i + sk - sq
- j|, softcap, empty rows 0 / -inf). On the CPU, qattn.attention is replaced by an fp32 stand-in
(attention_standin.py) so that the interface's own work (packing, segment ids, the cache writes,
the one-call / per-sequence choice) is what is tested; where a GPU is present the same tests also
run on the real kernels (bf16, with FlashAttention's tolerance rule). Needs torch (skipped in the
CPU CI, which installs none)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU CI installs none)")

import qattn  # noqa: E402
from qattn import _attention  # noqa: E402
from qattn import flash_attn_interface as fai  # noqa: E402
from attention_standin import kvcache_standin, standin, varlen_standin  # noqa: E402
from conftest import gpu_skip_reason  # noqa: E402

GPU = gpu_skip_reason() is None
MODES = ["standin"] + (["gpu"] if GPU else [])


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    if request.param == "standin":
        monkeypatch.setattr(_attention, "attention", standin)
        monkeypatch.setattr(fai, "attention_with_kvcache", kvcache_standin)
        monkeypatch.setattr(fai, "attention_varlen", varlen_standin)
    return request.param


def dev_dtype(mode):
    return ("cuda", torch.bfloat16) if mode == "gpu" else ("cpu", torch.float32)


def ref_one(q, k, v, causal, window, softcap, slopes, scale):
    """One sequence: q (sq, h, d), k/v (sk, hkv, d) -> out (sq, h, dv) fp64, lse (h, sq)."""
    sq, h, d = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    qd, kd, vd = q.double(), k.double().repeat_interleave(h // hkv, 1), v.double().repeat_interleave(h // hkv, 1)
    s = torch.einsum("qhd,khd->hqk", qd, kd) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None] + sk - sq
    j = torch.arange(sk, device=q.device)[None, :]
    if slopes is not None:
        s = s - slopes.double()[:, None, None] * (i - j).abs()
    vis = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    left, right = window
    if causal:
        right = 0
    if left >= 0:
        vis &= j >= i - left
    if right >= 0:
        vis &= j <= i + right
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", p, vd), lse


def close(got, want, mode):
    err = (got.double() - want).abs().max().item() if got.numel() else 0.0
    assert err < (2e-2 if mode == "gpu" else 1e-4), err


def test_flash_attn_func(mode):
    dev, dt = dev_dtype(mode)
    g = torch.Generator().manual_seed(0)
    for b, sq, sk, h, hkv, causal, window, softcap, alibi in (
            (2, 77, 77, 4, 2, True, (-1, -1), 0.0, False), (1, 40, 130, 4, 1, True, (-1, -1), 0.0, False),
            (2, 65, 65, 4, 4, False, (16, 3), 0.0, False), (1, 90, 90, 4, 2, True, (20, -1), 30.0, False),
            (2, 50, 50, 4, 4, True, (-1, -1), 0.0, True)):
        q = torch.randn(b, sq, h, 64, generator=g).to(dev, dt)
        k, v = (torch.randn(b, sk, hkv, 64, generator=g).to(dev, dt) for _ in range(2))
        slopes = (torch.rand(b, h, generator=g) * 0.2).to(dev) if alibi else None
        out, lse, probs = fai.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                              alibi_slopes=slopes, return_attn_probs=True)
        assert probs is None and out.shape == (b, sq, h, 64) and lse.shape == (b, h, sq)
        for i in range(b):
            o_r, l_r = ref_one(q[i], k[i], v[i], causal, window, softcap, slopes[i] if alibi else None, 64 ** -0.5)
            close(out[i], o_r, mode)
            close(lse[i], l_r, mode)


@pytest.mark.parametrize("same_lengths", [True, False])
def test_flash_attn_varlen_func(mode, same_lengths, monkeypatch):
    dev, dt = dev_dtype(mode)
    g = torch.Generator().manual_seed(1)
    lens_q = [37, 0, 64, 5, 100]
    lens_k = lens_q if same_lengths else [50, 3, 64, 0, 130]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device=dev)
    calls, varlen_calls = [], []
    real, real_varlen = _attention.attention, fai.attention_varlen
    monkeypatch.setattr(_attention, "attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    monkeypatch.setattr(fai, "attention_varlen", lambda *a, **kw: varlen_calls.append(1) or real_varlen(*a, **kw))
    for causal, window, softcap, alibi in ((True, (-1, -1), 0.0, False), (False, (-1, -1), 0.0, False),
                                           (False, (8, 8), 0.0, False), (True, (-1, -1), 20.0, False),
                                           (True, (-1, -1), 0.0, True), (False, (-1, -1), 0.0, True)):
        q = torch.randn(sum(lens_q), 4, 64, generator=g).to(dev, dt)
        k, v = (torch.randn(sum(lens_k), 2, 64, generator=g).to(dev, dt) for _ in range(2))
        slopes = (torch.rand(4, generator=g) * 0.2).to(dev) if alibi else None
        calls.clear()
        varlen_calls.clear()
        out, lse, _ = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                                 window_size=window, softcap=softcap, alibi_slopes=slopes,
                                                 return_attn_probs=True)
        if not alibi:
            assert (len(calls), len(varlen_calls)) == (0, 1)  # one launch of the ragged-batch kernel
        else:  # ALiBi: one packed row with the document mask, or one call per sequence when the ends differ
            per_seq = sum(1 for a, b in zip(lens_q, lens_k) if a and b)
            assert (len(calls), len(varlen_calls)) == (1 if same_lengths else per_seq, 0)
        assert out.shape == (sum(lens_q), 4, 64) and lse.shape == (4, sum(lens_q))
        for i in range(len(lens_q)):
            a, b, c, d = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
            if b == a:
                continue
            o_r, l_r = ref_one(q[a:b], k[c:d], v[c:d], causal, window, softcap, slopes, 64 ** -0.5)
            close(out[a:b], o_r, mode)
            if d > c:
                close(lse[:, a:b], l_r, mode)
            else:
                assert torch.isinf(lse[:, a:b]).all() and (out[a:b] == 0).all()


def test_flash_attn_with_kvcache(mode):
    dev, dt = dev_dtype(mode)
    g = torch.Generator().manual_seed(2)
    b, s_cache, h, hkv = 3, 96, 4, 2
    for lens, new, sq, causal, window in (([40, 40, 40], 1, 1, True, (-1, -1)), ([10, 70, 33], 1, 1, True, (-1, -1)),
                                          ([10, 70, 33], 0, 1, False, (-1, -1)), ([10, 70, 33], 4, 4, True, (-1, -1)),
                                          ([30, 50, 20], 1, 1, True, (8, 0))):
        k_cache, v_cache = (torch.randn(b, s_cache, hkv, 64, generator=g).to(dev, dt) for _ in range(2))
        q = torch.randn(b, sq, h, 64, generator=g).to(dev, dt)
        kn, vn = ((torch.randn(b, new, hkv, 64, generator=g).to(dev, dt) for _ in range(2)) if new else (None, None))
        seqlens = torch.tensor(lens, dtype=torch.int32, device=dev)
        kc0, vc0 = k_cache.clone(), v_cache.clone()
        out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, k=kn, v=vn, cache_seqlens=seqlens, causal=causal,
                                               window_size=window, return_softmax_lse=True)
        for i in range(b):
            n = lens[i] + new
            if new:
                assert torch.equal(k_cache[i, lens[i]:n], kn[i]) and torch.equal(v_cache[i, lens[i]:n], vn[i])
            assert torch.equal(k_cache[i, n:], kc0[i, n:]) and torch.equal(k_cache[i, :lens[i]], kc0[i, :lens[i]])
            o_r, l_r = ref_one(q[i], k_cache[i, :n], v_cache[i, :n], causal, window, 0.0, None, 64 ** -0.5)
            close(out[i], o_r, mode)
            close(lse[i], l_r, mode)


def test_flash_attn_with_kvcache_paged(mode):
    """A paged cache: pages out of order, a partial last page, unused pages and rows NaN (they must
    never be read as values), k / v appended through the block table."""
    dev, dt = dev_dtype(mode)
    g = torch.Generator().manual_seed(5)
    b, h, hkv, page, pages = 3, 4, 1, 16, 5
    for lens, new, sq, causal in (([40, 0, 77], 1, 1, True), ([33, 70, 16], 0, 1, False), ([10, 50, 63], 4, 4, True)):
        num = b * pages + 2
        k_cache = torch.full((num, page, hkv, 64), float("nan")).to(dev, dt)
        v_cache = k_cache.clone()
        table = torch.randperm(num, generator=g)[: b * pages].view(b, pages).to(torch.int32).to(dev)
        kk, vv = (torch.randn(b, pages * page, hkv, 64, generator=g).to(dev, dt) for _ in range(2))
        for i in range(b):  # the valid rows of each sequence into its pages
            for r in range(lens[i]):
                k_cache[table[i, r // page], r % page] = kk[i, r]
                v_cache[table[i, r // page], r % page] = vv[i, r]
        q = torch.randn(b, sq, h, 64, generator=g).to(dev, dt)
        kn, vn = ((torch.randn(b, new, hkv, 64, generator=g).to(dev, dt) for _ in range(2)) if new else (None, None))
        seqlens = torch.tensor(lens, dtype=torch.int32, device=dev)
        out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, k=kn, v=vn, cache_seqlens=seqlens, block_table=table,
                                               causal=causal, return_softmax_lse=True)
        for i in range(b):
            n = lens[i] + new
            keys = torch.cat([kk[i, :lens[i]], kn[i]]) if new else kk[i, :n]
            vals = torch.cat([vv[i, :lens[i]], vn[i]]) if new else vv[i, :n]
            if new:  # the appended rows landed in the sequence's pages
                rows = torch.arange(lens[i], n)
                assert torch.equal(k_cache[table[i, rows // page].long(), rows % page], kn[i])
            if n == 0:
                assert (out[i] == 0).all() and torch.isinf(lse[i]).all()
                continue
            o_r, l_r = ref_one(q[i], keys, vals, causal, (-1, -1), 0.0, None, 64 ** -0.5)
            close(out[i], o_r, mode)
            close(lse[i], l_r, mode)


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_deterministic_true_gives_bit_identical_gradients():
    """flash_attn_func(..., deterministic=True) and flash_attn_varlen_func(..., deterministic=True):
    the backward takes the kernel with ordered additions (its Build's spec says so) and 5 backward
    passes give the same bits, without torch.use_deterministic_algorithms."""
    from qattn import _build
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(2, 333, h, 64, device="cuda", generator=g).to(torch.bfloat16).requires_grad_() for h in (4, 2, 2))
    do = torch.randn(2, 333, 4, 64, device="cuda", generator=g).to(torch.bfloat16)
    assert not torch.are_deterministic_algorithms_enabled()
    cu = torch.tensor([0, 100, 333, 666], dtype=torch.int32, device="cuda")
    for call in (lambda: fai.flash_attn_func(q, k, v, causal=True, deterministic=True),
                 lambda: fai.flash_attn_varlen_func(q.view(666, 4, 64), k.view(666, 2, 64), v.view(666, 2, 64), cu, cu, 333,
                                                    333, causal=True, deterministic=True).view(2, 333, 4, 64)):
        o = call()
        runs = [torch.autograd.grad(o, (q, k, v), do, retain_graph=True) for _ in range(5)]
        for r in runs[1:]:
            assert all(torch.equal(a.view(torch.int16), c.view(torch.int16)) for a, c in zip(runs[0], r))
    assert any(b.backward and b.spec.get("deterministic") for b in _build._BUILDS.values())


def test_refusals():
    q = torch.zeros(1, 4, 2, 64)
    for kw, what in ((dict(dropout_p=0.1), "dropout"),):
        with pytest.raises(qattn.QattnError) as e:
            fai.flash_attn_func(q, q, q, **kw)
        assert e.value.code == "PY0903" and what in str(e.value)
    with pytest.raises(qattn.QattnError) as e:
        fai.flash_attn_with_kvcache(q, q, q, block_table=torch.zeros(1, 1, dtype=torch.int32), alibi_slopes=torch.ones(2))
    assert e.value.code == "PY0903" and "paged" in str(e.value)
    with pytest.raises(qattn.QattnError) as e:
        fai.flash_attn_with_kvcache(q, q, q, rotary_cos=torch.zeros(4, 32), rotary_sin=torch.zeros(4, 32))
    assert e.value.code == "PY0903" and "rotary" in str(e.value)
    cu = torch.tensor([0, 3, 2], dtype=torch.int32)
    with pytest.raises(qattn.QattnError) as e:
        fai.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4)
    assert e.value.code == "PY0105"
    with pytest.raises(qattn.QattnError) as e:
        fai.flash_attn_with_kvcache(q, q, q, k=torch.zeros(1, 1, 3, 64), v=torch.zeros(1, 1, 3, 64))
    assert e.value.code == "PY0105"
    with pytest.raises(qattn.QattnError) as e:
        fai.flash_attn_with_kvcache(q[0], q, q)
    assert e.value.code == "PY0101"
    for seqlens in (3, torch.tensor([3], dtype=torch.int32)):  # 3 + 2 new rows do not fit a 4-row cache
        with pytest.raises(qattn.QattnError) as e:
            fai.flash_attn_with_kvcache(q, q, q, k=q[:, :2], v=q[:, :2], cache_seqlens=seqlens)
        assert e.value.code == "PY0105" and "do not fit" in str(e.value)
