"""Splitting the keys of short-query calls (qattn._attention.split_keys / _launch_split) without a
GPU: the decision (which calls split, into how many parts) and the fold + LSE merge, with the kernel
launch replaced by the fp32 stand-in (attention_standin.py). The real kernels: tests/python/test_gpu.py
(test_split_keys_decoding). Needs torch (skipped in the CPU CI)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU CI installs none)")

from qattn import _attention as A  # noqa: E402
from qattn import _variants as V  # noqa: E402
from attention_standin import standin  # noqa: E402


def fields(**kw):
    return V.split_launch_args(V.variant_fields(kw.get("causal", False), kw.get("window"), kw.get("softcap"),
                                                None, None, None))


def decide(b, sq, hq, hkv, sk, sms=132, **kw):
    A._SMS[0] = sms
    f, a = fields(**kw)
    return A.split_keys(torch, torch.device("cuda", 0), torch.empty(b, sq, hq, 128, device="meta"),
                        torch.empty(b, sk, hkv, 128, device="meta"), f, a, {})


def test_which_calls_split(monkeypatch):
    """The fold (before Hopper, or QATTN_SPLIT_MODE=fold): only calls whose parts all compute the
    same function, S dividing the keys. Hopper (the split in TL): any S, masks and variants too (each
    part applies them to its own key tiles), not the variants that read auxiliary tensors."""
    monkeypatch.setattr(A, "_device_target", lambda torch_, dev: ("a100", "test", "sm80"))
    assert decide(32, 1, 32, 1, 8192) == 4            # MQA decoding: 32 blocks of 132 SMs
    assert decide(8, 1, 64, 8, 32768) == 2            # GQA 8: 64 blocks
    assert decide(1, 1, 32, 8, 131072) == 16          # batch 1: capped
    assert decide(1, 1, 32, 8, 100003) == 16          # batch 1: any length (a last call takes the rest)
    assert decide(3, 1, 32, 8, 100003) == 1           # no divisor of 100003 up to 5
    assert decide(32, 1, 32, 8, 8192) == 1            # 256 blocks fill the GPU
    assert decide(32, 1, 32, 1, 900) == 1             # too few keys
    assert decide(2, 1, 32, 1, 8192, causal=True) == 16  # one query: causal = every key
    assert decide(2, 4, 32, 1, 8192, causal=True) == 1   # several queries: the causal diagonal
    assert decide(2, 1, 32, 1, 8192, causal="top_left") == 1
    assert decide(2, 1, 32, 1, 8192, window=(128, 0)) == 1
    assert decide(2, 1, 32, 1, 8192, softcap=30.0) == 1
    assert decide(2, 128, 32, 1, 8192) == 1           # not a short query sequence
    monkeypatch.setattr(A, "_device_target", lambda torch_, dev: ("h100", "test", "sm90"))
    assert decide(3, 1, 32, 8, 100003) == 5           # any S: each sequence's own tiles are cut
    assert decide(2, 4, 32, 1, 8192, causal=True) == 16
    assert decide(2, 1, 32, 1, 8192, causal="top_left") == 16
    assert decide(2, 1, 32, 1, 8192, window=(128, 0)) == 16
    assert decide(2, 1, 32, 1, 8192, softcap=30.0) == 16
    assert decide(2, 128, 32, 1, 8192) == 1
    assert decide(32, 1, 32, 8, 8192) == 1
    f, a = fields()
    assert A.split_keys(torch, torch.device("cuda", 0), torch.empty(2, 1, 32, 128, device="meta"),
                        torch.empty(2, 8192, 1, 128, device="meta"), f, a, {"alibi_slopes": torch.empty(32)}) == 1
    monkeypatch.setenv("QATTN_SPLIT_MODE", "fold")
    assert decide(2, 4, 32, 1, 8192, causal=True) == 1
    assert decide(3, 1, 32, 8, 100003) == 1
    monkeypatch.setenv("QATTN_SPLIT_KV", "0")
    assert decide(32, 1, 32, 1, 8192) == 1


def test_kvcache_num_splits_forces_the_parts(monkeypatch):
    """attention_with_kvcache's num_splits (flash_attn_with_kvcache's): 0 qattn's choice, 1 none, N
    parts on Hopper for any call without auxiliary tensors; with the fold at most N, a divisor of the
    capacity (or of the block table's width), and only where the fold may split."""
    from qattn import _kvcache
    causal, a = fields(causal=True)
    none, _ = fields()

    def parts(n, f, sq=4, pages=0, cap=4096):  # (q is read only when qattn chooses: n = 0)
        return _kvcache._splits(torch, None, cap, pages, f, a, 32, 8, sq, A.tl_split(torch, torch.device("cuda", 0)), n)
    monkeypatch.setattr(A, "_device_target", lambda torch_, dev: ("h100", "test", "sm90"))
    assert parts(5, causal) == 5 and parts(5, none) == 5 and parts(1, causal) == 1
    assert parts(7, causal, pages=64) == 7             # any N: each sequence's tiles are cut
    monkeypatch.setattr(A, "_device_target", lambda torch_, dev: ("a100", "test", "sm80"))
    assert parts(5, none, sq=1) == 4                   # the fold: a divisor of the capacity
    assert parts(5, none, sq=1, pages=48) == 4         # ... of the block table's width
    assert parts(5, causal) == 1                       # several causal queries: the fold cannot split them
    assert parts(1, none, sq=1) == 1


def test_split_fields_one_causal_query_takes_the_unmasked_kernel():
    causal, _ = fields(causal=True)
    assert A.split_fields(causal, 1) == {"mask": {"kind": "none"}}
    assert A.split_fields(causal, 4) == causal        # several queries: the diagonal cuts keys
    for kw in ({"causal": "top_left"}, {"causal": True, "softcap": 30.0}, {"window": (128, 0)}):
        f, _ = fields(**kw)
        assert A.split_fields(f, 1) == f, kw


@pytest.mark.parametrize("b,sq,hq,hkv,sk,splits,layout", [(3, 1, 8, 1, 4096, 4, "bshd"), (1, 1, 8, 2, 5000, 3, "bhsd"),
                                                        (2, 7, 8, 8, 2048, 2, "bshd")])
def test_fold_and_merge_equal_one_call(monkeypatch, b, sq, hq, hkv, sk, splits, layout):
    calls = []

    def fake_launch(torch_, build, q, k, v, layout_, scale, return_lse, aux=None, args=None):
        assert layout_ == "bshd" and return_lse
        calls.append(tuple(k.shape))
        return standin(q, k, v, scale=scale, return_lse=True)
    monkeypatch.setattr(A, "_launch", fake_launch)
    g = torch.Generator().manual_seed(b * 100 + sk)
    q = torch.randn(b, sq, hq, 64, generator=g)
    k, v = (torch.randn(b, sk, hkv, 64, generator=g) for _ in range(2))
    o, lse = A._launch_split(torch, None, q, k, v, layout, 0.125, True, splits)
    want_o, want_l = standin(q, k, v, scale=0.125, return_lse=True)
    if layout == "bhsd":
        o = o.transpose(1, 2)
    assert (o - want_o).abs().max().item() < 1e-5 and (lse - want_l).abs().max().item() < 1e-5
    chunk = sk // splits
    assert calls[0] == (b * splits, chunk, hkv, 64)
    assert len(calls) == (1 if sk % splits == 0 else 2)


def test_no_compile_only_for_a_split(monkeypatch, tmp_path):
    """A call whose own kernel is ready (pack / cache) but whose LSE twin is not runs unsplit where
    no compiler is (a deployment with a kernel pack and no toolchain must not start building), and
    splits (building the twin) where one is; `available` looks in this process's builds, the packs
    and the disk cache."""
    from qattn import _build
    monkeypatch.setattr(A, "_device_target", lambda torch_, dev: ("h100", "test", "sm90"))
    ready = set()
    monkeypatch.setattr(_build, "available", lambda spec, tag="", use_cache=True: spec["return_lse"] in ready)
    q, k = torch.empty(32, 1, 32, 128, device="meta"), torch.empty(32, 8192, 1, 128, device="meta")
    f, _ = fields()
    run = lambda: A._compiles_only_for_split(torch, "bf16", q, k, f, torch.device("cuda", 0), (32, 1, 1))  # noqa: E731
    monkeypatch.setattr(_build, "can_compile", lambda: True)
    ready.add(False)
    assert run() is False          # the plain kernel cached, a compiler here: split (the twin is built)
    ready.clear()
    monkeypatch.setattr(_build, "can_compile", lambda: False)
    assert run() is False          # nothing ready: the first call compiles anyway (the twin)
    ready.add(False)
    assert run() is True           # the plain kernel is packed, the twin not: no split
    ready.add(True)
    assert run() is False          # both ready: split
    monkeypatch.undo()
    monkeypatch.setenv("QATTN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_build, "_BUILDS", {})  # (other tests of this process may have built the kernel)
    monkeypatch.setattr(_build._pack, "_PACKS", [])
    spec = _build.kernel_spec("bf16", 128, 128, f, True, "h100", short=True)
    assert not _build.available(spec, "sm90")
    text = __import__("json").dumps(spec, sort_keys=True)
    h = __import__("hashlib").sha256((text + "sm90").encode()).hexdigest()[:12]
    d = tmp_path / "python" / f"{spec['name']}-h100-sm90-{h}"
    d.mkdir(parents=True)
    (d / "libqattn_kernel.so").write_bytes(b"")
    assert _build.available(spec, "sm90")
