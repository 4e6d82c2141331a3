"""DeepSeek's absorbed-MLA decoding (docs/python.md, "Absorbed MLA decoding (DeepSeek-V3)"):
qattn.attention_with_kvcache(q, k_cache, None, cache_seqlens, block_table, head_dim_v=512) and its
FlashMLA-style alias qattn.flash_mla_with_kvcache, where V is the first head_dim_v columns of the one
latent cache (spec "v_from_k": true).

Without torch (CI): the kernel spec (v_from_k, head dims 576/512, the packed tile for a group of
128), the argument checks of check_v_from_k, and through the `qattn` executable the spec's
validation and plans (packed, V a view of K; Hopper only; split keys in the TL). Where torch is installed: the
call's checks on CPU tensors (they come before any CUDA work). On a Hopper GPU: 128 query heads over
one kv head of 576 columns, paged caches of 64-row pages in shuffled order with NaN in every row no
key occupies, ragged key counts in 1..2000, one and two (causal) queries, against an fp64 reference
with FlashAttention's rule (tests/python/test_kvcache.py's helpers), the LSE too; a contiguous cache;
k_new appended."""
import json

import pytest

from conftest import gpu_skip_reason, needs_cli

import qattn
from qattn import _build, _cli, _kvcache, _variants, flash_mla_interface
from qattn.errors import BuildError, SpecError

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (the CPU CI installs none)")

NONE = {"mask": {"kind": "none"}}
CAUSAL = {"mask": {"kind": "causal", "align": "bottom_right"}}


def _fields(causal=False, window=None, softcap=None):
    return _variants.split_launch_args(_variants.variant_fields(causal, window, softcap))[0]


# ---- the kernel spec (no torch) ---------------------------------------------------------------------

@pytest.mark.parametrize("kv", ["paged", "lengths"])
def test_kernel_spec_says_v_from_k_and_states_one_query_for_the_packed_tile(kv):
    s = _build.kernel_spec("bf16", 576, 512, NONE, False, "h100", short=True, kv_cache=kv, v_from_k=True)
    assert s["v_from_k"] is True
    assert (s["head_dim_qk"], s["head_dim_v"], s["dtype"], s["kv_cache"]) == (576, 512, "bf16", kv)
    assert s["name"].endswith("_vk") and "_short" in s["name"]
    # the planner packs when that saves rows: with its 64-row tile and the canonical group of 2, one query
    assert s["problem"]["seqlen_q"] == _build.V_FROM_K_PACK_QUERIES == 1
    assert "split_keys" not in s and "varlen" not in s
    plain = _build.kernel_spec("bf16", 576, 512, NONE, False, "h100", short=True, kv_cache=kv)
    assert "v_from_k" not in plain and plain["name"] != s["name"]  # (different kernels, different cache keys)
    assert plain["problem"]["seqlen_q"] == _build.SHORT_QUERIES
    unpacked = _build.kernel_spec("bf16", 576, 512, CAUSAL, True, "h100", kv_cache=kv, v_from_k=True)
    assert unpacked["v_from_k"] is True and "problem" not in unpacked and unpacked["return_lse"] is True


def test_short_queries_packs_a_group_of_128_only_for_v_from_k():
    """DeepSeek-V3: 128 query heads over one latent kv head. The packed kernel accepts a group that
    divides 64 or is a multiple of its 64 rows (the v_from_k planner's whole tiles); without v_from_k
    a group of 128 stays unpacked as before."""
    sq = _build.short_queries
    assert sq("h100", 128, 1, 1, NONE, v_from_k=True)
    assert sq("h200", 128, 1, 2, CAUSAL, v_from_k=True)
    assert sq("h100", 256, 2, 1, NONE, v_from_k=True)
    assert sq("h100", 16, 1, 1, NONE, v_from_k=True)  # a group dividing 64 packs too
    assert not sq("h100", 128, 1, 1, NONE)
    assert not sq("a100", 128, 1, 1, NONE, v_from_k=True)
    assert not sq("h100", 96, 1, 1, NONE, v_from_k=True)  # neither divides nor is a multiple of 64
    assert not sq("h100", 128, 1, _build.SHORT_QUERIES + 1, NONE, v_from_k=True)
    assert not sq("h100", 128, 128, 1, NONE, v_from_k=True)  # MHA: nothing to pack


