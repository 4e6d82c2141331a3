"""The binding on a GPU: qattn.attention() against a torch reference with FlashAttention's tolerance
rule, on random shapes (odd sequence lengths, seqlen_q < and > seqlen_k, one row), MHA / GQA / MQA,
MLA (d_qk 192, d_v 128), causal (both alignments), sliding window, BSHD and BHSD, return_lse, the
current stream, and errors on bad input.

Verdict (as tests/gpu/verify.py and FlashAttention's tests): max |O - ref| <= 2 * max |O_lowp - ref|
+ atol, where ref is attention in fp32 and O_lowp the same computation in the inputs' precision
(S in fp32 from low-precision operands, P rounded to the dtype, P V rounded). Every output buffer is
poisoned (the allocator's block filled with NaN) before the kernel writes it; inputs are fresh
random normals. Skipped (with the reason) without torch, without a CUDA device or without `qattn`.
"""
import math
import os

import pytest

from conftest import gpu_skip_reason
from gpu_kernels import TEST_KERNELS

import qattn

_REASON = gpu_skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
if _REASON is None:
    import torch
    import torch.nn.functional as F


@pytest.fixture(scope="module", autouse=True)
def kernels():
    """Builds the suite's few kernels in parallel up front (cache hits when already built)."""
    return qattn.compile_many(TEST_KERNELS)


# ---- reference --------------------------------------------------------------------------------------

def visible(sq, sk, causal=False, window=None, device="cuda"):
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    off = sk - sq
    if window is not None:
        left, right = window  # -1: unbounded on that side
        return ((j >= i + off - left) | (left < 0)) & ((j <= i + off + right) | (right < 0))
    if causal == "top_left":
        return j <= i
    if causal:
        return j <= i + off
    return torch.ones(sq, sk, dtype=torch.bool, device=device)


def reference(q, k, v, vis, scale, lowp=False, softcap=None, bias=None):
    """q (B,Sq,Hq,D), k/v (B,Sk,Hkv,D) BSHD views -> O (B,Sq,Hq,Dv) fp32, LSE (B,Hq,Sq) fp32.
    bias: added to every scaled score (broadcast to (B,Hq,Sq,Sk)); softcap c: every score s then
    becomes c * tanh(s / c) before the mask; vis broadcasts to (B,Hq,Sq,Sk) too."""
    hq, hkv = q.shape[2], k.shape[2]
    dt = q.dtype
    qd = q.permute(0, 2, 1, 3)
    kd = k.permute(0, 2, 1, 3).repeat_interleave(hq // hkv, dim=1)
    vd = v.permute(0, 2, 1, 3).repeat_interleave(hq // hkv, dim=1)
    if lowp:
        s = (qd @ kd.transpose(-1, -2)).float() * scale
    else:
        s = (qd.float() @ kd.float().transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    if lowp:
        o = (p.to(dt) @ vd).float()
    else:
        o = p @ vd.float()
    return o.permute(0, 2, 1, 3), lse


def max_abs(a, b):
    d = (a - b).abs()
    return d.max().item() if d.numel() else 0.0


def check(o, lse, q, k, v, vis, scale, softcap=None, bias=None):
    """FlashAttention's rule on O (and on LSE when given); q, k, v, o are BSHD views."""
    ref, lse_ref = reference(q, k, v, vis, scale, softcap=softcap, bias=bias)
    low, lse_low = reference(q, k, v, vis, scale, lowp=True, softcap=softcap, bias=bias)
    assert not torch.isnan(o).any(), "NaN in the output (unwritten poisoned rows?)"
    err, base = max_abs(o.float(), ref), max_abs(low, ref)
    atol = 1e-5 * max(1.0, ref.abs().max().item() if ref.numel() else 1.0)
    assert err <= 2 * base + atol, f"max |O - ref| {err:.3e} > 2 * {base:.3e} + {atol:.1e}"
    if lse is not None:
        fin = torch.isfinite(lse_ref)
        assert bool(((lse == float("-inf")) == ~fin).all()), "rows without a visible key must have lse -inf"
        lerr, lbase = max_abs(lse[fin], lse_ref[fin]), max_abs(lse_low[fin], lse_ref[fin])
        assert lerr <= 2 * lbase + 1e-4, f"max |LSE - ref| {lerr:.3e} > 2 * {lbase:.3e} + 1e-4"


def inputs(b, sq, sk, hq, hkv, dqk, dv, dtype, layout, gen):
    def rnd(s, h, d):
        if layout == "bhsd":
            return torch.randn(b, h, s, d, device="cuda", generator=gen).to(dtype)
        return torch.randn(b, s, h, d, device="cuda", generator=gen).to(dtype)
    return rnd(sq, hq, dqk), rnd(sk, hkv, dqk), rnd(sk, hkv, dv)


def bshd(t, layout):
    return t.transpose(1, 2) if layout == "bhsd" else t


def poisoned_call(q, k, v, sq, hq, dv, **kw):
    """attention() with the caching allocator's next block of O's size filled with NaN first."""
    n = q.shape[0] * sq * hq * dv
    if n:
        junk = torch.full((n,), float("nan"), device="cuda", dtype=q.dtype)
        del junk
    return qattn.attention(q, k, v, **kw)


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    return g


# batch, seqlen_q, seqlen_k, heads_q, heads_kv
SHAPES = [
    (1, 1, 1, 1, 1),
    (2, 113, 203, 4, 4),     # odd lengths, seqlen_q < seqlen_k
    (1, 239, 97, 8, 2),      # GQA, seqlen_q > seqlen_k (bottom-right causal: rows with no key)
    (3, 1, 517, 4, 1),       # MQA, one query row (decode-like)
    (2, 1000, 1000, 6, 3),   # GQA
    (1, 2047, 3001, 4, 4),   # longer, odd
    (4, 64, 64, 8, 1),       # MQA
]
LAYOUTS = ["bshd", "bhsd"]


def run_case(shape, layout, dtype, dqk, dv, gen, causal=False, window=None, return_lse=False, scale=None,
             softcap=None):
    b, sq, sk, hq, hkv = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, dqk, dv, dtype, layout, gen)
    kw = dict(softcap=softcap) if softcap else {}
    out = poisoned_call(q, k, v, sq, hq, dv, causal=causal, window=window, return_lse=return_lse,
                        scale=scale, layout=layout, **kw)
    o, lse = out if return_lse else (out, None)
    assert o.dtype == dtype and o.device == q.device
    assert tuple(o.shape) == ((b, hq, sq, dv) if layout == "bhsd" else (b, sq, hq, dv))
    if return_lse:
        assert lse.dtype == torch.float32 and tuple(lse.shape) == (b, hq, sq)
    vis = visible(sq, sk, causal, window)
    check(bshd(o, layout), lse, bshd(q, layout), bshd(k, layout), bshd(v, layout), vis,
          scale if scale is not None else dqk ** -0.5, softcap=softcap)


# ---- numerics --------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_bf16_d128_mha_gqa_mqa(shape, causal, layout, gen):
    run_case(shape, layout, torch.bfloat16, 128, 128, gen, causal=causal)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[2], SHAPES[4], (1, 517, 517, 16, 16)])
