"""Ahead-of-time kernel packs: kernels built once (on any machine with the CUDA toolkit) and shipped
with an application, so that qattn.attention() on the deployment machine compiles nothing.

    pack = qattn.precompile(["llama3-8b", {"head_dim": 64, "mask": "none"}], "qattn-pack", gpu="h100")
    qattn.use_pack("qattn-pack")          # or QATTN_PACKS=qattn-pack (os.pathsep-separated folders)

A pack is a folder: manifest.json and one folder per kernel with its artifacts (the library, the
spec, the TL, the kernel IR, the CUDA source). A kernel is found by its *kernel spec*, the same one
attention() and compile() derive from a call (qattn.kernel_spec: dtype, head dims, mask kind,
variants, return_lse, target), so a pack built with compile()-style specs serves every attention()
call with those compile-time fields (any batch, heads, lengths, layout, window size, softcap
value). The loading side runs neither the `qattn` command nor nvcc; it checks the manifest's
SHA-256 of each file before the library is loaded (a tampered or truncated pack is refused,
PY0206), and the manifest cannot name files outside its folder.
"""
import hashlib
import json
import os
import shutil
import tempfile
import threading

from .errors import BuildError

FORMAT = "qattn-pack"
VERSION = 1
FILES = ("libqattn_kernel.so", "spec.json", "code.tl", "kernel.kir", "kernel.cu", "plan.md")
MAX_MANIFEST = 16 << 20  # bytes

# qattn.precompile(qattn.COMMON_KERNELS, ...): the forward kernels most models need, bf16 and fp16,
# head dims 64 / 128 / 256 and MLA 192/128, causal and not (a window / softcap kernel serves every
# window and cap, so add one such spec per mask kind a model uses).
COMMON_KERNELS = [{"heads_q": 2, "head_dim": d, "dtype": dt, "mask": m}
                  for dt in ("bf16", "fp16") for d in (64, 128, 256) for m in ("causal", "none")] + \
                 [{"heads_q": 2, "head_dim_qk": 192, "head_dim_v": 128, "dtype": "bf16", "mask": "causal"}]

_PACKS = []   # [(folder, {key: entry})] in lookup order
_LOCK = threading.Lock()
_ENV_READ = [False]


def spec_key(spec, combine=False, backward=False):
    """The pack key of a kernel spec: SHA-256 of its canonical JSON (combine: the spec's `--combine`
    library, the merge of decoding's key split, qattn._combine; backward: its `--backward` library,
    the gradients, qattn._backward)."""
    tail = ("#combine" if combine else "") + ("#backward" if backward else "")
    return hashlib.sha256((json.dumps(spec, sort_keys=True) + tail).encode()).hexdigest()


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _bad(folder, why):
    return BuildError(f"kernel pack {folder}: {why}", code="PY0206",
                      hint="rebuild it with qattn.precompile(...) (docs/python.md, \"Kernel packs\")")


