"""Building kernels through the pipeline, with two caches.

What a kernel fixes at compile time (checked against src/plan/problem.h): dtype, head_dim_qk,
head_dim_v, the mask kind and alignment, the score variants, return_lse, whether it reads a KV cache
(kv_cache: per-sequence key counts, pages; qattn._kvcache) and the target architecture. Everything else is a runtime argument of the C ABI: batch, heads (any heads_q multiple
of heads_kv: MHA, GQA, MQA), sequence lengths, strides (BSHD, BHSD), the softmax scale, the window
sizes and the softcap (ABI 3; _variants.split_launch_args). So the binding builds
one kernel per compile-time tuple, from a *kernel spec* with a name derived from that tuple and
canonical heads 2/1 (the heads only reach a comment of the TL and the CPU interpreter's check, which
then also exercises the shared-KV head mapping).

Kernel packs (qattn.use_pack, $QATTN_PACKS; _pack.py) are searched first: a kernel found there is
loaded without running the `qattn` command or nvcc.
Caches: in this process, a dict from (kernel spec, local GPU) to the loaded library; on disk,
the nvcc driver's content-addressed cache (<cache>/<key[0:2]>/<key>/, key = SHA-256 of source,
flags, nvcc version, runtime headers), so a kernel built once is never compiled again.
`qattn generate` runs once per kernel per process (plan + check + interpret + translate, a fraction
of a second on a cache hit) and writes its artifacts to <cache>/python/<kernel>/.
<cache> is $QATTN_CACHE_DIR, else $XDG_CACHE_HOME/qattn, else ~/.cache/qattn.
"""
import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
import time

from . import _cli, _pack
from .errors import ToolchainError
from ._abi import BwdLibrary, Library
from ._variants import fields_of_spec, variant_tag
from .errors import BuildError, QattnError, SpecError

DTYPES = ("fp16", "bf16")
_LOCK = threading.Lock()
_KEY_LOCKS = {}
_BUILDS = {}   # (kernel spec json, local tag, use_cache) -> Build
FAST = {}      # attention()'s lookup: (dtype, d_qk, d_v, variant, lse, device, short) -> Build or the SpecError it raised


def cache_dir():
    """The cache root shared with the `qattn` command's nvcc driver."""
    for var, sub in (("QATTN_CACHE_DIR", ""), ("XDG_CACHE_HOME", "qattn")):
        v = os.environ.get(var)
        if v:
            return os.path.join(v, sub) if sub else v
    home = os.environ.get("HOME")
    if home:
        return os.path.join(home, ".cache", "qattn")
    return os.path.join(tempfile.gettempdir(), "qattn-cache")


# Short query sequences over GQA/MQA (decoding, chunked prefill): with at most this many queries
# the Hopper kernel packs the query heads of a kv head into one tile (docs/tl.md, "GQA packing";
# H100: 1.8-3.9x at seqlen_q 16-64, bench/results/2026-11-24-h100-sm90-gqa-pack).
SHORT_QUERIES = 64


# Decoding: at most this many packed rows (seqlen_q x group) take the kernel whose spec states one
# query, for which the planner chooses one 64-row tile and one consumer warpgroup (plan::decode_tile;
# H200: 1.01-1.07x the 128-row tile on decoding's split kernel, bench/results/2026-11-30-h200-merge).
DECODE_ROWS = 64


def varlen_kind(heads_q, heads_kv):
    """The varlen kernel for these heads (kernel_spec's varlen): True, the kernel whose Hopper tiles
    pack the query heads of a kv head (GQA / MQA with a group that divides 64: a decoding sequence's
    G query heads share one tile); "g1" otherwise (MHA, or a group such as 7 that does not divide
    the 64-row tiles: one query head per tile, as before packing)."""
    group = heads_q // heads_kv if heads_kv > 0 and heads_q % heads_kv == 0 else 1
    return True if group > 1 and 64 % group == 0 else "g1"


