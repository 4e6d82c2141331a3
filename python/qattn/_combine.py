"""The combine step of a split over the keys (decoding, qattn._attention._launch_split): a kernel
generated from TL (`qattn generate --combine`, docs/tl.md) that merges the per-part outputs and
LSEs of one attention problem whose keys were cut into S parts:

    LSE[b, h, i] = log sum_s exp(LSE_part[b, s, h, i])
    O[b, i, h]   = sum_s exp(LSE_part[b, s, h, i] - LSE[b, h, i]) O_part[b, s, i, h]

(a row whose parts are all empty gets O = 0 and LSE = -inf). One library per (dtype, d_v, target),
built from an ordinary kernel spec on first use and cached like the forward's (qattn._build), and
launched on torch's current stream. The torch merge (merge_torch) stays for kernel-pack deployments
that have no combine library and no compiler, and for A/B measurements (QATTN_COMBINE=torch).
"""
import ctypes
import os
import threading

from . import _build
from ._abi import QATTN_ABI_VERSION, STATUS, _kernel_info
from .errors import DeviceError, LaunchError, SpecError

_I32 = 2 ** 31


class CombineParams(ctypes.Structure):
    """qattn_combine_params (include/qattn/qattn.h), field for field; strides in elements."""
    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("o_part", ctypes.c_void_p), ("lse_part", ctypes.c_void_p), ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
        ("op_batch_stride", ctypes.c_int64), ("op_split_stride", ctypes.c_int64), ("op_row_stride", ctypes.c_int64),
        ("op_head_stride", ctypes.c_int64),
        ("lp_batch_stride", ctypes.c_int64), ("lp_split_stride", ctypes.c_int64), ("lp_head_stride", ctypes.c_int64),
        ("o_batch_stride", ctypes.c_int64), ("o_row_stride", ctypes.c_int64), ("o_head_stride", ctypes.c_int64),
        ("batch", ctypes.c_int32), ("splits", ctypes.c_int32), ("heads_q", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32), ("d_v", ctypes.c_int32),
    ]


def _strides(t, n):
    """The first n strides of t, 0 for a dimension of size 1 (never used to step; torch may give such
    a dimension any stride, which the library's alignment check would refuse)."""
    return tuple(int(st) if int(sz) > 1 else 0 for st, sz in zip(t.stride()[:n], t.shape[:n]))


def fill_combine_params(o_part, lse_part, o, lse=None):
    """CombineParams for o_part (batch, splits, seqlen_q, heads_q, d_v), lse_part (batch, splits,
    heads_q, seqlen_q), o (batch, seqlen_q, heads_q, d_v) (any objects with data_ptr(), stride(),
    shape) and lse (batch, heads_q, seqlen_q) contiguous or None (not stored)."""
    p = CombineParams()
    p.abi_version = QATTN_ABI_VERSION
    p.o_part, p.lse_part, p.o = o_part.data_ptr(), lse_part.data_ptr(), o.data_ptr()
    p.lse = lse.data_ptr() if lse is not None else None
    p.op_batch_stride, p.op_split_stride, p.op_row_stride, p.op_head_stride = _strides(o_part, 4)
    p.lp_batch_stride, p.lp_split_stride, p.lp_head_stride = _strides(lse_part, 3)
    p.o_batch_stride, p.o_row_stride, p.o_head_stride = _strides(o, 3)
    p.batch, p.splits, p.seqlen_q, p.heads_q, p.d_v = (int(x) for x in o_part.shape)
    return p


class CombineLibrary:
    """A loaded combine library: info (its qattn_kernel_info, "pass": "combine"), combine(params, stream)."""

    def __init__(self, path):
        self.path = str(path)
        self.lib = ctypes.CDLL(self.path)
        if not hasattr(self.lib, "qattn_combine"):
            raise ValueError(f"{self.path}: no qattn_combine (not a combine library)")
        self.lib.qattn_combine.argtypes = [ctypes.POINTER(CombineParams), ctypes.c_void_p]
        self.lib.qattn_combine.restype = ctypes.c_int
        info = _kernel_info(self.lib)
        if not isinstance(info, dict) or info.get("pass") != "combine":
            raise ValueError(f"{self.path}: its kernel info does not say \"pass\": \"combine\"")
        self.info = info

    def last_error(self):
        return self.lib.qattn_last_error().decode()

    def combine(self, params, stream=None):
        """Launches on `stream` (an integer cudaStream_t handle, or None for the default stream)."""
        return self.lib.qattn_combine(ctypes.byref(params), stream)


# ---- the library for a call -----------------------------------------------------------------------

def kernel_spec(dtype, d_v, target):
    """The spec the combine library of (dtype, d_v, target) is generated from: an ordinary kernel
    spec (only its dtype and head_dim_v reach the combine kernel; head_dim_qk = d_v, no mask)."""
    # short: the spec states the short-query length the key split serves, so the planner writes the
    # decoding tiling (one row per block of one warp; docs/planner.md, "The combine step")
    spec = _build.kernel_spec(dtype, d_v, d_v, {"mask": {"kind": "none"}}, False, target, short=True)
    spec["name"] = f"py_{dtype}_dv{d_v}_combine"
    return spec


