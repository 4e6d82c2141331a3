"""ctypes binding of a generated qattn kernel library (include/qattn/qattn.h), shared by
tests/gpu/verify.py, tests/gpu/time_kernel.py and bench/bench_sm80.py. Tensors are torch CUDA tensors
in (batch, seqlen, heads, dim) views with any strides whose last dimension is contiguous (BSHD, or
BHSD through permute). The ctypes struct itself lives in ONE place, python/qattn/_abi.py (the
Python package's), so a change of the C ABI is one edit there."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from qattn._abi import QATTN_ABI_VERSION, STATUS, Library, Params, fill_params  # noqa: E402,F401


class Kernel:
    """One generated library: kernel(q, k, v, o, lse=None, scale=None, descale=(dq, dk, dv)) -> status."""

    def __init__(self, path):
        self.path = path
        self._lib = Library(path)
        self.lib = self._lib.lib
        self.info = self._lib.info

    def last_error(self):
        return self._lib.last_error()

    def params(self, q, k, v, o, lse=None, scale=None, descale=None):
        return fill_params(q, k, v, o, lse, scale, descale)

    def __call__(self, q, k, v, o, lse=None, scale=None, descale=None, stream=None, params=None):
        p = params if params is not None else self.params(q, k, v, o, lse, scale, descale)
        return self._lib.fwd(p, stream)