# ---- the argument checks (no torch) -----------------------------------------------------------------

@pytest.mark.parametrize("bad", [None, 576, 640, 500, 100, 0, -64, 64, 320, True, 512.0, "512"])
def test_head_dim_v_missing_or_wrong_is_py0105(bad):
    with pytest.raises(SpecError) as e:
        _kvcache.check_v_from_k(576, bad)
    assert e.value.code == "PY0105", e.value
    if bad is None:
        assert "head_dim_v" in str(e.value) and "512" in (e.value.hint or "")


def test_check_v_from_k_accepts_deepseek_and_splits_refuses_v_new_window_softcap():
    ok = _kvcache.check_v_from_k
    assert ok(576, 512) == 512
    assert ok(576, 384) == 384 and ok(256, 128) == 128
    assert ok(None, 512) == 512  # (q not a 4-D tensor: _check reports that)
    for n in (0, 1, 2, 7, 64):  # 0: qattn's choice; 1: none; N: N parts (split in the TL)
        assert ok(576, 512, num_splits=n) == 512
    with pytest.raises(SpecError) as e:
        ok(576, 512, v_new_given=True)
    assert e.value.code == "PY0105" and "k_new" in (e.value.hint or "")
    for f in (_fields(window=(128, 0)), _fields(True, window=(1024, 0)), _fields(softcap=30.0)):
        with pytest.raises(SpecError) as e:
            ok(576, 512, fields=f)
        assert e.value.code == "PY0107", f
    # what passes trivially: causal (both alignments), an unbounded window, softcap 0 / None
    for f in (_fields(True), _fields("top_left"), _fields(window=(-1, -1)), _fields(True, window=(-1, 0)),
              _fields(softcap=0), NONE):
        assert ok(576, 512, fields=f) == 512, f


def test_flash_mla_with_kvcache_is_exported():
    assert qattn.flash_mla_with_kvcache is _kvcache.flash_mla_with_kvcache
    assert flash_mla_interface.flash_mla_with_kvcache is _kvcache.flash_mla_with_kvcache
    import inspect  # FlashMLA's parameter order, so positional calls written for it land where they mean
    assert list(inspect.signature(flash_mla_interface.flash_mla_with_kvcache).parameters)[:9] == [
        "q", "k_cache", "block_table", "cache_seqlens", "head_dim_v", "tile_scheduler_metadata", "num_splits",
        "softmax_scale", "causal"]
    assert "flash_mla_with_kvcache" in qattn.__all__


# ---- the spec through the `qattn` executable (no GPU) -----------------------------------------------

def _plan(tmp_path, spec, *extra):
    f = tmp_path / f"{spec['name']}-{spec['gpu']}.json"
    f.write_text(json.dumps(spec))
    return _cli.run(["plan", "--spec", str(f), "--print"] + list(extra), timeout=300)


@needs_cli
@pytest.mark.parametrize("kv,fields,lse", [("paged", NONE, False), ("paged", CAUSAL, True), ("lengths", CAUSAL, False)])
def test_v_from_k_spec_is_valid_and_plans_packed_with_v_a_view_of_k(tmp_path, kv, fields, lse):
    """The spec the binding builds is the CLI's canonical one (v_from_k kept), and its Hopper plan
    (checked and interpreted against the reference) packs the query heads and reads V from K's tile."""
    s = _build.kernel_spec("bf16", 576, 512, fields, lse, "h100", short=True, kv_cache=kv, v_from_k=True)
    c = _build.canonical_spec(s)
    assert c["v_from_k"] is True and (c["head_dim_qk"], c["head_dim_v"]) == (576, 512)
    r = _plan(tmp_path, s)
    assert r.rc == 0, r.stderr
    assert "{pack: heads_q / heads_kv}" in r.stdout, r.stdout[:2000]
    assert "{view: K}" in r.stdout and "split columns" in r.stdout
    assert "Allocate V in global" not in r.stdout  # no V of its own: the cache is K alone


