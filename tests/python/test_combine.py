"""The combine step of the key split (qattn._combine, the `qattn generate --combine` library).

Without a GPU (CI): the ctypes struct against include/qattn/qattn.h (field order and types, and the
offsets and size a C compiler gives, where one is installed), the parameters it is filled with, the
argument checks (PY0111 and the device codes), the cache names and CLI arguments of a combine build,
the library's kernel-info check, and which merge _launch_split takes (the TL kernel, or the torch
merge for a pack without a combine library, QATTN_COMBINE=torch, a CPU stand-in). The checks that
need torch skip without it.

On a GPU (skipped without torch, CUDA or `qattn`, as test_gpu.py): the kernel against an fp64 merge
on random parts with empty ones (tests/gpu/combine_check.py's cases: seqlen_q 1, 3, 17; splits 1,
2, 7, 16; d_v 64, 128, 256; bf16 and fp16; strided views), and attention() with its keys split
against the unsplit call and an fp32 reference.
"""
import ctypes
import hashlib
import json
import os
import re
import sys

import pytest

from conftest import REPO, c_layout, gpu_skip_reason

import qattn
from qattn import _build, _combine

_CTYPES = {"int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "float": ctypes.c_float}


def header_struct(struct="qattn_combine_params"):
    """[(name, C type)] of a struct of include/qattn/qattn.h, in order ('ptr' for any pointer)."""
    text = open(os.path.join(REPO, "include", "qattn", "qattn.h")).read()
    body = re.search(r"typedef struct " + struct + r" \{(.*?)\} " + struct + ";", text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    out = []
    for decl in (d.strip() for d in body.split(";")):
        if not decl:
            continue
        first, *rest = [p.strip() for p in decl.split(",")]
        words = first.replace("*", " * ").split()
        base = [w for w in words[:-1] if w not in ("const", "*")][-1]
        ptr = "*" in words
        for name in [words[-1]] + rest:
            out.append((name.replace("*", "").strip(), "ptr" if ptr or name.startswith("*") else base))
    return out


def test_params_struct_matches_the_header():
    fields = header_struct()
    assert [n for n, _ in fields] == [f[0] for f in _combine.CombineParams._fields_]
    for (name, ctype), (_, pytype) in zip(fields, _combine.CombineParams._fields_):
        want = ctypes.c_void_p if ctype == "ptr" else _CTYPES[ctype]
        assert ctypes.sizeof(pytype) == ctypes.sizeof(want), name
        assert pytype in (want, ctypes.c_void_p) if ctype == "ptr" else pytype is want, name
    assert [n for n, _ in fields][:5] == ["abi_version", "o_part", "lse_part", "o", "lse"]


def test_params_offsets_match_a_c_compiler(tmp_path):
    """offsetof / sizeof of qattn_combine_params by the C compiler = ctypes' layout."""
    names = [f[0] for f in _combine.CombineParams._fields_]
    want = [getattr(_combine.CombineParams, n).offset for n in names] + [ctypes.sizeof(_combine.CombineParams)]
    assert c_layout(tmp_path, "qattn_combine_params", names) == want


class FakeTensor:
    def __init__(self, shape, stride, ptr):
        self.shape, self._stride, self._ptr = shape, stride, ptr

    def stride(self):
        return self._stride

    def data_ptr(self):
        return self._ptr


def test_fill_params():
    op = FakeTensor((2, 7, 3, 4, 128), (7 * 3 * 4 * 136, 4 * 136, 7 * 4 * 136, 136, 1), 0x1000)
    lp = FakeTensor((2, 7, 4, 3), (7 * 4 * 8, 4 * 8, 8, 1), 0x2000)
    o = FakeTensor((2, 3, 4, 128), (4 * 3 * 128, 128, 3 * 128, 1), 0x3000)
    p = _combine.fill_combine_params(op, lp, o, None)
    assert p.abi_version == qattn.QATTN_ABI_VERSION
    assert (p.o_part, p.lse_part, p.o, p.lse) == (0x1000, 0x2000, 0x3000, None)
    assert (p.op_batch_stride, p.op_split_stride, p.op_row_stride, p.op_head_stride) == op.stride()[:4]
    assert (p.lp_batch_stride, p.lp_split_stride, p.lp_head_stride) == lp.stride()[:3]
    assert (p.o_batch_stride, p.o_row_stride, p.o_head_stride) == o.stride()[:3]
    assert (p.batch, p.splits, p.heads_q, p.seqlen_q, p.d_v) == (2, 7, 4, 3, 128)
    # a dimension of size 1 never steps: its stride is passed as 0 (torch may give it any value)
    op1 = FakeTensor((1, 7, 1, 4, 64), (5, 4 * 64, 3, 64, 1), 0x1000)
    lse = FakeTensor((1, 4, 1), (4, 1, 1), 0x4000)
    p = _combine.fill_combine_params(op1, FakeTensor((1, 7, 4, 1), (9, 4, 1, 1), 0x2000),
                                     FakeTensor((1, 1, 4, 64), (11, 13, 64, 1), 0x3000), lse)
    assert (p.op_batch_stride, p.op_split_stride, p.op_row_stride) == (0, 256, 0)
    assert (p.o_batch_stride, p.o_row_stride, p.o_head_stride) == (0, 0, 64) and p.lse == 0x4000


def test_combine_spec_and_build_arguments(monkeypatch, tmp_path):
    """A combine build: an ordinary spec of the dtype and d_v, `qattn generate --combine`, a '-combine'
    cache folder whose hash covers '#combine'; available() finds it in the process and on disk."""
    spec = _combine.kernel_spec("fp16", 256, "h100")
    assert spec["name"] == "py_fp16_dv256_combine" and spec["dtype"] == "fp16"
    assert spec["head_dim_v"] == 256 and spec["head_dim_qk"] == 256 and spec["gpu"] == "h100"
    monkeypatch.setenv("QATTN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_build, "_BUILDS", {})
    seen = []

    def fake_run(args, progress=None, timeout=None):
        seen.append(list(args))
        out = args[args.index("--out") + 1]
        os.makedirs(out, exist_ok=True)
        open(os.path.join(out, "libqattn_kernel.so"), "wb").close()
        return _build._cli.Result(0, "", "")
    monkeypatch.setattr(_build._cli, "run", fake_run)
    assert not _build.available(spec, "sm90", combine=True)
    b = _build.build(spec, "h100", "test", local_tag="sm90", combine=True, verbose=False)
    assert b.combine and not b.backward
    assert "--combine" in seen[0] and "--backward" not in seen[0] and "--no-verify" in seen[0]
    h = hashlib.sha256((json.dumps(spec, sort_keys=True) + "#combine" + "sm90").encode()).hexdigest()[:12]
    assert os.path.basename(b.dir) == f"py_fp16_dv256_combine-h100-sm90-combine-{h}"
    assert _build.available(spec, "sm90", combine=True)
    assert not _build.available(spec, "sm90")             # the forward of that spec is another kernel
    monkeypatch.setattr(_build, "_BUILDS", {})
    assert _build.available(spec, "sm90", combine=True)   # the disk cache
    assert _build.build(spec, "h100", "test", local_tag="sm90", combine=True, verbose=False).dir == b.dir
    with pytest.raises(ValueError):
        _build.build(spec, "h100", "test", backward=True, combine=True)


def test_combine_library_info_is_checked():
    spec = _combine.kernel_spec("bf16", 128, "h100")
    b = _build.Build(spec, "h100", "test", "/nonexistent", False, None, 0.0, "", combine=True)
    b._check_info({"pass": "combine", "dtype": "bf16", "part_dtype": "bf16", "d_v": 128})
    for bad in ({"pass": "combine", "dtype": "bf16", "part_dtype": "bf16", "d_v": 64},
                {"pass": "combine", "dtype": "fp16", "part_dtype": "fp16", "d_v": 128},
                {"pass": "forward", "dtype": "bf16", "part_dtype": "bf16", "d_v": 128},
                {"dtype": "bf16", "d_qk": 128, "d_v": 128, "lse": False}):
        with pytest.raises(qattn.BuildError) as e:
            b._check_info(bad)
        assert e.value.code == "PY0203"
    with pytest.raises(qattn.BuildError) as e:  # a library that does not load
        _ = b.library
    assert e.value.code == "PY0203"


def test_combine_mode(monkeypatch):
    monkeypatch.delenv("QATTN_COMBINE", raising=False)
    assert _combine.mode() == "auto"
    for v, want in (("torch", "torch"), ("TL", "tl"), (" auto ", "auto"), ("", "auto")):
        monkeypatch.setenv("QATTN_COMBINE", v)
        assert _combine.mode() == want
    monkeypatch.setenv("QATTN_COMBINE", "cuda")
    with pytest.raises(qattn.SpecError) as e:
        _combine.mode()
    assert e.value.code == "PY0111"


def test_prefetch_builds_in_the_background_once(monkeypatch):
    """The first key split of a (dtype, d_v, device) may start the combine's build beside the forward
    kernel's: a thread that calls build_for (its errors left for the merge to report); nothing when
    the merge is torch's or the library is ready; first_split is true once per key."""
    import threading

    class Dev:
        index = 3
    calls, done = [], threading.Event()

    def fake_build(torch, dtype, d_v, device):
        calls.append((dtype, d_v))
        done.set()
        raise qattn.ToolchainError("no nvcc here")  # swallowed: the merge calls build_for again
    monkeypatch.setattr(_combine, "build_for", fake_build)
    monkeypatch.setattr(_combine, "available", lambda torch, dtype, d_v, device: False)
    monkeypatch.setenv("QATTN_COMBINE", "torch")
    assert _combine.prefetch(None, "bf16", 128, Dev()) is None
    monkeypatch.setenv("QATTN_COMBINE", "auto")
    t = _combine.prefetch(None, "bf16", 128, Dev())
    assert t is not None and done.wait(10)
    t.join(10)
    assert calls == [("bf16", 128)]
    monkeypatch.setattr(_combine, "available", lambda torch, dtype, d_v, device: True)
    assert _combine.prefetch(None, "bf16", 128, Dev()) is None
    _combine._SEEN.clear()
    assert _combine.first_split("bf16", 128, Dev()) and not _combine.first_split("bf16", 128, Dev())
    assert _combine.first_split("fp16", 128, Dev())
    _combine._SEEN.clear()


# ---- with torch (on the CPU) -------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch", reason="torch is not installed (the CPU CI installs none)")


def test_argument_checks():
    torch = _torch()
    bf = torch.bfloat16
    op = torch.zeros(2, 3, 5, 4, 64, dtype=bf)
    lp = torch.zeros(2, 3, 4, 5)
    c = lambda *a, **k: _combine.check(torch, *a, **k)  # noqa: E731
    cases = [
        ((op[0], lp), "5"),
        ((op, lp[0]), "4"),
        (("x", lp), "not a torch.Tensor"),
        ((op.float(), lp), "torch.float16 or torch.bfloat16"),
        ((op, lp.to(bf)), "expected torch.float32"),
        ((op, lp.transpose(2, 3)), "expected (batch, splits, heads_q, seqlen_q)"),
        ((op, torch.zeros(2, 2, 4, 5)), "l_parts has shape"),
        ((op, lp, torch.zeros(2, 5, 4, 64, dtype=torch.float16)), "out has dtype"),
        ((op, lp, torch.zeros(2, 4, 5, 64, dtype=bf)), "out has shape"),
        ((torch.zeros(2, 3, 5, 64, 4, dtype=bf).transpose(3, 4), lp), "last dimension is not contiguous"),
        ((torch.zeros(2, 3, 5, 4, 65, dtype=bf)[..., 1:], lp), "16-byte aligned"),
        ((torch.zeros(2, 3, 5, 4, 68, dtype=bf)[..., :64], lp), "16-byte aligned"),
        ((op, lp, torch.zeros(2, 5, 4, 72, dtype=bf)[..., 4:68]), "out is not 16-byte aligned"),
        ((op, torch.zeros(2, 3, 5, 4).transpose(2, 3)), "l_parts's last dimension"),
    ]
    for args, what in cases:
        with pytest.raises(qattn.SpecError) as e:
            c(*args)
        assert e.value.code == "PY0111" and what in str(e.value), (what, str(e.value))
    # valid but on the CPU: the device is checked last (the kernel runs on CUDA tensors)
    with pytest.raises(qattn.DeviceError) as e:
        c(op, lp)
    assert e.value.code == "PY0102"
    # strides of size-1 dims do not count; a padded head stride of whole 16-byte chunks is fine
    assert _combine._strides(torch.zeros(1, 3, 1, 4, 64).as_strided((1, 3, 1, 4, 64), (7, 256, 3, 64, 1)), 4) == \
        (0, 256, 0, 64)
    with pytest.raises(qattn.DeviceError):
        c(torch.zeros(2, 3, 5, 4, 72, dtype=bf)[..., :64], lp)
    with pytest.raises(qattn.DeviceError) as e:
        c(op.to("meta"), lp.to("meta"))
    assert e.value.code == "PY0102"


def test_merge_torch_matches_fp64():
    torch = _torch()
    g = torch.Generator().manual_seed(3)
    op = torch.randn(2, 5, 3, 4, 32, generator=g).to(torch.bfloat16)
    lp = 3 * torch.randn(2, 5, 4, 3, generator=g)
    o, lse = _combine.merge_torch(torch, op, lp, True)
    w = torch.softmax(lp.double(), 1)
    ref = (op.double() * w.transpose(2, 3)[..., None]).sum(1)
    assert o.dtype == torch.bfloat16 and (o.double() - ref).abs().max().item() < 2 ** -7 * ref.abs().max().item()
    assert (lse.double() - torch.logsumexp(lp.double(), 1)).abs().max().item() < 1e-5
    assert _combine.merge_torch(torch, op, lp, False)[1] is None


class FakeParts:
    """What _merge_with_torch reads of o_parts."""

    def __init__(self, torch, device="cuda"):
        self.device, self.dtype, self.shape = torch.device(device, 0), torch.bfloat16, (1, 2, 1, 8, 128)


class FakeBuild:
    def __init__(self, cache_hit):
        self.cache_hit = cache_hit


def test_which_merge(monkeypatch):
    """The TL kernel, unless QATTN_COMBINE=torch, the parts are not CUDA tensors (a stand-in), or
    the forward came ready-made (pack / cache) while the combine library would need a compile that
    this machine cannot do (no qattn executable or no nvcc)."""
    torch = _torch()
    from qattn import _attention as A
    from qattn import _build
    ready = []
    monkeypatch.setattr(_combine, "available", lambda torch_, dt, dv, dev: (dt, dv) in ready)
    monkeypatch.setattr(_build, "can_compile", lambda: True)
    parts = FakeParts(torch)
    monkeypatch.delenv("QATTN_COMBINE", raising=False)
    assert A._merge_with_torch(torch, FakeBuild(True), parts) is False    # from the cache, a compiler here: build it
    monkeypatch.setattr(_build, "can_compile", lambda: False)  # a deployment: a pack, no toolchain
    assert A._merge_with_torch(torch, FakeBuild(False), parts) is False   # compiled now: compile the combine too
    assert A._merge_with_torch(torch, None, parts) is False
    assert A._merge_with_torch(torch, FakeBuild(True), parts) is True     # from a pack / the cache, no combine
    ready.append(("bf16", 128))
    assert A._merge_with_torch(torch, FakeBuild(True), parts) is False    # both ready
    assert A._merge_with_torch(torch, FakeBuild(False), FakeParts(torch, "cpu")) is True
    assert A._merge_with_torch(torch, FakeBuild(False), FakeParts(torch, "meta")) is True
    monkeypatch.setenv("QATTN_COMBINE", "torch")
    assert A._merge_with_torch(torch, FakeBuild(False), parts) is True
    monkeypatch.setenv("QATTN_COMBINE", "tl")
    ready.clear()
    assert A._merge_with_torch(torch, FakeBuild(True), parts) is False


def test_available_looks_in_the_process_then_the_disk(monkeypatch, tmp_path):
    torch = _torch()
    monkeypatch.setattr(_combine, "_device_target", lambda torch_, dev: ("h100", "test", "sm90"))
    monkeypatch.setenv("QATTN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_build, "_BUILDS", {})
    monkeypatch.setattr(_build, "FAST", {})
    dev = torch.device("cuda", 0)
    assert not _combine.available(torch, "bf16", 128, dev)
    _build.FAST[("combine", "bf16", 128, 0)] = qattn.SpecError("refused", code="SPEC0203")
    assert not _combine.available(torch, "bf16", 128, dev)
    with pytest.raises(qattn.SpecError):      # a refusal is remembered
        _combine.build_for(torch, "bf16", 128, dev)
    _build.FAST.clear()
    spec = _combine.kernel_spec("bf16", 128, "h100")
    h = hashlib.sha256((json.dumps(spec, sort_keys=True) + "#combine" + "sm90").encode()).hexdigest()[:12]
    d = tmp_path / "python" / f"{spec['name']}-h100-sm90-combine-{h}"
    d.mkdir(parents=True)
    (d / "libqattn_kernel.so").write_bytes(b"")
    assert _combine.available(torch, "bf16", 128, dev)


@pytest.mark.parametrize("layout,return_lse", [("bshd", False), ("bhsd", True), ("bhsd", False)])
def test_launch_split_uses_the_combine_kernel(monkeypatch, layout, return_lse):
    """With the TL kernel chosen, _launch_split hands it the parts (one merge launch), asks for the
    LSE only when the caller does (NULL otherwise) and, for BHSD, has it write the caller's layout."""
    torch = _torch()
    from qattn import _attention as A
    from attention_standin import standin

    def fake_launch(torch_, build, q, k, v, layout_, scale, lse, aux=None, args=None):
        return standin(q, k, v, scale=scale, return_lse=True)
    calls = []

    def fake_combine(torch_, op, lp, want_lse, device, out=None):
        calls.append((tuple(op.shape), want_lse, None if out is None else tuple(out.stride())))
        o, lse = _combine.merge_torch(torch_, op.double(), lp.double(), want_lse, op.dtype)
        if out is not None:
            out.copy_(o)
            o = out
        return o, (lse.float() if want_lse else None)
    monkeypatch.setattr(A, "_launch", fake_launch)
    monkeypatch.setattr(A, "_merge_with_torch", lambda *a: False)
    monkeypatch.setattr(_combine, "combine", fake_combine)
    g = torch.Generator().manual_seed(7)
    b, sq, hq, hkv, sk, splits = 2, 3, 8, 2, 2048, 4
    q = torch.randn(b, sq, hq, 64, generator=g)
    k, v = (torch.randn(b, sk, hkv, 64, generator=g) for _ in range(2))
    args = [t.transpose(1, 2) if layout == "bhsd" else t for t in (q, k, v)]
    qv, kv, vv = A._views(*args, layout)
    r = A._launch_split(torch, None, qv, kv, vv, layout, 0.125, return_lse, splits)
    o, lse = r if return_lse else (r, None)
    want_o, want_l = standin(q, k, v, scale=0.125, return_lse=True)
    if layout == "bhsd":
        assert o.shape == (b, hq, sq, 64) and o.is_contiguous()
        o = o.transpose(1, 2)
    assert (o - want_o).abs().max().item() < 1e-5
    if return_lse:
        assert (lse - want_l).abs().max().item() < 1e-5
    assert len(calls) == 1 and calls[0][0] == (b, splits, sq, hq, 64) and calls[0][1] == return_lse
    assert calls[0][2] == (None if layout == "bshd" else (hq * sq * 64, 64, sq * 64, 1))


def test_batch1_queries_are_a_view():
    """Batch 1: the folded queries are the caller's tensor with batch stride 0 (no copy)."""
    torch = _torch()
    q = torch.randn(1, 1, 8, 64)
    qf = q[:, None].expand(1, 4, 1, 8, 64).reshape(4, 1, 8, 64)
    assert qf.data_ptr() == q.data_ptr() and qf.stride(0) == 0


# ---- on a GPU -----------------------------------------------------------------------------------------

_REASON = gpu_skip_reason()
gpu = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def _check_module():
    from qattn import _combine_check
    return _combine_check


@gpu
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("dv", [64, 128, 256])
def test_combine_kernel_against_fp64(dtype, dv):
    cc = _check_module()
    run = cc.package_runner()
    bad = []
    for i, case in enumerate(cc.CASES):
        r = cc.run_case(run, dtype, dv, case, seed=17 * dv + i)
        if not r["ok"]:
            bad.append(r["detail"])
    assert not bad, "\n".join(bad)


@gpu
def test_combine_launch_errors_are_launch_errors():
    import torch
    op = torch.zeros(1, 2, 3, 4, 64, device="cuda", dtype=torch.bfloat16)
    lp = torch.zeros(1, 2, 4, 3, device="cuda")
    bld = _combine.build_for(torch, "bf16", 64, op.device)
    p = _combine.fill_combine_params(op, lp, torch.empty(1, 3, 4, 64, device="cuda", dtype=torch.bfloat16))
    p.d_v = 128  # the library's own check
    assert bld.library.combine(p, torch.cuda.current_stream().cuda_stream) != 0
    assert "d_v" in bld.library.last_error()
    o, lse = _combine.combine(torch, op[:, :0], lp[:, :0], True)   # no part: empty rows
    assert (o == 0).all() and (lse == float("-inf")).all()


@gpu
@pytest.mark.parametrize("b,sq,hq,hkv,sk,causal,layout", [(4, 1, 32, 1, 8192, True, "bshd"),
                                                        (1, 1, 16, 2, 5001, False, "bhsd"),
                                                        (2, 3, 8, 1, 4096, False, "bshd"),
                                                        (1, 17, 8, 8, 4096, False, "bhsd")])
def test_split_keys_end_to_end(b, sq, hq, hkv, sk, causal, layout, monkeypatch):
    """attention() with its keys split and merged by the TL kernel: the split is taken, the kernel
    merges (once), and o / lse are as close to an fp32 reference as the unsplit call's (2x + atol)."""
    import torch
    from qattn import _attention as A
    from attention_standin import standin
    gen = torch.Generator(device="cuda").manual_seed(b * 1000 + sk)

    def rnd(s, h):
        t = torch.randn(b, s, h, 128, device="cuda", generator=gen).to(torch.bfloat16)
        return t.transpose(1, 2).contiguous() if layout == "bhsd" else t
    q, k, v = rnd(sq, hq), rnd(sk, hkv), rnd(sk, hkv)
    views = A._views(q, k, v, layout)
    fields, args = A.split_launch_args(A.variant_fields(causal, None, None, None, None, None))
    assert A.split_keys(torch, q.device, views[0], views[1], fields, args, {}) > 1
    monkeypatch.setenv("QATTN_COMBINE", "tl")
    merges = []
    real = _combine.combine
    monkeypatch.setattr(_combine, "combine", lambda *a, **kw: merges.append(1) or real(*a, **kw))
    o, lse = qattn.attention(q, k, v, causal=causal, return_lse=True, layout=layout)
    o_nolse = qattn.attention(q, k, v, causal=causal, layout=layout)
    assert len(merges) == 2
    monkeypatch.setenv("QATTN_SPLIT_KV", "0")
    o1, lse1 = qattn.attention(q, k, v, causal=causal, return_lse=True, layout=layout)
    bs = (lambda t: t.transpose(1, 2)) if layout == "bhsd" else (lambda t: t)
    ref_o, ref_l = standin(*(x.float() for x in views), causal=causal, scale=128 ** -0.5, return_lse=True)
    err, base = (bs(o).float() - ref_o).abs().max().item(), (bs(o1).float() - ref_o).abs().max().item()
    assert err <= 2 * base + 1e-3, (err, base)
    assert (lse - ref_l).abs().max().item() <= 2 * (lse1 - ref_l).abs().max().item() + 1e-4
    assert torch.equal(o_nolse, o)
    assert not torch.isnan(o).any()


@gpu
@pytest.mark.parametrize("layout,return_lse", [("bshd", False), ("bhsd", True)])
def test_a_split_decode_step_captures_in_a_cuda_graph(layout, return_lse, monkeypatch):
    """The serving issue: a decoding step whose keys are split (the folded forward, the query copy,
    the TL combine) captures as a CUDA graph; replayed on new inputs copied into the captured
    tensors it gives exactly the eager result (poisoned output first)."""
    import torch
    from qattn import _attention as A
    monkeypatch.setenv("QATTN_COMBINE", "tl")
    gen = torch.Generator(device="cuda").manual_seed(7)
    b, hq, hkv, sk = 4, 16, 1, 8192

    def rnd(s, h):
        t = torch.randn(b, s, h, 128, device="cuda", generator=gen).to(torch.bfloat16)
        return t.transpose(1, 2).contiguous() if layout == "bhsd" else t

    def step(q, k, v):
        return qattn.attention(q, k, v, causal=True, return_lse=return_lse, layout=layout)
    q, k, v = rnd(1, hq), rnd(sk, hkv), rnd(sk, hkv)
    views = A._views(q, k, v, layout)
    fields, args = A.split_launch_args(A.variant_fields(True, None, None, None, None, None))
    assert A.split_keys(torch, q.device, views[0], views[1], fields, args, {}) > 1
    sq_, sk_, sv_ = q.clone(), k.clone(), v.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step(sq_, sk_, sv_)  # builds and loads the kernels, warms up on the side stream
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(sq_, sk_, sv_)
    outs = out if return_lse else (out,)
    for _ in range(2):
        q2, k2, v2 = rnd(1, hq), rnd(sk, hkv), rnd(sk, hkv)
        sq_.copy_(q2), sk_.copy_(k2), sv_.copy_(v2)
        for t in outs:
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        eager = step(q2, k2, v2)
        for got, want in zip(outs, eager if return_lse else (eager,)):
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_gpu_check_catches_wrong_merges():
    """tests/gpu/combine_check.py's verdict on the CPU: the fp64 merge rounded to the dtype passes
    every case; a merge that drops a part, or leaves the all-empty rows unwritten, fails."""
    torch = _torch()
    cc = _check_module()
    good, drop, unwritten = cc.reference_runner(), [], []

    def dropping(op, lp, o, lse):
        cc.reference_runner()(op[:, :-1], lp[:, :-1], o, lse)

    def leaves_empty_rows(op, lp, o, lse):
        cc.reference_runner()(op, lp, o, lse)
        o[0, 0, 0] = float("nan")
    for i, case in enumerate(cc.CASES):
        for dt in ("bf16", "fp16"):
            assert cc.run_case(good, dt, 64, case, seed=i, device="cpu")["ok"], case
        if case[1] > 1:
            drop.append(cc.run_case(dropping, "bf16", 64, case, seed=i, device="cpu")["ok"])
        unwritten.append(cc.run_case(leaves_empty_rows, "bf16", 64, case, seed=i, device="cpu")["ok"])
    assert not any(drop) and not any(unwritten)
    assert torch.isinf(cc.reference(*cc.make_inputs(torch.bfloat16, 1, 2, 1, 1, 64, False, None, "cpu")[:2])[1]).all()
