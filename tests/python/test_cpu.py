"""The binding's tests that need no GPU (they run in CI): import without torch, the C ABI struct
against the header, spec diagnostics, the target policy, variant arguments, missing tools, and
the kernel cache (one nvcc build)."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import REPO, fake_compile_many, have_executable, have_nvcc, needs_cli

import qattn
from qattn import _abi, _build, _cli, _variants


def _pythonpath():
    return os.path.dirname(os.path.dirname(os.path.abspath(qattn.__file__)))


def _run_python(code, env=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = _pythonpath() + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=120)


# ---- import and the C ABI -------------------------------------------------------------------------

def test_import_without_torch():
    """`import qattn` and the spec-level API work where torch cannot be imported; attention() then
    raises a ToolchainError (PY0204) instead of an ImportError."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import qattn\n"
        "assert qattn.kernel_spec('bf16', 128, 128, {'mask': {'kind': 'none'}}, False, 'sm80')['name']\n"
        "try:\n"
        "    qattn.attention(1, 2, 3)\n"
        "except qattn.ToolchainError as e:\n"
        "    assert e.code == 'PY0204', e\n"
        "    print('ok', e.code)\n"
    )
    r = _run_python(code)
    assert r.returncode == 0, r.stderr
    assert "ok PY0204" in r.stdout


def _header_fields(struct="qattn_fwd_params"):
    text = open(os.path.join(REPO, "include", "qattn", "qattn.h")).read()
    version = int(re.search(r"#define\s+QATTN_ABI_VERSION\s+(\d+)", text).group(1))
    body = re.search(r"typedef struct " + struct + r" \{(.*?)\} " + struct + ";", text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        parts = [p.strip() for p in decl.replace("*", " ").split(",")]
        names.append(re.sub(r"\[.*\]", "", parts[0].split()[-1]))
        names += [re.sub(r"\[.*\]", "", p.split()[-1]) for p in parts[1:]]
    return version, names


def test_abi_struct_matches_header():
    """python/qattn/_abi.py is the one ctypes copy of qattn_fwd_params: same version, same fields
    in the same order as include/qattn/qattn.h."""
    version, names = _header_fields()
    assert qattn.QATTN_ABI_VERSION == version
    assert [f[0] for f in _abi.Params._fields_] == names


def test_backward_abi_struct_matches_header():
    """qattn_bwd_params (the backward pass's ABI) likewise: _abi.BwdParams field for field."""
    _, names = _header_fields("qattn_bwd_params")
    assert [f[0] for f in _abi.BwdParams._fields_] == names
    assert "dq" in names and "do_row_stride" in names


def test_backward_of_custom_expressions_is_refused_with_py0109():
    from qattn import _backward
    assert _backward.supported({"mask": {"kind": "causal", "align": "bottom_right"}})
    assert _backward.supported({"mask": {"kind": "window", "left": 8, "right": 0}})
    assert _backward.supported({"mask": {"kind": "none"}, "variants": {"softcap": 30.0, "alibi": True}})
    fields = {"mask": {"kind": "none"}, "variants": {"score_mod": "score * 2.0"}}
    assert not _backward.supported(fields)
    with pytest.raises(qattn.SpecError) as e:
        _backward.refuse(fields)
    assert e.value.code == "PY0109" and "score_mod" in str(e.value)


def test_kernel_info_is_checked_before_the_verifiers_use_it():
    # qattn_kernel_info may be LLM-written: missing optional fields get their defaults, a missing
    # or ill-typed required field is a ValueError naming it (never a KeyError or a huge allocation)
    base = {"arch": "sm90", "dtype": "bf16", "d_qk": 64, "d_v": 64, "mask": "none"}
    info = _abi.check_info(base)
    assert info["out_dtype"] == "bf16" and info["lse"] is False and info["aux"] == []
    assert _abi.check_info({**base, "out_dtype": "fp16"})["out_dtype"] == "fp16"
    bad = [
        ([1, 2], "not a JSON object"),
        ({k: v for k, v in base.items() if k != "dtype"}, "missing field 'dtype'"),
        ({**base, "d_v": 10**9}, "'d_v'"),
        ({**base, "d_qk": "64"}, "'d_qk'"),
        ({**base, "d_qk": True}, "'d_qk'"),
        ({**base, "mask": "rm -rf"}, "'mask'"),
        ({**base, "lse": "yes"}, "'lse'"),
        ({**base, "mask": "window"}, "missing field 'window'"),
        ({**base, "mask": "window", "window": [1, -2]}, "'window'"),
        ({**base, "aux": "x" * 10}, "'aux'"),
    ]
    for info, what in bad:
        with pytest.raises(ValueError, match=re.escape(what)):
            _abi.check_info(info)


def test_gpu_helpers_reuse_the_package_struct():
    """tests/gpu/qattn_lib.py (verify.py, time_kernel.py, bench_sm80.py) takes the struct from the package."""
    sys.path.insert(0, os.path.join(REPO, "tests", "gpu"))
    try:
        import qattn_lib
    finally:
        sys.path.pop(0)
    assert qattn_lib.Params.__name__ == "Params" and qattn_lib.QATTN_ABI_VERSION == qattn.QATTN_ABI_VERSION
    assert [f[0] for f in qattn_lib.Params._fields_] == [f[0] for f in _abi.Params._fields_]
    assert qattn_lib.Kernel is _abi.Kernel


def test_gpu_step_modules_live_in_the_package():
    """`qattn generate` runs `python -m qattn.verify` and `-m qattn.timing` (src/pipeline/generate.cc);
    tests/gpu/verify.py and time_kernel.py only forward to them. Checked on the source (the modules
    import torch, which the CPU-only CI does not install)."""
    import ast
    for module, wrapper in (("verify", "verify.py"), ("timing", "time_kernel.py")):
        src = os.path.join(REPO, "python", "qattn", module + ".py")
        tree = ast.parse(open(src).read())
        assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body), src
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert any(n.module == "qattn._abi" for n in imports), "the ABI comes from the package"
        assert not any(n.module == "qattn_lib" for n in imports)
        fwd = open(os.path.join(REPO, "tests", "gpu", wrapper)).read()
        assert f"from qattn.{module} import main" in fwd