def test_mla_192_128_causal(shape, layout, gen):
    run_case(shape, layout, torch.bfloat16, 192, 128, gen, causal=True)


@pytest.mark.parametrize("dqk,dv,causal", [(64, 128, True), (64, 128, False), (128, 256, False), (64, 256, True)])
@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[2], SHAPES[5]])
def test_v_wider_than_qk(shape, dqk, dv, causal, gen):
    """head_dim_v > head_dim_qk (issue 20: "d_v > d_qk where a model needs it"): the wider head dim picks
    the tiles, and on Hopper O stages in a tile of its own (it no longer fits Q's rows)."""
    run_case(shape, "bshd", torch.bfloat16, dqk, dv, gen, causal=causal, return_lse=dv == 128)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_fp16_d64_causal_return_lse(shape, layout, gen):
    run_case(shape, layout, torch.float16, 64, 64, gen, causal=True, return_lse=True)


@pytest.mark.parametrize("shape", SHAPES)
def test_fp16_d64_sliding_window(shape, gen):
    run_case(shape, "bshd", torch.float16, 64, 64, gen, window=(37, 5))


def test_twenty_windows_and_softcaps_build_one_kernel(gen):
    """Issue 21: the window sizes and the softcap are launch arguments. 20 calls with 20 windows
    (unbounded sides included) and 20 caps build ONE kernel; each call matches the reference with
    its own window and cap."""
    from qattn import _build
    before = set(_build._BUILDS)
    shapes = [(1, 300, 517, 4, 2), (2, 129, 129, 2, 2), (1, 517, 300, 4, 1), (1, 1, 777, 4, 4)]
    for i in range(20):
        window = [(16 * i + 1, 0), (i, -1), (-1, i + 3), (3 * i, 2 * i)][i % 4]
        run_case(shapes[i % 4], "bshd", torch.float16, 64, 64, gen, window=window, scale=0.5, softcap=2.0 + 1.5 * i)
    new = [b.spec["name"] for key, b in _build._BUILDS.items() if key not in before]
    assert new == ["py_fp16_d64_window_softcap"], new


