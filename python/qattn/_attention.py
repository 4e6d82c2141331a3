"""qattn.attention(): the call on torch tensors (checks, the kernel built on first use, the launch, the key
split of decoding). qattn.compile() / precompile() / explain(): qattn._compile."""
import math
import os

from . import _op
from . import _backward, _build, _combine
from ._abi import STATUS, fill_params
from ._target import local_capability, target_for_capability
from ._torch_util import import_torch
from ._variants import AUX_INPUTS, aux_arguments, split_launch_args, variant_fields
from .errors import DeviceError, LaunchError, SpecError

_TORCH_DTYPES = None


def _dtype_name(torch, dt):
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        _TORCH_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
    return _TORCH_DTYPES.get(dt)


_DEVICE_TARGETS = {}  # device index -> (target, reason, local tag)


def _device_target(torch, device):
    idx = device.index if device.index is not None else torch.cuda.current_device()
    t = _DEVICE_TARGETS.get(idx)
    if t is None:
        major, minor, name = local_capability(idx)
        target, reason = target_for_capability((major, minor), name)
        t = (target, f"{name}: {reason}", f"sm{major}{minor}")
        _DEVICE_TARGETS[idx] = t
    return t


# ---- checking tensors ---------------------------------------------------------------------------

def _check_tensors(torch, q, k, v, layout):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise SpecError(f"{name} is a {type(t).__name__}, not a torch.Tensor", code="PY0101")
        if t.dim() != 4:
            raise SpecError(f"{name} has {t.dim()} dimensions; expected 4 ({layout.upper()})", code="PY0101",
                            hint="layout='bshd': (batch, seqlen, heads, dim); layout='bhsd': (batch, heads, seqlen, dim)")
        if t.device.type != "cuda":
            raise DeviceError(f"{name} is on {t.device}; qattn kernels run on CUDA tensors", code="PY0102",
                              hint=f"move the inputs to the GPU: {name}.cuda()")
    if not (q.device == k.device == v.device):
        raise DeviceError(f"q, k, v are on different devices ({q.device}, {k.device}, {v.device})", code="PY0103")
    dt = _dtype_name(torch, q.dtype)
    if dt is None:
        raise SpecError(f"q has dtype {q.dtype}; the Python API takes torch.float16 and torch.bfloat16", code="PY0104",
                        hint="fp8 kernels are built by the `qattn` command and launched through the C API")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise SpecError(f"q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})", code="PY0104")
    return dt


def _views(q, k, v, layout):
    """(batch, seqlen, heads, dim) views of the inputs."""
    if layout == "bshd":
        return q, k, v
    if layout == "bhsd":
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    raise SpecError(f"layout={layout!r}: expected 'bshd' or 'bhsd'", code="PY0106")


def _check_shapes(qv, kv, vv):
    b, sq, hq, dqk = qv.shape
    bk, sk, hkv, dk = kv.shape
    bv, sv, hv, dv = vv.shape
    if not (b == bk == bv):
        raise SpecError(f"batch sizes differ: q {b}, k {bk}, v {bv}", code="PY0105")
    if sk != sv:
        raise SpecError(f"k and v sequence lengths differ ({sk}, {sv})", code="PY0105")
    if hkv != hv:
        raise SpecError(f"k and v head counts differ ({hkv}, {hv})", code="PY0105")
    if dk != dqk:
        raise SpecError(f"q and k head dims differ ({dqk}, {dk})", code="PY0105")
    if hkv == 0 or hq % hkv:
        raise SpecError(f"heads_q = {hq} is not a multiple of heads_kv = {hkv}", code="PY0105",
                        hint="GQA/MQA need every kv head shared by the same number of query heads")
    for name, n in (("seqlen", sq), ("seqlen_k", sk), ("batch", b), ("heads", hq)):
        if n >= 2 ** 31:
            raise SpecError(f"{name} = {n} does not fit the C ABI's int32", code="PY0105")
    return b, sq, sk, hq, hkv, dqk, dv


def _aligned(t):
    """The C ABI needs a contiguous last dim and 16-byte aligned pointers and strides."""
    es = t.element_size()
    return t.stride(3) == 1 and t.data_ptr() % 16 == 0 and all((s * es) % 16 == 0 for s in t.stride()[:3])


def _scale(scale, dqk):
    if scale is None:
        return dqk ** -0.5
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise SpecError(f"scale={scale!r} is not a number", code="PY0108") from None
    if not (math.isfinite(s) and s > 0):
        raise SpecError(f"scale={scale!r}: expected a finite number > 0", code="PY0108")
    return s


# id -> (weakref, version) of segment-id tensors known to be nondecreasing along each row: built so by
# their maker (mark_sorted_segments: version None) or checked by _aux_tensors at that tensor version
_SORTED_IDS = {}