def short_queries(target, heads_q, heads_kv, seqlen_q, fields, v_from_k=False):
    """Whether a call should use the packed kernel: an sm90 target, GQA/MQA with a group that divides
    64 (the packed tile's rows), at most SHORT_QUERIES queries, no score/mask variants. "decode" (true
    too) when its packed rows, seqlen_q x group, are at most DECODE_ROWS: the one-tile decoding kernel;
    "decode1" for MHA (nothing to pack) with at most DECODE_ROWS queries: the one-tile kernel without
    packing (spec heads 1 / 1; H200 MHA over pages of 16 1.06-1.23x the 128-row tile,
    bench/results/2026-12-01-h200-decode-mha).
    v_from_k (absorbed MLA, qattn._kvcache): also a group that is a multiple of 64 (DeepSeek's 128
    query heads over one latent kv head: each 64-row tile holds 64 heads of one query; the kernel
    accepts a group that divides 64 or is a multiple of its 64 rows); never "decode"."""
    if target not in ("h100", "h200") or heads_kv <= 0 or heads_q < heads_kv or heads_q % heads_kv:
        return False
    if heads_q == heads_kv:  # MHA: no heads to pack; decoding's rows still fit one 64-row tile
        return "decode1" if not v_from_k and 0 < seqlen_q <= DECODE_ROWS and "variants" not in fields else False
    group = heads_q // heads_kv
    fits = 64 % group == 0 or (v_from_k and group % 64 == 0)
    if not (fits and 0 < seqlen_q <= SHORT_QUERIES and "variants" not in fields):
        return False
    return "decode" if not v_from_k and seqlen_q * group <= DECODE_ROWS else True


# The queries the spec of a packed absorbed-MLA kernel states (problem.seqlen_q): the planner packs
# when that saves a fifth of the rows, which for its 64-row tiles and the spec's canonical group of 2
# holds up to 32 queries, not at SHORT_QUERIES (src/plan/plan.cc, pack_gqa_decision). The kernel is
# generic in seqlen_q: this only makes the planner choose the packed tile.
V_FROM_K_PACK_QUERIES = 1


def kernel_spec(dtype, d_qk, d_v, fields, return_lse, target, short=False, kv_cache=None, varlen=False, split=False,
                v_from_k=False):
    """The canonical spec of the kernel for one compile-time tuple (see the module comment);
    fields: the variant fields ({"mask": ...}, qattn._variants). short: the kernel for short query
    sequences (short_queries): the spec states seqlen_q = SHORT_QUERIES (V_FROM_K_PACK_QUERIES with
    v_from_k), so the planner packs heads; short="decode": seqlen_q = 1, so it also takes one 64-row tile;
    "decode1" (MHA): seqlen_q = 1 and heads 1 / 1, one 64-row tile and nothing packed.
    kv_cache: "lengths" or "paged" for a kernel that reads a KV cache (qattn._kvcache); varlen: a
    kernel over packed ragged batches (qattn._varlen): True for GQA packing on Hopper (the spec's group
    of 2: the planner packs the query heads of a kv head into each sequence's tiles), "g1" for the
    unpacked kernel (spec heads 1 / 1: MHA, and groups that do not divide a 64-row tile); split: the
    kernel that writes the parts of split keys (the spec's split_keys, Hopper: docs/tl.md "Splitting the
    keys"; with the LSE; with varlen, ragged queries over a KV cache); v_from_k: V is
    the first d_v columns of K (the spec's v_from_k: DeepSeek's absorbed MLA, one latent cache of
    d_qk = 576 columns, d_v = 512; Hopper only; not with varlen, split or variants)."""
    name = f"py_{dtype}_d{d_qk}" + (f"v{d_v}" if d_v != d_qk else "") + "_" + variant_tag(fields) + \
        ("_lse" if return_lse else "") + ("_dec1" if short == "decode1" else "_dec" if short == "decode" else "_short" if short else "") + \
        (f"_kv{kv_cache}" if kv_cache else "") + \
        ("_varlen" if varlen else "") + ("_g1" if varlen == "g1" else "") + ("_split" if split else "") + \
        ("_vk" if v_from_k else "")
    name = name[:128]  # a spec name is at most 128 characters (SPEC0217); the cache key is the whole spec
    spec = {"name": name, "heads_q": 2, "heads_kv": 1, "head_dim_qk": int(d_qk), "head_dim_v": int(d_v),
            "dtype": dtype, "layout": "bshd", "return_lse": bool(return_lse), "gpu": target}
    if short:
        sq = V_FROM_K_PACK_QUERIES if v_from_k else 1 if short in ("decode", "decode1") else SHORT_QUERIES
        spec["problem"] = {"batch": 1, "seqlen_q": sq, "seqlen_k": 4096}
        if short == "decode1":  # MHA: heads 1 / 1, so that the planner packs nothing
            spec["heads_q"] = 1
    spec.update(fields)
    if kv_cache:
        spec["kv_cache"] = kv_cache
    if varlen:
        spec["varlen"] = True
        if varlen == "g1":
            spec["heads_q"] = 1
    if split:
        spec["split_keys"] = True
    if v_from_k:
        spec["v_from_k"] = True
    return spec


