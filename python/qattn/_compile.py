"""qattn.compile(), qattn.precompile(), qattn.explain(): kernels built ahead of a call (a Kernel object, a
kernel pack) and the explanation of what a call would run. The calls themselves: qattn._attention."""
import json
import os

from . import _attention as A
from . import _backward, _build, _combine, _pack
from ._target import local_capability, target_for_capability, target_for_gpu
from ._torch_util import import_torch
from ._variants import aux_arguments, split_launch_args, variant_fields
from .errors import DeviceError, SpecError, ToolchainError

def _window_arg(window):
    """A window (left, right) checked as attention() checks it (-1: unbounded)."""
    from ._variants import _window
    kind, lr = _window(window, None)
    return {"none": (-1, -1), "causal": (-1, 0)}.get(kind, lr)


class Kernel:
    """A kernel built by qattn.compile(): call it like attention() on matching tensors.

    spec: the request as validated by the CLI; kernel_spec: what was built (compile-time fields,
    canonical heads); target / target_reason: the code path and why; library, dir: the .so and the
    artifacts folder; cache_hit, nvcc_seconds, wall_seconds: how the build went; info: the library's
    qattn_kernel_info()."""

    def __init__(self, spec, build, target_reason=None):
        self.spec = spec
        self._b = build
        self.kernel_spec = build.spec
        self.name = build.spec["name"]
        self.target, self.target_reason = build.target, target_reason or build.target_reason
        self.library, self.dir = build.library_path, build.dir
        self.cache_hit, self.nvcc_seconds, self.wall_seconds = build.cache_hit, build.nvcc_seconds, build.wall_seconds

    @property
    def info(self):
        return self._b.library.info

    def __call__(self, q, k, v, scale=None, *, layout=None, return_lse=None, alibi_slopes=None, segment_ids=None,
                 relative_bias=None, window=None, softcap=None):
        """o (or (o, lse)) for q, k, v of the compiled dtype and head dims; scale defaults to the
        spec's softmax_scale, else 1/sqrt(d_qk); layout defaults to the spec's. The auxiliary tensors
        of the spec's variants (alibi, document, relative_bias) as in attention(). window / softcap:
        a window kernel's (left, right) and a softcap kernel's cap, launch arguments (default: the
        spec's). Under torch.compile the call is the operator torch.ops.qattn.attention with the
        spec's variants (fullgraph=True traces it; the operator picks the kernel for the device as
        attention() does, the same one when the kernel was compiled for this device)."""
        torch = import_torch()
        compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
        if compiling is not None and compiling():
            return A.attention(q, k, v, scale=scale if scale is not None else self.spec.get("softmax_scale"),
                             return_lse=self.kernel_spec["return_lse"] if return_lse is None else return_lse,
                             layout=layout or self.spec.get("layout", "bshd"), alibi_slopes=alibi_slopes,
                             segment_ids=segment_ids, relative_bias=relative_bias,
                             **self._call_arguments(window, softcap))
        layout = layout or self.spec.get("layout", "bshd")
        _backward.refuse_grad(torch, f"the compiled kernel {self.name} (a forward kernel)",
                              "call qattn.attention() to train (it builds the backward too), or call the kernel under "
                              "torch.no_grad()", q, k, v)
        dt = A._check_tensors(torch, q, k, v, layout)
        qv, kv, vv = A._views(q, k, v, layout)
        A._check_shapes(qv, kv, vv)
        ks = self.kernel_spec
        got = (dt, int(qv.shape[3]), int(vv.shape[3]))
        want = (ks["dtype"], ks["head_dim_qk"], ks["head_dim_v"])
        if got != want:
            raise SpecError(f"kernel {self.name} takes {want[0]} d {want[1]}/{want[2]}, got {got[0]} d "
                            f"{got[1]}/{got[2]}", code="PY0105", hint="qattn.attention() picks the kernel itself")
        if return_lse is None:
            return_lse = ks["return_lse"]
        if return_lse and not ks["return_lse"]:
            raise SpecError(f"kernel {self.name} was built without return_lse", code="PY0105",
                            hint="compile the spec with \"return_lse\": true")
        if scale is None:
            scale = self.spec.get("softmax_scale")
        aux, _ = aux_arguments(alibi_slopes, segment_ids, relative_bias)
        A.refuse_aux_grad(torch, alibi_slopes, relative_bias, f"through the compiled forward kernel {self.name}")
        _, args = split_launch_args(_build.fields_of_spec(self.spec))
        if window is not None:
            if "window" not in args:
                raise SpecError(f"kernel {self.name} has no sliding window", code="PY0105",
                                hint="compile a spec with mask {\"kind\": \"window\", ...}")
            args["window"] = _window_arg(window)
        if softcap is not None:
            if "softcap" not in args:
                raise SpecError(f"kernel {self.name} has no softcap", code="PY0105",
                                hint="compile a spec with \"variants\": {\"softcap\": C}")
            args["softcap"] = float(variant_fields(softcap=softcap)["variants"]["softcap"])
        return A._launch(torch, self._b, q, k, v, layout, scale, return_lse, aux, args)

    def _call_arguments(self, window=None, softcap=None):
        """attention()'s variant arguments for this kernel's spec (the call's window / softcap win)."""
        m = self.spec.get("mask", {})
        m = m if isinstance(m, dict) else {"kind": m}
        var = self.spec.get("variants") or {}
        kw = {}
        kind = m.get("kind", "none")
        if kind == "causal":
            kw["causal"] = "top_left" if m.get("align") == "top_left" else True
        elif kind == "causal_top_left":
            kw["causal"] = "top_left"
        elif kind == "window":
            kw["window"] = tuple(window) if window is not None else (m["left"], m["right"])
        if var.get("softcap") or softcap is not None:
            kw["softcap"] = softcap if softcap is not None else var["softcap"]
        for key in ("score_mod", "mask_mod", "prefix_lm"):
            if var.get(key) is not None:
                kw[key] = var[key]
        return kw

    def explain(self):
        return Explanation(self)

    def __repr__(self):
        return f"<qattn.Kernel {self.name} target={self.target} library={self.library}>"


