"""attention()'s backward pass: a kernel generated from the backward TL (`qattn generate --backward`,
docs/tl.md "The backward pass") for the call's dtype, head dims and mask.

attention() on inputs that require grad runs the forward kernel with its LSE and records this
module's autograd Function; backward() launches the qattn_bwd library: dQ (and, for GQA / MQA, dK and
dV) accumulate in fp32 buffers zeroed here, then take the inputs' dtype. MHA calls use the kernel that
stores dK and dV once per query head. Under torch.use_deterministic_algorithms(True) the kernel adds
in a fixed order instead of with atomics (TL `{ordered}`): bit-identical gradients. The built-in variants (softcap, ALiBi, relative bias,
document and prefix-LM masks) are differentiated by the backward TL; custom score_mod / mask_mod
text has no backward from Python yet (PY0109), nor do the KV-cache calls (refuse_grad).
"""
import contextlib
import contextvars

from . import _build
from ._abi import STATUS, bwd_workspace, fill_bwd_params

# A forward call made inside deterministic_backward(True) records that its backward must be the
# deterministic kernel (flash_attn_interface's `deterministic=True`); None: torch's setting when the
# backward runs.
_DETERMINISTIC = contextvars.ContextVar("qattn_deterministic_backward", default=None)


def requested():
    """The deterministic choice of the enclosing deterministic_backward(), else None."""
    return _DETERMINISTIC.get()


@contextlib.contextmanager
def deterministic_backward(flag=True):
    """attention() calls inside record the backward kernel they differentiate with: the deterministic
    one for flag=True (whatever torch.use_deterministic_algorithms says when backward() runs)."""
    token = _DETERMINISTIC.set(bool(flag))
    try:
        yield
    finally:
        _DETERMINISTIC.reset(token)
from .errors import LaunchError, SpecError


def supported(fields):
    """The backward is generated for every mask and variant but custom score_mod / mask_mod text (the
    backward TL differentiates the built-in Scores: softcap, ALiBi, relative bias; Masks need no
    derivative: document, prefix-LM)."""
    var = fields.get("variants") or {}
    return not (var.get("score_mod") or var.get("mask_mod"))


def refuse(fields):
    names = sorted(k for k, x in (fields.get("variants") or {}).items() if x not in (None, False))
    raise SpecError(f"the backward of custom score_mod / mask_mod expressions ({', '.join(names)}) is not generated "
                    "from Python yet", code="PY0109",
                    hint="`qattn plan --backward --spec ...` writes and interprets their backward TL; from Python, "
                         "differentiate the built-in variants (softcap, alibi_slopes, relative_bias, segment_ids, "
                         "prefix_lm), or call the custom one under torch.no_grad()")


def refuse_grad(torch, what, hint, *tensors):
    """PY0109 when autograd would record a call that has no backward (`what`): an input requires grad
    and grad mode is on. Without it the output would silently carry no gradient to its inputs."""
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
        raise SpecError(f"{what} has no backward: an input requires grad, and its gradient would be lost",
                        code="PY0109", hint=hint)


def kernel_spec(dt, dqk, dv, fields, target, gqa, deterministic=False, aux_grad=False):
    """The spec of the backward library for these compile-time fields (what build_for builds and a
    kernel pack holds under it): heads (2, 1) for GQA / MQA, (1, 1) for MHA. aux_grad: the kernel
    also writes the gradients of the fp32 auxiliary inputs (ALiBi slopes, the relative-bias table)."""
    spec = _build.kernel_spec(dt, dqk, dv, fields, False, target)
    spec["name"] = (spec["name"] + "_bwd" + ("_gqa" if gqa else "") + ("_det" if deterministic else "") +
                    ("_ag" if aux_grad else ""))[:128]
    spec["heads_q"], spec["heads_kv"] = (2, 1) if gqa else (1, 1)
    if deterministic:
        spec["deterministic"] = True
    if aux_grad:
        spec["aux_grad"] = True
    return spec