# ---- progress -----------------------------------------------------------------------------------

def _verbose(verbose):
    if verbose is not None:
        return bool(verbose)
    return os.environ.get("QATTN_VERBOSE", "1") not in ("0", "false", "no", "")


class _Progress:
    """Shows the CLI's progress lines on stderr once nvcc starts (a cache hit stays quiet)."""

    def __init__(self, name, show):
        self.name, self.show, self.buf, self.streaming = name, show, [], False
        self.cache_hit, self.nvcc_seconds = False, None

    def __call__(self, line):
        if "cache hit" in line:
            self.cache_hit = True
        m = re.search(r"nvcc done in ([0-9.]+) s", line)
        if m:
            self.nvcc_seconds = float(m.group(1))
        if not self.show:
            return
        if not self.streaming and re.match(r"\s*nvcc\b", line):  # "nvcc sm80: compiling ..."
            self.streaming = True
            print(f"qattn: building {self.name} (first use; later runs use the cache)", file=sys.stderr, flush=True)
            for b in self.buf:
                print(f"qattn: {self.name}: {b}", file=sys.stderr, flush=True)
            self.buf = []
        if self.streaming:
            print(f"qattn: {self.name}: {line}", file=sys.stderr, flush=True)
        else:
            self.buf.append(line)


# ---- one built kernel ---------------------------------------------------------------------------

class Build:
    """The artifacts of one `qattn generate` run and the loaded library (shared by all users)."""

    def __init__(self, spec, target, reason, out_dir, cache_hit, nvcc_seconds, wall_seconds, log, backward=False,
                 combine=False):
        self.spec, self.target, self.target_reason = spec, target, reason
        self.backward = backward  # a `qattn generate --backward` library (qattn_bwd)
        self.combine = combine    # a `qattn generate --combine` library (qattn_combine; qattn._combine)
        self.dir = out_dir
        self.library_path = os.path.join(out_dir, "libqattn_kernel.so")
        self.cache_hit, self.nvcc_seconds, self.wall_seconds, self.log = cache_hit, nvcc_seconds, wall_seconds, log
        self.from_pack = None  # the kernel pack folder it came from (qattn.use_pack), else None
        self._lib = None
        self._lock = threading.Lock()

    @property
    def library(self):
        if self._lib is None:
            with self._lock:
                if self._lib is None:
                    try:
                        if self.combine:
                            from ._combine import CombineLibrary  # (qattn._combine imports this module)
                            lib = CombineLibrary(self.library_path)
                        else:
                            lib = (BwdLibrary if self.backward else Library)(self.library_path)
                    except (OSError, ValueError) as e:  # not loadable, or its qattn_kernel_info is malformed
                        raise BuildError(f"cannot load {self.library_path}: {e}", code="PY0203") from None
                    self._check_info(lib.info)
                    self._lib = lib
        return self._lib

    def _check_info(self, info):
        s = self.spec
        if self.combine:  # O_part and O both in the spec's dtype
            want = {"pass": "combine", "dtype": s["dtype"], "part_dtype": s["dtype"], "d_v": s["head_dim_v"]}
        else:
            want = {"dtype": s["dtype"], "d_qk": s["head_dim_qk"], "d_v": s["head_dim_v"]}
            want.update({"pass": "backward"} if self.backward else {"lse": s["return_lse"]})
        got = {k: info.get(k) for k in want}
        if got != want:
            raise BuildError(f"{self.library_path} computes {got}, expected {want}", code="PY0203",
                             hint="remove the folder and try again")

    def artifact(self, name):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return f.read()
        except OSError:
            return None