def _resolve_target(spec, gpu):
    name = gpu if gpu else spec.get("gpu")
    if name:
        target, reason = target_for_gpu(name)
        return target, reason, ""
    try:
        major, minor, dev = local_capability()
    except ToolchainError as e:
        raise DeviceError("no GPU to build for: torch is not importable and neither gpu= nor the spec's "
                          "\"gpu\" names one", code="PY0401",
                          hint="pass gpu='a100' (or another name of `qattn gpus`) to build without a GPU") from e
    except DeviceError as e:
        raise DeviceError(f"{e.diagnostic}; pass gpu=NAME to build without one", code="PY0401") from None
    target, reason = target_for_capability((major, minor), dev)
    return target, f"{dev}: {reason}", f"sm{major}{minor}"


def compile(spec=None, *, gpu=None, cache=True, verbose=None, **overrides):
    """Builds (or finds in the cache) the kernel of a spec ahead of time; returns a qattn.Kernel.

    spec: a dict with docs/spec.md's keys, a JSON file, or a preset name ('llama3-8b'); keyword
    overrides use the same keys (compile('llama3-8b', dtype='fp16')). gpu: the GPU to build for
    (a `qattn gpus` name); default: the spec's "gpu", else the current CUDA device. Hopper builds
    the sm90a path (qattn._target). cache=False rebuilds with nvcc even when the cache has the kernel.
    """
    s = _build.canonical_spec(spec, **overrides)
    dt, dqk, dv, fields, lse = _build.compile_time_fields(s)
    fields, _ = split_launch_args(fields)  # the window and softcap are launch arguments (Kernel.__call__)
    target, reason, tag = _resolve_target(s, gpu)
    ks = _build.kernel_spec(dt, dqk, dv, fields, lse, target)
    b = _build.build(ks, target, reason, local_tag=tag, use_cache=cache, verbose=verbose)
    return Kernel(s, b, reason)


