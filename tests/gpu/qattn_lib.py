"""ctypes binding of a generated qattn kernel library (include/qattn/qattn.h), shared by
tests/gpu/verify.py and bench/bench_sm80.py. Tensors are torch CUDA tensors in (batch, seqlen, heads,
dim) views with any strides whose last dimension is contiguous (BSHD, or BHSD through permute)."""
import ctypes
import json

QATTN_ABI_VERSION = 1
STATUS = {0: "OK", 1: "ERR_ABI", 2: "ERR_SHAPE", 3: "ERR_ALIGNMENT", 4: "ERR_LAUNCH", 5: "ERR_ARCH"}


class Params(ctypes.Structure):
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
    ]


class Kernel:
    """One generated library: kernel(q, k, v, o, lse=None, scale=None, descale=(dq, dk, dv)) -> status."""

    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.qattn_fwd.argtypes = [ctypes.POINTER(Params), ctypes.c_void_p]
        self.lib.qattn_fwd.restype = ctypes.c_int
        self.lib.qattn_kernel_info.restype = ctypes.c_char_p
        self.lib.qattn_last_error.restype = ctypes.c_char_p
        self.info = json.loads(self.lib.qattn_kernel_info().decode())

    def last_error(self):
        return self.lib.qattn_last_error().decode()

    def params(self, q, k, v, o, lse=None, scale=None, descale=None):
        p = Params()
        p.abi_version = QATTN_ABI_VERSION
        p.q, p.k, p.v, p.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
        p.lse = lse.data_ptr() if lse is not None else None
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            s = t.stride()
            setattr(p, name + "_batch_stride", s[0])
            setattr(p, name + "_row_stride", s[1])
            setattr(p, name + "_head_stride", s[2])
        p.batch, p.seqlen_q, p.heads_q, p.d_qk = q.shape
        p.seqlen_k, p.heads_kv = k.shape[1], k.shape[2]
        p.d_v = v.shape[3]
        p.softmax_scale = scale if scale is not None else q.shape[3] ** -0.5
        if descale is not None:
            p.descale_q, p.descale_k, p.descale_v = (d.data_ptr() if d is not None else None for d in descale)
        return p

    def __call__(self, q, k, v, o, lse=None, scale=None, descale=None, stream=None, params=None):
        p = params if params is not None else self.params(q, k, v, o, lse, scale, descale)
        return self.lib.qattn_fwd(ctypes.byref(p), stream)
