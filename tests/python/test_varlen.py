"""qattn.attention_varlen and flash_attn_varlen_func on packed ragged batches (docs/python.md,
"Ragged batches") on the GPU: random sequence lengths (an empty sequence, one query, lengths that
cross the 128-row tiles, more keys than queries and fewer), causal / window / none, MHA / GQA, fp16
and bf16, NaN rows in the packed K and V past the last sequence and NaN-filled outputs, against an
fp64 reference per sequence with FlashAttention's rule (error at most twice a same-precision torch
attention's, plus 1e-5); the LSE against the fp64 one; the same tokens padded into a batch give the
same rows; a CUDA graph replays a call with new lengths. The argument checks run on the CPU too.
Needs torch."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU CI installs none)")

import qattn  # noqa: E402
from conftest import gpu_skip_reason  # noqa: E402
from qattn.flash_attn_interface import flash_attn_varlen_func  # noqa: E402

GPU = gpu_skip_reason() is None
gpu = pytest.mark.skipif(not GPU, reason=gpu_skip_reason() or "")


def packed(g, lens_q, lens_k, hq, hkv, d, dt, spare=3, d_v=None):
    """q (total_q + spare, hq, d), k / v (total_k + spare, hkv, d; v d_v wide if given) with NaN in the spare
    rows, and cu_seqlens."""
    cq = torch.tensor([0] + lens_q, dtype=torch.int64).cumsum(0).to(torch.int32)
    ck = torch.tensor([0] + lens_k, dtype=torch.int64).cumsum(0).to(torch.int32)
    tq, tk = int(cq[-1]), int(ck[-1])
    q = torch.randn(tq + spare, hq, d, generator=g).to(dt)
    k = torch.randn(tk + spare, hkv, d, generator=g).to(dt)
    v = torch.randn(tk + spare, hkv, d_v or d, generator=g).to(dt)
    k[tk:] = float("nan")
    v[tk:] = float("nan")
    return q.cuda(), k.cuda(), v.cuda(), cq.cuda(), ck.cuda()


def hidden_keys(sq, sk, causal, window, device):
    """(sq, sk) True where a key is hidden from a query: causal / window aligned bottom-right."""
    i = torch.arange(sq, device=device)[:, None] + sk - sq
    j = torch.arange(sk, device=device)[None, :]
    hidden = torch.zeros(sq, sk, dtype=torch.bool, device=device)
    if causal:
        hidden |= j > i
    if window is not None:
        hidden |= (j < i - window[0]) | (j > i + window[1])
    return hidden


def reference(q, k, v, causal, window, dt):
    """One sequence: (fp64 o, fp64 lse, same-precision o) of q (sq, h, d) over k, v (sk, hkv, d)."""
    sq, h, d = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    hidden = hidden_keys(sq, sk, causal, window, q.device)
    out = []
    for prec in (torch.float64, dt):
        qd = q.to(prec).transpose(0, 1).float() if prec != torch.float64 else q.double().transpose(0, 1)
        kd = k.to(prec).repeat_interleave(h // hkv, 1).transpose(0, 1)
        vd = v.to(prec).repeat_interleave(h // hkv, 1).transpose(0, 1)
        kd, vd = (kd.double(), vd.double()) if prec == torch.float64 else (kd.float(), vd.float())
        s = (qd @ kd.transpose(-1, -2)) * d ** -0.5
        s = s.masked_fill(hidden, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        o = p @ vd if prec == torch.float64 else (p.to(prec).float() @ vd).to(prec)
        out.append((o.transpose(0, 1), lse))
    return out[0][0], out[0][1], out[1][0]


def check(o, lse, q, k, v, cq, ck, causal, window, dt):
    cq, ck = cq.tolist(), ck.tolist()
    for b in range(len(cq) - 1):
        a, e, c, f = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if e == a:
            continue
        ob, lb = o[a:e], lse[:, a:e]
        assert torch.isfinite(ob).all(), f"sequence {b}: non-finite output"
        if f == c:
            assert (ob == 0).all() and torch.isinf(lb).all()
            continue
        o_ref, l_ref, o_low = reference(q[a:e], k[c:f], v[c:f], causal, window, dt)
        err = (ob.double() - o_ref).abs().max().item()
        base = (o_low.double() - o_ref).abs().max().item()
        assert err <= 2 * base + 1e-5, f"sequence {b} ({e - a} queries, {f - c} keys): error {err:.3g} vs torch {base:.3g}"
        fin = torch.isfinite(l_ref)
        assert torch.allclose(lb[fin].double(), l_ref[fin], atol=1e-3, rtol=1e-4), f"sequence {b}: LSE"


CASES = [  # dtype, hq, hkv, d, causal, window, lens_q, lens_k
    (torch.bfloat16, 8, 2, 128, True, None, [300, 0, 1, 129, 1000, 64], None),         # self-attention
    (torch.float16, 4, 4, 64, False, None, [77, 513, 5, 256], [200, 40, 5, 1024]),      # cross lengths
    (torch.bfloat16, 8, 1, 128, True, None, [17, 128, 700], [30, 100, 1500]),           # MQA, causal, sq != sk
    (torch.bfloat16, 4, 2, 128, False, (64, 0), [333, 12, 900], None),                 # sliding window
    (torch.bfloat16, 14, 2, 128, True, None, [1, 300, 1, 45], None),                   # a group of 7: the unpacked kernel
    # 70 sequences, empty ones among them: the Hopper scheduler numbers the live tiles 32 sequences at a time
    (torch.bfloat16, 8, 2, 128, True, None, [0 if i % 9 == 4 else (i * 37) % 301 + 1 for i in range(70)], None),
    (torch.float16, 12, 12, 64, False, None, [(i * 53) % 97 + 1 for i in range(40)], [(i * 29) % 150 for i in range(40)]),
]


@gpu
@pytest.mark.parametrize("d,d_v,causal", [(64, 128, True), (128, 256, False)])
def test_varlen_with_v_wider_than_qk(d, d_v, causal):
    """head_dim_v > head_dim_qk on a ragged batch (issue 20: d_v > d_qk where a model needs it)."""
    lq = [300, 0, 1, 129, 77]
    g = torch.Generator().manual_seed(d_v)
    q, k, v, cq, ck = packed(g, lq, lq, 8, 2, d, torch.bfloat16, d_v=d_v)
    o, lse = qattn.attention_varlen(q, k, v, cq, ck, max(lq), max(lq), causal=causal, return_lse=True)
    torch.cuda.synchronize()
    assert o.shape == (q.shape[0], 8, d_v)
    check(o, lse, q, k, v, cq, ck, causal, None, torch.bfloat16)


@gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{str(c[0])[6:]}_{c[1]}_{c[2]}_d{c[3]}_{'c' if c[4] else 'w' if c[5] else 'n'}_b{len(c[6])}")
def test_varlen_matches_fp64_per_sequence(case):
    dt, hq, hkv, d, causal, window, lq, lk = case
    lk = lk if lk is not None else lq
    g = torch.Generator().manual_seed(len(lq) * 31 + d)
    q, k, v, cq, ck = packed(g, lq, lk, hq, hkv, d, dt)
    o, lse = qattn.attention_varlen(q, k, v, cq, ck, max(lq), max(lk), causal=causal, window=window, return_lse=True)
    torch.cuda.synchronize()
    assert o.shape == (q.shape[0], hq, d) and lse.shape == (hq, q.shape[0])
    check(o, lse, q, k, v, cq, ck, causal, window, dt)
    # flash_attn_varlen_func's arguments give the same rows
    ws = (-1, -1) if window is None else window
    o2, lse2, _ = flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=causal, window_size=ws,
                                         return_attn_probs=True)
    n = int(cq[-1])
    assert torch.equal(o2[:n], o[:n]) and torch.equal(lse2[:, :n], lse[:, :n])


@gpu
def test_varlen_equals_the_padded_batch():
    """The same tokens padded to one length: qattn.attention on the batch gives each sequence's rows."""
    g = torch.Generator().manual_seed(5)
    lens = [256, 256, 256]
    q, k, v, cq, ck = packed(g, lens, lens, 8, 2, 128, torch.bfloat16, spare=0)
    o = qattn.attention_varlen(q, k, v, cq, ck, 256, 256, causal=True)
    ob = qattn.attention(q.view(3, 256, 8, 128), k.view(3, 256, 2, 128), v.view(3, 256, 2, 128), causal=True)
    assert torch.equal(o.view(3, 256, 8, 128), ob)