def test_kernel_pack_runs_with_no_compiler(tmp_path):
    """Issue 21: a kernel from a pack (qattn.precompile) runs in a process that has no `qattn`
    command: nothing is compiled, the output matches SDPA, no build progress is printed."""
    import subprocess
    import sys
    from gpu_kernels import D128_CAUSAL
    pack = tmp_path / "pack"
    assert qattn.precompile([D128_CAUSAL], str(pack), verbose=False) == 1  # the suite's kernel: a cache hit
    child = (
        "import time, torch, qattn\n"
        "q = torch.randn(2, 333, 8, 128, device='cuda', dtype=torch.bfloat16)\n"
        "k = torch.randn(2, 333, 2, 128, device='cuda', dtype=torch.bfloat16)\n"
        "v = torch.randn(2, 333, 2, 128, device='cuda', dtype=torch.bfloat16)\n"
        "o = qattn.attention(q, k, v, causal=True)\n"
        "r = torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True, enable_gqa=True)\n"
        "b = [x for x in qattn._build._BUILDS.values()][0]\n"
        "print('diff', (o.transpose(1, 2).float() - r.float()).abs().max().item(), 'pack', b.from_pack is not None)\n")
    env = dict(os.environ, QATTN_PACKS=str(pack), QATTN_BIN=str(tmp_path / "none"), QATTN_CACHE_DIR=str(tmp_path / "c"))
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    words = r.stdout.split()
    assert words[words.index("pack") + 1] == "True", r.stdout
    assert float(words[words.index("diff") + 1]) < 2e-2, r.stdout
    assert "building" not in r.stderr and "nvcc" not in r.stderr, r.stderr


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[1], SHAPES[2], SHAPES[4]])
def test_bf16_d128_softcap_return_lse(shape, causal, gen):
    """softcap=c: Gemma 2's tanh soft-capping (a TL Score declaration), LSE included; scale 0.5 so
    that the cap bends the scores (|s| reaches ~15 at d128)."""
    run_case(shape, "bshd", torch.bfloat16, 128, 128, gen, causal=causal, return_lse=True, scale=0.5, softcap=10.0)


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[2], SHAPES[4], SHAPES[5]])
def test_custom_mask_and_score_mod_in_tl(shape, gen):
    """mask_mod / score_mod as TL text: a causal band plus every 16th key ("attention sinks") and a
    score multiplied by 2 (so the kernel with scale s equals the reference with scale 2 s)."""
    b, sq, sk, hq, hkv = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, 64, 64, torch.bfloat16, "bshd", gen)
    mm = "kv_idx <= q_idx + seqlen_k - seqlen_q and (kv_idx >= q_idx + seqlen_k - seqlen_q - 40 or kv_idx % 16 == 0)"
    o = poisoned_call(q, k, v, sq, hq, 64, mask_mod=mm, score_mod="score * 2.0")
    i = torch.arange(sq, device="cuda")[:, None]
    j = torch.arange(sk, device="cuda")[None, :]
    off = sk - sq
    vis = (j <= i + off) & ((j >= i + off - 40) | (j % 16 == 0))
    check(o, None, q, k, v, vis, 2.0 * 64 ** -0.5)


def packed_segments(b, s, gen, docs=4):
    """(b, s) int32 document ids, nondecreasing per row: up to `docs` random cut points per row."""
    cuts = torch.randint(0, max(1, s), (b, docs - 1), device="cuda", generator=gen)
    pos = torch.arange(s, device="cuda")
    return (pos[None, None, :] >= cuts[:, :, None]).sum(1).to(torch.int32)