def mark_sorted_segments(*tensors, version=False):
    """Segment ids built nondecreasing along each row by their maker (qattn.integrations.transformers):
    _aux_tensors skips its check of them (a host synchronisation per call). version=True: known
    sorted only until the tensor is next modified in place (its `_version` moves on): what a passed
    check records, so that the same ids given to every layer of a model are checked once."""
    import weakref
    for t in tensors:
        _SORTED_IDS[id(t)] = (weakref.ref(t, lambda _, k=id(t): _SORTED_IDS.pop(k, None)),
                              t._version if version else None)


def _known_sorted(t):
    entry = _SORTED_IDS.get(id(t))
    return entry is not None and entry[0]() is t and (entry[1] is None or entry[1] == t._version)


def _aux_tensors(torch, b, given, qv, kv):
    """The auxiliary inputs Build b's kernel reads (its info "aux" list, in ABI order), checked:
    given, on q's device, the kernel's dtype (integer ids are converted to int32), the shape its
    declaration names; contiguous. Segment ids must be nondecreasing along each row (the document
    mask's tile skipping relies on it: checked here, one small reduction)."""
    want = b.library.info.get("aux", [])
    names = [a["name"] for a in want]
    for n in given:
        if n not in names:
            arg = AUX_INPUTS.get(n, n)
            raise SpecError(f"{arg} was given but kernel {b.spec['name']} has no {n} input", code="PY0110",
                            hint="compile the kernel with the variant that reads it (alibi, document, relative_bias)")
    bsz, sq, hq = (int(x) for x in qv.shape[:3])
    sk, hkv = int(kv.shape[1]), int(kv.shape[2])
    dims = {"batch": bsz, "seqlen_q": sq, "seqlen_k": sk, "heads_q": hq, "heads_kv": hkv,
            "NB": (b.spec.get("variants") or {}).get("relative_bias")}
    out = []
    for a in want:
        n = a["name"]
        arg = AUX_INPUTS.get(n, n)
        t = given_t = given.get(n)
        sorted_ids = t is not None and _known_sorted(t)
        shape = tuple(a.get("shape", []))
        if t is None:
            raise SpecError(f"kernel {b.spec['name']} reads {n} ({a['dtype']} ({', '.join(shape)})) and it was not "
                            f"given", code="PY0110", hint=f"pass {arg.split('[')[0]}=")
        if not isinstance(t, torch.Tensor):
            raise SpecError(f"{arg} is a {type(t).__name__}, not a torch.Tensor", code="PY0110")
        if t.device != qv.device:
            raise DeviceError(f"{arg} is on {t.device}, q on {qv.device}", code="PY0103", hint=f"move {arg} to {qv.device}")
        if a["dtype"] == "int32":
            if t.dtype.is_floating_point or t.dtype == torch.bool:
                raise SpecError(f"{arg} has dtype {t.dtype}; expected integer ids (int32)", code="PY0110")
            t = t.to(torch.int32)
        elif t.dtype != torch.float32:
            raise SpecError(f"{arg} has dtype {t.dtype}; expected torch.float32", code="PY0110")
        want_shape = tuple(dims.get(e) for e in shape)
        if len(t.shape) != len(shape) or any(w is not None and int(g) != w for g, w in zip(t.shape, want_shape)):
            raise SpecError(f"{arg} has shape {tuple(t.shape)}; expected ({', '.join(shape)}) = {want_shape}",
                            code="PY0110")
        t = t.contiguous()
        # (a host read: skipped under CUDA-graph capture, where the kernel reads the ids as given)
        # (checked once per tensor version: the same ids given to every layer cost one host read)
        if n in ("seg_q", "seg_k") and not sorted_ids and t.shape[1] > 1 and \
                not (t.is_cuda and torch.cuda.is_current_stream_capturing()):
            if bool((t[:, 1:] < t[:, :-1]).any()):
                raise SpecError(f"{arg}: segment ids must be nondecreasing along each row (packed sequences)",
                                code="PY0110", hint="number the packed documents in order of their position")
            mark_sorted_segments(given_t, version=True)
        out.append(t)
    return out


# ---- launching ----------------------------------------------------------------------------------

