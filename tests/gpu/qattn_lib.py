"""ctypes binding of a generated qattn kernel library for the GPU scripts and benchmarks: the
package's (python/qattn/_abi.py: the ONE Python copy of the C ABI), importable from tests/gpu and
bench/ without installing the package."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from qattn._abi import QATTN_ABI_VERSION, STATUS, Kernel, Library, Params, fill_params  # noqa: E402,F401