def read_manifest(folder):
    """{key: entry} of a pack folder; BuildError (PY0206) when it is not a valid pack."""
    path = os.path.join(folder, "manifest.json")
    try:
        if os.path.getsize(path) > MAX_MANIFEST:
            raise _bad(folder, "manifest.json is larger than 16 MiB")
        with open(path) as f:
            m = json.load(f)
    except OSError as e:
        raise _bad(folder, f"no readable manifest.json ({e.strerror or e})") from None
    except ValueError as e:
        raise _bad(folder, f"manifest.json is not JSON ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("version") != VERSION:
        raise _bad(folder, f"manifest.json is not a {FORMAT} version {VERSION}")
    from ._abi import QATTN_ABI_VERSION
    if m.get("abi") != QATTN_ABI_VERSION:
        raise _bad(folder, f"built for C ABI {m.get('abi')}; this qattn speaks ABI {QATTN_ABI_VERSION}")
    out = {}
    for e in m.get("kernels", []) if isinstance(m.get("kernels"), list) else []:
        if not (isinstance(e, dict) and isinstance(e.get("key"), str) and isinstance(e.get("dir"), str)
                and isinstance(e.get("spec"), dict) and isinstance(e.get("files"), dict)):
            raise _bad(folder, "a malformed kernel entry")
        d = e["dir"]
        # a plain child folder: no separators, no '..', nothing hidden
        if not d or d != os.path.basename(d) or d.startswith(".") or "/" in d or "\\" in d:
            raise _bad(folder, f"kernel folder {d!r} is not a plain name inside the pack")
        if e.get("pass") not in (None, "combine", "backward"):
            raise _bad(folder, f"{d}: unknown pass {str(e.get('pass'))[:20]!r}")
        if spec_key(e["spec"], e.get("pass") == "combine", e.get("pass") == "backward") != e["key"]:
            raise _bad(folder, f"the key of {d} does not match its spec")
        for name, digest in e["files"].items():
            if name not in FILES or not isinstance(digest, str) or len(digest) != 64:
                raise _bad(folder, f"{d}: unexpected file entry {name!r}")
        if "libqattn_kernel.so" not in e["files"]:
            raise _bad(folder, f"{d}: no library listed")
        out[e["key"]] = e
    return out


def use_pack(folder):
    """Makes attention() / compile() take kernels from the pack in `folder` before building any
    (packs added later are searched first). Returns the number of kernels it holds."""
    folder = os.path.abspath(os.fspath(folder))
    entries = read_manifest(folder)
    with _LOCK:
        _PACKS[:] = [(f, e) for f, e in _PACKS if f != folder]
        _PACKS.insert(0, (folder, entries))
    return len(entries)


def _env_packs():
    if _ENV_READ[0]:
        return
    _ENV_READ[0] = True
    for folder in reversed([p for p in os.environ.get("QATTN_PACKS", "").split(os.pathsep) if p]):
        use_pack(folder)


def find(spec, combine=False, backward=False):
    """(folder of the kernel's artifacts, entry) for a kernel spec found in a pack, else None. The
    files are checked against the manifest's digests (once per process and folder). combine: the
    spec's combine library (`qattn generate --combine`); backward: its backward library
    (`qattn generate --backward`)."""
    _env_packs()
    key = spec_key(spec, combine, backward)
    with _LOCK:
        packs = list(_PACKS)
    for folder, entries in packs:
        e = entries.get(key)
        if e is None:
            continue
        if not e.get("_checked"):
            check_files(folder, e)
            e["_checked"] = True
        return os.path.join(folder, e["dir"]), e
    return None


def check_files(folder, e):
    """Every file of a manifest entry is there, a regular file, with the manifest's SHA-256."""
    kdir = os.path.join(folder, e["dir"])
    if os.path.islink(kdir) or not os.path.isdir(kdir):
        raise _bad(folder, f"{e['dir']} is missing (or a link)")
    for name, digest in e["files"].items():
        p = os.path.join(kdir, name)
        if os.path.islink(p) or not os.path.isfile(p):
            raise _bad(folder, f"{e['dir']}/{name} is missing (or a link)")
        if _sha256(p) != digest:
            raise _bad(folder, f"{e['dir']}/{name} does not match its SHA-256 in manifest.json")


def write_pack(folder, builds):
    """Writes the pack of `builds` (qattn._build.Build objects) to `folder`, whole: a temporary
    sibling renamed into place, so a reader never sees half a pack. An existing pack's kernels are
    kept (a rebuild of the same kernel replaces it)."""
    from ._abi import QATTN_ABI_VERSION
    folder = os.path.abspath(os.fspath(folder))
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    old = read_manifest(folder) if os.path.exists(os.path.join(folder, "manifest.json")) else {}
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(folder) + ".tmp-", dir=parent)
    try:
        entries = {}
        for key, e in old.items():  # keep what the pack had, copied whole
            shutil.copytree(os.path.join(folder, e["dir"]), os.path.join(tmp, e["dir"]))
            entries[key] = {k: v for k, v in e.items() if not k.startswith("_")}
        for b in builds:
            combine = bool(getattr(b, "combine", False))
            backward = bool(getattr(b, "backward", False))
            key = spec_key(b.spec, combine, backward)
            d = f"{b.spec['name']}-{key[:12]}"
            kdir = os.path.join(tmp, d)
            if os.path.exists(kdir):
                shutil.rmtree(kdir)
            os.makedirs(kdir)
            files = {}
            for name in FILES:
                src = os.path.join(b.dir, name)
                if os.path.isfile(src):
                    shutil.copyfile(src, os.path.join(kdir, name))
                    files[name] = _sha256(os.path.join(kdir, name))
            if "libqattn_kernel.so" not in files:
                raise BuildError(f"{b.dir} has no library to pack", code="PY0203")
            entries[key] = {"key": key, "name": b.spec["name"], "dir": d, "target": b.target, "spec": b.spec,
                            "files": files}
            if combine or backward:
                entries[key]["pass"] = "combine" if combine else "backward"
        manifest = {"format": FORMAT, "version": VERSION, "abi": QATTN_ABI_VERSION,
                    "kernels": sorted(entries.values(), key=lambda x: x["name"])}
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")
        if os.path.exists(folder):
            gone = tempfile.mkdtemp(prefix="." + os.path.basename(folder) + ".old-", dir=parent)
            os.rename(folder, os.path.join(gone, "pack"))
            os.rename(tmp, folder)
            shutil.rmtree(gone, ignore_errors=True)
        else:
            os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return len(entries)