def _launch(torch, b, q, k, v, layout, scale, return_lse, aux=None, args=None):
    """Runs Build b on q, k, v (already checked) and the auxiliary tensors aux ({ABI name: tensor})
    with the launch arguments args ({"window": (l, r), "softcap": c}); returns o or (o, lse)."""
    qv, kv, vv = _views(q, k, v, layout)
    bsz, sq, sk, hq, hkv, dqk, dv = _check_shapes(qv, kv, vv)
    aux_list = _aux_tensors(torch, b, aux or {}, qv, kv)
    s = _scale(scale, dqk)
    dev = q.device
    if layout == "bshd":
        o = torch.empty((bsz, sq, hq, dv), device=dev, dtype=q.dtype)
        ov = o
    else:
        o = torch.empty((bsz, hq, sq, dv), device=dev, dtype=q.dtype)
        ov = o.transpose(1, 2)
    lse = torch.empty((bsz, hq, sq), device=dev, dtype=torch.float32) if return_lse else None
    if o.numel() == 0:
        return (o, lse) if return_lse else o
    if sk == 0:  # no key at all: every row is empty (output 0, lse -inf), as with a fully masked row
        o.zero_()
        if lse is not None:
            lse.fill_(float("-inf"))
        return (o, lse) if return_lse else o
    views = []
    for t, tv in ((q, qv), (k, kv), (v, vv)):
        if not _aligned(tv):  # e.g. a slice with an odd offset: one copy in the caller's layout
            t = t.contiguous()
            tv = t if layout == "bshd" else t.transpose(1, 2)
            if not _aligned(tv):
                t = t.clone()
                tv = t if layout == "bshd" else t.transpose(1, 2)
        views.append(tv)
    args = args or {}
    p = fill_params(views[0], views[1], views[2], ov, lse, s, aux=aux_list, window=args.get("window"),
                    softcap=args.get("softcap"), sm_margin=args.get("sm_margin", 0))
    run_fwd(torch, b, p, dev)
    return (o, lse) if return_lse else o


def run_fwd(torch, b, p, device):
    """qattn_fwd of Build b with params p on `device`'s current stream; LaunchError (PY0501) on a status."""
    with torch.cuda.device(device):
        st = b.library.fwd(p, torch.cuda.current_stream(device).cuda_stream)
    if st != 0:
        raise LaunchError(f"qattn_fwd returned {STATUS.get(st, st)}: {b.library.last_error()}", code="PY0501",
                          hint=f"kernel {b.spec['name']} ({b.library_path})")