@needs_cli
def test_v_from_k_is_refused_off_hopper_and_splits_keys_on_hopper(tmp_path):
    s = _build.kernel_spec("bf16", 576, 512, NONE, False, "a100", kv_cache="paged", v_from_k=True)
    r = _plan(tmp_path, s, "--no-verify")
    assert r.rc != 0
    with pytest.raises(BuildError) as e:
        _cli.check(r, "planning")
    assert "PLAN0103" in e.value.codes, e.value
    split = _build.kernel_spec("bf16", 576, 512, NONE, True, "h100", kv_cache="paged", split=True, v_from_k=True)
    assert _build.canonical_spec(split)["split_keys"] is True
    r = _plan(tmp_path, split, "--no-verify")
    assert r.rc == 0, r.stdout + r.stderr
    assert "split = 0: splits" in r.stdout and "{view: K}" in r.stdout and "split columns" in r.stdout
    varlen = dict(split, varlen=True, split_keys=False)
    with pytest.raises(SpecError) as e:
        _build.canonical_spec(varlen)
    assert "SPEC0237" in e.value.codes, e.value


# ---- the call's checks on CPU tensors (torch, no GPU) ----------------------------------------------

@needs_torch
def test_attention_with_kvcache_v_from_k_argument_checks():
    """Every absorbed-MLA check comes before the device check: with valid arguments CPU tensors get
    PY0103 (the device), with invalid ones the argument's code."""
    q = torch.zeros(2, 1, 8, 256, dtype=torch.bfloat16)
    cache = torch.zeros(4, 16, 1, 256, dtype=torch.bfloat16)
    lens = torch.ones(2, dtype=torch.int32)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    call = qattn.attention_with_kvcache
    cases = [
        (dict(), "PY0105"),  # head_dim_v missing
        (dict(head_dim_v=256), "PY0105"),  # not below d
        (dict(head_dim_v=64), "PY0105"),  # not a multiple of 128 (two warpgroups of 64 columns)
        (dict(head_dim_v=128, num_splits=3), "PY0103"),  # valid: three parts
        (dict(head_dim_v=128, num_splits=-1), "PY0105"),
        (dict(head_dim_v=128, k_new=cache[:2, :1], v_new=cache[:2, :1, :, :128]), "PY0105"),
        (dict(head_dim_v=128, window=(8, 0)), "PY0107"),
        (dict(head_dim_v=128, softcap=30.0), "PY0107"),
        (dict(head_dim_v=128, causal="sideways"), "PY0107"),
        (dict(head_dim_v=128), "PY0103"),  # valid: then the device (a CPU tensor)
        (dict(head_dim_v=128, causal=True, num_splits=1), "PY0103"),
        (dict(head_dim_v=128, window=(-1, -1), softcap=0), "PY0103"),
    ]
    for kw, code in cases:
        with pytest.raises(qattn.QattnError) as e:
            call(q, cache, None, lens, table, **kw)
        assert e.value.code == code, (kw, e.value)
    with pytest.raises(qattn.QattnError) as e:  # k_cache's head dim is not q's
        call(q, cache[..., :128], None, lens, table, head_dim_v=128)
    assert e.value.code == "PY0105"
    with pytest.raises(qattn.QattnError) as e:  # head_dim_v with a v_cache of another width
        call(q, cache, cache[..., :128], lens, table, head_dim_v=256)
    assert e.value.code == "PY0105"
    with pytest.raises(qattn.QattnError) as e:  # the FlashMLA-style alias: the same checks
        qattn.flash_mla_with_kvcache(q, cache, table, lens, 100)
    assert e.value.code == "PY0105"
    with pytest.raises(qattn.QattnError) as e:
        qattn.flash_mla_with_kvcache(q, cache, table, lens, 128, causal=True)
    assert e.value.code == "PY0103"
    with pytest.raises(qattn.QattnError) as e:  # inference only
        call(q.clone().requires_grad_(), cache, None, lens, table, head_dim_v=128)
    assert e.value.code == "PY0109"