def _key_lock(key):
    with _LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


@contextlib.contextmanager
def _file_lock(path):
    """An exclusive lock between processes (two pytest workers building the same kernel)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: the CLI's atomic writes still keep the artifacts whole
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _suffix(backward, combine):
    return ("-bwd" if backward else "") + ("-combine" if combine else "")


def build(spec, target, reason, local_tag="", use_cache=True, verbose=None, backward=False, combine=False):
    """The Build for a kernel spec: from this process's cache, else through `qattn generate`
    (`--backward`: the backward pass of the spec's attention, a qattn_bwd library; `--combine`: the
    combine step of a split over the keys for the spec's dtype and head_dim_v, a qattn_combine library)."""
    if backward and combine:
        raise ValueError("build(): backward and combine name two different kernels")
    text = json.dumps(spec, sort_keys=True) + ("#backward" if backward else "") + ("#combine" if combine else "")
    key = (text, local_tag, use_cache)
    if use_cache and key in _BUILDS:
        return _BUILDS[key]
    with _key_lock(key):
        if use_cache and key in _BUILDS:
            return _BUILDS[key]
        # an ahead-of-time pack (qattn.use_pack, $QATTN_PACKS): no compiler, no nvcc (forward kernels, the
        # combine libraries of the key split, the backward libraries of training)
        if use_cache:
            t0 = time.perf_counter()
            found = _pack.find(spec, combine, backward)
            if found is not None:
                kdir, _ = found
                b = Build(spec, target, reason, kdir, True, None, time.perf_counter() - t0, f"from the kernel pack: {kdir}",
                          backward=backward, combine=combine)
                b.from_pack = os.path.dirname(kdir)
                _BUILDS[key] = b
                return b
        h = hashlib.sha256((text + local_tag).encode()).hexdigest()[:12]
        root = os.path.join(cache_dir(), "python")
        name = f"{spec['name']}-{spec['gpu']}{'-' + local_tag if local_tag else ''}{_suffix(backward, combine)}-{h}"
        out_dir = os.path.join(root, name)
        try:
            os.makedirs(root, exist_ok=True)
            spec_file = out_dir + ".spec.json"
            with open(spec_file, "w") as f:
                f.write(json.dumps(spec, indent=2) + "\n")
        except OSError as e:
            raise QattnError(f"cannot write to the cache folder {root}: {e}", code="PY0205",
                             hint="set QATTN_CACHE_DIR to a writable folder") from None
        args = ["generate", "--spec", spec_file, "--out", out_dir, "--no-verify"] + \
            (["--backward"] if backward else []) + (["--combine"] if combine else [])
        if not use_cache:
            args.append("--no-cache")
        prog = _Progress(spec["name"], _verbose(verbose))
        t0 = time.perf_counter()
        with _file_lock(out_dir + ".lock"):
            r = _cli.run(args, progress=prog)
        wall = time.perf_counter() - t0
        _cli.check(r, f"building {spec['name']} for {spec['gpu']}")
        if not os.path.isfile(os.path.join(out_dir, "libqattn_kernel.so")):
            raise BuildError(f"`qattn generate` succeeded but wrote no library to {out_dir}:\n{r.stderr}",
                             code="PY0203")
        b = Build(spec, target, reason, out_dir, prog.cache_hit, prog.nvcc_seconds, wall, r.stderr, backward=backward,
                  combine=combine)
        if use_cache:
            _BUILDS[key] = b
        return b


def available(spec, local_tag="", use_cache=True, combine=False):
    """True when build() would return this kernel without compiling: built in this process, in a
    kernel pack, or already in the disk cache (its library present in the
    cache folder). combine: the `--combine` library of the spec (as build(..., combine=True))."""
    text = json.dumps(spec, sort_keys=True) + ("#combine" if combine else "")
    if (text, local_tag, use_cache) in _BUILDS or _pack.find(spec, combine) is not None:
        return True
    h = hashlib.sha256((text + local_tag).encode()).hexdigest()[:12]
    name = f"{spec['name']}-{spec['gpu']}{'-' + local_tag if local_tag else ''}{_suffix(False, combine)}-{h}"
    return os.path.isfile(os.path.join(cache_dir(), "python", name, "libqattn_kernel.so"))


def nvcc_path():
    """The nvcc that `qattn generate` would run (src/build/nvcc.cc's order: $QATTN_NVCC, PATH,
    /usr/local/cuda/bin/nvcc), or None."""
    v = os.environ.get("QATTN_NVCC")
    if v:
        return v if os.path.isfile(v) else None
    import shutil
    found = shutil.which("nvcc")
    if found:
        return found
    return "/usr/local/cuda/bin/nvcc" if os.path.isfile("/usr/local/cuda/bin/nvcc") else None


_CAN_COMPILE = {}  # (QATTN_BIN, QATTN_NVCC, PATH) -> bool: the answer of can_compile()


def can_compile():
    """True when this machine can build a kernel: the `qattn` executable and nvcc are found. (A
    deployment that ships a kernel pack without the toolchain cannot: then calls use what is ready
    and never start a build they did not need; _attention._compiles_only_for_split.) Asked on the
    decoding path, so the answer is kept per environment (no file lookups per call)."""
    key = tuple(os.environ.get(v) for v in ("QATTN_BIN", "QATTN_NVCC", "PATH"))
    hit = _CAN_COMPILE.get(key)
    if hit is None:
        try:
            _cli.find_executable()
            hit = nvcc_path() is not None
        except ToolchainError:
            hit = False
        _CAN_COMPILE[key] = hit
    return hit


def clear_memory_cache():
    """Forget the kernels built in this process (the disk cache stays; loaded libraries stay loaded)."""
    with _LOCK:
        _BUILDS.clear()
        FAST.clear()


# ---- specs from users ---------------------------------------------------------------------------

def canonical_spec(spec=None, **overrides):
    """A validated spec dict in the CLI's canonical form (`qattn spec show`), from a dict, a JSON
    file, or a preset name, with keyword overrides (docs/spec.md keys). SpecError with the CLI's
    diagnostics when invalid."""
    if spec is None:
        base = {}
    elif isinstance(spec, dict):
        base = dict(spec)
    elif isinstance(spec, (str, os.PathLike)) and os.path.isfile(spec):
        r = _cli.run(["spec", "show", "--spec", os.fspath(spec)])
        _cli.check(r, f"reading the spec {os.fspath(spec)}")
        base = json.loads(r.stdout)
    elif isinstance(spec, str):
        base = {"preset": spec}
    else:
        raise SpecError(f"spec={spec!r}: expected a dict, a JSON file or a preset name", code="PY0101")
    if "head_dim" in overrides:
        base.pop("head_dim_qk", None)
        base.pop("head_dim_v", None)
    if "seqlen" in overrides.get("problem", {}):
        base.pop("problem", None)
    base.update(overrides)
    try:
        text = json.dumps(base, indent=2)
    except (TypeError, ValueError) as e:
        raise SpecError(f"the spec is not JSON-serialisable: {e}", code="PY0101") from None
    fd, path = tempfile.mkstemp(prefix="qattn-spec-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        r = _cli.run(["spec", "show", "--spec", path])
        r.stderr = r.stderr.replace(path, "<spec>")
        _cli.check(r, "checking the spec")
        return json.loads(r.stdout)
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


def compile_time_fields(spec):
    """(dtype, d_qk, d_v, variant fields, return_lse) of a canonical spec; SpecError for what the
    binding refuses."""
    dtype = spec["dtype"]
    if dtype not in DTYPES:
        raise SpecError(f"dtype {dtype} is not part of the Python API (fp16 and bf16 are)", code="PY0104",
                        hint="fp8 kernels: use the `qattn` command and the C API (include/qattn/qattn.h)")
    return dtype, spec["head_dim_qk"], spec["head_dim_v"], fields_of_spec(spec), spec["return_lse"]