def _build_for(torch, dt, dqk, dv, fields, return_lse, device, verbose=None, shape=None, kv_cache=None, varlen=False,
               split=False, v_from_k=False):
    """The Build for this compile-time tuple on `device`; shape (heads_q, heads_kv, seqlen_q) picks
    the packed kernel for short GQA/MQA queries on Hopper (_build.short_queries); kv_cache: "lengths"
    or "paged" (qattn._kvcache); varlen: packed ragged batches (qattn._varlen; True or "g1":
    _build.varlen_kind); split: the kernel that writes the parts of split keys (tl_split); v_from_k:
    V is K's first dv columns (absorbed MLA, qattn._kvcache)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    target, reason, tag = _device_target(torch, device)
    short = shape is not None and _build.short_queries(target, *shape, fields, v_from_k=v_from_k)
    key = (dt, dqk, dv, repr(sorted((k, sorted(v.items())) for k, v in fields.items())), bool(return_lse), idx, short,
           kv_cache, varlen if varlen == "g1" else bool(varlen), bool(split), bool(v_from_k))
    hit = _build.FAST.get(key)
    if hit is not None:
        if isinstance(hit, Exception):
            raise hit
        return hit
    spec = _build.kernel_spec(dt, dqk, dv, fields, return_lse or split, target, short=short, kv_cache=kv_cache,
                              varlen=varlen, split=split, v_from_k=v_from_k)
    try:
        b = _build.build(spec, target, reason, local_tag=tag, verbose=verbose)
    except SpecError as e:  # deterministic: do not run the pipeline again for the same request
        _build.FAST[key] = e
        raise
    _build.FAST[key] = b
    return b


def attention(q, k, v, causal=False, window=None, scale=None, softcap=None, return_lse=False, *, layout="bshd",
              score_mod=None, mask_mod=None, prefix_lm=None, alibi_slopes=None, segment_ids=None, relative_bias=None,
              sm_margin=0):
    """Attention forward with a kernel generated by qattn for these inputs (built on first use).

    q (batch, seqlen_q, heads_q, d_qk), k (batch, seqlen_k, heads_kv, d_qk), v (batch, seqlen_k,
    heads_kv, d_v) with layout='bshd' (FlashAttention's order, the default), or (batch, heads,
    seqlen, dim) with layout='bhsd' (torch SDPA's order). fp16 or bf16 CUDA tensors; heads_q a
    multiple of heads_kv (MHA, GQA, MQA); d_v may be smaller than d_qk (MLA prefill, 192/128) or larger.
    causal: False, True (= 'bottom_right', FlashAttention's alignment) or 'top_left' (SDPA's
    is_causal); the two agree when seqlen_q == seqlen_k. window: (left, right) sliding window,
    bottom-right aligned; -1 is unbounded. scale: default 1/sqrt(d_qk). softcap: c -> scores become c * tanh(s / c) (None: none).
    score_mod / mask_mod: TL expressions over score, q_idx, kv_idx, seqlen_q, seqlen_k, head, b
    (e.g. mask_mod='kv_idx % 256 < 16 or kv_idx <= q_idx'), compiled into the kernel (docs/spec.md).
    The spec's shorthands: prefix_lm=P (keys k <= q + off or k < P visible), alibi_slopes (heads_q,)
    float32 (s - slope[h] * |q + off - k|), segment_ids=(seg_q, seg_k) (batch, seqlen) int ids,
    nondecreasing per row (keys of the query's document only), relative_bias (heads_q, NB) float32
    (s + table[h, clamp(k - q - off, -NB/2, NB/2 - 1) + NB/2]); the tensors are read at launch.
    sm_margin: SMs the Hopper kernel's persistent grid leaves free, for a kernel another stream runs
    at the same time (e.g. NCCL transfers: qattn.distributed's ring); FlashAttention-3's argument.
    Returns o in the input's layout, and with return_lse=True also lse (batch, heads_q, seqlen_q) fp32.
    Launches on the current CUDA stream. Raises a qattn.QattnError subclass for anything it cannot do.
    Under torch.compile the call is the operator torch.ops.qattn.attention (qattn._op: fullgraph=True
    traces it); eagerly the same implementation runs directly. The kernel is built on the first call.
    """
    torch = import_torch()
    op = _op.OP if _op.OP is not None else _op.register(torch)
    # the argument checks that need no kernel, before the operator (the same errors as eagerly)
    if layout not in ("bshd", "bhsd"):
        raise SpecError(f"layout={layout!r}: expected 'bshd' or 'bhsd'", code="PY0106")
    aux, flags = aux_arguments(alibi_slopes, segment_ids, relative_bias)
    variant_fields(causal, window, softcap, score_mod, mask_mod, prefix_lm, **flags)
    sm_margin = _sm_margin(sm_margin)
    _check_tensors(torch, q, k, v, layout)  # (requires_grad is invisible inside the operator)
    # Eagerly the operator would only add its dispatch (~35 us a call measured on an H200,
    # bench/bench_op_overhead.py): it is used where it is needed, under torch.compile.
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if op is None or compiling is None or not compiling():
        return eager_attention(q, k, v, causal, window, scale, softcap, return_lse, layout=layout, score_mod=score_mod,
                               mask_mod=mask_mod, prefix_lm=prefix_lm, alibi_slopes=alibi_slopes,
                               segment_ids=segment_ids, relative_bias=relative_bias, sm_margin=sm_margin)
    refuse_aux_grad(torch, alibi_slopes, relative_bias)  # (learnable slopes / tables: eagerly)
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if grad:  # the operator's autograd formula (qattn._op) needs the LSE and covers the plain attention
        fields = variant_fields(causal, window, softcap, score_mod, mask_mod, prefix_lm, **flags)
        if fields.get("variants"):
            raise SpecError("under torch.compile, the backward of attention variants is not traced yet", code="PY0109",
                            hint="train the variant eagerly (qattn.attention differentiates softcap, alibi_slopes, "
                                 "relative_bias, segment_ids, prefix_lm outside torch.compile), or compile inference only")
    o, lse = op(q, k, v, _op.causal_name(causal), [int(x) for x in window] if window is not None else None,
                None if scale is None else float(scale), None if softcap is None else float(softcap),
                bool(return_lse) or grad,
                layout, score_mod, mask_mod, prefix_lm, aux.get("alibi_slopes"), aux.get("seg_q"), aux.get("seg_k"),
                aux.get("rel_bias"), sm_margin)
    return (o, lse) if return_lse else o


def refuse_aux_grad(torch, alibi_slopes=None, relative_bias=None, where="under torch.compile"):
    """PY0109 when ALiBi slopes or a relative-bias table require grad (grad mode on) on a path that
    computes no gradient for them (torch.compile's operator, a compiled forward Kernel): autograd
    would leave their .grad at None without a word. Eagerly, attention() computes them."""
    for name, t in (("alibi_slopes", alibi_slopes), ("relative_bias", relative_bias)):
        if torch.is_grad_enabled() and isinstance(t, torch.Tensor) and t.requires_grad:
            raise SpecError(f"{name} requires grad, but {where} qattn computes no gradient for it: its .grad would "
                            "stay None", code="PY0109",
                            hint=f"train learnable {name} with qattn.attention() eagerly (it differentiates them), or "
                                 f"pass {name}.detach() to keep it fixed")


def learnable(torch, aux):
    """The auxiliary inputs whose gradients autograd asks for (ABI names, the backward kernel's
    "aux_grad" order): ALiBi slopes and a relative-bias table that require grad, in grad mode."""
    if not torch.is_grad_enabled():
        return []
    return [n for n in ("alibi_slopes", "rel_bias") if isinstance(aux.get(n), torch.Tensor) and aux[n].requires_grad]


def _sm_margin(x):
    """attention()'s sm_margin as an int >= 0, or SpecError (PY0112)."""
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < 2**16:
        raise SpecError(f"sm_margin={x!r}: expected the number of SMs to leave free, an int >= 0", code="PY0112")
    return int(x)


def eager_attention(q, k, v, causal=False, window=None, scale=None, softcap=None, return_lse=False, *, layout="bshd",
                    score_mod=None, mask_mod=None, prefix_lm=None, alibi_slopes=None, segment_ids=None,
                    relative_bias=None, sm_margin=0):
    """attention() without the operator: the checks, the kernel built on first use, the launch (the
    operator's real implementation; also the path of non-CUDA inputs, which it rejects)."""
    torch = import_torch()
    if layout not in ("bshd", "bhsd"):
        raise SpecError(f"layout={layout!r}: expected 'bshd' or 'bhsd'", code="PY0106")
    aux, flags = aux_arguments(alibi_slopes, segment_ids, relative_bias)
    fields, args = split_launch_args(variant_fields(causal, window, softcap, score_mod, mask_mod, prefix_lm, **flags))
    if _sm_margin(sm_margin):
        args["sm_margin"] = sm_margin
    dt = _check_tensors(torch, q, k, v, layout)
    qv, kv, vv = _views(q, k, v, layout)
    _, sq, _, hq, hkv, _, _ = _check_shapes(qv, kv, vv)
    scale = _scale(scale, int(qv.shape[3]))
    if (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)) or learnable(torch, aux):
        return _differentiable(torch, dt, q, k, v, layout, scale, return_lse, fields, args, aux)
    splits = split_keys(torch, q.device, qv, kv, fields, args, aux)
    if splits > 1 and not return_lse and _compiles_only_for_split(torch, dt, qv, vv, fields, q.device, (hq, hkv, sq)):
        splits = 1  # a pack / the cache has this call's kernel but not its LSE twin, and no compiler is here
    if splits > 1 and _combine.first_split(dt, int(vv.shape[3]), q.device) and \
            not _split_kernel_ready(torch, dt, qv, vv, fields, q.device, (hq, hkv, sq)):
        _combine.prefetch(torch, dt, int(vv.shape[3]), q.device)  # compiled beside the forward kernel below
    b, in_tl = _build_split(torch, dt, int(qv.shape[3]), int(vv.shape[3]), fields, return_lse, q.device, (hq, hkv, sq), splits)
    if in_tl:
        return _launch_tl_split(torch, b, qv, kv, vv, layout, scale, return_lse, splits, args)
    if splits > 1:
        return _launch_split(torch, b, qv, kv, vv, layout, scale, return_lse, splits, args)
    return _launch(torch, b, q, k, v, layout, scale, return_lse, aux, args)


def _build_split(torch, dt, dqk, dv, fields, return_lse, device, shape, splits, kv_cache=None, v_from_k=False):
    """The kernel a call whose keys split into `splits` parts (1: none) launches, and whether it splits
    them in its TL (Hopper, tl_split: split_fields, the part a Grid axis) rather than as batch entries
    (the fold: the call's own kernel); split kernels always write their LSE. shape: (heads_q, heads_kv,
    seqlen_q). attention(), attention_with_kvcache() and explain() pick their kernel here. v_from_k
    (absorbed MLA: V is K's first dv columns) splits in the TL, as every Hopper split does."""
    in_tl = splits > 1 and (tl_split(torch, device) or v_from_k)  # v_from_k: Hopper only, never folded
    b = _build_for(torch, dt, dqk, dv, split_fields(fields, shape[2]) if in_tl else fields, return_lse or splits > 1, device,
                   shape=shape, kv_cache=kv_cache, split=in_tl, v_from_k=v_from_k)
    return b, in_tl


def attention_backward(q, k, v, o, lse, dout, causal=False, window=None, scale=None, *, layout="bshd",
                       segment_ids=None):
    """dQ, dK, dV of attention(q, k, v, causal, window, scale[, segment_ids]) for the upstream
    gradient dout, given its output o and LSE (the implementation of torch.ops.qattn.attention_backward
    and of the operator's autograd formula; attention() under autograd uses the same kernel)."""
    torch = import_torch()
    aux, flags = aux_arguments(segment_ids=segment_ids)
    fields, args = split_launch_args(variant_fields(causal, window, **flags))
    dt = _check_tensors(torch, q, k, v, layout)
    return run_backward(torch, dt, fields, args, aux, layout, _scale(scale, int(_views(q, k, v, layout)[0].shape[3])),
                        q, k, v, o, lse, dout)


def _differentiable(torch, dt, q, k, v, layout, scale, return_lse, fields, args, aux):
    """attention() recorded for autograd: the forward kernel with its LSE, and the backward kernel
    (qattn._backward) when the gradients are asked for."""
    if not _backward.supported(fields):
        _backward.refuse(fields)
    qv, kv, vv = _views(q, k, v, layout)
    _, sq, _, hq, hkv, dqk, dv = _check_shapes(qv, kv, vv)
    b = _build_for(torch, dt, dqk, dv, fields, True, q.device)
    _backward.device_target = _device_target

    def run(qd, kd, vd):
        return _launch(torch, b, qd, kd, vd, layout, scale, True, aux, args)

    det = _backward.requested()  # a deterministic_backward() around this call (flash_attn_interface)
    learn = learnable(torch, aux)  # learnable ALiBi slopes / bias table: the kernel that writes their gradients
    if learn and (det or (det is None and torch.are_deterministic_algorithms_enabled())):
        raise SpecError(f"learnable {', '.join(AUX_INPUTS.get(n, n) for n in learn)} with deterministic algorithms: their "
                        "gradients are added with atomics, in no fixed order", code="PY0109",
                        hint="detach them (constant slopes / table) for bit-identical gradients, or turn "
                             "torch.use_deterministic_algorithms off")

    def bwd(q_, k_, v_, o_, lse_, do_):
        grads = run_backward(torch, dt, fields, args, aux, layout, scale, q_, k_, v_, o_, lse_, do_, deterministic=det,
                             aux_grad=bool(learn))
        return tuple(grads[:3]) + tuple(grads[3][n] for n in learn) if learn else grads

    o, lse = _backward.function(torch).apply(q, k, v, run, bwd, *(aux[n] for n in learn))
    return (o, lse) if return_lse else o


def run_backward(torch, dt, fields, args, aux, layout, scale, q, k, v, o, lse, do, deterministic=None, aux_grad=False):
    """(dQ, dK, dV) in the inputs' layout from the backward kernel of these variant fields (built on
    first use) for the forward's o and lse (batch, heads_q, seqlen_q) and the upstream gradient do.
    deterministic: the kernel with ordered additions (None: torch.are_deterministic_algorithms_enabled()).
    aux_grad: the kernel that also writes the gradients of the fp32 auxiliary inputs, returned as a
    fourth item {ABI name: fp32 gradient} (the slopes' and the bias table's shapes)."""
    qv, kv, vv = _views(q, k, v, layout)
    _, _, _, hq, hkv, dqk, dv = _check_shapes(qv, kv, vv)
    _backward.device_target = _device_target
    bb = _backward.build_for(torch, _device_target, dt, dqk, dv, fields, hq != hkv, q.device, deterministic, aux_grad)
    ov, dov = (o, do) if layout == "bshd" else (o.transpose(1, 2), do.transpose(1, 2))
    aux_list = _aux_tensors(torch, bb, aux or {}, qv, kv)
    grads = _backward.launch(torch, bb, qv, kv, vv, ov, lse, dov, scale, args.get("window"), args.get("softcap"), aux_list,
                             aux=aux)
    tail = tuple(grads[3:])
    grads = grads[:3] if layout == "bshd" else tuple(g.transpose(1, 2) for g in grads[:3])
    return tuple(grads) + tail


# ---- split keys (FlashDecoding) on the host --------------------------------------------------------

_SMS = {}


def parts_to_fill(torch, device, blocks, keys):
    """How many parts of the keys fill the SMs a launch of `blocks` blocks leaves idle: at least
    MIN_KEYS_PER_SPLIT keys a part, at most MAX_SPLITS parts (1 or less: no split)."""
    return min(sm_count(torch, device) // max(blocks, 1), keys // MIN_KEYS_PER_SPLIT, MAX_SPLITS)


def sm_count(torch, device):
    """The SMs of `device` (cached per device index)."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    sms = _SMS.get(idx)
    if sms is None:
        sms = _SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return sms
MIN_KEYS_PER_SPLIT = 512
MAX_SPLITS = 16


def split_allowed(fields, args, aux, sq, in_tl):
    """Whether a call may split its keys at all: not with auxiliary tensors (ALiBi slopes, segment
    ids, a bias table); on Hopper (in_tl: the kernel splits in its TL, each part applying the mask
    and the variants to its own tiles) any mask and variant; elsewhere (the fold: every part the same
    function) no mask, or a bottom-right causal mask with one query, no window, no variants."""
    if aux:
        return False
    if in_tl:
        return True
    mask = fields.get("mask") or {"kind": "none"}
    kind, align = mask.get("kind"), mask.get("align", "bottom_right")
    return "variants" not in fields and (args or {}).get("window") is None and \
        (kind == "none" or (kind == "causal" and align == "bottom_right" and sq == 1))


def split_keys(torch, device, qv, kv, fields, args, aux):
    """How many parts to split the keys of this call into (1: none). A short query sequence over a
    long cache launches too few blocks to fill the GPU (decoding: batch x kv heads blocks with the
    packed GQA kernel): then the keys are cut into S parts and the S partial results are merged by
    their LSE. On Hopper the kernel splits in its TL (tl_split): every part applies the call's mask,
    window and score / mask variants to its own key tiles, so any of them splits (not the variants
    that read auxiliary tensors: ALiBi slopes, segment ids, a bias table). Elsewhere the parts are
    folded into the batch, where every part must compute the same function: no mask, or a
    bottom-right causal mask with one query (it sees every key); no window, no variants (the softcap
    is one); S divides seqlen_k (or batch is 1). Each part >= MIN_KEYS_PER_SPLIT keys.
    QATTN_SPLIT_KV=0 turns it off."""
    if os.environ.get("QATTN_SPLIT_KV", "1") in ("0", "false", "no"):
        return 1
    bsz, sq, hq, _ = (int(x) for x in qv.shape)
    sk, hkv = int(kv.shape[1]), int(kv.shape[2])
    in_tl = tl_split(torch, device)
    if not split_allowed(fields, args, aux, sq, in_tl):
        return 1
    if sk < 2 * MIN_KEYS_PER_SPLIT or sq > _build.SHORT_QUERIES:
        return 1
    group = hq // hkv
    packed = group > 1 and 64 % group == 0
    want = parts_to_fill(torch, device, bsz * (hkv * -(-sq * group // 64) if packed else hq * -(-sq // 64)), sk)
    for s in range(want, 1, -1):
        if in_tl or sk % s == 0 or bsz == 1:
            return s
    return 1


def tl_split(torch, device):
    """True when a key split on `device` launches the kernel that splits in its TL (the spec's
    split_keys: the parts a Grid axis, O and LSE written per part, the queries read in place; docs/tl.md
    "Splitting the keys"): on Hopper (the sm90 lowering), unless QATTN_SPLIT_MODE=fold. Elsewhere, or
    with QATTN_SPLIT_MODE=fold, the keys are folded into the batch (_launch_split: a copy of the
    queries per part). H200, 2026-11-29: the split in TL 2-14% faster than the fold on every row the
    key split serves (bench/results/2026-11-29-h200-split-causal)."""
    mode = os.environ.get("QATTN_SPLIT_MODE", "tl").strip().lower() or "tl"
    if mode not in ("tl", "fold"):
        raise SpecError(f"QATTN_SPLIT_MODE={mode!r}: expected 'tl' (the kernel splits the keys in its TL, Hopper) or "
                        "'fold' (the parts folded into the batch)", code="PY0111")
    if mode == "fold":
        return False
    target, _, _ = _device_target(torch, device)
    return target in ("h100", "h200")


def split_fields(fields, sq):
    """The variant fields of the kernel that splits in its TL for a call of sq queries: the call's
    own, but a bottom-right causal call with one query (which sees every key) takes the unmasked
    kernel: exact, no mask work, and the decoding kernel every such call shares."""
    mask = fields.get("mask") or {"kind": "none"}
    if sq == 1 and set(fields) <= {"mask"} and mask.get("kind") == "causal" and \
            mask.get("align", "bottom_right") == "bottom_right":
        return {"mask": {"kind": "none"}}
    return fields


def _split_kernel_ready(torch, dt, qv, vv, fields, device, shape):
    """True when the kernel (with LSE) that the key split launches is ready (built, packed or cached)."""
    target, _, tag = _device_target(torch, device)
    short = _build.short_queries(target, *shape, fields)
    split = tl_split(torch, device)
    spec = _build.kernel_spec(dt, int(qv.shape[3]), int(vv.shape[3]), split_fields(fields, shape[2]) if split else fields, True,
                              target, short=short, split=split)
    return _build.available(spec, tag)


def _compiles_only_for_split(torch, dt, qv, vv, fields, device, shape):
    """True when this call's own kernel (no LSE) is ready (built, packed or cached) but the LSE twin
    that the split launches is not, and this machine cannot compile (_build.can_compile: no qattn
    executable or no nvcc, as on a deployment with a kernel pack): splitting would fail there where
    the unsplit call would not. Where a compiler is, the twin is built (once, then cached): a call
    after another process had built only the plain kernel ran unsplit before, 2.1x slower (MQA 32/1,
    batch 32, 8k keys on an H200: 93.9 against 45.2 us)."""
    target, _, tag = _device_target(torch, device)
    short = _build.short_queries(target, *shape, fields)
    dqk, dv = int(qv.shape[3]), int(vv.shape[3])

    def spec(lse):
        split = lse and tl_split(torch, device)
        return _build.kernel_spec(dt, dqk, dv, split_fields(fields, shape[2]) if split else fields, lse, target, short=short,
                                  split=split)
    return _build.available(spec(False), tag) and not _build.available(spec(True), tag) and not _build.can_compile()


def _merge_with_torch(torch, b, o_parts):
    """Whether _launch_split merges its parts with torch operations (_combine.merge_torch) instead of
    the TL combine kernel (qattn._combine): QATTN_COMBINE=torch (A/B measurements); parts that are not
    on a CUDA device (a stand-in for the kernel, tests/python/test_split_keys.py); or, in the
    default mode ('auto'), a forward kernel that came ready-made (a kernel pack, or the disk cache:
    b.cache_hit) while the combine library is not ready (this process, a pack: precompile(short=True)
    adds it, the disk cache) and this machine cannot compile (_build.can_compile): the split must not
    start a build that fails where the call itself compiled nothing (a deployment with a pack and no
    compiler), as _compiles_only_for_split. QATTN_COMBINE=tl always takes the kernel (built if need
    be)."""
    m = _combine.mode()
    if m == "torch" or o_parts.device.type != "cuda":
        return True
    if m == "tl" or not getattr(b, "cache_hit", False):
        return False
    return not _combine.available(torch, _dtype_name(torch, o_parts.dtype), int(o_parts.shape[-1]), o_parts.device) \
        and not _build.can_compile()


def _launch_split(torch, b, qv, kv, vv, layout, scale, return_lse, splits, args=None):
    """One launch over batch x splits (each part of the keys a batch entry: a view, no copy, when
    seqlen_k divides; batch 1 takes the parts of equal size and a last call for the rest), then
    the LSE merge by the combine kernel written in TL (qattn._combine: one launch, writing o in the
    caller's layout and the LSE only when asked for), or by torch operations where _merge_with_torch
    says so. The queries are a view for batch 1 (batch stride 0); with batch > 1 they are copied
    once per part (batch entry b * splits + s reads query b: no single batch stride expresses it)."""
    bsz, sq, hq, _ = qv.shape
    sk, hkv, dqk, dv = kv.shape[1], kv.shape[2], kv.shape[3], vv.shape[3]
    chunk = sk // splits
    main = chunk * splits
    kc, vc = kv.contiguous(), vv.contiguous()
    kf = kc[:, :main].reshape(bsz * splits, chunk, hkv, dqk)
    vf = vc[:, :main].reshape(bsz * splits, chunk, hkv, dv)
    qf = qv[:, None].expand(bsz, splits, sq, hq, dqk).reshape(bsz * splits, sq, hq, dqk)  # a view when bsz == 1
    o_parts, l_parts = _launch(torch, b, qf, kf, vf, "bshd", scale, True, args=args)
    o_parts = o_parts.view(bsz, splits, sq, hq, dv)
    l_parts = l_parts.view(bsz, splits, hq, sq)
    if main < sk:  # batch 1: the rest of the keys
        o_t, l_t = _launch(torch, b, qv, kc[:, main:], vc[:, main:], "bshd", scale, True, args=args)
        o_parts = torch.cat([o_parts, o_t[:, None]], 1)
        l_parts = torch.cat([l_parts, l_t[:, None]], 1)
    return _merge_parts(torch, b, qv, o_parts, l_parts, layout, return_lse)


def _merge_parts(torch, b, qv, o_parts, l_parts, layout, return_lse):
    """The LSE merge of o_parts (bsz, splits, sq, hq, dv) / l_parts (bsz, splits, hq, sq): the combine
    kernel written in TL (qattn._combine: one launch, o in the caller's layout, the LSE only when asked
    for), or torch operations where _merge_with_torch says so."""
    bsz, _, sq, hq, dv = o_parts.shape
    if _merge_with_torch(torch, b, o_parts):
        o, lse = _combine.merge_torch(torch, o_parts, l_parts, return_lse, qv.dtype)
        if layout == "bhsd":
            o = o.transpose(1, 2).contiguous()
    elif layout == "bhsd":  # the kernel writes the caller's layout through o's strides
        o = torch.empty((bsz, hq, sq, dv), device=qv.device, dtype=qv.dtype)
        _, lse = _combine.combine(torch, o_parts, l_parts, return_lse, qv.device, out=o.transpose(1, 2))
    else:
        o, lse = _combine.combine(torch, o_parts, l_parts, return_lse, qv.device)
    return (o, lse) if return_lse else o


def _launch_tl_split(torch, b, qv, kv, vv, layout, scale, return_lse, splits, args=None):
    """One launch of a kernel that splits the keys in its TL (tl_split; Build b from a split_keys
    spec): q, k, v read in place (no copy per part), each sequence's key tiles cut into `splits`
    parts by the kernel, the parts' O and LSE written to (batch * splits) entries, then merged
    (_merge_parts). A part without keys stores O = 0 and LSE = -inf, which the merge ignores."""
    bsz, sq, hq, _ = (int(x) for x in qv.shape)
    dv = int(vv.shape[3])
    views = []
    for tv in (qv, kv, vv):  # e.g. a slice with an odd offset: one copy
        if not _aligned(tv):
            tv = tv.contiguous()
            if not _aligned(tv):
                tv = tv.clone()
        views.append(tv)
    o_parts = torch.empty((bsz * splits, sq, hq, dv), device=qv.device, dtype=qv.dtype)
    l_parts = torch.empty((bsz * splits, hq, sq), device=qv.device, dtype=torch.float32)
    args = args or {}
    p = fill_params(views[0], views[1], views[2], o_parts, l_parts, _scale(scale, int(qv.shape[3])),
                    window=args.get("window"), softcap=args.get("softcap"), sm_margin=args.get("sm_margin", 0),
                    splits=splits)
    run_fwd(torch, b, p, qv.device)
    return _merge_parts(torch, b, qv, o_parts.view(bsz, splits, sq, hq, dv), l_parts.view(bsz, splits, hq, sq), layout,
                        return_lse)