# ---- the kernels on a Hopper GPU --------------------------------------------------------------------

def _hopper_skip_reason():
    why = gpu_skip_reason()
    if why:
        return why
    from qattn import _attention
    target = _attention._device_target(torch, torch.device("cuda"))[0]
    return None if target in ("h100", "h200") else f"absorbed MLA is planned for Hopper only (this GPU: {target})"


HOPPER_WHY = _hopper_skip_reason() if torch is not None else "torch is not installed (the CPU CI installs none)"
hopper = pytest.mark.skipif(HOPPER_WHY is not None, reason=HOPPER_WHY or "")

HQ, D, DV, PAGE = 128, 576, 512, 64


def _lens(g, b, cap):
    """Ragged key counts in 1..cap: a multiple of 64, one that is not (a partial last page), one key,
    the rest random."""
    lens = [1 + int(x) for x in torch.randint(cap, (b,), generator=g)]
    lens[0] = 64 * int(torch.randint(1, cap // 64 + 1, (1,), generator=g))
    lens[1] = 64 * int(torch.randint(1, cap // 64, (1,), generator=g)) + 1 + int(torch.randint(62, (1,), generator=g))
    if b > 2:
        lens[2] = 1
    return lens


def _latent_cache(g, b, cap, lens, page, dt=None):
    """Random latent keys (b, cap, 1, 576) and a cache holding each sequence's first lens[i] rows with
    NaN everywhere else: contiguous (page 0) or a pool of b * pages + 3 pages in shuffled order (the
    block table a random permutation). Returns (k, k_cache, block_table or None)."""
    dt = dt or torch.bfloat16
    k = torch.randn(b, cap, 1, D, generator=g).to("cuda", dt)
    if page == 0:
        kc = torch.full_like(k, float("nan"))
        for i, n in enumerate(lens):
            kc[i, :n] = k[i, :n]
        return k, kc, None
    pages = -(-cap // page)
    num = b * pages + 3
    kc = torch.full((num, page, 1, D), float("nan"), device="cuda", dtype=dt)
    table = torch.randperm(num, generator=g)[: b * pages].view(b, pages).to("cuda", torch.int32)
    for i, n in enumerate(lens):
        for r0 in range(0, n, page):
            r1 = min(n, r0 + page)
            kc[table[i, r0 // page], : r1 - r0] = k[i, r0:r1]
    return k, kc, table


def _check(o, lse, q, k, lens, causal):
    """Each sequence against tests/python/test_kvcache.py's reference over its own keys with V = K[..., :512]
    (fp64, and a same-precision torch attention for FlashAttention's rule), and the LSE."""
    from test_kvcache import check
    assert o.shape == (q.shape[0], q.shape[1], HQ, DV) and o.dtype == q.dtype
    assert not torch.isnan(o).any()
    check(o, lse, q, k, k[..., :DV], lens, causal, q.dtype, lse_too=lse is not None)


@hopper
@pytest.mark.parametrize("b,sq,causal", [(2, 1, False), (3, 1, True), (4, 2, True), (3, 2, False)])
def test_flash_mla_paged_matches_reference(b, sq, causal):
    g = torch.Generator().manual_seed(1000 * b + 10 * sq + causal)
    cap = 2048
    lens = _lens(g, b, 2000)
    k, kc, table = _latent_cache(g, b, cap, lens, PAGE)
    q = torch.randn(b, sq, HQ, D, generator=g).to("cuda", torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    meta, parts = flash_mla_interface.get_mla_metadata(seqlens, HQ, 1)  # FlashMLA's call, its results ignored
    o, lse = flash_mla_interface.flash_mla_with_kvcache(q, kc, table, seqlens, DV, meta, parts, causal=causal)
    assert lse.shape == (b, HQ, sq) and lse.dtype == torch.float32
    _check(o, lse, q, k, lens, causal)
    o2 = qattn.attention_with_kvcache(q, kc, None, seqlens, table, causal=causal, head_dim_v=DV)
    assert (o2.float() - o.float()).abs().max().item() <= 1e-2  # the same call (here the kernel without LSE)
    assert seqlens.tolist() == lens


@hopper
@pytest.mark.parametrize("sq,causal", [(1, False), (2, True)])
def test_contiguous_cache_and_lse_match_reference(sq, causal):
    g = torch.Generator().manual_seed(7 + sq)
    b, cap = 3, 2000
    lens = _lens(g, b, cap)
    k, kc, _ = _latent_cache(g, b, cap, lens, 0)
    q = torch.randn(b, sq, HQ, D, generator=g).to("cuda", torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    o, lse = qattn.attention_with_kvcache(q, kc, None, seqlens, causal=causal, return_lse=True, head_dim_v=DV)
    _check(o, lse, q, k, lens, causal)
    o1, _ = qattn.flash_mla_with_kvcache(q, kc, None, seqlens, DV, softmax_scale=D ** -0.5, causal=causal)
    assert torch.equal(o1, o)
    o3, _ = qattn.flash_mla_with_kvcache(q, kc, None, seqlens, DV, softmax_scale=0.5 * D ** -0.5, causal=causal)
    assert not torch.isnan(o3).any() and not torch.equal(o3, o)  # the scale reaches the kernel


@hopper
def test_k_new_is_appended_and_its_first_columns_are_the_values():
    """k_new alone with v_cache=None: written at each sequence's end (through the block table), then
    attended with V = its first 512 columns; the same as writing the rows by hand."""
    g = torch.Generator().manual_seed(5)
    b, cap, new = 3, 512, 2
    lens = [100, 64, 509]
    _, kc, table = _latent_cache(g, b, cap, lens, PAGE)
    kn = torch.randn(b, new, 1, D, generator=g).to("cuda", torch.bfloat16)
    q = torch.randn(b, new, HQ, D, generator=g).to("cuda", torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    kc2 = kc.clone()
    with pytest.raises(SpecError) as e:  # 509 + 2 fits, 510 + 2 would not: first a call that does not fit
        qattn.attention_with_kvcache(q, kc, None, seqlens + 2, table, k_new=kn, head_dim_v=DV)
    assert e.value.code == "PY0105"
    o = qattn.attention_with_kvcache(q, kc, None, seqlens, table, k_new=kn, causal=True, head_dim_v=DV)
    for i, n in enumerate(lens):
        for r in range(new):
            pos = n + r
            kc2[int(table[i, pos // PAGE]), pos % PAGE] = kn[i, r]
    assert torch.equal(kc.nan_to_num(7.0), kc2.nan_to_num(7.0))
    want = qattn.attention_with_kvcache(q, kc2, None, seqlens + new, table, causal=True, head_dim_v=DV)
    assert torch.equal(o, want)


@hopper
def test_v_from_k_kernel_refuses_a_v_that_is_not_k():
    """The generated kernel's C ABI: v must be k (pointer and strides), d_v = head_dim_v; a launch with
    another v gets an error status, not a wrong result (the binding always passes k_cache as v)."""
    from qattn import _abi, _attention
    b, sq = 2, 1
    g = torch.Generator().manual_seed(3)
    lens = [70, 128]
    k, kc, table = _latent_cache(g, b, 128, lens, PAGE)
    q = torch.randn(b, sq, HQ, D, generator=g).to("cuda", torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    qattn.attention_with_kvcache(q, kc, None, seqlens, table, head_dim_v=DV)  # builds the kernel
    bld = _attention._build_for(torch, "bf16", D, DV, NONE, False, q.device, shape=(HQ, 1, sq), kv_cache="paged",
                                v_from_k=True)
    assert bld.spec["v_from_k"] is True and bld.library.info["d_v"] == DV
    o = q.new_empty((b, sq, HQ, DV))
    roles = bld.library.info.get("kv_cache", {})
    given = {roles.get("lengths"): seqlens, roles.get("block_table"): table}
    names = [a["name"] for a in bld.library.info.get("aux", [])]
    vc = kc[..., :DV].clone()  # a V of its own: refused
    p = _abi.fill_params(q, kc, vc, o, None, D ** -0.5, aux=[given[n] for n in names])
    p.seqlen_k, p.page_size, p.pages, p.num_pages = 128, PAGE, int(table.shape[1]), int(kc.shape[0])
    st = bld.library.fwd(p, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert st != 0, "a v_from_k kernel launched with v != k must return an error"
    p = _abi.fill_params(q, kc, kc, o, None, D ** -0.5, aux=[given[n] for n in names])
    p.seqlen_k, p.page_size, p.pages, p.num_pages = 128, PAGE, int(table.shape[1]), int(kc.shape[0])
    p.d_v = DV
    assert p.v == p.k and (p.v_batch_stride, p.v_row_stride, p.v_head_stride) == \
        (p.k_batch_stride, p.k_row_stride, p.k_head_stride)
    assert bld.library.fwd(p, torch.cuda.current_stream().cuda_stream) == 0, bld.library.last_error()
    torch.cuda.synchronize()
    _check(o, None, q, k, lens, False)


@hopper
@pytest.mark.parametrize("sq,causal", [(1, False), (2, True)])
def test_every_split_count_equals_no_split(sq, causal):
    """The keys cut into 1..16 parts in the kernel's TL (some parts empty for the short sequences) and
    merged by the combine: every count within tolerance of one launch and of the reference; the
    automatic choice (num_splits=0) splits a batch of 3 (6 tiles on an SM count over 100)."""
    g = torch.Generator().manual_seed(31 + sq)
    b, cap = 3, 4096
    lens = _lens(g, b, cap)
    k, kc, table = _latent_cache(g, b, cap, lens, PAGE)
    q = torch.randn(b, sq, HQ, D, generator=g).to("cuda", torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    call = lambda n: qattn.attention_with_kvcache(q, kc, None, seqlens, table, causal=causal, return_lse=True, head_dim_v=DV,
                                                  num_splits=n)
    o1, l1 = call(1)
    _check(o1, l1, q, k, lens, causal)
    from qattn import _kvcache
    assert _kvcache.mla_splits(torch, q, cap, HQ, 1, sq) > 1
    for n in (0, 2, 3, 16):
        o, lse = call(n)
        _check(o, lse, q, k, lens, causal)
        assert (o.float() - o1.float()).abs().max().item() <= 2e-2, n
        empty = torch.isinf(l1)  # a causal query before the sequence's only key sees none: -inf in both
        assert torch.equal(empty, torch.isinf(lse)), n
        assert (lse - l1)[~empty].abs().max().item() <= 1e-3, n


@needs_torch
def test_get_mla_metadata_gives_flash_mla_types_and_checks_its_arguments():
    """FlashMLA's metadata call: (tile_scheduler_metadata (0, 8) int32, num_splits (batch + 1,) int32) on
    cache_seqlens' device; bad arguments PY0105."""
    seqlens = torch.tensor([5, 70, 1], dtype=torch.int32)
    meta, parts = flash_mla_interface.get_mla_metadata(seqlens, 128, 1)
    assert meta.shape == (0, 8) and meta.dtype == torch.int32
    assert parts.shape == (4,) and parts.dtype == torch.int32 and parts.device == seqlens.device
    for args in ((seqlens[None], 128, 1), ([5, 70], 128, 1), (seqlens, 0, 1), (seqlens, 128, True), (seqlens, 128.0, 1)):
        with pytest.raises(SpecError) as e:
            flash_mla_interface.get_mla_metadata(*args)
        assert e.value.code == "PY0105", args
