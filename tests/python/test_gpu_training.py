"""Training on a GPU (issue 19): qattn.attention() under autograd. Gradients against fp32 autograd
with FlashAttention's rule for gradients (max |dX - ref| <= 2 * max |dX_lowp - ref| + atol) on shapes
crossing the tiles, every mask, GQA / MQA, both layouts; the deterministic backward bit-identical;
a training step against SDPA; torch.compile(fullgraph=True) through forward and backward; opcheck of
the backward operator; the built-in score variants; training from a kernel pack with no compiler.
The forward's tests and the shared helpers are tests/python/test_gpu.py. Skipped (with the reason)
without torch, without a CUDA device or without `qattn`.
"""
import os

import pytest

from conftest import gpu_skip_reason

import qattn

_REASON = gpu_skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
if _REASON is None:
    import torch
    from test_gpu import _Block, _op_or_skip, inputs, visible


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    return g


def test_training_from_a_pack_compiles_nothing(tmp_path):
    """precompile(backward=True): a process with no `qattn` command trains (forward with its LSE, the
    GQA backward) from the pack alone; the gradients match fp32 autograd within bf16 noise."""
    import subprocess
    import sys
    pack = tmp_path / "pack"
    spec = {"heads_q": 2, "head_dim": 64, "dtype": "bf16", "mask": "causal"}
    assert qattn.precompile([spec], str(pack), backward=True, verbose=False) == 4  # fwd, its LSE twin, bwd MHA / GQA
    child = (
        "import torch, qattn\n"
        "g = torch.Generator(device='cuda').manual_seed(3)\n"
        "q, k, v = (torch.randn(2, 300, h, 64, device='cuda', generator=g).to(torch.bfloat16).requires_grad_() for h in (8, 2, 2))\n"
        "do = torch.randn(2, 300, 8, 64, device='cuda', generator=g).to(torch.bfloat16)\n"
        "got = torch.autograd.grad(qattn.attention(q, k, v, causal=True), (q, k, v), do)\n"
        "qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))\n"
        "o = torch.nn.functional.scaled_dot_product_attention(qf.transpose(1, 2), kf.transpose(1, 2), vf.transpose(1, 2), "
        "is_causal=True, enable_gqa=True).transpose(1, 2)\n"
        "ref = torch.autograd.grad(o, (qf, kf, vf), do.float())\n"
        "print('err', max(((a.float() - r).abs().max() / r.abs().max()).item() for a, r in zip(got, ref)))\n"
        "print('packed', all(b.from_pack is not None for b in qattn._build._BUILDS.values()), len(qattn._build._BUILDS))\n")
    env = dict(os.environ, QATTN_PACKS=str(pack), QATTN_BIN=str(tmp_path / "none"), QATTN_CACHE_DIR=str(tmp_path / "c"))
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    words = r.stdout.split()
    assert words[words.index("packed") + 1:words.index("packed") + 3] == ["True", "2"], r.stdout
    assert float(words[words.index("err") + 1]) < 2e-2, r.stdout
    assert "building" not in r.stderr and "nvcc" not in r.stderr, r.stderr


# ---- the backward pass (issue 19): attention() is differentiable -----------------------------------

