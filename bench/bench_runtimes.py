"""Several qattn runtimes in one benchmark process: `--also NAME=DEVICE_DIR[:QATTN_BIN]` A/Bs.

A runtime is another copy of the device runtime (a folder holding qattn/*.cuh, e.g. the parent
commit's device/) and, when given, another qattn compiler (a planner or translation change), with a
kernel cache folder of its own. Calls made inside `runtime(NAME)` build and launch that runtime's
kernels: the environment (QATTN_DEVICE_DIR, QATTN_BIN, QATTN_CACHE_DIR) and both in-process build
tables are swapped (_build._BUILDS is keyed by the spec alone, so a runtime sharing it would reuse
this tree's kernels: the --also A/Bs before 2026-11-29 did, and their two sides ran the same kernels).
Used by bench_kvcache.py and bench_backward.py.
"""
import contextlib
import os
import tempfile

from qattn import _build

RUNTIMES = {}  # NAME: (environment {VAR: value}, its own in-process build tables: _build.FAST and _build._BUILDS)


def add_runtime(spec):
    """Registers `NAME=DEVICE_DIR[:QATTN_BIN]`; returns NAME. ValueError for a malformed spec."""
    name, _, rest = spec.partition("=")
    device, _, qattn_bin = rest.partition(":")
    if not name or not os.path.isdir(os.path.join(device, "qattn")) or (qattn_bin and not os.access(qattn_bin, os.X_OK)):
        raise ValueError(f"--also wants NAME=DEVICE_DIR[:QATTN_BIN] (a folder holding qattn/*.cuh; an executable qattn "
                         f"compiler), got {spec!r}")
    env = {"QATTN_DEVICE_DIR": os.path.abspath(device), "QATTN_CACHE_DIR": tempfile.mkdtemp(prefix=f"qattn_{name}_cache_")}
    if qattn_bin:
        env["QATTN_BIN"] = os.path.abspath(qattn_bin)
    RUNTIMES[name] = (env, {}, {})
    return name


def add_runtimes(specs, error):
    """Registers every --also spec; a malformed one is reported by error(message) (argparse's
    parser.error or sys.exit)."""
    for spec in specs:
        try:
            add_runtime(spec)
        except ValueError as e:
            error(str(e))


@contextlib.contextmanager
def runtime(name):
    """Builds and launches inside use runtime `name`'s kernels (None: this tree's)."""
    if name is None:
        yield
        return
    env, fast, builds = RUNTIMES[name]
    saved = (dict(_build.FAST), dict(_build._BUILDS), {var: os.environ.get(var) for var in env})
    _build.FAST.clear()
    _build.FAST.update(fast)
    _build._BUILDS.clear()
    _build._BUILDS.update(builds)
    os.environ.update(env)
    try:
        yield
    finally:
        fast.clear()
        fast.update(_build.FAST)
        builds.clear()
        builds.update(_build._BUILDS)
        _build.FAST.clear()
        _build.FAST.update(saved[0])
        _build._BUILDS.clear()
        _build._BUILDS.update(saved[1])
        for var, old in saved[2].items():
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old


def check_runtimes():
    """Every --also runtime's kernels are its own builds (libraries in its own cache folder)."""
    for name, (env, _, builds) in RUNTIMES.items():
        cache = env.get("QATTN_CACHE_DIR")
        if cache is None:
            continue
        for b in builds.values():
            assert os.path.abspath(b.dir).startswith(os.path.abspath(cache)), \
                f"runtime {name} launched {b.dir}, a kernel outside its cache {cache}"


def in_runtime(name, fn):
    def run():
        with runtime(name):
            return fn()
    return run