# ---- target policy and variants -----------------------------------------------------------------

def test_target_policy_hopper_uses_sm90_path(monkeypatch):
    monkeypatch.delenv("QATTN_TARGET", raising=False)
    target, reason = qattn.target_for_capability((9, 0), "NVIDIA H100 80GB HBM3")
    assert target == "h100" and "sm90a" in reason and "QATTN_TARGET=a100" in reason
    assert qattn.target_for_capability((8, 0))[0] == "sm80"
    assert qattn.target_for_capability((7, 5))[0] == "sm75"
    with pytest.raises(qattn.DeviceError) as e:
        qattn.target_for_capability((6, 1))
    assert e.value.code == "PY0403"
    monkeypatch.setenv("QATTN_TARGET", "a100")
    assert qattn.target_for_capability((9, 0))[0] == "a100"


def test_variant_arguments():
    vf = _variants.variant_fields
    assert vf() == {"mask": {"kind": "none"}}
    assert vf(causal=True) == {"mask": {"kind": "causal", "align": "bottom_right"}}
    assert vf(causal="top_left") == {"mask": {"kind": "causal", "align": "top_left"}}
    assert vf(window=(128, 0)) == {"mask": {"kind": "window", "left": 128, "right": 0}}
    assert vf(window=64, causal=True) == {"mask": {"kind": "window", "left": 64, "right": 0}}
    assert vf(window=(-1, 0)) == {"mask": {"kind": "causal", "align": "bottom_right"}}
    assert vf(window=(-1, -1)) == {"mask": {"kind": "none"}}
    # unbounded on one side: a window kernel with -1 at launch
    assert vf(window=(8, -1)) == {"mask": {"kind": "window", "left": 8, "right": -1}}
    assert vf(window=(-1, 8)) == {"mask": {"kind": "window", "left": -1, "right": 8}}
    for bad in (dict(causal="yes"), dict(window=(8, -2)), dict(window=(2**30, 0)), dict(window=(8, 4), causal=True),
                dict(window="wide"), dict(window=(8, 0), causal="top_left")):
        with pytest.raises(qattn.SpecError) as e:
            vf(**bad)
        assert e.value.code == "PY0107", bad
    assert vf(softcap=30.0, causal=True) == {"mask": {"kind": "causal", "align": "bottom_right"},
                                             "variants": {"softcap": 30.0}}
    assert vf(softcap=0) == {"mask": {"kind": "none"}}  # 0 / None: no soft-capping
    for bad in (-1.0, "big", float("nan"), float("inf")):
        with pytest.raises(qattn.SpecError) as e:
            vf(softcap=bad)
        assert e.value.code == "PY0107", bad
    # custom TL expressions: passed on verbatim (the spec validator and the interpreter check them)
    f = vf(causal=True, mask_mod=" kv_idx % 256 < 16 ", score_mod="score * 0.5")
    assert f["variants"] == {"mask_mod": "kv_idx % 256 < 16", "score_mod": "score * 0.5"}
    for bad in ("", "  ", 3, ["kv_idx < 3"]):
        with pytest.raises(qattn.SpecError) as e:
            vf(mask_mod=bad)
        assert e.value.code == "PY0107", bad
    # the spec's shorthands: prefix-LM alone, and the flags of the auxiliary-input variants
    assert vf(prefix_lm=64) == {"mask": {"kind": "none"}, "variants": {"prefix_lm": 64}}
    for bad in (-1, 2.5, True, "64"):
        with pytest.raises(qattn.SpecError) as e:
            vf(prefix_lm=bad)
        assert e.value.code == "PY0107", bad
    for kw in (dict(causal=True), dict(window=(16, 0))):
        with pytest.raises(qattn.SpecError) as e:
            vf(prefix_lm=8, **kw)
        assert e.value.code == "PY0107" and "prefix_lm" in str(e.value)
    f = vf(causal=True, alibi=True, document=True, relative_bias=32)
    assert f["variants"] == {"alibi": True, "document": True, "relative_bias": 32}
    for nb in (31, 0, 8192):
        with pytest.raises(qattn.SpecError) as e:
            vf(relative_bias=nb)
        assert e.value.code == "PY0110", nb
    aux, flags = _variants.aux_arguments(alibi_slopes="s", segment_ids=("a", "b"))
    assert aux == {"alibi_slopes": "s", "seg_q": "a", "seg_k": "b"} and flags == {"alibi": True, "document": True}
    for kw in (dict(segment_ids="ab"), dict(segment_ids=("a",)), dict(relative_bias=[1.0, 2.0])):
        with pytest.raises(qattn.SpecError) as e:
            _variants.aux_arguments(**kw)
        assert e.value.code == "PY0110", kw
    # kernel names carry a digest of the expression: two expressions sharing a long prefix differ
    a = _variants.variant_tag(vf(mask_mod="kv_idx <= q_idx + seqlen_k - seqlen_q and kv_idx % 7 < 3"))
    b = _variants.variant_tag(vf(mask_mod="kv_idx <= q_idx + seqlen_k - seqlen_q and kv_idx % 7 < 4"))
    assert a != b and all(c.isalnum() or c == "_" for c in a + b)


