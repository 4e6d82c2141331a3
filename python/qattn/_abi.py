"""The C ABI of a generated kernel library (include/qattn/qattn.h), in ctypes: the ONE Python copy.

Everything that calls a generated .so from Python (this package, qattn.verify and qattn.timing (the
GPU step of `qattn generate`), tests/gpu/qattn_lib.py and the benchmarks) uses the struct below, so a
change of the C header is an edit here. Torch-free: tensors are any objects with data_ptr(), stride() and
shape (torch tensors in (batch, seqlen, heads, dim) views whose last dimension is contiguous).
"""
import ctypes
import json

# Must equal QATTN_ABI_VERSION in include/qattn/qattn.h (tests/python/test_cpu.py checks it).
QATTN_ABI_VERSION = 10

STATUS = {0: "OK", 1: "ERR_ABI", 2: "ERR_SHAPE", 3: "ERR_ALIGNMENT", 4: "ERR_LAUNCH", 5: "ERR_ARCH", 6: "ERR_AUX",
          7: "ERR_ARG"}

# The launch arguments a kernel may read (its info's "args"): the TL builtins of docs/tl.md.
LAUNCH_ARGS = ("window_left", "window_right", "softcap")


class Params(ctypes.Structure):
    """qattn_fwd_params, field for field."""
    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("q_batch_stride", ctypes.c_int64), ("q_row_stride", ctypes.c_int64), ("q_head_stride", ctypes.c_int64),
        ("k_batch_stride", ctypes.c_int64), ("k_row_stride", ctypes.c_int64), ("k_head_stride", ctypes.c_int64),
        ("v_batch_stride", ctypes.c_int64), ("v_row_stride", ctypes.c_int64), ("v_head_stride", ctypes.c_int64),
        ("o_batch_stride", ctypes.c_int64), ("o_row_stride", ctypes.c_int64), ("o_head_stride", ctypes.c_int64),
        ("batch", ctypes.c_int32), ("heads_q", ctypes.c_int32), ("heads_kv", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32), ("seqlen_k", ctypes.c_int32),
        ("d_qk", ctypes.c_int32), ("d_v", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("descale_q", ctypes.c_void_p), ("descale_k", ctypes.c_void_p), ("descale_v", ctypes.c_void_p),
        ("aux", ctypes.c_void_p * 4),  # ABI 2: auxiliary inputs of Score/Mask variants (info["aux"] order)
        ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),  # ABI 3: launch arguments (-1: unbounded)
        ("softcap", ctypes.c_float),
        ("page_size", ctypes.c_int32), ("pages", ctypes.c_int32), ("num_pages", ctypes.c_int32),  # ABI 4: a paged KV cache
        ("total_q", ctypes.c_int32), ("total_k", ctypes.c_int32),  # ABI 5: packed ragged batches
        ("sm_margin", ctypes.c_int32),  # ABI 7: SMs a persistent kernel leaves free
        ("splits", ctypes.c_int32),  # ABI 8: split keys (o, lse hold batch * splits parts)
        ("o_merged", ctypes.c_void_p), ("lse_merged", ctypes.c_void_p),  # ABI 10: a TL Merge's result
        ("om_batch_stride", ctypes.c_int64), ("om_row_stride", ctypes.c_int64), ("om_head_stride", ctypes.c_int64),
    ]


def fill_params(q, k, v, o, lse=None, scale=None, descale=None, aux=None, window=None, softcap=None, sm_margin=0,
                splits=1):
    """Params for (batch, seqlen, heads, dim) views q, k, v, o; lse (batch, heads_q, seqlen_q) or None;
    aux: up to 4 contiguous device tensors (or None) in the order of the kernel info's "aux" list;
    window (left, right) (-1: unbounded) and softcap: the launch arguments of kernels whose info
    lists them in "args" (ignored by the others); sm_margin: SMs a persistent kernel leaves free;
    splits: the parts of split keys (kernels whose info says "splits"): then o and lse hold batch * splits
    parts, part s of sequence b at b * splits + s, and batch is q's. A kernel whose info says "merge" (its TL
    merges the parts itself, ABI 10) also needs o_merged / lse_merged (qattn.verify.poisoned_merge sets them)."""
    p = Params()
    p.abi_version = QATTN_ABI_VERSION
    p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
    p.lse = lse.data_ptr() if lse is not None else None
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        s = t.stride()
        setattr(p, name + "_batch_stride", s[0])
        setattr(p, name + "_row_stride", s[1])
        setattr(p, name + "_head_stride", s[2])
    p.batch, p.seqlen_q, p.heads_q, p.d_qk = (int(x) for x in q.shape)
    p.seqlen_k, p.heads_kv = int(k.shape[1]), int(k.shape[2])
    p.d_v = int(v.shape[3])
    p.softmax_scale = scale if scale is not None else int(q.shape[3]) ** -0.5
    if descale is not None:
        p.descale_q, p.descale_k, p.descale_v = (d.data_ptr() if d is not None else None for d in descale)
    for i, t in enumerate(aux or ()):
        p.aux[i] = t.data_ptr() if t is not None else None
    if window is not None:
        p.window_left, p.window_right = (int(x) for x in window)
    if softcap is not None:
        p.softcap = float(softcap)
    p.sm_margin = int(sm_margin)
    p.splits = int(splits)
    return p