def compile_many(specs, *, gpu=None, jobs=None, verbose=None):
    """compile() of several specs in parallel (nvcc runs are independent). specs: a list of what
    compile() takes: a spec, or a dict of compile() keyword arguments under the key "compile"."""
    from concurrent.futures import ThreadPoolExecutor
    jobs = jobs or max(1, min(len(specs), (os.cpu_count() or 2) // 2))

    def one(s):
        if isinstance(s, dict) and "compile" in s:
            return compile(gpu=gpu, verbose=verbose, **s["compile"])
        return compile(s, gpu=gpu, verbose=verbose)

    with ThreadPoolExecutor(max_workers=jobs) as ex:
        return list(ex.map(one, specs))


def precompile(specs, out, *, gpu=None, short=False, backward=False, deterministic=False, jobs=None, verbose=None):
    """Builds the kernels of `specs` ahead of time and writes them as a kernel pack to the folder
    `out` (added to an existing pack there); returns the number of kernels the pack holds.

    specs: what compile() takes (presets, spec dicts, JSON files), or qattn.COMMON_KERNELS. Each
    kernel serves every attention() call with its compile-time fields (dtype, head dims, mask kind,
    variants, return_lse; any batch, heads, lengths, layout, window size, softcap). gpu: the GPU to
    build for (default: the spec's, else the local one). short=True also packs what decoding uses:
    the Hopper kernels for short GQA/MQA queries and MHA decoding (qattn._build.short_queries), the kernels the key
    split launches (split_keys; without them a packed deployment decodes unsplit: on Hopper the
    kernels that split in their TL, elsewhere the LSE twins of the fold) and the combine library that
    merges its parts (qattn._combine; without it the merge runs as torch ops).
    backward=True also packs what training uses: the forward kernel with its LSE (attention() under
    autograd runs it) and the backward libraries for MHA and for GQA / MQA (each about a minute of
    nvcc when built on first use); deterministic=True adds the backward libraries of
    torch.use_deterministic_algorithms(True); specs with ALiBi slopes or a relative-bias table also get
    the backward libraries that differentiate them when they require grad (aux_grad). Specs whose
    backward is not generated (custom score_mod / mask_mod) are skipped. The extra kernels build in
    parallel (jobs). On the deployment machine, qattn.use_pack(out) or QATTN_PACKS=out: attention()
    then runs those kernels with no compiler."""
    kernels = compile_many(specs, gpu=gpu, jobs=jobs, verbose=verbose)
    builds = [k._b for k in kernels]
    combines = set()
    extra = []  # (spec, target, reason, build keyword arguments): built in parallel below
    if short:
        for k in kernels:
            dt, dqk, dv, fields, lse = _build.compile_time_fields(k.spec)
            fields, _ = split_launch_args(fields)
            hopper = k.target in ("h100", "h200")
            # the calls whose keys split (one query: decoding), as attention() decides it; the variants
            # that read auxiliary tensors at launch stand for those tensors
            aux = set(fields.get("variants", {})) & {"alibi", "document", "relative_bias"}
            splits = A.split_allowed(fields, {}, aux, 1, hopper)
            # the packed short kernels (Hopper), the LSE twins the fold launches (elsewhere), and the
            # split kernels (Hopper: the call's fields and, for one causal query, the unmasked ones;
            # packed for GQA / MQA, one-tile for MHA ("decode1") and not, as _attention._build_for picks them)
            wanted = [(False, True)] if splits and not lse and not hopper else []
            if hopper and "variants" not in fields:
                wanted += [(True, lse), ("decode", lse), ("decode1", lse)]
            for sh, with_lse in wanted:
                extra.append((_build.kernel_spec(dt, dqk, dv, fields, with_lse, k.target, short=sh), k, {}))
            if hopper and splits:
                for f in (fields, A.split_fields(fields, 1)):
                    for sh in ("decode", "decode1", True, False) if "variants" not in f else (False,):
                        extra.append((_build.kernel_spec(dt, dqk, dv, f, True, k.target, short=sh, split=True), k, {}))
            if splits and (dt, dv) not in combines:  # the split's merge (qattn._combine), once per dtype and d_v
                combines.add((dt, dv))
                extra.append((_combine.kernel_spec(dt, dv, k.target), k, {"combine": True}))
    if backward or deterministic:
        for k in kernels:
            dt, dqk, dv, fields, lse = _build.compile_time_fields(k.spec)
            fields, _ = split_launch_args(fields)
            if not _backward.supported(fields):
                continue
            if not lse:  # the forward under autograd runs with its LSE
                extra.append((_build.kernel_spec(dt, dqk, dv, fields, True, k.target), k, {}))
            learnable = backward and any((fields.get("variants") or {}).get(n) for n in ("alibi", "relative_bias"))
            for det in ([False] if backward else []) + ([True] if deterministic else []):
                for gqa in (False, True):
                    extra.append((_backward.kernel_spec(dt, dqk, dv, fields, k.target, gqa, det), k, {"backward": True}))
                    if learnable and not det:  # learnable slopes / bias table (spec aux_grad; never deterministic)
                        extra.append((_backward.kernel_spec(dt, dqk, dv, fields, k.target, gqa, False, True), k,
                                      {"backward": True}))
    seen, todo = set(), []
    for spec, k, kw in extra:  # one build per kernel (two specs may ask for the same LSE twin)
        tag = (json.dumps(spec, sort_keys=True), tuple(sorted(kw)))
        if tag not in seen:
            seen.add(tag)
            todo.append((spec, k, kw))
    if todo:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=jobs or max(1, min(len(todo), (os.cpu_count() or 2) // 2))) as ex:
            builds += list(ex.map(lambda t: _build.build(t[0], t[1].target, t[1].target_reason, verbose=verbose, **t[2]), todo))
    return _pack.write_pack(out, builds)


class Explanation:
    """What qattn built and why: the target choice, the TL sketch and code, the plan, the kernel IR (.kir:
    what stage 2 decided, statement by statement), the CUDA source."""

    def __init__(self, kernel, splits=1, split_mode=None):
        b = kernel._b
        self.splits = splits          # the key split of the explained call: parts (1: none)
        self.split_mode = split_mode  # "tl" (the kernel splits in its TL), "fold" (parts as batch entries), None
        self.name = kernel.name
        self.spec = kernel.spec
        self.kernel_spec = kernel.kernel_spec
        self.target = kernel.target
        self.target_reason = kernel.target_reason
        self.sketch = b.artifact("sketch.tl")
        self.tl = b.artifact("code.tl")
        self.plan = b.artifact("plan.md")
        self.kir = b.artifact("kernel.kir")
        self.source = b.artifact("kernel.cu")
        self.build_log = b.artifact("build.log")
        self.library = kernel.library
        self.dir = kernel.dir
        try:
            self.info = b.library.info
        except Exception as e:  # noqa: BLE001 - a library that does not load here still explains
            self.info = {"error": str(e)}

    def as_dict(self):
        return {k: getattr(self, k) for k in ("name", "spec", "kernel_spec", "target", "target_reason", "sketch",
                                              "tl", "plan", "kir", "source", "build_log", "library", "dir", "info",
                                              "splits", "split_mode")}

    def __str__(self):
        lines = [f"qattn kernel {self.name}",
                 f"target: {self.target} ({self.target_reason})",
                 f"library: {self.library}",
                 f"artifacts: {self.dir}"]
        if self.splits > 1:
            how = ("the kernel below splits the keys in its TL (a Grid axis over the parts)" if self.split_mode == "tl"
                   else "the parts folded into the batch of the kernel below (a copy of the queries per part)")
            lines.append(f"key split: {self.splits} parts, {how}; their partial results merged by the combine kernel")
        lines += ["", "== TL code ==", self.tl or "(missing)",
                 "", f"== kernel IR: {len((self.kir or '').splitlines())} lines in {self.dir}/kernel.kir ==",
                 "", f"== CUDA source: {len((self.source or '').splitlines())} lines in {self.dir}/kernel.cu =="]
        return "\n".join(lines)

    __repr__ = __str__


def explain(*args, gpu=None, **kwargs):
    """The TL and the generated source of the kernel that qattn.attention(*args, **kwargs) would use
    (tensors), or of qattn.compile(spec, **kwargs) (a spec dict / file / preset name). Builds it if
    it is not cached. Returns a qattn.Explanation (str() prints a summary; .tl, .source, ...)."""
    if args and not isinstance(args[0], (dict, str, os.PathLike)):
        torch = import_torch()
        q, k, v = args[:3]
        kw = dict(zip(("causal", "window", "scale", "softcap", "return_lse"), args[3:]))
        kw.update(kwargs)
        layout = kw.pop("layout", "bshd")
        aux, flags = aux_arguments(kw.get("alibi_slopes"), kw.get("segment_ids"), kw.get("relative_bias"))
        fields, args = split_launch_args(variant_fields(kw.get("causal", False), kw.get("window"), kw.get("softcap"),
                                                        kw.get("score_mod"), kw.get("mask_mod"), kw.get("prefix_lm"),
                                                        **flags))
        dt = A._check_tensors(torch, q, k, v, layout)
        qv, kv, vv = A._views(q, k, v, layout)
        _, sq, _, hq, hkv, _, _ = A._check_shapes(qv, kv, vv)
        # the kernel the call launches: with a key split (attention's split_keys) the one that writes the parts
        splits = A.split_keys(torch, q.device, qv, kv, fields, args, aux)
        b, in_tl = A._build_split(torch, dt, int(qv.shape[3]), int(vv.shape[3]), fields, kw.get("return_lse", False), q.device,
                                  (hq, hkv, sq), splits)
        return Explanation(Kernel(b.spec, b, A._device_target(torch, q.device)[1]), splits,
                           ("tl" if in_tl else "fold") if splits > 1 else None)
    spec = args[0] if args else None
    return compile(spec, gpu=gpu, **kwargs).explain()