def test_windows_and_softcaps_share_one_kernel():
    """Issue 21: the window sizes and the softcap are launch arguments. 20 calls with 20 windows and
    caps map to ONE kernel key (spec and name), and each call keeps its own values for the launch."""
    vf, split = _variants.variant_fields, _variants.split_launch_args
    keys, names, seen = set(), set(), []
    for i in range(20):
        window = [(16 * i + 1, 0), (i, -1), (-1, i + 1), (3 * i, 2 * i)][i % 4]
        fields, args = split(vf(window=window, softcap=1.0 + 2.5 * i))
        spec = qattn.kernel_spec("bf16", 128, 128, fields, False, "h100")
        keys.add(json.dumps(spec, sort_keys=True))
        names.add(spec["name"])
        seen.append((args["window"], args["softcap"]))
        assert args["window"] == window
    assert len(keys) == 1 and names == {"py_bf16_d128_window_softcap"}, names
    assert len(set(seen)) == 20
    # causal sliding windows share another kernel with every size; no window: no window argument
    fields, args = split(vf(window=(4096, 0), causal=True))
    assert fields["mask"] == {"kind": "window", "left": 256, "right": 0} and args == {"window": (4096, 0)}
    assert split(vf(causal=True)) == ({"mask": {"kind": "causal", "align": "bottom_right"}}, {})


def test_launch_arguments_reach_the_c_abi():
    """fill_params writes the ABI 3 fields; a kernel that reads them refuses a call without them."""
    from qattn import _abi

    class T:
        def __init__(self, *shape):
            self.shape = shape

        def data_ptr(self):
            return 4096

        def stride(self):
            return (self.shape[1] * self.shape[2] * self.shape[3], self.shape[2] * self.shape[3], self.shape[3], 1)

    q, k = T(1, 8, 2, 64), T(1, 9, 1, 64)
    p = _abi.fill_params(q, k, k, q, window=(-1, 7), softcap=12.5)
    assert (p.abi_version, p.window_left, p.window_right, p.softcap) == (qattn.QATTN_ABI_VERSION, -1, 7, 12.5)
    assert (p.page_size, p.pages, p.num_pages) == (0, 0, 0)  # ABI 4: a contiguous cache
    info = _abi.check_info({"dtype": "bf16", "d_qk": 64, "d_v": 64, "mask": "window", "window": "runtime",
                            "args": ["window_left", "window_right"]})
    with pytest.raises(ValueError, match="window"):
        _abi.launch_defaults(info)
    assert _abi.launch_defaults(info, window=(3, 0)) == ((3, 0), None)
    with pytest.raises(ValueError, match="args"):
        _abi.check_info({**info, "args": ["window_left", "rm -rf"]})