def _device_target(torch, device):
    from ._attention import _device_target as dt  # the per-device target cache (imported late: a cycle)
    return dt(torch, device)


def build_for(torch, dtype, d_v, device, verbose=None):
    """The combine Build for (dtype, d_v) on `device`: from this process's lookup, else built (or
    found in the disk cache) through `qattn generate --combine`; a refusal is remembered."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    key = ("combine", dtype, int(d_v), idx)
    hit = _build.FAST.get(key)
    if hit is not None:
        if isinstance(hit, Exception):
            raise hit
        return hit
    target, reason, tag = _device_target(torch, device)
    try:
        b = _build.build(kernel_spec(dtype, d_v, target), target, reason, local_tag=tag, verbose=verbose, combine=True)
    except SpecError as e:  # deterministic: do not run the pipeline again for the same request
        _build.FAST[key] = e
        raise
    _build.FAST[key] = b
    return b


_SEEN = set()
_SEEN_LOCK = threading.Lock()


def first_split(dtype, d_v, device):
    """True once per (dtype, d_v, device) and process: the first key split of those decides whether
    to prefetch the combine library (later calls pay no readiness checks)."""
    key = (dtype, int(d_v), device.index)
    with _SEEN_LOCK:
        if key in _SEEN:
            return False
        _SEEN.add(key)
        return True


def prefetch(torch, dtype, d_v, device):
    """Starts building the combine library of (dtype, d_v) in a background thread when it is not
    ready and the merge would take it: the first call of a key split then compiles it while its
    forward kernel compiles, instead of after (attention() calls this only when the forward kernel
    is compiled too: a call that compiles nothing starts no build). The merge's build_for waits for
    the same build (qattn._build's per-kernel lock); a refusal is remembered or raised again there.
    Returns the thread, or None."""
    if mode() == "torch" or available(torch, dtype, d_v, device):
        return None

    def run():
        try:
            build_for(torch, dtype, d_v, device)
        except Exception:  # noqa: BLE001 - the merge calls build_for again and reports it
            pass
    t = threading.Thread(target=run, name="qattn-combine-build", daemon=True)
    t.start()
    return t


def available(torch, dtype, d_v, device):
    """True when build_for() would return the library without compiling (this process, or the disk cache)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    hit = _build.FAST.get(("combine", dtype, int(d_v), idx))
    if hit is not None:
        return not isinstance(hit, Exception)
    target, _, tag = _device_target(torch, device)
    return _build.available(kernel_spec(dtype, d_v, target), tag, combine=True)


def mode():
    """$QATTN_COMBINE: 'torch' (always the torch merge), 'tl' (always the TL kernel, built if need be)
    or 'auto' (default: the TL kernel, except where only it would need a compiler; _attention)."""
    m = os.environ.get("QATTN_COMBINE", "auto").strip().lower() or "auto"
    if m not in ("auto", "tl", "torch"):
        raise SpecError(f"QATTN_COMBINE={m!r}: expected 'auto', 'tl' or 'torch'", code="PY0111")
    return m


# ---- checks and the launch ------------------------------------------------------------------------

def _bad(msg, hint=None):
    return SpecError(msg, code="PY0111", hint=hint)


def check(torch, o_parts, l_parts, out=None):
    """(dtype name, batch, splits, seqlen_q, heads_q, d_v) of valid combine inputs, else a
    QattnError naming what is wrong: o_parts (batch, splits, seqlen_q, heads_q, d_v) fp16/bf16,
    l_parts (batch, splits, heads_q, seqlen_q) fp32, out (batch, seqlen_q, heads_q, d_v) of
    o_parts' dtype or None; one CUDA device; contiguous last dims; o_parts / out 16-byte aligned
    (pointer and strides: the kernel's vector loads), l_parts 4-byte aligned."""
    for name, t, nd in (("o_parts", o_parts, 5), ("l_parts", l_parts, 4), ("out", out, 4)):
        if t is None and name == "out":
            continue
        if not isinstance(t, torch.Tensor):
            raise _bad(f"combine: {name} is a {type(t).__name__}, not a torch.Tensor")
        if t.dim() != nd:
            raise _bad(f"combine: {name} has {t.dim()} dimensions; expected {nd}",
                       hint="o_parts (batch, splits, seqlen_q, heads_q, d_v), l_parts (batch, splits, heads_q, "
                            "seqlen_q), out (batch, seqlen_q, heads_q, d_v)")
    dt = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(o_parts.dtype)
    if dt is None:
        raise _bad(f"combine: o_parts has dtype {o_parts.dtype}; expected torch.float16 or torch.bfloat16")
    if l_parts.dtype != torch.float32:
        raise _bad(f"combine: l_parts has dtype {l_parts.dtype}; expected torch.float32")
    if out is not None and out.dtype != o_parts.dtype:
        raise _bad(f"combine: out has dtype {out.dtype}; expected o_parts' {o_parts.dtype}")
    b, s, sq, hq, dv = (int(x) for x in o_parts.shape)
    if tuple(l_parts.shape) != (b, s, hq, sq):
        raise _bad(f"combine: l_parts has shape {tuple(l_parts.shape)}; expected (batch, splits, heads_q, seqlen_q) = "
                   f"{(b, s, hq, sq)}")
    if out is not None and tuple(out.shape) != (b, sq, hq, dv):
        raise _bad(f"combine: out has shape {tuple(out.shape)}; expected (batch, seqlen_q, heads_q, d_v) = "
                   f"{(b, sq, hq, dv)}")
    for name, n in (("batch", b), ("splits", s), ("seqlen_q", sq), ("heads_q", hq), ("d_v", dv)):
        if n >= _I32:
            raise _bad(f"combine: {name} = {n} does not fit the C ABI's int32")
    for name, t, need in (("o_parts", o_parts, 16), ("l_parts", l_parts, 4), ("out", out, 16)):
        if t is None or t.numel() == 0:
            continue
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise _bad(f"combine: {name}'s last dimension is not contiguous (stride {t.stride(-1)})",
                       hint=f"pass {name}.contiguous()")
        es = t.element_size()
        ptr = t.data_ptr() if t.device.type != "meta" else 0
        if ptr % need or any((st * es) % need for st, n in zip(t.stride()[:-1], t.shape[:-1]) if n > 1):
            raise _bad(f"combine: {name} is not {need}-byte aligned (pointer {ptr:#x}, strides "
                       f"{tuple(t.stride())} of {es}-byte elements)", hint=f"pass {name}.contiguous() (or a clone)")
    for name, t in (("o_parts", o_parts), ("l_parts", l_parts), ("out", out)):
        if t is not None and t.device.type != "cuda":
            raise DeviceError(f"combine: {name} is on {t.device}; the combine kernel runs on CUDA tensors",
                              code="PY0102")
    if l_parts.device != o_parts.device or (out is not None and out.device != o_parts.device):
        raise DeviceError(f"combine: o_parts, l_parts{', out' if out is not None else ''} are on different devices",
                          code="PY0103")
    return dt, b, s, sq, hq, dv


def combine(torch, o_parts, l_parts, return_lse, device=None, out=None):
    """The merge of S partial attention results by the TL combine kernel: o_parts (batch, S, seqlen_q,
    heads_q, d_v) fp16/bf16 and l_parts (batch, S, heads_q, seqlen_q) fp32 LSEs (-inf: an empty part)
    -> (o, lse): o (batch, seqlen_q, heads_q, d_v) in o_parts' dtype (written into `out`, any such
    view with 16-byte aligned strides, when given), lse (batch, heads_q, seqlen_q) fp32, or None
    when return_lse is false (the kernel then stores none). Launched on the current stream of
    `device` (default: o_parts'); the library is built on first use (qattn._build, --combine)."""
    dt, b, s, sq, hq, dv = check(torch, o_parts, l_parts, out)
    device = device if device is not None else o_parts.device
    o = out if out is not None else torch.empty((b, sq, hq, dv), device=device, dtype=o_parts.dtype)
    lse = torch.empty((b, hq, sq), device=device, dtype=torch.float32) if return_lse else None
    if o.numel() == 0 and (lse is None or lse.numel() == 0):
        return o, lse
    if s == 0 or dv == 0:  # no part at all: every row is empty
        o.zero_()
        if lse is not None:
            lse.fill_(float("-inf"))
        return o, lse
    bld = build_for(torch, dt, dv, device)
    lib = bld.library
    p = fill_combine_params(o_parts, l_parts, o, lse)
    with torch.cuda.device(device):
        st = lib.combine(p, torch.cuda.current_stream(device).cuda_stream)
    if st != 0:
        raise LaunchError(f"qattn_combine returned {STATUS.get(st, st)}: {lib.last_error()}", code="PY0501",
                          hint=f"kernel {bld.spec['name']} ({bld.library_path})")
    return o, lse


def merge_torch(torch, o_parts, l_parts, return_lse, dtype=None):
    """The same merge as torch element-wise operations (fp32): weights softmax(l_parts) over the parts,
    a weighted sum; the fallback of a kernel pack without a combine library, and QATTN_COMBINE=torch.
    A row needs one non-empty part (finite LSE; empty parts weigh 0); a row with none gives NaN (the
    TL kernel gives 0 / -inf). Returns (o, lse or None)."""
    w = torch.softmax(l_parts, dim=1).transpose(2, 3).unsqueeze(-1)  # (b, S, sq, hq, 1) fp32
    o = (o_parts * w).sum(dim=1).to(dtype or o_parts.dtype)  # the product is fp32 (type promotion)
    return o, (torch.logsumexp(l_parts, dim=1) if return_lse else None)