@gpu
def test_varlen_cuda_graph_replays_with_new_lengths():
    g = torch.Generator().manual_seed(9)
    q, k, v, cq, ck = packed(g, [100, 200, 50], [100, 200, 50], 4, 4, 128, torch.bfloat16, spare=0)
    qattn.attention_varlen(q, k, v, cq, ck, 256, 256, causal=True)  # built and loaded outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = qattn.attention_varlen(q, k, v, cq, ck, 256, 256, causal=True)
    cq.copy_(torch.tensor([0, 30, 250, 350], dtype=torch.int32, device="cuda"))  # new lengths, same total
    ck.copy_(cq)
    graph.replay()
    torch.cuda.synchronize()
    want = qattn.attention_varlen(q, k, v, cq, ck, 256, 256, causal=True)
    assert torch.equal(out, want)


def test_varlen_argument_checks_need_no_gpu():
    q = torch.zeros(10, 4, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(qattn.SpecError) as e:
        qattn.attention_varlen(q[None], q, q, cu, cu, 6, 6)
    assert e.value.code == "PY0101"
    with pytest.raises(qattn.SpecError) as e:
        qattn.attention_varlen(q, q, q, cu, cu[:2], 6, 6)
    assert e.value.code == "PY0105"
    with pytest.raises(qattn.SpecError) as e:
        qattn.attention_varlen(q, q, q, cu, cu, -1, 6)
    assert e.value.code == "PY0105"
    with pytest.raises(qattn.SpecError) as e:
        qattn.attention_varlen(q, q[:, :3], q[:, :3], cu, cu, 6, 6)
    assert e.value.code == "PY0105"
    with pytest.raises(qattn.DeviceError) as e:
        qattn.attention_varlen(q, q, q, cu, cu, 6, 6)
    assert e.value.code == "PY0103"


def test_varlen_kernel_spec():
    s = qattn.kernel_spec("bf16", 128, 128, {"mask": {"kind": "causal"}}, True, "h100", varlen=True)
    assert s["varlen"] is True and s["name"].endswith("_varlen") and "kv_cache" not in s
    assert "varlen" not in qattn.kernel_spec("bf16", 128, 128, {"mask": {"kind": "causal"}}, True, "h100")


def check_causal_rows(o, lse, a, e, q, k, v, dt, what):
    """Packed rows a..e of o (total_q, h, d) and lse (h, total_q): one sequence's causal queries over its
    keys k, v, against fp64 (FlashAttention's rule: at most twice a same-precision torch attention's
    error, plus 1e-5) and the fp64 LSE."""
    o_ref, l_ref, o_low = reference(q[a:e], k, v, True, None, dt)
    err = (o[a:e].double() - o_ref).abs().max().item()
    base = (o_low.double() - o_ref).abs().max().item()
    assert err <= 2 * base + 1e-5, f"{what}: error {err:.3g} vs torch {base:.3g}"
    fin = torch.isfinite(l_ref)
    assert torch.allclose(lse[:, a:e][fin].double(), l_ref[fin], atol=1e-3, rtol=1e-4)


def call_over_cache(g, lq, lk, cap, hq, hkv, d, dt, page, spare=0):
    """attention_varlen (causal, with its LSE) of fresh packed queries, lq per sequence (`spare` NaN rows
    past the last), over a fresh cache holding lk keys per sequence (qattn._kvcache_check.make_cache:
    NaN wherever no key is; paged unless page is 0). Returns (k, v, k_cache, v_cache, block_table,
    cu_seqlens_q, q, o, lse), synchronised."""
    from qattn._kvcache_check import make_cache
    k, v, kc, vc, table = make_cache(len(lq), cap, hkv, d, d, dt, page, lk, g)
    cq = torch.tensor([0] + lq, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
    q = torch.randn(int(cq[-1]) + spare, hq, d, device="cuda", generator=g).to(dt)
    if spare:
        q[-spare:] = float("nan")
    lens = torch.tensor(lk, dtype=torch.int32, device="cuda")
    o, lse = qattn.attention_varlen(q, kc, vc, cq, None, max(lq), cap, causal=True, return_lse=True, cache_seqlens=lens,
                                    block_table=table)
    torch.cuda.synchronize()
    return k, v, kc, vc, table, cq, q, o, lse


@gpu
@pytest.mark.parametrize("page", [0, 16, 64])
def test_varlen_queries_over_a_kv_cache(page):
    """Chunked prefill: packed queries (the last lens_q positions of each sequence) over a KV cache,
    contiguous or paged (NaN wherever no key is, pages in random order), causal; each sequence
    against fp64; flash_attn_varlen_func(block_table=...) gives the same rows."""
    g = torch.Generator(device="cuda").manual_seed(13 + page)
    lq, lk, cap, hq, hkv, d, dt = [5, 0, 1, 200, 33], [300, 0, 40, 200, 33], 320, 8, 2, 128, torch.bfloat16
    k, v, kc, vc, table, cq, q, o, lse = call_over_cache(g, lq, lk, cap, hq, hkv, d, dt, page)
    cql = cq.tolist()
    for b, n in enumerate(lk):
        a, e = cql[b], cql[b + 1]
        if e == a:
            continue
        if n == 0:
            assert (o[a:e] == 0).all() and torch.isinf(lse[:, a:e]).all()
            continue
        check_causal_rows(o, lse, a, e, q, k[b, :n], v[b, :n], dt, f"sequence {b}")
    if table is not None:
        ck = torch.tensor([0] + lk, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
        o2 = flash_attn_varlen_func(q, kc, vc, cq, ck, max(lq), cap, causal=True, block_table=table)
        assert torch.equal(o2, o)


@gpu
@pytest.mark.parametrize("lq,page", [([2, 1, 2, 2], 16), ([1, 0, 1], 0), ([3, 3, 1, 3, 2], 64)])
def test_varlen_over_a_cache_with_a_static_query_buffer(lq, page):
    """A serving engine's fixed-size query buffer (CUDA graphs): q holds batch x max_seqlen_q rows, its
    spare rows exactly the ones the shorter sequences leave, so the row count alone looks like equal
    sequences; the counts on the device say otherwise. Every sequence against fp64 (its queries the
    last of its keys), GQA 32/8 and MQA 16/1 (on Hopper: the ragged kernel on the decoding tile)."""
    for hq, hkv in ((32, 8), (16, 1)):
        g = torch.Generator(device="cuda").manual_seed(len(lq) + page + hkv)
        lk, cap, d, dt = [3000, 500, 20, 8000, 64][:len(lq)], 8192, 128, torch.bfloat16
        spare = len(lq) * max(lq) - sum(lq)
        k, v, kc, vc, table, cq, q, o, lse = call_over_cache(g, lq, lk, cap, hq, hkv, d, dt, page, spare=spare)
        assert int(q.shape[0]) == len(lq) * max(lq)
        cql = cq.tolist()
        for b, n in enumerate(lk):
            a, e = cql[b], cql[b + 1]
            if e > a:
                check_causal_rows(o, lse, a, e, q, k[b, :n], v[b, :n], dt, f"{hq}/{hkv}: sequence {b} ({e - a} of "
                                  f"{max(lq)} queries, {n} keys)")


def slot_reference(q, k_cache, v_cache, lens, block_table=None, *, causal=False, window=None, scale=None, softcap=None,
                   return_lse=False):
    """attention_with_kvcache's meaning in fp64 on the CPU (contiguous cache): batch entry b's sq queries
    the last of its lens[b] keys (bottom-right causal, `reference`); a row that sees no key gets O 0,
    LSE -inf."""
    b, sq, hq, _ = q.shape
    o = torch.zeros(b, sq, hq, v_cache.shape[3], dtype=torch.float64)
    lse = torch.full((b, hq, sq), float("-inf"), dtype=torch.float64)
    for i in range(b):
        n = int(lens[i])
        o[i], lse[i], _ = reference(q[i], k_cache[i, :n], v_cache[i, :n], True, None, torch.float64)
    return (o, lse) if return_lse else o


@pytest.mark.parametrize("lq,sq", [([1, 0, 1, 1], 1), ([2, 1, 2, 2], 2), ([3, 3, 1, 3, 2], 3), ([3, 3, 3], 3)])
def test_slots_path_before_hopper_keeps_every_sequence_exact(lq, sq, monkeypatch):
    """_varlen._in_slots (short ragged queries over a KV cache before Hopper: the batched call on the
    sequences' queries gathered into right-aligned slots of sq rows, then each packed row taken back
    from its slot), with the batched call replaced by its fp64 meaning on the CPU: every sequence's
    rows and LSE equal that call on the sequence alone, for equal lengths and for a fixed-size buffer
    whose spare rows make up the shorter sequences (lengths 0 included)."""
    from qattn import _kvcache, _varlen
    monkeypatch.setattr(_kvcache, "attention_with_kvcache", slot_reference)
    g = torch.Generator().manual_seed(sum(lq) + sq)
    bsz, hq, hkv, d, cap = len(lq), 4, 2, 16, 40
    lk = [30, 5, 1, 40, 12][:bsz]
    q = torch.randn(bsz * sq, hq, d, generator=g, dtype=torch.float64)
    kc = torch.randn(bsz, cap, hkv, d, generator=g, dtype=torch.float64)
    vc = torch.randn(bsz, cap, hkv, d, generator=g, dtype=torch.float64)
    cq = torch.tensor([0] + lq).cumsum(0).to(torch.int32)
    lens = torch.tensor(lk, dtype=torch.int32)
    o, lse = _varlen._in_slots(torch, q, kc, vc, cq, bsz, sq, lens, None, True, None, None, None, True)
    assert o.shape == (bsz * sq, hq, d) and lse.shape == (hq, bsz * sq)
    for b in range(bsz):
        a, e = int(cq[b]), int(cq[b + 1])
        if e == a:
            continue
        want_o, want_l = slot_reference(q[a:e][None], kc[b:b + 1], vc[b:b + 1], lens[b:b + 1], causal=True, return_lse=True)
        assert torch.allclose(o[a:e], want_o[0], atol=1e-12), b
        assert torch.equal(torch.isinf(lse[:, a:e]), torch.isinf(want_l[0])), b
        fin = torch.isfinite(want_l[0])
        assert torch.allclose(lse[:, a:e][fin], want_l[0][fin], atol=1e-12), b


def test_slots_path_clamps_hostile_counts(monkeypatch):
    """The slots path's gathers with counts past q, decreasing and negative: every index clamped into
    q and the slots (no error, nothing read outside them), the outputs q's shape."""
    from qattn import _kvcache, _varlen
    seen = []

    def batched(q, *a, **k):
        seen.append(q.shape)
        return slot_reference(q, *a, **k)
    monkeypatch.setattr(_kvcache, "attention_with_kvcache", batched)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(4, 2, 8, generator=g, dtype=torch.float64)
    kc, vc = (torch.randn(4, 9, 1, 8, generator=g, dtype=torch.float64) for _ in range(2))
    for cq in ([0, 10 ** 9, -5, 2, 3], [0, 3, 2, 1, 0], [-7, -7, 4, 4, 2 ** 31 - 1]):
        o, lse = _varlen._in_slots(torch, q, kc, vc, torch.tensor(cq, dtype=torch.int32), 4, 1,
                                   torch.full((4,), 9, dtype=torch.int32), None, True, None, None, None, True)
        assert o.shape == (4, 2, 8) and lse.shape == (2, 4) and seen[-1] == (4, 1, 2, 8)


@gpu
@pytest.mark.parametrize("hq,hkv,page", [(32, 8, 16), (16, 1, 64), (64, 8, 0)])
def test_varlen_serving_step_mixes_decoding_and_prefill_chunks(hq, hkv, page):
    """A continuous-batching step (flash_attn_varlen_func with a block table): decoding sequences of
    one query and prefill chunks over a KV cache, an empty sequence and one query over one key among
    them; on Hopper a kv head's query heads share one packed tile of each sequence (GQA packing of
    ragged sequences, docs/tl.md "Ragged batches"). Each sequence against fp64, the empty one unwritten."""
    g = torch.Generator(device="cuda").manual_seed(hq + page)
    lq = [1, 1, 77, 1, 0, 1, 130, 1, 1, 3]
    lk = [900, 1, 300, 64, 50, 1300, 130, 17, 640, 200]
    cap, d, dt = 1344, 128, torch.bfloat16
    k, v, kc, vc, table, cq, q, o, lse = call_over_cache(g, lq, lk, cap, hq, hkv, d, dt, page, spare=2)
    cql = cq.tolist()
    for b, n in enumerate(lk):
        a, e = cql[b], cql[b + 1]
        if e > a:
            check_causal_rows(o, lse, a, e, q, k[b, :n], v[b, :n], dt, f"sequence {b} ({e - a} queries, {n} keys)")
    assert torch.isfinite(o[:cql[-1]]).all()


@gpu
def test_varlen_serving_step_of_many_sequences_over_pages():
    """A serving step of 75 sequences (decoding ones, three prefill chunks, an empty one) over pages of
    16: the Hopper scheduler's live-tile numbering crosses its 32-sequence windows (a chunk's tiles
    and the decoding sequences' single tiles, every other tile of the Grid dead), with the paged
    kernel's several producer warps; each sequence against fp64, then the same call again (the tile
    counter reset between launches) bit-identical."""
    g = torch.Generator(device="cuda").manual_seed(75)
    lq = [1] * 75
    lq[3], lq[40], lq[70], lq[33] = 200, 97, 350, 0
    lk = [max(lq[b], (b * 97) % 700 + 1) for b in range(75)]
    cap, hq, hkv, d, dt = 704, 32, 8, 128, torch.bfloat16
    k, v, kc, vc, table, cq, q, o, lse = call_over_cache(g, lq, lk, cap, hq, hkv, d, dt, 16)
    cql = cq.tolist()
    for b, n in enumerate(lk):
        a, e = cql[b], cql[b + 1]
        if e > a:
            check_causal_rows(o, lse, a, e, q, k[b, :n], v[b, :n], dt, f"sequence {b} ({e - a} queries, {n} keys)")
    lens = torch.tensor(lk, dtype=torch.int32, device="cuda")
    o2 = qattn.attention_varlen(q, kc, vc, cq, None, max(lq), cap, causal=True, cache_seqlens=lens, block_table=table)
    assert torch.equal(o2, o)


@gpu
@pytest.mark.parametrize("hq,hkv,page", [(16, 1, 64), (32, 8, 16), (8, 8, 0)])
def test_varlen_over_a_cache_splits_the_keys_of_few_long_sequences(hq, hkv, page, monkeypatch):
    """A serving step of a few long sequences (decoding beside a prefill chunk) leaves SMs idle: on
    Hopper the kernel splits the keys in its TL (the parts of ragged rows, docs/tl.md "Ragged
    batches"; _varlen.ragged_splits) and the combine merges them. Each sequence against fp64, and the
    split call against the same call unsplit (QATTN_SPLIT_KV=0); MHA takes the unpacked kernel."""
    from qattn import _varlen
    g = torch.Generator(device="cuda").manual_seed(7 + hq + page)
    lq, lk, cap, d, dt = [1, 1, 3, 0, 40], [9000, 70, 16000, 20, 4000], 16384, 128, torch.bfloat16
    seen, real = [], _varlen.ragged_splits
    monkeypatch.setattr(_varlen, "ragged_splits", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    k, v, kc, vc, table, cq, q, o, lse = call_over_cache(g, lq, lk, cap, hq, hkv, d, dt, page)
    assert seen and seen[-1] > 1, seen
    cql = cq.tolist()
    for b, n in enumerate(lk):
        a, e = cql[b], cql[b + 1]
        if e > a:
            check_causal_rows(o, lse, a, e, q, k[b, :n], v[b, :n], dt, f"sequence {b} ({e - a} queries, {n} keys)")
    monkeypatch.setenv("QATTN_SPLIT_KV", "0")
    lens = torch.tensor(lk, dtype=torch.int32, device="cuda")
    o1, lse1 = qattn.attention_varlen(q, kc, vc, cq, None, max(lq), cap, causal=True, return_lse=True, cache_seqlens=lens,
                                      block_table=table)
    assert seen[-1] == 1
    assert (o.float() - o1.float()).abs().max().item() < 2e-2
    assert torch.allclose(lse, lse1, atol=1e-3, rtol=1e-4)


@gpu
def test_varlen_check_merges_the_parts_of_a_split_kernel():
    """qattn generate's GPU check of the ragged kernel that splits the keys over a paged cache
    (qattn._varlen_check, used by qattn.verify) launches it with 1, 3 and 7 parts and checks their
    fp64 LSE merge per sequence; a launch that writes one part while the check merges three fails
    (the other parts stay NaN)."""
    import copy

    from qattn import _abi, _attention, _varlen_check
    from qattn._variants import split_launch_args, variant_fields
    fields, _ = split_launch_args(variant_fields(True, None, None))
    dev = torch.device("cuda")
    lib = _attention._build_for(torch, "bf16", 128, 128, fields, True, dev, kv_cache="paged", varlen=True, split=True).library
    kern = _abi.Kernel(lib.path)
    assert kern.info.get("splits") and "varlen" in kern.info
    g = torch.Generator(device="cuda").manual_seed(5)
    out = _varlen_check.check_library(kern, g)
    assert all(ok for _, ok, _ in out), out
    names = " | ".join(n for n, _, _ in out)
    assert "3 parts" in names and "7 parts" in names, names
    one_part = copy.copy(kern)
    one_part.info = {k: v for k, v in kern.info.items() if k != "splits"}  # p.splits stays 1: parts 1, 2 unwritten
    ok, detail = _varlen_check.run_cache_case(one_part, _varlen_check.CACHE_CASES[0], 16, g, parts=3)
    assert not ok, detail


@gpu
@pytest.mark.parametrize("sq,page", [(1, 0), (1, 16), (3, 64)])
def test_short_varlen_over_a_cache_takes_the_decoding_tile(sq, page, monkeypatch):
    """Decoding (and speculative decoding) through attention_varlen / flash_attn_varlen_func over a KV
    cache: sq queries in every sequence, so each sequence's packed rows fit one 64-row tile and the
    ragged kernel is the decoding tile's (BM 64, one consumer warpgroup; spec `_dec` / `_dec1`), on
    long caches (up to 20k keys, 4 sequences, GQA 32/8, MQA 16/1, MHA 8/8): o and lse against fp64 per
    sequence, and equal within tolerance to attention_with_kvcache on q viewed as (batch, sq, heads, d)."""
    from qattn import _attention, _kvcache_check
    names = []
    real = _attention._build_for

    def build_for(*a, **kw):
        b = real(*a, **kw)
        names.append(b.spec["name"])
        return b
    monkeypatch.setattr(_attention, "_build_for", build_for)
    for hq, hkv in ((32, 8), (16, 1), (8, 8)):
        g = torch.Generator(device="cuda").manual_seed(hq + sq + page)
        lk, cap, d, dt = [20000, 1, 777, 9000], 20480, 128, torch.bfloat16
        k, v, kc, vc, table = _kvcache_check.make_cache(len(lk), cap, hkv, d, d, dt, page, lk, g)
        cq = torch.arange(len(lk) + 1, dtype=torch.int32, device="cuda") * sq
        q = torch.randn(len(lk) * sq, hq, d, device="cuda", generator=g).to(dt)
        lens = torch.tensor(lk, dtype=torch.int32, device="cuda")
        n0 = len(names)
        o, lse = qattn.attention_varlen(q, kc, vc, cq, None, sq, cap, causal=True, return_lse=True, cache_seqlens=lens,
                                        block_table=table)
        assert len(names) == n0 + 1 and "_varlen" in names[-1] and ("_dec_" in names[-1] or "_dec1_" in names[-1]), \
            names[n0:]
        o_b, lse_b = qattn.attention_with_kvcache(q.view(len(lk), sq, hq, d), kc, vc, lens, table, causal=True,
                                                  return_lse=True)
        torch.cuda.synchronize()
        for b, n in enumerate(lk):
            a, e = b * sq, (b + 1) * sq
            check_causal_rows(o, lse, a, e, q, k[b, :n], v[b, :n], dt, f"{hq}/{hkv} sequence {b} ({n} keys)")
        assert (o.float() - o_b.view(o.shape).float()).abs().max().item() < 2e-2
        lse_b = lse_b.permute(1, 0, 2).reshape(hq, -1)
        fin = torch.isfinite(lse_b)
        assert torch.equal(fin, torch.isfinite(lse)) and torch.allclose(lse[fin], lse_b[fin], atol=1e-3, rtol=1e-4)
    if page:
        ck = torch.tensor([0] + lk, dtype=torch.int64).cumsum(0).to("cuda", torch.int32)
        o2 = flash_attn_varlen_func(q, kc, vc, cq, ck, sq, cap, causal=True, block_table=table)
        assert (o2.float() - o.float()).abs().max().item() < 2e-2


@gpu
def test_varlen_hostile_counts_are_clamped_not_faulted():
    """attention_varlen does not read cu_seqlens on the host: counts past the packed tensors, a
    decreasing and a negative entry are clamped by the kernel (nothing read or written outside
    q / k / v / o: the CUDA context stays usable), and the sequences before them are still right."""
    g = torch.Generator().manual_seed(21)
    q, k, v, cq, ck = packed(g, [100, 60], [100, 60], 4, 2, 128, torch.bfloat16, spare=0)
    o_ok = qattn.attention_varlen(q, k, v, cq, ck, 100, 100, causal=True)
    bad = torch.tensor([0, 100, 10 ** 9, 50, -7], dtype=torch.int32, device="cuda")  # past, decreasing, negative
    o = qattn.attention_varlen(q, k, v, bad, bad, 100, 100, causal=True)
    torch.cuda.synchronize()  # a fault would surface here
    assert torch.equal(o[:100], o_ok[:100])  # sequence 0 is untouched by the hostile entries after it
    assert (torch.ones(4, device="cuda") * 2).sum().item() == 8.0  # the context still works


def grads_reference(q, k, v, do, causal, window, softcap, prec):
    """One sequence's (dq, dk, dv) by autograd of attention in `prec` (fp64 reference or the dtype's
    own rounding: q, k, v and P rounded to it), bottom-right aligned masks."""
    sq, h, d = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    hidden = hidden_keys(sq, sk, causal, window, q.device)
    work = torch.float64 if prec == torch.float64 else torch.float32
    qd, kd, vd = (t.detach().to(prec).to(work).requires_grad_() for t in (q, k, v))
    kr, vr = (t.repeat_interleave(h // hkv, 1).transpose(0, 1) for t in (kd, vd))
    s = (qd.transpose(0, 1) @ kr.transpose(-1, -2)) * d ** -0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    p = torch.softmax(s.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0)
    if prec != torch.float64:
        p = p.to(prec).to(work)
    o = (p @ vr).transpose(0, 1)
    grads = torch.autograd.grad(o, (qd, kd, vd), do.to(work))
    return grads if prec == torch.float64 else tuple(x.to(prec) for x in grads)  # returned in the dtype


@gpu
@pytest.mark.parametrize("case", [
    # lens_q, lens_k, hq, hkv, d, causal, window, softcap, dtype
    ([130, 1, 0, 257], [130, 1, 0, 257], 4, 2, 64, True, None, None, torch.bfloat16),
    ([77, 300, 64], [77, 300, 64], 4, 4, 128, True, None, 20.0, torch.float16),
    ([200, 129], [200, 129], 4, 1, 64, False, (48, 0), None, torch.bfloat16),
    ([33, 190, 5], [100, 64, 260], 4, 2, 64, False, None, None, torch.bfloat16),
])
def test_varlen_gradients_match_fp64_per_sequence(case):
    """attention_varlen under autograd: dQ, dK, dV of every sequence against fp64 autograd of that
    sequence alone by FlashAttention's rule (error <= 2x the same-precision torch attention's + 1e-4
    x max |ref|); the spare rows past the last sequence get zero gradients (K / V NaN there stay
    unread); flash_attn_varlen_func differentiates the same way. Causal with different packings of
    queries and keys is refused (PY0109)."""
    lens_q, lens_k, hq, hkv, d, causal, window, softcap, dt = case
    g = torch.Generator().manual_seed(sum(lens_q) + d)
    q, k, v, cq, ck = packed(g, lens_q, lens_k, hq, hkv, d, dt)
    k, v = k.nan_to_num(0.0), v.nan_to_num(0.0)  # leaves that require grad (the spare rows zero)
    same = lens_q == lens_k
    cu_k = cq if same else ck
    do = torch.randn(q.shape, generator=g).to(dt).cuda()
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    o = qattn.attention_varlen(qg, kg, vg, cq, cu_k, max(lens_q), max(lens_k), causal=causal, window=window,
                               softcap=softcap)
    dq, dk, dv = torch.autograd.grad(o, (qg, kg, vg), do)
    for b in range(len(lens_q)):
        rq = slice(int(cq[b]), int(cq[b + 1]))
        rk = slice(int(cu_k[b]), int(cu_k[b + 1]))
        if rq.start == rq.stop:
            continue
        ref = grads_reference(q[rq], k[rk], v[rk], do[rq], causal, window, softcap, torch.float64)
        own = grads_reference(q[rq], k[rk], v[rk], do[rq], causal, window, softcap, dt)
        for name, got, r, t in zip(("dq", "dk", "dv"), (dq[rq], dk[rk], dv[rk]), ref, own):
            err = (got.double() - r).abs().max().item()
            bound = 2 * (t.double() - r).abs().max().item() + 1e-4 * max(1.0, r.abs().max().item())
            assert err <= bound, (b, name, err, bound)
    assert dq[int(cq[-1]):].abs().max().item() == 0 and dk[int(cu_k[-1]):].abs().max().item() == 0
    fq, fk, fv = (t.clone().requires_grad_() for t in (q, k, v))
    fo = flash_attn_varlen_func(fq, fk, fv, cq, cu_k, max(lens_q), max(lens_k), causal=causal,
                                window_size=window if window is not None else (-1, -1), softcap=softcap or 0.0)
    fgrads = torch.autograd.grad(fo, (fq, fk, fv), do)
    for a, b_ in zip(fgrads, (dq, dk, dv)):  # the same kernels (dQ's fp32 atomics add in any order)
        assert torch.allclose(a.float(), b_.float(), rtol=1e-2, atol=1e-3)
    if not same:
        return
    other = torch.tensor([0] + lens_q[::-1], dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
    if not torch.equal(other, cq):
        with pytest.raises(qattn.QattnError) as e:
            qattn.attention_varlen(qg, kg, vg, cq, other, max(lens_q), max(lens_k), causal=True)
        assert e.value.code == "PY0109"