@needs_cli
def test_kernel_pack_serves_without_the_compiler(tmp_path):
    """Issue 21: a pack built ahead of time is loaded with no `qattn` command and no nvcc (a fresh
    process whose QATTN_BIN names nothing and whose PATH has no nvcc), its files checked first:
    a changed library, a manifest naming a folder outside the pack, another ABI are refused."""
    if not have_nvcc():
        pytest.skip("nvcc is not installed")
    pack = tmp_path / "pack"
    n = qattn.precompile([{"heads_q": 2, "head_dim": 64, "dtype": "bf16", "mask": "none"}], str(pack), gpu="h100",
                         verbose=False)
    assert n == 1
    m = json.loads((pack / "manifest.json").read_text())
    e = m["kernels"][0]
    assert m["abi"] == qattn.QATTN_ABI_VERSION and e["spec"]["name"] == "py_bf16_d64_none"
    assert set(e["files"]) >= {"libqattn_kernel.so", "spec.json", "code.tl", "kernel.kir", "kernel.cu"}
    code = (
        "import os, qattn\n"
        "from qattn import _build, _pack\n"
        "spec = qattn.kernel_spec('bf16', 64, 64, {'mask': {'kind': 'none'}}, False, 'h100')\n"
        "b = _build.build(spec, 'h100', 'test')\n"
        "print('from_pack', b.from_pack == os.environ['QATTN_PACKS'], 'nvcc', b.nvcc_seconds)\n"
        "print('tl', 'Kernel flash_fwd' in b.artifact('code.tl'))\n"
        "other = qattn.kernel_spec('bf16', 128, 128, {'mask': {'kind': 'none'}}, False, 'h100')\n"
        "try:\n"
        "    _build.build(other, 'h100', 'test')\n"
        "except qattn.QattnError as e:\n"
        "    print('not in the pack ->', e.code)\n")
    env = {"QATTN_PACKS": str(pack), "QATTN_BIN": str(tmp_path / "no-qattn"), "PATH": "/usr/bin:/bin",
           "QATTN_CACHE_DIR": str(tmp_path / "cache")}
    r = _run_python(code, env)
    assert r.returncode == 0, r.stderr
    assert "from_pack True nvcc None" in r.stdout and "tl True" in r.stdout, r.stdout
    assert "not in the pack -> PY0201" in r.stdout, r.stdout  # the compiler is needed only for what a pack lacks
    # hostile or damaged packs are refused before anything is loaded
    from qattn import _pack
    lib = pack / e["dir"] / "libqattn_kernel.so"
    data = lib.read_bytes()
    lib.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    _pack._PACKS.clear()
    qattn.use_pack(str(pack))
    with pytest.raises(qattn.BuildError) as x:
        _pack.find(e["spec"])
    assert x.value.code == "PY0206" and "SHA-256" in str(x.value)
    lib.write_bytes(data)
    for bad in ({**m, "abi": 2}, {**m, "kernels": [{**e, "dir": "../escape"}]}, {**m, "kernels": [{**e, "key": "0" * 64}]}):
        (pack / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(qattn.BuildError) as x:
            qattn.use_pack(str(pack))
        assert x.value.code == "PY0206", bad
    _pack._PACKS.clear()


def test_split_mode_is_tl_or_fold(monkeypatch):
    """QATTN_SPLIT_MODE: 'tl' (the default) or 'fold'; anything else is a SpecError (PY0111) naming both,
    raised before the device is asked (so no GPU is needed to see it)."""
    from qattn import _attention
    from qattn.errors import SpecError
    monkeypatch.setenv("QATTN_SPLIT_MODE", "fold")
    assert _attention.tl_split(None, None) is False
    for bad in ("TL2", "folded", "1"):
        monkeypatch.setenv("QATTN_SPLIT_MODE", bad)
        with pytest.raises(SpecError) as e:
            _attention.tl_split(None, None)
        assert e.value.code == "PY0111" and "'tl'" in str(e.value) and "'fold'" in str(e.value)


@needs_cli
def test_ragged_batches_pack_the_groups_that_divide_a_tile(tmp_path):
    """attention_varlen's kernel (_build.varlen_kind): GQA / MQA whose group divides 64 take the kernel
    whose Hopper tiles pack a kv head's query heads (spec heads 2 / 1: the planner packs); MHA and a
    group such as Qwen2.5-7B's 7 the unpacked one (heads 1 / 1), which the planner writes without
    `{pack}`, as the CLI's TL shows."""
    assert _build.varlen_kind(32, 8) is True and _build.varlen_kind(16, 1) is True and _build.varlen_kind(64, 1) is True
    assert _build.varlen_kind(32, 32) == "g1" and _build.varlen_kind(28, 4) == "g1" and _build.varlen_kind(128, 1) == "g1"
    causal = {"mask": {"kind": "causal", "align": "bottom_right"}}
    for kind, packed in ((True, True), ("g1", False)):
        s = qattn.kernel_spec("bf16", 128, 128, causal, True, "h100", varlen=kind)
        assert s["varlen"] is True and (s["heads_q"], s["heads_kv"]) == ((2, 1) if packed else (1, 1))
        assert s["name"].endswith("_varlen" if packed else "_varlen_g1")
        f = tmp_path / f"{s['name']}.json"
        f.write_text(json.dumps(s))
        r = subprocess.run([qattn.find_executable(), "plan", "--spec", str(f), "--out", str(tmp_path / s["name"])],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        code = (tmp_path / s["name"] / "code.tl").read_text()
        assert ("{pack: heads_q / heads_kv, ragged: cu_seqlens_q}" in code) == packed, code
        assert "{ragged: cu_seqlens_q}" in code or packed


def test_ragged_queries_over_a_cache_split_where_sms_idle(monkeypatch):
    """_varlen.ragged_splits: a serving step's blocks (each sequence's partial tile plus the packed rows'
    full ones, per kv head) against the SMs; Hopper only (the kernel splits in its TL)."""
    from qattn import _attention, _varlen
    monkeypatch.setattr(_attention, "tl_split", lambda torch, device: True)
    monkeypatch.setattr(_attention, "sm_count", lambda torch, device: 132)
    causal = {"mask": {"kind": "causal", "align": "bottom_right"}}
    # MQA 16/1, 5 sequences, 45 queries: 5 + cdiv(45 x 16, 128) = 11 blocks -> 12 parts of a 16k capacity
    assert _varlen.ragged_splits(None, None, 5, 45, 16, 1, 16384, causal, {}, True) == 12
    # MHA (unpacked): 8 heads x (5 + 1) blocks -> 2 parts
    assert _varlen.ragged_splits(None, None, 5, 45, 8, 8, 16384, causal, {}, "g1") == 2
    # 64 decoding sequences of GQA 32/8 fill the GPU; a short capacity has no part of 512 keys
    assert _varlen.ragged_splits(None, None, 64, 64, 32, 8, 4096, causal, {}, True) == 1
    assert _varlen.ragged_splits(None, None, 2, 2, 16, 1, 700, causal, {}, True) == 1
    # decoding on the 64-row tile: MQA 16/1, 8 sequences of one query -> 8 blocks, as
    # attention_with_kvcache counts them (16 parts; 10 blocks and 13 parts without max_seqlen_q)
    assert _varlen.ragged_splits(None, None, 8, 8, 16, 1, 16384, causal, {}, True, max_seqlen_q=1, bm=64) == 16
    assert _varlen.ragged_splits(None, None, 8, 8, 16, 1, 16384, causal, {}, True, bm=64) == 13
    # MHA 8/8 decoding, 4 sequences: 32 blocks -> 4 parts
    assert _varlen.ragged_splits(None, None, 4, 4, 8, 8, 16384, causal, {}, "g1", max_seqlen_q=1, bm=64) == 4
    monkeypatch.setenv("QATTN_SPLIT_KV", "0")
    assert _varlen.ragged_splits(None, None, 5, 45, 16, 1, 16384, causal, {}, True) == 1
    monkeypatch.delenv("QATTN_SPLIT_KV")
    monkeypatch.setattr(_attention, "tl_split", lambda torch, device: False)  # no fold of ragged rows elsewhere
    assert _varlen.ragged_splits(None, None, 5, 45, 16, 1, 16384, causal, {}, True) == 1
    s = qattn.kernel_spec("bf16", 128, 128, causal, True, "h100", kv_cache="paged", varlen=True, split=True)
    assert s["varlen"] and s["split_keys"] and s["kv_cache"] == "paged" and s["name"].endswith("_varlen_split")


def test_kernel_spec_is_keyed_by_compile_time_fields_only():
    a = qattn.kernel_spec("bf16", 192, 128, {"mask": {"kind": "causal", "align": "bottom_right"}}, True, "sm80")
    assert a["name"] == "py_bf16_d192v128_causal_lse"
    assert (a["heads_q"], a["heads_kv"], a["layout"], a["gpu"]) == (2, 1, "bshd", "sm80")
    assert "softmax_scale" not in a and "problem" not in a


# ---- diagnostics through the CLI -----------------------------------------------------------------

@needs_cli
def test_unsupported_head_dim_carries_the_spec_diagnostic():
    with pytest.raises(qattn.SpecError) as e:
        qattn.compile({"heads_q": 8, "head_dim": 80}, gpu="a100")
    assert e.value.code == "SPEC0203"
    assert "SPEC0203" in str(e.value) and "hint:" in str(e.value) and "96" in str(e.value)


@needs_cli
@pytest.mark.parametrize("spec,code", [
    ({"heads_q": 8, "heads_kv": 3, "head_dim": 64}, "SPEC0202"),
    ({"heads_q": 8, "head_dim": 64, "dtyp": "fp16"}, "SPEC0104"),
    ({"heads_q": 8, "head_dim": 64, "mask": "diagonal"}, "SPEC0107"),
    ({"head_dim": 64}, "SPEC0106"),
    ("no-such-model", "SPEC0110"),
    ({"heads_q": 8, "head_dim": 64, "dtype": "fp8_e4m3"}, "PY0104"),
    ({"heads_q": 8, "head_dim": 64, "variants": {"mask_mod": "kv_idx <="}}, "PLAN0301"),
    ({"heads_q": 8, "head_dim": 64, "variants": {"score_mod": "score < 3"}}, "PLAN0302"),
])
def test_bad_specs_raise_spec_error(spec, code):
    with pytest.raises(qattn.SpecError) as e:
        qattn.compile(spec, gpu="a100")
    assert code in e.value.codes, str(e.value)
    assert code in str(e.value)


@needs_cli
def test_unknown_gpu():
    with pytest.raises(qattn.SpecError) as e:
        qattn.compile({"heads_q": 8, "head_dim": 64}, gpu="h900")
    assert e.value.code == "PY0402" and "H100" in str(e.value)


@needs_cli
def test_preset_and_overrides_are_validated():
    s = _build.canonical_spec("llama3-8b", dtype="fp16", head_dim=64)
    assert (s["heads_q"], s["heads_kv"], s["head_dim_qk"], s["dtype"]) == (32, 8, 64, "fp16")


def test_missing_executable(monkeypatch, tmp_path):
    monkeypatch.setenv("QATTN_BIN", str(tmp_path / "nowhere" / "qattn"))
    with pytest.raises(qattn.ToolchainError) as e:
        qattn.compile("llama3-8b", gpu="a100")
    assert e.value.code == "PY0201" and "QATTN_BIN" in str(e.value)
    monkeypatch.delenv("QATTN_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("QATTN_HOME", str(tmp_path))
    with pytest.raises(qattn.ToolchainError) as e:
        qattn.compile("llama3-8b", gpu="a100")
    assert e.value.code == "PY0201" and "scripts/build.sh" in str(e.value)


@needs_cli
def test_missing_nvcc_carries_build0101(monkeypatch, tmp_path):
    monkeypatch.setenv("QATTN_NVCC", str(tmp_path / "no-nvcc"))
    monkeypatch.setenv("QATTN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(qattn.ToolchainError) as e:
        qattn.compile({"heads_q": 4, "head_dim": 64, "dtype": "fp16"}, gpu="a100", verbose=False)
    assert e.value.code == "BUILD0101" and "nvcc" in str(e.value)


# ---- the cache: one nvcc build -------------------------------------------------------------------

@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    if not have_executable():
        pytest.skip("the `qattn` executable was not found (QATTN_BIN / PATH / build/qattn)")
    if not have_nvcc():
        pytest.skip("nvcc was not found")
    mp = pytest.MonkeyPatch()
    mp.setenv("QATTN_CACHE_DIR", str(tmp_path_factory.mktemp("qattn-cache")))
    _build.clear_memory_cache()
    try:
        t0 = time.perf_counter()
        # the Hopper target: its kernels build in seconds (the split build), the sm80 ones in a minute
        k = qattn.compile({"heads_q": 8, "heads_kv": 2, "head_dim": 64, "dtype": "fp16", "mask": "causal"},
                          gpu="h100")
        yield k, time.perf_counter() - t0
    except qattn.ToolchainError as e:  # e.g. no CUTLASS headers on this machine
        pytest.skip(f"toolchain incomplete: {e}")
    finally:
        _build.clear_memory_cache()
        mp.undo()


def test_compile_builds_once_with_nvcc(cache_env):
    k, _ = cache_env
    assert not k.cache_hit and k.nvcc_seconds is not None
    assert os.path.isfile(k.library)
    info = k.info
    assert (info["dtype"], info["d_qk"], info["d_v"], info["mask"], info["arch"]) == ("fp16", 64, 64, "causal", "sm90")


def test_compile_same_kernel_again_is_an_in_process_hit(cache_env, monkeypatch):
    k, _ = cache_env
    calls = []
    real = _cli.run
    monkeypatch.setattr(_cli, "run", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    t0 = time.perf_counter()
    # other heads, another name: the same compile-time fields, so the same kernel
    k2 = qattn.compile({"heads_q": 32, "heads_kv": 32, "head_dim": 64, "dtype": "fp16", "mask": "causal",
                        "name": "other"}, gpu="h100")
    assert k2.library == k.library and k2.name == k.name
    assert [c[0][:2] for c in calls] == [["spec", "show"]]  # only the spec check, no `qattn generate`
    assert time.perf_counter() - t0 < 5


def test_new_process_finds_the_kernel_in_the_disk_cache(cache_env):
    k, first = cache_env
    _build.clear_memory_cache()
    k3 = qattn.compile({"heads_q": 2, "head_dim": 64, "dtype": "fp16", "mask": "causal"}, gpu="h100")
    assert k3.cache_hit and k3.nvcc_seconds is None  # `qattn generate` ran, nvcc did not
    assert k3.wall_seconds < first / 3


def test_explain_shows_target_tl_and_source(cache_env):
    # Hopper (the kernel cache_env built): the sm90a translation, its schedule visible in the TL (Roles)
    # and the source (wgmma)
    h = qattn.explain({"heads_q": 2, "head_dim": 64, "dtype": "fp16", "mask": "causal"}, gpu="h100")
    assert h.target == "h100" and "sm90a" in h.target_reason
    assert "Kernel flash_fwd_py_fp16_d64_causal with mask causal" in h.tl
    assert "Compute GEMM" in h.tl and h.sketch
    assert "// TL" in h.source and "qattn_fwd" in h.source
    assert "Role consumer warpgroups" in h.tl and "gemm_ss<" in h.source and "load_tile<" in h.source
    assert h.kir.startswith("# kernel IR") and "gemm.ss" in h.kir
    assert h.info["arch"] == "sm90" and "h100" in str(h)
    # an A100 gets the sm80 path (its kernel's build is emit_compile_test's and the GPU suites')
    from qattn import _target
    assert _target.target_for_gpu("a100")[0] == "sm80" and "sm80 path" in _target.target_for_gpu("a100")[1]


def test_no_cache_rebuild_flag_is_passed(cache_env, monkeypatch):
    """cache=False runs `qattn generate --no-cache` (checked on the arguments, without running nvcc)."""
    seen = []

    def fake(args, progress=None, timeout=None):
        seen.append(list(args))
        return _cli.Result(1, "", "qattn: error BUILD0201: stop here\n")

    _cli.gpu_table()  # the GPU table is read once per process; read it before the fake takes over
    monkeypatch.setattr(_cli, "run", fake)
    monkeypatch.setattr(_build, "canonical_spec", lambda spec, **kw: dict(
        name="", heads_q=2, heads_kv=2, head_dim_qk=64, head_dim_v=64, dtype="fp16",
        mask={"kind": "none"}, layout="bshd", return_lse=False, gpu=""))
    with pytest.raises(qattn.BuildError) as e:
        qattn.compile({"heads_q": 2, "head_dim": 64}, gpu="sm80", cache=False)
    assert e.value.code == "BUILD0201"
    assert seen and seen[-1][0] == "generate" and "--no-cache" in seen[-1] and "--no-verify" in seen[-1]


# ---- torch present, no GPU -------------------------------------------------------------------------

def test_attention_rejects_cpu_tensors_and_bad_input():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    q = torch.randn(1, 16, 2, 64, dtype=torch.float16)
    with pytest.raises(qattn.DeviceError) as e:
        qattn.attention(q, q, q)
    assert e.value.code == "PY0102"
    with pytest.raises(qattn.SpecError) as e:
        qattn.attention(q[0], q[0], q[0])
    assert e.value.code == "PY0101"
    with pytest.raises(qattn.SpecError) as e:
        qattn.attention(q, q, q, softcap=-50.0)
    assert e.value.code == "PY0107"
    with pytest.raises(qattn.SpecError) as e:
        qattn.attention(q, q, q, layout="sbhd")
    assert e.value.code == "PY0106"


def test_kernel_names_are_safe_spec_names():
    """Issue 18: the binding's kernel names pass the spec's name rule (SPEC0217: 1-128 characters
    from A-Z a-z 0-9 . _ -, starting with a letter or a digit, no ".."), the longest variant
    combination included (cut at 128 characters; the cache key is the whole spec)."""
    rule = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
    longest = _variants.variant_fields(prefix_lm=131072, softcap=30.5, score_mod="score * 0.5",
                                       mask_mod="kv_idx <= q_idx", alibi=True, document=True, relative_bias=4096)
    for fields in ({"mask": {"kind": "none"}}, longest):
        name = _build.kernel_spec("fp8_e4m3", 192, 128, fields, True, "h100", short=True)["name"]
        assert rule.fullmatch(name) and ".." not in name, name


def test_a_pack_holds_and_serves_the_combine_library(tmp_path):
    """A combine library in a pack has its own key (the spec's JSON + "#combine"), is found as such
    (never as a forward kernel of the same spec), and build(..., combine=True) loads it from the
    pack with no compiler; available(..., combine=True) says so."""
    from qattn import _combine, _pack

    class B:
        def __init__(self, spec, d, combine):
            self.spec, self.dir, self.target, self.combine = spec, str(d), "h100", combine
    spec = _combine.kernel_spec("bf16", 128, "h100")
    d = tmp_path / "built"
    d.mkdir()
    (d / "libqattn_kernel.so").write_bytes(b"not really a library")
    (d / "code.tl").write_text("Kernel k combine\n")
    pack = tmp_path / "pack"
    assert _pack.write_pack(str(pack), [B(spec, d, True)]) == 1
    m = json.loads((pack / "manifest.json").read_text())
    assert m["kernels"][0]["pass"] == "combine" and m["kernels"][0]["key"] == _pack.spec_key(spec, True)
    _pack._PACKS.clear()
    try:
        qattn.use_pack(str(pack))
        assert _pack.find(spec) is None            # not a forward kernel
        assert _pack.find(spec, combine=True) is not None
        assert _build.available(spec, combine=True)
        b = _build.build(spec, "h100", "test", combine=True)
        assert b.combine and b.from_pack == str(pack) and b.nvcc_seconds is None
    finally:
        _pack._PACKS.clear()
        _build._BUILDS.clear()


def test_precompile_backward_packs_what_training_uses(monkeypatch, tmp_path):
    """precompile(backward=True) adds, per spec whose backward is generated: the forward's LSE twin
    (what attention() under autograd launches) and the backward libraries for MHA and GQA;
    deterministic=True the deterministic ones; custom score_mod text gets none. A backward library
    in a pack has its own key (the spec's JSON + "#backward") and build(..., backward=True) loads it
    from the pack with no compiler."""
    from qattn import _backward, _pack

    fake_compile_many(monkeypatch)
    built = []
    monkeypatch.setattr(_build, "build", lambda spec, target, reason, **kw: built.append((spec, kw.get("backward", False)))
                        or spec["name"])
    monkeypatch.setattr(_pack, "write_pack", lambda out, builds: len(builds))
    specs = [{"heads_q": 2, "head_dim": 128, "dtype": "bf16", "mask": "causal"},
             {"heads_q": 2, "head_dim": 64, "dtype": "bf16", "mask": "none", "variants": {"score_mod": "score * 0.5"}}]
    assert qattn.precompile(specs, str(tmp_path), gpu="h100", backward=True, deterministic=True) == 2 + 1 + 4
    got = sorted((s["name"], bwd, s.get("deterministic", False), s["heads_kv"] < s["heads_q"]) for s, bwd in built)
    assert got == [("py_bf16_d128_causal_bwd", True, False, False), ("py_bf16_d128_causal_bwd_det", True, True, False),
                   ("py_bf16_d128_causal_bwd_gqa", True, False, True), ("py_bf16_d128_causal_bwd_gqa_det", True, True, True),
                   ("py_bf16_d128_causal_lse", False, False, True)], got
    # a spec with ALiBi slopes: also the backward libraries that differentiate learnable slopes (aux_grad)
    built.clear()
    alibi = [{"heads_q": 2, "head_dim": 64, "dtype": "bf16", "mask": "causal", "variants": {"alibi": True}}]
    assert qattn.precompile(alibi, str(tmp_path), gpu="h100", backward=True) == 1 + 1 + 4
    got = sorted((s["name"], s.get("aux_grad", False)) for s, bwd in built if bwd)
    assert got == [("py_bf16_d64_causal_alibi_bwd", False), ("py_bf16_d64_causal_alibi_bwd_ag", True),
                   ("py_bf16_d64_causal_alibi_bwd_gqa", False), ("py_bf16_d64_causal_alibi_bwd_gqa_ag", True)], got
    monkeypatch.undo()
    # the pack side: a backward library is found as such, never as the forward kernel of its spec
    spec = _backward.kernel_spec("bf16", 64, 64, {"mask": {"kind": "causal"}}, "h100", False)

    class B:
        def __init__(self, spec, d):
            self.spec, self.dir, self.target, self.combine, self.backward = spec, str(d), "h100", False, True
    d = tmp_path / "built"
    d.mkdir()
    (d / "libqattn_kernel.so").write_bytes(b"not really a library")
    pack = tmp_path / "pack"
    assert _pack.write_pack(str(pack), [B(spec, d)]) == 1
    m = json.loads((pack / "manifest.json").read_text())
    assert m["kernels"][0]["pass"] == "backward" and m["kernels"][0]["key"] == _pack.spec_key(spec, backward=True)
    _pack._PACKS.clear()
    try:
        qattn.use_pack(str(pack))
        assert _pack.find(spec) is None and _pack.find(spec, combine=True) is None
        assert _pack.find(spec, backward=True) is not None
        b = _build.build(spec, "h100", "test", backward=True)
        assert b.backward and b.from_pack == str(pack) and b.nvcc_seconds is None
        bad = dict(m)
        bad["kernels"] = [dict(m["kernels"][0], **{"pass": "sideways"})]
        (pack / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(qattn.QattnError) as e:
            qattn.use_pack(str(pack))
        assert e.value.code == "PY0206"
    finally:
        _pack._PACKS.clear()
        _build._BUILDS.clear()


def test_deterministic_backward_is_recorded_by_the_forward_call():
    """_backward.deterministic_backward(): the forward calls made inside it record the deterministic
    backward kernel (flash_attn_interface's deterministic=True); outside, None (torch's setting when
    backward() runs); nested and restored on exceptions."""
    from qattn import _backward
    assert _backward.requested() is None
    with _backward.deterministic_backward(True):
        assert _backward.requested() is True
        with _backward.deterministic_backward(False):
            assert _backward.requested() is False
        assert _backward.requested() is True
    with pytest.raises(RuntimeError):
        with _backward.deterministic_backward(True):
            raise RuntimeError("inside")
    assert _backward.requested() is None
    spec = _backward.kernel_spec("bf16", 64, 64, {"mask": {"kind": "causal"}}, "h100", True, deterministic=True)
    assert spec["deterministic"] is True and spec["name"].endswith("_bwd_gqa_det") and spec["heads_kv"] == 1


def test_layers_import_without_torch_and_say_what_they_need():
    """qattn.distributed and qattn.flash_attn_interface import where torch does not (their calls then
    raise PY0204); qattn.integrations.transformers without transformers raises PY0904, not an
    ImportError trace."""
    r = _run_python("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
                    "import qattn, qattn.distributed as d, qattn.flash_attn_interface as f\n"
                    "assert d.chunk_bounds(5, 2) == [(0, 3), (3, 5)]\n"
                    "try:\n    f.flash_attn_func(None, None, None)\nexcept qattn.QattnError as e:\n    print(e.code)\n"
                    "try:\n    import qattn.integrations.transformers\nexcept qattn.QattnError as e:\n    print(e.code)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["PY0204", "PY0904"], r.stdout


# ---- can this machine compile (the split's twin kernels, the combine) ---------------------------------

def test_can_compile_needs_the_executable_and_nvcc(monkeypatch, tmp_path):
    """_build.can_compile: True with a qattn executable and an nvcc (QATTN_NVCC, PATH or
    /usr/local/cuda/bin/nvcc: the C++ side's order); False without either, so that a deployment with
    a kernel pack and no toolchain never starts a build a call did not need."""
    exe = tmp_path / "qattn"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    fake_nvcc = tmp_path / "nvcc"
    fake_nvcc.write_text("#!/bin/sh\nexit 0\n")
    fake_nvcc.chmod(0o755)
    monkeypatch.setenv("QATTN_BIN", str(exe))
    monkeypatch.setenv("QATTN_NVCC", str(fake_nvcc))
    assert _build.nvcc_path() == str(fake_nvcc)
    assert _build.can_compile() is True
    monkeypatch.setenv("QATTN_NVCC", str(tmp_path / "no-nvcc-here"))
    assert _build.nvcc_path() is None
    assert _build.can_compile() is False
    monkeypatch.setenv("QATTN_NVCC", str(fake_nvcc))
    monkeypatch.setenv("QATTN_BIN", str(tmp_path / "no-qattn-here"))
    assert _build.can_compile() is False


def test_short_ragged_queries_over_a_cache_take_the_decoding_tile():
    """Ragged queries over a KV cache whose sequences hold few enough queries that each one's packed rows
    fit one 64-row tile take the decoding tile's kernel (decided from max_seqlen_q alone: the kernel
    still reads the counts, so a shorter sequence or a q with spare rows stays exact); longer chunks,
    variants and targets before Hopper keep the 128-row ragged kernel."""
    from qattn._varlen import decoding_tile
    causal = {"mask": {"kind": "causal", "align": "bottom_right"}}
    assert decoding_tile("h100", 32, 8, 1, causal) == "decode"      # GQA decoding: 4 packed rows
    assert decoding_tile("h200", 16, 1, 4, causal) == "decode"      # MQA speculative decoding: 64 rows
    assert decoding_tile("h100", 8, 8, 3, causal) == "decode1"      # MHA: 3 rows of a head
    assert decoding_tile("h100", 16, 1, 5, causal) is False         # 80 packed rows: two tiles
    assert decoding_tile("h100", 32, 8, 512, causal) is False       # a prefill chunk
    assert decoding_tile("a100", 32, 8, 1, causal) is False
    assert decoding_tile("h100", 14, 2, 1, causal) is False         # a group of 7 is not packed
    assert decoding_tile("h100", 32, 8, 1, {**causal, "variants": [{"score": "softcap"}]}) is False