def _grad_reference(q, k, v, dout, causal, window, layout):
    """fp32 autograd and same-dtype autograd of the eager attention (bshd or bhsd inputs)."""
    def eager(q, k, v):
        qb, kb, vb = (x if layout == "bhsd" else x.transpose(1, 2) for x in (q, k, v))
        hq, hk = qb.shape[1], kb.shape[1]
        kb = kb.repeat_interleave(hq // hk, dim=1)
        vb = vb.repeat_interleave(hq // hk, dim=1)
        vis = visible(qb.shape[2], kb.shape[2], causal=causal, window=window)
        s = (qb @ kb.transpose(-1, -2)) * qb.shape[-1] ** -0.5
        s = s.masked_fill(~vis, float("-inf"))
        p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(qb.dtype)
        o = p @ vb
        return o if layout == "bhsd" else o.transpose(1, 2)
    out = []
    for cast in (torch.float32, None):
        xs = [(x.detach().to(cast) if cast else x.detach().clone()).requires_grad_() for x in (q, k, v)]
        o = eager(*xs)
        out.append(torch.autograd.grad(o, xs, dout.to(o.dtype)))
    return out


@pytest.mark.parametrize("shape,causal,window,layout", [
    ((2, 77, 130, 4, 2, 64), True, None, "bshd"),         # GQA, causal bottom-right, ragged lengths
    ((1, 130, 77, 4, 4, 64), "top_left", None, "bhsd"),   # MHA, top-left, seqlen_q > seqlen_k, SDPA's layout
    ((2, 257, 257, 2, 2, 128), False, None, "bshd"),      # MHA d128, no mask
    ((1, 300, 290, 8, 1, 128), True, None, "bshd"),       # MQA d128
    ((1, 200, 230, 2, 2, 64), False, (37, 5), "bshd"),    # sliding window (launch argument)
    ((2, 141, 203, 2, 2, 256), True, None, "bshd"),       # MHA d256 (Hopper: the natural form on wgmma)
    ((1, 97, 330, 4, 2, 256), False, (70, 0), "bshd"),    # GQA d256, window: dK / dV accumulated in fp32
    ((2, 150, 211, 4, 4, 192, 128), True, None, "bshd"),  # MLA 192/128 (Hopper: 64-byte-swizzled tiles)
    ((1, 333, 129, 4, 2, 192), False, None, "bshd"),      # GQA d192
    ((2, 150, 211, 4, 2, 64, 128), True, None, "bshd"),   # V wider than Q, K (Hopper: the transposed form)
    ((1, 257, 130, 2, 2, 64, 128), False, None, "bhsd"),
    ((1, 141, 203, 2, 1, 128, 256), True, None, "bshd"),  # (the natural form on mma.sync)
    ((2, 130, 77, 4, 2, 128, 64), "top_left", None, "bshd"),  # narrower V at d128 (Hopper: the transposed form)
])
def test_attention_backward_matches_autograd(gen, shape, causal, window, layout):
    b, sq, sk, hq, hk, d = shape[:6]
    dv = shape[6] if len(shape) > 6 else d
    dt = torch.bfloat16

    def t(s, h, dim=d):
        x = torch.randn(b, s, h, dim, device="cuda", generator=gen).to(dt)
        return (x if layout == "bshd" else x.transpose(1, 2).contiguous()).requires_grad_()
    q, k, v = t(sq, hq), t(sk, hk), t(sk, hk, dv)
    o = qattn.attention(q, k, v, causal=causal, window=window, layout=layout)
    assert o.requires_grad and o.grad_fn is not None
    dout = torch.randn(o.shape, device="cuda", generator=gen).to(dt)
    got = torch.autograd.grad(o, (q, k, v), dout)
    ref, low = _grad_reference(q, k, v, dout, causal, window, layout)
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        assert g.shape == r.shape and g.dtype == dt
        err = (g.float() - r).abs().max().item()
        bound = 2 * (lo.float() - r).abs().max().item() + 1e-4 * max(1.0, r.abs().max().item())
        assert err <= bound, f"{name}: max abs err {err:.3e} > {bound:.3e}"


@pytest.mark.parametrize("expand", ["all", "heads"])
def test_attention_backward_with_a_broadcast_gradient(gen, expand):
    """dout with zero strides (the gradient of `o.sum()`: copied, its last stride is 0; or one broadcast
    over the heads: on Hopper read through a TMA tensor map whose head stride is 0); the gradients match."""
    b, sq, sk, hq, hk, d = 2, 150, 211, 4, 2, 128
    q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
               for s, h in ((sq, hq), (sk, hk), (sk, hk)))
    o = qattn.attention(q, k, v, causal=True)
    if expand == "all":
        dout = torch.ones((), device="cuda", dtype=o.dtype).expand(o.shape)
    else:
        dout = torch.randn(b, sq, 1, d, device="cuda", generator=gen).to(o.dtype).expand(o.shape)
    assert 0 in dout.stride()
    got = torch.autograd.grad(o, (q, k, v), dout)
    ref, low = _grad_reference(q, k, v, dout.contiguous(), True, None, "bshd")
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        err = (g.float() - r).abs().max().item()
        bound = 2 * (lo.float() - r).abs().max().item() + 1e-4 * max(1.0, r.abs().max().item())
        assert err <= bound, f"{name}: max abs err {err:.3e} > {bound:.3e}"


def test_deterministic_backward_is_bit_identical(gen):
    """Under torch.use_deterministic_algorithms(True) attention()'s backward takes the kernel whose
    additions go in a fixed order (TL `{ordered}`): 10 backward passes give the same bits (GQA: dQ, dK
    and dV all ordered; a causal mask, lengths crossing the tiles), and they match fp32 autograd."""
    b, sq, sk, hq, hk, d = 2, 700, 1030, 8, 2, 64
    dt = torch.bfloat16
    q = torch.randn(b, sq, hq, d, device="cuda", generator=gen).to(dt).requires_grad_()
    k = torch.randn(b, sk, hk, d, device="cuda", generator=gen).to(dt).requires_grad_()
    v = torch.randn(b, sk, hk, d, device="cuda", generator=gen).to(dt).requires_grad_()
    dout = torch.randn(b, sq, hq, d, device="cuda", generator=gen).to(dt)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        o = qattn.attention(q, k, v, causal=True)
        runs = [torch.autograd.grad(o, (q, k, v), dout, retain_graph=True) for _ in range(10)]
    finally:
        torch.use_deterministic_algorithms(was)
    for r in runs[1:]:
        for a, c in zip(runs[0], r):
            assert torch.equal(a.view(torch.int16), c.view(torch.int16))
    ref, low = _grad_reference(q, k, v, dout, True, None, "bshd")
    for name, g, r, lo in zip(("dq", "dk", "dv"), runs[0], ref, low):
        err = (g.float() - r).abs().max().item()
        bound = 2 * (lo.float() - r).abs().max().item() + 1e-4 * max(1.0, r.abs().max().item())
        assert err <= bound, f"{name}: max abs err {err:.3e} > {bound:.3e}"


def test_a_training_step_through_attention(gen):
    """A small attention layer trains: loss.backward() through qattn.attention matches the same layer
    on SDPA within bf16 noise, and an optimizer step changes the weights."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(128, 3 * 128, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(2, 200, 128, device="cuda", generator=gen).to(torch.bfloat16)

    def loss_of(attn):
        qkv = layer(x).view(2, 200, 3, 2, 64)
        o = attn(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
        return (o.float() ** 2).mean()
    loss = loss_of(lambda q, k, v: qattn.attention(q, k, v, causal=True))
    loss.backward()
    g_qattn = layer.weight.grad.detach().clone()
    layer.weight.grad = None
    sdpa = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    loss_of(sdpa).backward()
    g_sdpa = layer.weight.grad.detach().clone()
    rel = (g_qattn.float() - g_sdpa.float()).norm() / g_sdpa.float().norm()
    assert rel < 2e-2, rel
    before = layer.weight.detach().clone()
    opt = torch.optim.SGD(layer.parameters(), lr=1.0)
    layer.weight.grad = g_qattn
    opt.step()
    assert not torch.equal(before, layer.weight.detach())


def test_torch_compile_fullgraph_trains_through_forward_and_backward(gen):
    """Issue 19: torch.compile(fullgraph=True) of a block with qattn.attention traces forward and
    backward (the operator's autograd formula calls torch.ops.qattn.attention_backward): the loss
    and every weight gradient match the eager block's, with no graph break."""
    _op_or_skip()
    torch.manual_seed(7)
    block = _Block().cuda().to(torch.bfloat16)
    x = torch.randn(2, 300, 256, device="cuda", generator=gen).to(torch.bfloat16)

    def step(model):
        for p in block.parameters():
            p.grad = None
        loss = model(x).float().pow(2).mean()
        loss.backward()
        return loss.detach(), [p.grad.detach().clone() for p in block.parameters()]
    eager_loss, eager_grads = step(block)
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    loss, grads = step(compiled)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-2, atol=1e-3)
    for g, e in zip(grads, eager_grads):
        rel = ((g.float() - e.float()).norm() / e.float().norm()).item()
        assert rel < 2e-2, rel
    explained = torch._dynamo.explain(block)(x)
    assert explained.graph_break_count == 0, explained.break_reasons


def test_opcheck_passes_for_the_backward_operator(gen):
    op = _op_or_skip()
    b, sq, sk, hq, hkv, d = 2, 77, 130, 4, 2, 64
    q, k, v = inputs(b, sq, sk, hq, hkv, d, d, torch.bfloat16, "bshd", gen)
    for x in (q, k, v):
        x.requires_grad_()
    # the forward operator with its autograd formula (opcheck's autograd-registration test included)
    torch.library.opcheck(op, (q, k, v, "bottom_right", None, None, None, True, "bshd", None, None, None, None, None,
                               None, None))
    with torch.no_grad():
        o, lse = op(q, k, v, "bottom_right", None, None, None, True, "bshd", None, None, None, None, None, None, None)
    dout = torch.randn(o.shape, device="cuda", generator=gen).to(torch.bfloat16)
    torch.library.opcheck(torch.ops.qattn.attention_backward,
                          (q.detach(), k.detach(), v.detach(), o, lse, dout, "bottom_right", None, None, "bshd"))


@pytest.mark.parametrize("softcap,alibi,causal", [(30.0, False, True), (None, True, False), (5.0, True, True)])
def test_attention_backward_through_score_variants(gen, softcap, alibi, causal):
    """Issue 19: the softcap and ALiBi are differentiated by the backward TL (`Compute Derivative`):
    gradients against fp32 autograd of the same variant by FlashAttention's rule."""
    b, sq, sk, hq, hk, d = 2, 150, 170, 4, 2, 64
    dt = torch.bfloat16
    q = torch.randn(b, sq, hq, d, device="cuda", generator=gen).to(dt).requires_grad_()
    k = torch.randn(b, sk, hk, d, device="cuda", generator=gen).to(dt).requires_grad_()
    v = torch.randn(b, sk, hk, d, device="cuda", generator=gen).to(dt).requires_grad_()
    slopes = (torch.rand(hq, device="cuda", generator=gen) * 0.1).float() if alibi else None
    o = qattn.attention(q, k, v, causal=causal, softcap=softcap, alibi_slopes=slopes)
    dout = torch.randn(o.shape, device="cuda", generator=gen).to(dt)
    got = torch.autograd.grad(o, (q, k, v), dout)

    def eager(q, k, v):
        qb, kb, vb = (x.transpose(1, 2) for x in (q, k, v))
        kb = kb.repeat_interleave(hq // hk, dim=1)
        vb = vb.repeat_interleave(hq // hk, dim=1)
        s = (qb @ kb.transpose(-1, -2)).float() * d ** -0.5
        qi = torch.arange(sq, device="cuda")[:, None]
        ki = torch.arange(sk, device="cuda")[None, :]
        if alibi:
            s = s - slopes[None, :, None, None] * (qi + sk - sq - ki).abs()
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        if causal:
            s = s.masked_fill(ki > qi + sk - sq, float("-inf"))
        p = torch.softmax(s, dim=-1).to(qb.dtype)
        return (p @ vb).transpose(1, 2)
    ref, low = [], []
    for cast, out in ((torch.float32, ref), (None, low)):
        xs = [(x.detach().to(cast) if cast else x.detach().clone()).requires_grad_() for x in (q, k, v)]
        out.extend(torch.autograd.grad(eager(*xs), xs, dout.to(xs[0].dtype)))
    for name, g, r, lo in zip(("dq", "dk", "dv"), got, ref, low):
        err = (g.float() - r).abs().max().item()
        bound = 2 * (lo.float() - r).abs().max().item() + 1e-4 * max(1.0, r.abs().max().item())
        assert err <= bound, f"{name}: max abs err {err:.3e} > {bound:.3e}"


@pytest.mark.parametrize("causal", [True, False])
def test_attention_backward_through_documents_with_long_runs_of_empty_tiles(gen, causal):
    """Document masking over 1500 packed tokens, 7 random documents a row (empty documents
    included): the forward's and the backward's `{skip: document}` loops walk runs of whole tiles no
    key of the tile's documents reaches (four clauses a round, next_visible), so a wrong walk skips
    a visible tile or visits past the end. Output and gradients against fp32 autograd of the masked
    attention, by FlashAttention's rule."""
    from test_gpu import packed_segments
    b, s, hq, hk, d = 2, 1500, 4, 2, 64
    dt = torch.bfloat16
    q = torch.randn(b, s, hq, d, device="cuda", generator=gen).to(dt).requires_grad_()
    k = torch.randn(b, s, hk, d, device="cuda", generator=gen).to(dt).requires_grad_()
    v = torch.randn(b, s, hk, d, device="cuda", generator=gen).to(dt).requires_grad_()
    seg = packed_segments(b, s, gen, docs=7)
    o = qattn.attention(q, k, v, causal=causal, segment_ids=(seg, seg))
    dout = torch.randn(o.shape, device="cuda", generator=gen).to(dt)
    got = torch.autograd.grad(o, (q, k, v), dout)
    keep = (seg[:, None, :, None] == seg[:, None, None, :])  # (b, 1, s, s)
    if causal:
        keep = keep & visible(s, s, True)[None, None]

    def eager(q, k, v):
        qb, kb, vb = (x.transpose(1, 2) for x in (q, k, v))
        kb = kb.repeat_interleave(hq // hk, dim=1)
        vb = vb.repeat_interleave(hq // hk, dim=1)
        sc = (qb @ kb.transpose(-1, -2)).float() * d ** -0.5
        p = torch.softmax(sc.masked_fill(~keep, float("-inf")), dim=-1).to(qb.dtype)
        return (p @ vb).transpose(1, 2)
    ref, low = [], []
    for cast, out in ((torch.float32, ref), (None, low)):
        xs = [(x.detach().to(cast) if cast else x.detach().clone()).requires_grad_() for x in (q, k, v)]
        y = eager(*xs)
        out.append(y.detach())
        out.extend(torch.autograd.grad(y, xs, dout.to(xs[0].dtype)))
    for name, g, r, lo in zip(("o", "dq", "dk", "dv"), (o.detach(),) + got, ref, low):
        err = (g.float() - r).abs().max().item()
        bound = 2 * (lo.float() - r).abs().max().item() + 1e-4 * max(1.0, r.abs().max().item())
        assert err <= bound, f"{name}: max abs err {err:.3e} > {bound:.3e}"


def test_backward_refuses_a_dq_its_tma_additions_cannot_address(gen):
    """Hopper's backward adds dQ by TMA (an fp32 tensor map of the ABI's dq): a dq view whose address
    is not 16-byte aligned is refused with QATTN_ERR_ALIGNMENT and a message naming dQ, nothing launched
    (dq keeps its values); the aligned view of the same buffer runs. (Through qattn.attention dq is the
    package's own zeroed fp32 buffer: this is the C ABI's case.)"""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the TMA additions are Hopper's (sm90) backward")
    from qattn import _abi, _backward
    from qattn._attention import _device_target
    b, s, h, d = 1, 130, 2, 128
    build = _backward.build_for(torch, _device_target, "bf16", d, d, {"mask": {"kind": "causal", "align": "bottom_right"}}, False,
                                torch.device("cuda"))
    lib = build.library
    q, k, v, o, dout = (torch.randn(b, s, h, d, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(5))
    lse = torch.full((b, h, s), 8.0, device="cuda")
    dk, dv = torch.zeros_like(q), torch.zeros_like(q)
    buf = torch.zeros(b * s * h * d + 4, device="cuda")
    for off, want in ((1, 3), (4, 0)):  # 4 bytes past an aligned base, then 16
        dq = buf[off:off + b * s * h * d].view(b, s, h, d)
        buf.fill_(-7.0 if want else 0.0)
        p = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dv, scale=d ** -0.5)
        ws = _abi.bwd_workspace(torch, lib, p, "cuda")  # noqa: F841 (alive for the launch)
        st = lib.bwd(p, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        assert st == want, (off, st, lib.last_error())
        if want:
            assert "dQ" in lib.last_error() and "16 bytes" in lib.last_error()
            assert bool((buf == -7.0).all()), "a refused launch wrote dq"
        else:
            assert bool(dq.abs().sum() > 0) and bool(torch.isfinite(dq).all())


def test_backward_refuses_a_dk_or_dv_its_tma_stores_cannot_address(gen):
    """Hopper's MHA backward stores its bf16 dK and dV by TMA (tensor maps of the ABI's dk / dv): a view
    whose address is element-aligned but not 16-byte aligned passes the argument checks and is refused
    when its map is made, with QATTN_ERR_ALIGNMENT and a message naming it, before any launch (dq, dk,
    dv keep their values); the 16-byte aligned view of the same buffer runs and writes finite gradients."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the TMA stores are Hopper's (sm90) backward")
    from qattn import _abi, _backward
    from qattn._attention import _device_target
    b, s, h, d = 1, 130, 2, 128
    build = _backward.build_for(torch, _device_target, "bf16", d, d, {"mask": {"kind": "causal", "align": "bottom_right"}}, False,
                                torch.device("cuda"))
    lib = build.library
    assert lib.info["dk_dtype"] == "bf16", lib.info  # (MHA: stored once per key tile)
    q, k, v, o, dout = (torch.randn(b, s, h, d, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(5))
    lse = torch.full((b, h, s), 8.0, device="cuda")
    n = b * s * h * d
    for name in ("dK", "dV"):
        for off, want in ((1, 3), (8, 0)):  # 2 bytes past an aligned base, then 16
            dq = torch.full((b, s, h, d), -7.0, device="cuda")
            buf = torch.full((n + 8,), -7.0, device="cuda", dtype=torch.bfloat16)
            view = buf[off:off + n].view(b, s, h, d)
            other = torch.full((b, s, h, d), -7.0, device="cuda", dtype=torch.bfloat16)
            dk, dv = (view, other) if name == "dK" else (other, view)
            if not want:
                dq.zero_()
            p = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dv, scale=d ** -0.5)
            ws = _abi.bwd_workspace(torch, lib, p, "cuda")  # noqa: F841 (alive for the launch)
            st = lib.bwd(p, torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            assert st == want, (name, off, st, lib.last_error())
            if want:
                assert f"refused {name}" in lib.last_error() and "16 bytes" in lib.last_error(), lib.last_error()
                assert bool((buf == -7.0).all()) and bool((other == -7.0).all()) and bool((dq == -7.0).all()), \
                    "a refused launch wrote a gradient"
            else:
                for t in (dq, dk, dv):
                    assert bool(torch.isfinite(t).all()) and bool(t.float().abs().sum() > 0), name
