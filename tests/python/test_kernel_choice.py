"""Which kernel a call takes, without a GPU (they run in CI): Hopper's short-query and one-tile decoding
kernels (`_build.short_queries`, `kernel_spec`), and what `precompile(short=True)` packs for decoding."""
from conftest import fake_compile_many

import qattn
from qattn import _build


def test_short_gqa_queries_on_hopper_take_the_packed_kernel():
    none = {"mask": {"kind": "none"}}
    assert _build.short_queries("h100", 32, 8, 16, none)
    assert _build.short_queries("h200", 16, 1, 64, none)
    assert not _build.short_queries("h100", 32, 8, 65, none)      # full tiles: nothing to pack
    assert _build.short_queries("h100", 32, 32, 1, none) == "decode1"  # MHA decoding: one 64-row tile, nothing packed
    assert not _build.short_queries("h100", 32, 32, 65, none)     # MHA beyond a tile
    assert not _build.short_queries("sm80", 32, 32, 1, none)
    assert not _build.short_queries("h100", 32, 32, 1, {"mask": {"kind": "none"}, "variants": {"softcap": 30.0}})
    assert not _build.short_queries("sm80", 32, 8, 16, none)      # packing is lowered on sm90a only
    assert not _build.short_queries("h100", 48, 1, 16, none)      # a group of 48 does not divide 64 rows
    assert not _build.short_queries("h100", 32, 8, 16, {"mask": {"kind": "none"}, "variants": {"softcap": 30.0}})
    s = qattn.kernel_spec("bf16", 128, 128, none, False, "h100", short=True)
    assert s["name"] == "py_bf16_d128_none_short" and s["problem"]["seqlen_q"] == _build.SHORT_QUERIES
    assert "problem" not in qattn.kernel_spec("bf16", 128, 128, none, False, "h100")
    # decoding: at most 64 packed rows (seqlen_q x group) take the one-tile kernel, whose spec states one query
    assert _build.short_queries("h100", 32, 8, 16, none) == "decode"     # 64 rows
    assert _build.short_queries("h100", 32, 1, 2, none) == "decode"      # MQA 32/1, 2 queries
    assert _build.short_queries("h100", 32, 8, 17, none) is True         # 68 rows: the 128-row tile
    assert _build.short_queries("h100", 32, 1, 3, none) is True
    assert _build.short_queries("h100", 128, 1, 1, none, v_from_k=True) is True  # absorbed MLA: its own tiles
    d = qattn.kernel_spec("bf16", 128, 128, none, True, "h100", short="decode", split=True)
    assert d["name"] == "py_bf16_d128_none_lse_dec_split" and d["problem"]["seqlen_q"] == 1
    m = qattn.kernel_spec("bf16", 128, 128, none, False, "h100", short="decode1", kv_cache="paged")
    assert m["name"] == "py_bf16_d128_none_dec1_kvpaged" and m["problem"]["seqlen_q"] == 1
    assert (m["heads_q"], m["heads_kv"]) == (1, 1)  # MHA: the planner packs nothing, takes one 64-row tile


def test_precompile_short_packs_what_decoding_uses(monkeypatch, tmp_path):
    """precompile(short=True) adds, per spec: on Hopper the packed short-query kernel and the one-tile
    decoding kernels, packed and for MHA (no variants) and the kernels that split the keys in their TL (the spec's fields and, for one causal query, the
    unmasked ones; packed and not; variants too); elsewhere the LSE twins the fold launches (no
    variants; no mask or bottom-right causal); one combine library per dtype and d_v."""
    from qattn import _pack

    fake_compile_many(monkeypatch)
    built = []
    combined = []
    monkeypatch.setattr(_build, "build", lambda spec, target, reason, **kw: (combined if kw.get("combine") else built)
                        .append(spec) or spec["name"])
    monkeypatch.setattr(_pack, "write_pack", lambda out, builds: len(builds))
    specs = [{"heads_q": 2, "head_dim": 128, "dtype": "bf16", "mask": "causal"},
             {"heads_q": 2, "head_dim": 128, "dtype": "bf16", "mask": "none", "variants": {"softcap": 30.0}},
             {"heads_q": 4, "head_dim": 128, "dtype": "bf16", "mask": "none"},
             {"heads_q": 2, "head_dim": 128, "dtype": "bf16", "mask": "none", "variants": {"alibi": True}}]
    assert qattn.precompile(specs, str(tmp_path), gpu="h100", short=True) == 4 + 15 + 1
    got = sorted((s["name"], s["return_lse"], s.get("split_keys", False)) for s in built)
    assert got == [("py_bf16_d128_causal_dec", False, False), ("py_bf16_d128_causal_dec1", False, False),
                   ("py_bf16_d128_causal_lse_dec1_split", True, True), ("py_bf16_d128_causal_lse_dec_split", True, True),
                   ("py_bf16_d128_causal_lse_short_split", True, True), ("py_bf16_d128_causal_lse_split", True, True),
                   ("py_bf16_d128_causal_short", False, False),
                   ("py_bf16_d128_none_dec", False, False), ("py_bf16_d128_none_dec1", False, False),
                   ("py_bf16_d128_none_lse_dec1_split", True, True), ("py_bf16_d128_none_lse_dec_split", True, True),
                   ("py_bf16_d128_none_lse_short_split", True, True), ("py_bf16_d128_none_lse_split", True, True),
                   ("py_bf16_d128_none_short", False, False),
                   ("py_bf16_d128_none_softcap_lse_split", True, True)], got
    # the split's merge: one combine library per dtype and d_v, its spec stating the short queries
    assert [s["name"] for s in combined] == ["py_bf16_dv128_combine"], combined
    assert combined[0]["problem"]["seqlen_q"] == _build.SHORT_QUERIES
    built.clear()
    combined.clear()
    assert qattn.precompile(specs[:2], str(tmp_path), gpu="a100", short=True) == 2 + 1 + 1
    assert [(s["name"], s["return_lse"], s.get("split_keys", False)) for s in built] == [("py_bf16_d128_causal_lse", True, False)]
    assert [s["name"] for s in combined] == ["py_bf16_dv128_combine"]
