"""Shared setup of the binding's tests (tests/python/).

The tests import the installed `qattn` package when there is one (the GPU suite installs it with
pip), else the one in <repo>/python. The `qattn` executable: $QATTN_BIN, PATH, <repo>/build/qattn.
CPU-only machines (CI) run test_cpu.py; test_gpu.py skips with the reason (no torch / no CUDA).
"""
import os
import shutil
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
try:
    import qattn  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "python"))
    import qattn  # noqa: F401


def have_executable():
    try:
        qattn.find_executable()
        return True
    except qattn.QattnError:
        return False


def have_nvcc():
    from qattn import _build
    return _build.nvcc_path() is not None


def gpu_skip_reason():
    """None when the GPU tests can run, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (CPU-only CI installs no torch; the GPU suite runs on a GPU machine)"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    if not have_executable():
        return "the `qattn` executable was not found (QATTN_BIN / PATH / build/qattn)"
    return None


needs_cli = pytest.mark.skipif(not have_executable(),
                               reason="the `qattn` executable was not found (QATTN_BIN / PATH / build/qattn)")


def c_layout(tmp_path, struct, names):
    """[offsetof(struct, n) for n in names] + [sizeof(struct)] as a C compiler lays out the struct of
    include/qattn/qattn.h (pytest.skip without a C compiler): the ctypes mirrors are checked against it."""
    import subprocess
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / f"{struct}.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "qattn/qattn.h"\nint main(void) {\n'
                   + "".join(f'  printf("%zu\\n", offsetof({struct}, {n}));\n' for n in names)
                   + f'  printf("%zu\\n", sizeof({struct}));\n  return 0;\n}}\n')
    exe = tmp_path / struct
    subprocess.run([cc, "-I", os.path.join(REPO, "include"), str(src), "-o", str(exe)], check=True, timeout=60)
    return [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]


def fake_compile_many(monkeypatch):
    """precompile's compile step replaced by a stand-in that compiles nothing: each spec becomes a kernel
    whose spec is the canonical one and whose build is ("compiled", name) (the precompile tests then
    stub _build.build and _pack.write_pack to see what would be packed)."""
    from qattn import _build, _compile

    class K:
        def __init__(self, spec, target):
            self.spec = _build.canonical_spec(spec)
            self.target, self.target_reason, self._b = target, "test", ("compiled", self.spec["name"])
    monkeypatch.setattr(_compile, "compile_many", lambda specs, gpu=None, jobs=None, verbose=None: [K(s, gpu) for s in specs])