def _kernel_info(lib):
    """A loaded library's qattn_kernel_info as JSON (bounded; ValueError when NULL, too long or not JSON)."""
    lib.qattn_kernel_info.restype = ctypes.c_char_p
    lib.qattn_last_error.restype = ctypes.c_char_p
    raw = lib.qattn_kernel_info()
    if not raw:
        raise ValueError("qattn_kernel_info: returned NULL")
    if len(raw) > 1 << 16:
        raise ValueError("qattn_kernel_info: longer than 64 KiB")
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise ValueError(f"qattn_kernel_info: not JSON ({e})") from None


class BwdParams(ctypes.Structure):
    """qattn_bwd_params, field for field (the backward pass: a library of a `Kernel NAME backward`)."""
    _fields_ = [("abi_version", ctypes.c_int32)] + [
        (n, ctypes.c_void_p) for n in ("q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv")] + [
        (f"{t}_{w}_stride", ctypes.c_int64) for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv")
        for w in ("batch", "row", "head")] + [
        ("batch", ctypes.c_int32), ("heads_q", ctypes.c_int32), ("heads_kv", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32), ("seqlen_k", ctypes.c_int32),
        ("d_qk", ctypes.c_int32), ("d_v", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("aux", ctypes.c_void_p * 4),
        ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_int64),
        ("daux", ctypes.c_void_p * 4),  # ABI 9: the gradients of auxiliary inputs (info "aux_grad" order)
    ]


def fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dv, scale=None, window=None, softcap=None, aux=None, daux=None):
    """BwdParams for (batch, seqlen, heads, dim) views q, k, v, o, dout, dq (fp32), dk, dv; lse
    (batch, heads_q, seqlen_q) fp32 contiguous. dq (and fp32 dk / dv) must be zero: the kernel adds.
    daux: the fp32 gradients of the auxiliary inputs the info's "aux_grad" names, zero, in that order."""
    p = BwdParams()
    p.abi_version = QATTN_ABI_VERSION
    tensors = (("q", "q", q), ("k", "k", k), ("v", "v", v), ("o", "o", o), ("dout", "do", dout), ("dq", "dq", dq),
               ("dk", "dk", dk), ("dv", "dv", dv))
    for field, prefix, t in tensors:
        setattr(p, field, t.data_ptr())
        s = t.stride()
        setattr(p, prefix + "_batch_stride", s[0])
        setattr(p, prefix + "_row_stride", s[1])
        setattr(p, prefix + "_head_stride", s[2])
    p.lse = lse.data_ptr()
    p.batch, p.seqlen_q, p.heads_q, p.d_qk = (int(x) for x in q.shape)
    p.seqlen_k, p.heads_kv = int(k.shape[1]), int(k.shape[2])
    p.d_v = int(v.shape[3])
    p.softmax_scale = scale if scale is not None else int(q.shape[3]) ** -0.5
    p.window_left, p.window_right = (int(x) for x in window) if window is not None else (-1, -1)
    p.softcap = float(softcap) if softcap is not None else 1.0
    for i, t in enumerate(aux or ()):
        p.aux[i] = t.data_ptr() if t is not None else None
    for i, t in enumerate(daux or ()):
        p.daux[i] = t.data_ptr() if t is not None else None
    return p