def build_for(torch, device_target, dt, dqk, dv, fields, gqa, device, deterministic=None, aux_grad=False):
    """The backward Build of this compile-time tuple: heads (2, 1) for GQA / MQA (dK, dV accumulated in
    fp32), (1, 1) for MHA (stored once per query head). deterministic (default: torch's
    use_deterministic_algorithms setting): the kernel whose additions into dQ (and GQA's dK, dV) go in
    a fixed order (the spec's "deterministic", TL `{ordered}`): bit-identical gradients, slower."""
    if deterministic is None:
        deterministic = bool(torch.are_deterministic_algorithms_enabled())
    idx = device.index if device.index is not None else torch.cuda.current_device()
    target, reason, tag = device_target(torch, device)
    key = ("bwd", dt, dqk, dv, repr(sorted((k, sorted(v.items())) for k, v in fields.items())), gqa, idx, deterministic,
           aux_grad)
    hit = _build.FAST.get(key)
    if hit is not None:
        if isinstance(hit, Exception):
            raise hit
        return hit
    spec = kernel_spec(dt, dqk, dv, fields, target, gqa, deterministic, aux_grad)
    try:
        b = _build.build(spec, target, reason, local_tag=tag, backward=True)
    except SpecError as e:
        _build.FAST[key] = e
        raise
    _build.FAST[key] = b
    return b


device_target = None  # set by _attention (its per-device target cache)


def launch(torch, b, q, k, v, o, lse, dout, scale, window, softcap=None, aux_list=None, aux=None):
    """dQ, dK, dV for (batch, seqlen, heads, dim) views q, k, v, o, dout and lse (batch, heads_q, seqlen_q);
    with a kernel that writes the gradients of auxiliary inputs (info "aux_grad", ABI 9), also a dict
    {input name: its fp32 gradient} of those inputs (aux: {name: tensor}, their values)."""
    lib = b.library
    bsz, sq, hq, dqk = q.shape
    sk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    dev = q.device
    acc_kv = lib.info.get("dk_dtype") == "fp32"
    dq = torch.zeros((bsz, sq, hq, dqk), device=dev, dtype=torch.float32)
    kv_dtype = torch.float32 if acc_kv else q.dtype
    make = torch.zeros if acc_kv else torch.empty
    dk = make((bsz, sk, hkv, dqk), device=dev, dtype=kv_dtype)
    dvv = make((bsz, sk, hkv, dv), device=dev, dtype=kv_dtype)
    names = lib.info.get("aux_grad", [])
    daux = {n: torch.zeros(tuple((aux or {})[n].shape), device=dev, dtype=torch.float32) for n in names}

    def out(dq_, dk_, dv_):
        grads = (dq_.to(q.dtype), dk_.to(q.dtype), dv_.to(q.dtype))
        return grads + (daux,) if names else grads

    if dq.numel() == 0 and dk.numel() == 0:
        return out(dq, dk, dvv)
    if sk == 0:
        return out(dq, dk, dvv)
    if sq == 0:  # no query: no gradient reaches K and V
        return out(dq, torch.zeros_like(dk), torch.zeros_like(dvv))
    tensors = [t if t.stride(-1) == 1 and t.data_ptr() % 16 == 0 else t.contiguous() for t in (q, k, v, o, dout)]
    p = fill_bwd_params(*tensors, lse.contiguous(), dq, dk, dvv, scale=scale, window=window, softcap=softcap, aux=aux_list,
                        daux=[daux[n] for n in names])
    ws = bwd_workspace(torch, lib, p, dev)  # noqa: F841 (a deterministic kernel's turn counters, alive for the launch)
    with torch.cuda.device(dev):
        st = lib.bwd(p, torch.cuda.current_stream(dev).cuda_stream)
    if st != 0:
        raise LaunchError(f"qattn_bwd returned {STATUS.get(st, st)}: {lib.last_error()}", code="PY0501",
                          hint=f"kernel {b.spec['name']} ({b.library_path})")
    return out(dq, dk, dvv)


_FUNCTION = None


def function(torch):
    """The autograd Function (made once torch is imported)."""
    global _FUNCTION
    if _FUNCTION is not None:
        return _FUNCTION

    class AttentionFunction(torch.autograd.Function):
        """forward(q, k, v, run, bwd, *learnable) with run() -> (o, lse) the forward launch on detached
        views and bwd(q, k, v, o, lse, do) -> (dq, dk, dv, *grads of learnable); learnable: auxiliary
        inputs that require grad (ALiBi slopes, a bias table: the backward kernel's "aux_grad")."""

        @staticmethod
        def forward(ctx, q, k, v, run, bwd, *learnable):
            o, lse = run(q.detach(), k.detach(), v.detach())
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.bwd = bwd
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx, do, _dlse):
            q, k, v, o, lse = ctx.saved_tensors
            grads = ctx.bwd(q, k, v, o, lse, do)
            return tuple(grads[:3]) + (None, None) + tuple(grads[3:])

    _FUNCTION = AttentionFunction
    return _FUNCTION