@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[2], SHAPES[4], SHAPES[5]])
def test_alibi_relative_bias_document_prefix_lm(shape, gen):
    """The spec's shorthands with their auxiliary tensors, against formulas written here from
    docs/spec.md: ALiBi slopes, a T5-style bucket table, document masking of packed sequences
    (self-attention: seg_k = seg_q's ids when the lengths agree), and prefix-LM."""
    b, sq, sk, hq, hkv = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, 64, 64, torch.bfloat16, "bshd", gen)
    scale = 64 ** -0.5
    i = torch.arange(sq, device="cuda")[:, None]
    j = torch.arange(sk, device="cuda")[None, :]
    off = sk - sq
    slopes = torch.rand(hq, device="cuda", generator=gen) * 0.2
    nb = 32
    table = torch.randn(hq, nb, device="cuda", generator=gen)
    seg_q, seg_k = packed_segments(b, sq, gen), packed_segments(b, sk, gen)
    dist = (i + off - j).abs().float()
    alibi_bias = -slopes[None, :, None, None] * dist[None, None]
    bucket = (j - i - off).clamp(-nb // 2, nb // 2 - 1) + nb // 2
    rel = table[:, bucket][None]  # (1, hq, sq, sk)
    doc = (seg_q[:, None, :, None] == seg_k[:, None, None, :])  # (b, 1, sq, sk)
    # ALiBi + relative bias, causal, LSE
    o, lse = qattn.attention(q, k, v, causal=True, alibi_slopes=slopes, relative_bias=table, return_lse=True)
    check(o, lse, q, k, v, visible(sq, sk, True), scale, bias=alibi_bias + rel)
    # document masking of packed sequences (int64 ids are accepted and converted), causal
    o = qattn.attention(q, k, v, causal=True, segment_ids=(seg_q.long(), seg_k))
    check(o, None, q, k, v, visible(sq, sk, True)[None, None] & doc, scale)
    # prefix-LM: a bidirectional prefix of 40 keys, causal after it
    o = qattn.attention(q, k, v, prefix_lm=40)
    check(o, None, q, k, v, (j <= i + off) | (j < 40), scale)


def test_segment_ids_are_checked_once_per_version(gen):
    """The nondecreasing check of segment ids is a host read: it runs once per tensor version, so the
    same ids given to every layer synchronise once (torch's sync debug mode raises on a sync in the
    second call); an in-place edit moves the version on and the next call checks, and refuses, again."""
    b, s, h = 2, 300, 4
    q, k, v = inputs(b, s, s, h, h, 64, 64, torch.bfloat16, "bshd", gen)
    seg = packed_segments(b, s, gen)
    first = qattn.attention(q, k, v, causal=True, segment_ids=(seg, seg))  # builds, checks the ids
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = qattn.attention(q, k, v, causal=True, segment_ids=(seg, seg))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(first, again)
    seg[0, 10] = seg[0, 9] - 1  # in place: the row decreases there
    with pytest.raises(qattn.SpecError, match="nondecreasing"):
        qattn.attention(q, k, v, causal=True, segment_ids=(seg, seg))


def test_auxiliary_inputs_are_checked(gen):
    q, k, v = inputs(2, 50, 50, 4, 4, 64, 64, torch.bfloat16, "bshd", gen)
    slopes = torch.rand(4, device="cuda", generator=gen)
    seg = torch.zeros(2, 50, dtype=torch.int32, device="cuda")
    bad = [
        (dict(alibi_slopes=slopes[:3]), "shape"),                 # heads_q slopes
        (dict(alibi_slopes=slopes.double()), "float32"),          # dtype
        (dict(alibi_slopes=slopes.cpu()), "is on"),               # device
        (dict(segment_ids=(seg, -torch.arange(50, device="cuda", dtype=torch.int32).repeat(2, 1))), "nondecreasing"),
        (dict(segment_ids=(seg,)), "pair"),
        (dict(relative_bias=torch.randn(4, 31, device="cuda")), "even"),
        (dict(relative_bias=torch.randn(4, device="cuda")), "(heads_q, NB)"),
    ]
    for kw, what in bad:
        with pytest.raises((qattn.SpecError, qattn.DeviceError)) as e:
            qattn.attention(q, k, v, causal=True, **kw)
        assert e.value.code in ("PY0110", "PY0103") and what in str(e.value), (kw.keys(), str(e.value))
    # a compiled ALiBi kernel called without its slopes
    kern = qattn.compile({"heads_q": 4, "head_dim": 64, "mask": "causal", "variants": {"alibi": True}})
    with pytest.raises(qattn.SpecError) as e:
        kern(q, k, v)
    assert e.value.code == "PY0110" and "alibi_slopes" in str(e.value)
    o = kern(q, k, v, alibi_slopes=slopes)
    i = torch.arange(50, device="cuda")
    check(o, None, q, k, v, visible(50, 50, True), 64 ** -0.5,
          bias=-slopes[None, :, None, None] * (i[:, None] - i[None, :]).abs().float())
    # the compiled (forward) kernel computes no gradient: inputs or slopes that require grad are
    # refused (PY0109), not left at .grad None; without grad mode the same call runs
    with pytest.raises(qattn.SpecError) as e:
        kern(q, k, v, alibi_slopes=slopes.clone().requires_grad_())
    assert e.value.code == "PY0109" and "alibi_slopes" in str(e.value) and "qattn.attention()" in e.value.hint
    with pytest.raises(qattn.SpecError) as e:
        kern(q.clone().requires_grad_(), k, v, alibi_slopes=slopes)
    assert e.value.code == "PY0109" and "qattn.attention()" in e.value.hint
    with torch.no_grad():
        assert torch.equal(kern(q, k, v, alibi_slopes=slopes.clone().requires_grad_()), o)


@pytest.mark.parametrize("shape", [(2, 77, 200, 4, 2), (1, 300, 300, 4, 4)])
def test_learnable_alibi_slopes_and_bias_table(shape, gen):
    """ALiBi slopes and a relative-bias table that require grad get their gradients from the
    backward kernel (TL `Compute Gradient`, ABI 9's daux): against fp32 autograd of the same formulas
    (docs/spec.md), within twice the error of a bf16 torch implementation plus 0.5% of the largest
    entry; dQ, dK, dV likewise. Only the slopes requiring grad: the table gets none."""
    b, sq, sk, hq, hkv = shape
    nb = 16
    q, k, v = inputs(b, sq, sk, hq, hkv, 64, 64, torch.bfloat16, "bshd", gen)
    slopes = (torch.rand(hq, device="cuda", generator=gen) * 0.2).requires_grad_()
    table = torch.randn(hq, nb, device="cuda", generator=gen).requires_grad_()
    do = torch.randn(b, sq, hq, 64, device="cuda", generator=gen).to(torch.bfloat16)
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    o = qattn.attention(qg, kg, vg, causal=True, alibi_slopes=slopes, relative_bias=table)
    got = torch.autograd.grad(o, (qg, kg, vg, slopes, table), do)
    off = sk - sq
    i = torch.arange(sq, device="cuda")[:, None]
    j = torch.arange(sk, device="cuda")[None, :]
    bucket = (j - i - off).clamp(-(nb // 2), nb // 2 - 1) + nb // 2

    def reference(dtype):
        qs, ks, vs, s_, t_ = (x.detach().clone().requires_grad_() for x in (q, k, v, slopes, table))
        qd, kd, vd = (x.to(dtype).transpose(1, 2) for x in (qs, ks, vs))
        kd, vd = (x.repeat_interleave(hq // hkv, dim=1) for x in (kd, vd))
        bias = -s_[:, None, None] * (i + off - j).abs().float() + t_[:, bucket]
        scores = (qd @ kd.transpose(-1, -2)) * 64 ** -0.5 + bias.to(dtype)
        scores = scores.masked_fill(j > i + off, float("-inf"))
        out = (torch.softmax(scores.float(), -1).to(dtype) @ vd).transpose(1, 2)
        return torch.autograd.grad(out, (qs, ks, vs, s_, t_), do.to(dtype))

    ref, low = reference(torch.float32), reference(torch.bfloat16)
    for name, g, r, lo in zip(("dq", "dk", "dv", "dslopes", "dtable"), got, ref, low):
        err, low_err = (g.float() - r).abs().max().item(), (lo.float() - r).abs().max().item()
        assert err <= 2 * low_err + 5e-3 * r.abs().max().item(), (name, err, low_err, r.abs().max().item())
    # with deterministic algorithms: refused (the slopes' and the table's sums are atomic)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(qattn.SpecError) as e:
            qattn.attention(q.clone().requires_grad_(), k, v, causal=True, alibi_slopes=slopes, relative_bias=table)
        assert e.value.code == "PY0109" and "deterministic" in str(e.value)
    finally:
        torch.use_deterministic_algorithms(False)
    # only the slopes learnable: the table (constant) gets no gradient, the slopes the same one
    qg2 = q.clone().requires_grad_()
    o2 = qattn.attention(qg2, k, v, causal=True, alibi_slopes=slopes, relative_bias=table.detach())
    (ds2,) = torch.autograd.grad(o2, (slopes,), do)
    assert torch.allclose(ds2, got[3], rtol=1e-3, atol=1e-3 * got[3].abs().max().item())


@pytest.mark.parametrize("shape", [SHAPES[1], SHAPES[2], SHAPES[4]])
def test_causal_top_left_is_sdpa_is_causal(shape, gen):
    """causal='top_left' is torch SDPA's is_causal, also when seqlen_q != seqlen_k."""
    run_case(shape, "bhsd", torch.float16, 64, 64, gen, causal="top_left")
    b, sq, sk, hq, hkv = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, 64, 64, torch.float16, "bhsd", gen)
    o = qattn.attention(q, k, v, causal="top_left", layout="bhsd")
    sdpa = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=hq != hkv)
    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    low, _ = reference(qs, ks, vs, visible(sq, sk, "top_left"), 64 ** -0.5, lowp=True)
    assert max_abs(o.float(), sdpa) <= 2 * max_abs(low.transpose(1, 2), sdpa) + 1e-5


def test_custom_scale(gen):
    run_case((2, 300, 300, 4, 2), "bshd", torch.bfloat16, 128, 128, gen, causal=True, scale=0.37)


def test_strided_and_misaligned_inputs(gen):
    """Views with a padded head dim (16-byte aligned strides) run in place; a misaligned view is copied."""
    b, s, h, d = 2, 257, 4, 128
    for pad in (8, 4):  # 136 elements: strides stay 16-byte aligned; 132: they do not
        base = torch.randn(b, s, h, d + pad, device="cuda", generator=gen).to(torch.bfloat16)
        q, k, v = base[..., :d], base[..., pad:pad + d], base[..., :d]
        o = qattn.attention(q, k, v)
        check(o, None, q, k, v, visible(s, s), d ** -0.5)


# ---- runtime behaviour -----------------------------------------------------------------------------

def test_runs_on_the_current_stream(gen):
    """The kernel is enqueued on torch's current stream: inputs written on a side stream after a long
    GPU sleep must be seen by the kernel without any synchronisation by the caller."""
    b, s, h, d = 2, 512, 4, 128
    q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
    qb = torch.full_like(q, float("nan"))
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on this stream
        qb.copy_(q)
        o = qattn.attention(qb, k, v, causal=True)
        done = torch.cuda.Event()
        done.record(side)
    done.synchronize()
    check(o, None, q, k, v, visible(s, s, causal=True), d ** -0.5)


def test_launches_from_several_threads_at_once(gen):
    """A thread pool calling attention() at once (a serving thread, a data loader): every launch
    succeeds and gives the bits of the same call made alone. (On Hopper a thread whose first CUDA
    call was the launch had no current context, and the driver refused to encode the TMA maps:
    CUresult 201 in 54 of 80 threaded calls on an H200; tests/gpu/threads_check.py.)"""
    import threading
    calls = []
    for b, s, hq, hkv, causal in ((1, 300, 8, 8, True), (2, 257, 8, 2, False)):
        q = torch.randn(b, s, hq, 128, device="cuda", generator=gen).to(torch.bfloat16)
        k, v = (torch.randn(b, s, hkv, 128, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
        calls.append((q, k, v, causal))
    alone = [qattn.attention(q, k, v, causal=c) for q, k, v, c in calls]
    torch.cuda.synchronize()
    bad = []

    def worker(t):
        try:
            for it in range(6):
                q, k, v, c = calls[(t + it) % len(calls)]
                o = qattn.attention(q, k, v, causal=c)
                torch.cuda.current_stream().synchronize()
                if not torch.equal(o, alone[(t + it) % len(calls)]):
                    bad.append(f"thread {t}: differs")
        except Exception as e:  # noqa: BLE001
            bad.append(f"thread {t}: {e}")
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not bad, bad[:3]


def test_kernels_are_reused_across_shapes(gen):
    """One kernel per compile-time tuple: MHA, GQA, MQA, any seqlen and both layouts share it."""
    from qattn import _build
    for hq, hkv, s, layout in ((8, 8, 100, "bshd"), (8, 2, 333, "bhsd"), (8, 1, 65, "bshd")):
        q = torch.randn(1, s, hq, 128, device="cuda", generator=gen).to(torch.bfloat16)
        kv = torch.randn(1, s, hkv, 128, device="cuda", generator=gen).to(torch.bfloat16)
        if layout == "bhsd":
            q, kv = q.transpose(1, 2).contiguous(), kv.transpose(1, 2).contiguous()
        qattn.attention(q, kv, kv, layout=layout)
    builds = {id(b) for key, b in _build.FAST.items() if key[:3] == ("bf16", 128, 128) and "'none'" in key[3]
              and not key[4] and not key[6]}  # key[6]: the short-query (packed) kernel, test_short_gqa_queries
    from gpu_kernels import D128_NONE
    assert builds == {id(qattn.compile(D128_NONE)._b)}  # the kernel compile() built up front
    assert [b.spec["name"] for b in _build._BUILDS.values()].count("py_bf16_d128_none") == 1


@pytest.mark.parametrize("hq,hkv,sq,sk,causal", [(32, 8, 16, 1000, True), (16, 1, 3, 777, False), (8, 2, 64, 300, True),
                                               (8, 8, 16, 500, True)])
def test_short_gqa_queries(hq, hkv, sq, sk, causal, gen):
    """Short query sequences over a longer cache (decoding, chunked prefill): on Hopper GQA/MQA
    take the kernel that packs a kv head's query heads into one tile (at most 64 packed rows: the
    one-tile decoding kernel); results as any other."""
    from qattn import _build
    q = torch.randn(2, sq, hq, 128, device="cuda", generator=gen).to(torch.bfloat16)
    k = torch.randn(2, sk, hkv, 128, device="cuda", generator=gen).to(torch.bfloat16)
    v = torch.randn(2, sk, hkv, 128, device="cuda", generator=gen).to(torch.bfloat16)
    o, lse = qattn.attention(q, k, v, causal=causal, return_lse=True)
    check(o, lse, q, k, v, visible(sq, sk, causal=causal), 128 ** -0.5)
    ex = qattn.explain(q, k, v, causal=causal, return_lse=True)
    packed = "{pack: heads_q / heads_kv}" in ex.tl
    major, _ = torch.cuda.get_device_capability()
    assert packed == (major == 9 and hq > hkv and not os.environ.get("QATTN_TARGET")), ex.tl
    name = ex.kernel_spec["name"]
    assert packed == (name.endswith("_short") or name.endswith("_dec"))
    if packed:  # at most 64 packed rows (queries x group): decoding's one 64-row tile on one consumer warpgroup
        assert name.endswith("_dec") == (sq * (hq // hkv) <= 64), name
        assert ("Role consumer warpgroups 1 " in ex.tl) == name.endswith("_dec"), ex.tl


@pytest.mark.parametrize("b,sq,hq,hkv,sk,causal,layout", [(4, 1, 32, 1, 8192, True, "bshd"), (1, 1, 16, 2, 5001, False, "bhsd"),
                                                        (2, 3, 8, 1, 4096, False, "bshd"), (2, 4, 32, 8, 3000, True, "bhsd")])
def test_split_keys_decoding(b, sq, hq, hkv, sk, causal, layout, gen, monkeypatch):
    """Short queries over a long cache that would leave the GPU mostly idle split their keys (one
    launch over batch x parts, then the LSE merge): results as one call, o and lse; the split is taken
    (several causal queries only by the kernel that splits in its TL: Hopper)."""
    from qattn import _attention as A
    q, k, v = inputs(b, sq, sk, hq, hkv, 128, 128, torch.bfloat16, layout, gen)
    fields, args = A.split_launch_args(A.variant_fields(causal, None, None, None, None, None))
    splits = A.split_keys(torch, q.device, bshd(q, layout), bshd(k, layout), fields, args, {})
    assert splits > 1 or (causal and sq > 1 and not A.tl_split(torch, q.device))
    o, lse = qattn.attention(q, k, v, causal=causal, return_lse=True, layout=layout)
    check(bshd(o, layout), lse, bshd(q, layout), bshd(k, layout), bshd(v, layout), visible(sq, sk, causal=causal),
          128 ** -0.5)
    monkeypatch.setenv("QATTN_SPLIT_KV", "0")
    o1 = qattn.attention(q, k, v, causal=causal, layout=layout)
    assert (o.float() - o1.float()).abs().max().item() < 2e-2


def test_compiled_kernel_matches_attention(gen):
    kern = qattn.compile({"heads_q": 8, "heads_kv": 2, "head_dim": 128, "mask": "causal"})
    q = torch.randn(2, 301, 8, 128, device="cuda", generator=gen).to(torch.bfloat16)
    k = torch.randn(2, 301, 2, 128, device="cuda", generator=gen).to(torch.bfloat16)
    v = torch.randn(2, 301, 2, 128, device="cuda", generator=gen).to(torch.bfloat16)
    assert torch.equal(kern(q, k, v), qattn.attention(q, k, v, causal=True))
    assert kern.info["d_qk"] == 128 and kern.info["mask"] == "causal"


def test_empty_inputs():
    q = torch.randn(2, 0, 4, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(2, 5, 4, 64, device="cuda", dtype=torch.float16)
    o, lse = qattn.attention(q, k, k, causal=True, return_lse=True)
    assert o.shape == (2, 0, 4, 64) and lse.shape == (2, 4, 0)
    q = torch.randn(2, 3, 4, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(2, 0, 4, 64, device="cuda", dtype=torch.float16)
    o, lse = qattn.attention(q, k, k, causal=True, return_lse=True)
    assert (o == 0).all() and (lse == float("-inf")).all()


def test_explain_tensors_shows_the_target_choice():
    q = torch.randn(1, 64, 2, 128, device="cuda", dtype=torch.bfloat16)
    e = qattn.explain(q, q, q, causal=True)
    major, _ = torch.cuda.get_device_capability()
    if major == 9 and not os.environ.get("QATTN_TARGET"):
        assert e.target == "h100" and "sm90a" in e.target_reason and "Role producer" in e.tl
    assert "with mask causal" in e.tl and "// TL" in e.source
    assert e.info["d_qk"] == 128 and e.splits == 1 and "key split" not in str(e)


def test_explain_a_decoding_call_shows_the_key_split():
    """explain() of a call that splits its keys shows the kernel that call launches: on Hopper the one
    whose TL has the part axis (and the unmasked one for one causal query), and says how many parts."""
    from qattn import _attention as A
    q = torch.randn(4, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 8192, 1, 128, device="cuda", dtype=torch.bfloat16)
    e = qattn.explain(q, k, k, causal=True)
    assert e.splits > 1 and f"key split: {e.splits} parts" in str(e)
    if A.tl_split(torch, q.device):
        assert e.split_mode == "tl" and "split = 0: splits" in e.tl and e.info.get("splits") is True
        assert "with mask none" in e.tl  # one causal query sees every key
    else:
        assert e.split_mode == "fold" and e.info["lse"] is True


# ---- errors ----------------------------------------------------------------------------------------

def _err(fn, cls, code):
    with pytest.raises(cls) as e:
        fn()
    assert code in e.value.codes, str(e.value)
    assert code in str(e.value)
    return e.value


def test_errors_are_exceptions_with_diagnostics():
    c = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.float16)
    _err(lambda: qattn.attention(c.float(), c.float(), c.float()), qattn.SpecError, "PY0104")
    _err(lambda: qattn.attention(c, c.bfloat16(), c), qattn.SpecError, "PY0104")
    _err(lambda: qattn.attention(c, c.cpu(), c), qattn.DeviceError, "PY0102")
    _err(lambda: qattn.attention(c, c[:, :, :1].repeat(1, 1, 3, 1), c[:, :, :1].repeat(1, 1, 3, 1)),
         qattn.SpecError, "PY0105")  # 2 query heads, 3 kv heads
    _err(lambda: qattn.attention(c, c, c, softcap=-30.0), qattn.SpecError, "PY0107")
    _err(lambda: qattn.attention(c, c, c, scale=-1.0), qattn.SpecError, "PY0108")
    _err(lambda: qattn.attention(c, c, c, window=(4, 2), causal=True), qattn.SpecError, "PY0107")
    g = c.clone().requires_grad_(True)
    # custom score_mod text has no backward from Python yet (the built-in variants' is in test_attention_backward_*)
    _err(lambda: qattn.attention(g, c, c, causal="top_left", score_mod="score * 0.5"), qattn.SpecError, "PY0109")
    with torch.no_grad():  # (the top-left causal kernel is one of the suite's)
        assert qattn.attention(g, c, c, causal="top_left").shape == c.shape
    odd = torch.randn(1, 16, 2, 80, device="cuda", dtype=torch.float16)
    e = _err(lambda: qattn.attention(odd, odd, odd), qattn.SpecError, "SPEC0203")
    assert e.hint and "96" in str(e)
    # the same bad request again is refused without running the pipeline
    _err(lambda: qattn.attention(odd, odd, odd), qattn.SpecError, "SPEC0203")


def test_sdpa_drop_in_on_square_causal(gen):
    """For seqlen_q == seqlen_k, qattn.attention(..., layout='bhsd') is F.scaled_dot_product_attention."""
    q, k, v = inputs(2, 777, 777, 8, 2, 128, 128, torch.bfloat16, "bhsd", gen)
    o = qattn.attention(q, k, v, causal=True, layout="bhsd")
    sdpa = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
    qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
    low, _ = reference(qs, ks, vs, visible(777, 777, True), 128 ** -0.5, lowp=True)
    assert max_abs(o.float(), sdpa) <= 2 * max_abs(low.transpose(1, 2), sdpa) + 1e-5
    assert math.isfinite(o.float().abs().max().item())


# ---- the operator: torch.compile, opcheck, CUDA graphs (issue 21) -----------------------------------

def _op_or_skip():
    if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.custom_op (2.4+)")
    from qattn import _op
    op = _op.register(torch)
    assert op is not None and op is torch.ops.qattn.attention
    return op


class _Block(torch.nn.Module if _REASON is None else object):
    """A small attention block: projections around qattn.attention, GQA 4/2, d128, causal."""

    def __init__(self, dim=256, hq=4, hkv=2, d=128):
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, d
        self.wq = torch.nn.Linear(dim, hq * d, bias=False)
        self.wkv = torch.nn.Linear(dim, 2 * hkv * d, bias=False)
        self.wo = torch.nn.Linear(hq * d, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.hq, self.d)
        k, v = self.wkv(x).view(b, s, 2, self.hkv, self.d).unbind(2)
        o, lse = qattn.attention(q, k, v, causal=True, return_lse=True)
        return self.wo(torch.relu(o).reshape(b, s, -1)) + lse.mean()


def test_torch_compile_fullgraph_traces_the_operator_and_matches_eager(gen):
    _op_or_skip()
    torch.manual_seed(5)
    block = _Block().cuda().to(torch.bfloat16)
    x = torch.randn(2, 300, 256, device="cuda", generator=gen).to(torch.bfloat16)
    with torch.no_grad():
        eager = block(x)
        torch._dynamo.reset()
        compiled = torch.compile(block, fullgraph=True)
        got = compiled(x)
        got2 = compiled(torch.randn(2, 300, 256, device="cuda", generator=gen).to(torch.bfloat16))
    assert got.shape == eager.shape and torch.isfinite(got).all() and torch.isfinite(got2).all()
    torch.testing.assert_close(got.float(), eager.float(), rtol=2e-2, atol=2e-2)
    # the graph holds the operator (no graph break at the ctypes launch); training through the
    # compiled block is test_torch_compile_fullgraph_trains_through_forward_and_backward
    with torch.no_grad():
        explained = torch._dynamo.explain(block)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert any("qattn.attention" in str(n.target) for g in explained.graphs for n in g.graph.nodes), \
        "the operator is not in the traced graph"


def test_compiled_kernel_under_torch_compile_fullgraph(gen):
    """Issue 21: a qattn.compile() Kernel called inside torch.compile(fullgraph=True) is the
    operator (no graph break) and matches its eager call; its window is a launch argument."""
    _op_or_skip()
    from gpu_kernels import FP16_D64_WINDOW
    kern = qattn.compile(FP16_D64_WINDOW)
    q = torch.randn(2, 300, 4, 64, device="cuda", generator=gen).to(torch.float16)
    kv = torch.randn(2, 300, 2, 64, device="cuda", generator=gen).to(torch.float16)

    def f(q, kv):
        return kern(q, kv, kv, window=(50, 3)) * 2

    with torch.no_grad():
        eager = f(q, kv)
        torch._dynamo.reset()
        got = torch.compile(f, fullgraph=True)(q, kv)
        explained = torch._dynamo.explain(f)(q, kv)
    torch.testing.assert_close(got, eager, rtol=0, atol=0)  # the same kernel, the same inputs
    assert explained.graph_break_count == 0, explained.break_reasons
    vis = visible(300, 300, window=(50, 3))
    check(eager / 2, None, q, kv, kv, vis, 64 ** -0.5)


def test_opcheck_passes(gen):
    op = _op_or_skip()
    b, sq, sk, hq, hkv, d = 2, 77, 130, 4, 2, 128
    q, k, v = inputs(b, sq, sk, hq, hkv, d, d, torch.bfloat16, "bshd", gen)
    for causal, lse in (("bottom_right", True), ("none", False)):
        torch.library.opcheck(op, (q, k, v, causal, None, None, None, lse, "bshd", None, None, None, None, None, None,
                                   None))


def test_cuda_graph_capture_and_replay_match_eager(gen):
    _op_or_skip()
    b, sq, sk, hq, hkv, d = 2, 257, 257, 4, 2, 128
    q, k, v = inputs(b, sq, sk, hq, hkv, d, d, torch.bfloat16, "bshd", gen)
    eager = qattn.attention(q, k, v, causal=True)  # builds the kernel before the capture
    static_q, static_k, static_v = q.clone(), k.clone(), v.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        qattn.attention(static_q, static_k, static_v, causal=True)  # warm-up on the side stream
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = qattn.attention(static_q, static_k, static_v, causal=True)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    q2, k2, v2 = inputs(b, sq, sk, hq, hkv, d, d, torch.bfloat16, "bshd", gen)
    static_q.copy_(q2), static_k.copy_(k2), static_v.copy_(v2)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, qattn.attention(q2, k2, v2, causal=True), rtol=0, atol=0)
    # the operator itself (what torch.compile puts in a graph) captures too
    args = ("bottom_right", None, None, None, False, "bshd", None, None, None, None, None, None, None)
    op = torch.ops.qattn.attention
    graph2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph2):
        out2, _ = op(static_q, static_k, static_v, *args)
    out2.fill_(float("nan"))
    graph2.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out2, out, rtol=0, atol=0)