def bwd_workspace(torch, lib, p, device):
    """The workspace a backward kernel takes (ABI 6: its Phases' fp32 rows, e.g. D = rowsum(dO * O),
    and a deterministic kernel's turn counters), set into p; None when it needs none (the launch
    writes or zeroes what it reads: no memset here)."""
    n = lib.workspace_bytes(p)
    if n < 0:
        raise ValueError(f"{lib.path}: qattn_bwd_workspace_bytes returned {n}")
    if n == 0:
        return None
    ws = torch.empty((n + 3) // 4, dtype=torch.int32, device=device)
    p.workspace, p.workspace_bytes = ws.data_ptr(), ws.numel() * 4
    return ws


class BwdLibrary:
    """A loaded backward library: info (its qattn_kernel_info, "pass": "backward"), bwd(params, stream)."""

    def __init__(self, path):
        self.path = str(path)
        self.lib = ctypes.CDLL(self.path)
        if not hasattr(self.lib, "qattn_bwd"):
            raise ValueError(f"{self.path}: no qattn_bwd (not a backward library)")
        self.lib.qattn_bwd.argtypes = [ctypes.POINTER(BwdParams), ctypes.c_void_p]
        self.lib.qattn_bwd.restype = ctypes.c_int
        if not hasattr(self.lib, "qattn_bwd_workspace_bytes"):
            raise ValueError(f"{self.path}: no qattn_bwd_workspace_bytes (a backward library of C ABI < 6)")
        self.lib.qattn_bwd_workspace_bytes.argtypes = [ctypes.POINTER(BwdParams)]
        self.lib.qattn_bwd_workspace_bytes.restype = ctypes.c_int64
        info = _kernel_info(self.lib)
        if not isinstance(info, dict) or info.get("pass") != "backward":
            raise ValueError(f"{self.path}: its kernel info does not say \"pass\": \"backward\"")
        self.info = info

    def last_error(self):
        return self.lib.qattn_last_error().decode()

    def bwd(self, params, stream=None):
        return self.lib.qattn_bwd(ctypes.byref(params), stream)

    def workspace_bytes(self, params):
        return int(self.lib.qattn_bwd_workspace_bytes(ctypes.byref(params)))


INFO_DTYPES = ("fp16", "bf16", "fp8_e4m3")
INFO_MASKS = ("none", "causal", "causal_top_left", "window")


def check_info(info):
    """qattn_kernel_info() as the verifiers use it, checked: the library may be LLM-written, so every
    field is validated (type, range) and the optional ones get their defaults (out_dtype = dtype,
    lse false, aux []). Raises ValueError naming the field; returns the completed dict."""
    if not isinstance(info, dict):
        raise ValueError("qattn_kernel_info: not a JSON object")
    out = dict(info)

    def need(key, ok, what):
        if key not in out:
            raise ValueError(f"qattn_kernel_info: missing field '{key}' ({what})")
        if not ok(out[key]):
            raise ValueError(f"qattn_kernel_info: field '{key}' = {str(out[key])[:40]!r} is not {what}")

    def head_dim(x):
        return isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 1024

    need("dtype", lambda x: x in INFO_DTYPES, "one of " + ", ".join(INFO_DTYPES))
    need("d_qk", head_dim, "an integer head dim in 1..1024")
    need("d_v", head_dim, "an integer head dim in 1..1024")
    need("mask", lambda x: x in INFO_MASKS, "one of " + ", ".join(INFO_MASKS))
    out.setdefault("out_dtype", out["dtype"])
    need("out_dtype", lambda x: x in INFO_DTYPES, "one of " + ", ".join(INFO_DTYPES))
    out.setdefault("lse", False)
    need("lse", lambda x: isinstance(x, bool), "true or false")
    out.setdefault("aux", [])
    need("aux", lambda x: isinstance(x, list) and len(x) <= 4, "a list of at most 4 inputs")
    out.setdefault("aux_grad", [])
    need("aux_grad", lambda x: isinstance(x, list) and len(x) <= 4 and all(isinstance(a, str) for a in x),
         "a list of at most 4 input names")
    out.setdefault("arch", "?")
    out.setdefault("args", [])
    need("args", lambda x: isinstance(x, list) and all(a in LAUNCH_ARGS for a in x), "a list of " + ", ".join(LAUNCH_ARGS))
    if out["mask"] == "window":
        need("window", lambda x: x == "runtime" or (isinstance(x, list) and len(x) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 for v in x)),
             "[left, right] (integers >= 0) or \"runtime\"")
    return out


def launch_defaults(info, window=None, softcap=None):
    """The (window, softcap) to pass a kernel: the given ones, else for a kernel that reads them
    (info "args") a ValueError naming what is missing."""
    args = info.get("args", [])
    if window is None and ("window_left" in args or "window_right" in args):
        raise ValueError("this kernel takes the window at launch: pass window=(left, right) (-1: unbounded)")
    if softcap is None and "softcap" in args:
        raise ValueError("this kernel takes the softcap at launch: pass softcap=C (> 0)")
    return window, softcap


class Library:
    """One loaded kernel library: info (qattn_kernel_info as a dict), fwd(params, stream) -> status."""

    def __init__(self, path):
        self.path = str(path)
        self.lib = ctypes.CDLL(self.path)
        self.lib.qattn_fwd.argtypes = [ctypes.POINTER(Params), ctypes.c_void_p]
        self.lib.qattn_fwd.restype = ctypes.c_int
        self.info = check_info(_kernel_info(self.lib))

    def last_error(self):
        return self.lib.qattn_last_error().decode()

    def fwd(self, params, stream=None):
        """Launches on `stream` (an integer cudaStream_t handle, or None for the default stream)."""
        return self.lib.qattn_fwd(ctypes.byref(params), stream)


class Kernel:
    """One generated library for tests and benchmarks: kernel(q, k, v, o, lse=None, scale=None,
    descale=(dq, dk, dv)) -> status. (qattn.compile's Kernel is the user-facing one.)"""

    def __init__(self, path):
        self.path = path
        self._lib = Library(path)
        self.lib = self._lib.lib
        self.info = self._lib.info

    def last_error(self):
        return self._lib.last_error()

    def params(self, q, k, v, o, lse=None, scale=None, descale=None, aux=None, window=None, softcap=None):
        window, softcap = launch_defaults(self.info, window, softcap)
        return fill_params(q, k, v, o, lse, scale, descale, aux=aux, window=window, softcap=softcap)

    def __call__(self, q, k, v, o, lse=None, scale=None, descale=None, stream=None, params=None, aux=None, window=None,
                 softcap=None):
        """window / softcap: the launch arguments of a kernel whose info lists them in "args"."""
        p = params if params is not None else self.params(q, k, v, o, lse, scale, descale, aux, window, softcap)
        return self._lib.fwd(p, stream)
