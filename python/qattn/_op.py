"""qattn.attention as a PyTorch operator: `torch.ops.qattn.attention` (torch.library.custom_op with a
fake implementation), so that torch.compile(fullgraph=True) traces a model through it instead of
breaking the graph at the ctypes launch, CUDA graphs capture it, and torch.library.opcheck passes.

    torch.ops.qattn.attention(q, k, v, causal, window, scale, softcap, return_lse, layout,
                              score_mod, mask_mod, prefix_lm, alibi_slopes, seg_q, seg_k,
                              relative_bias, sm_margin=0) -> (o, lse)

causal is a string ('none', 'bottom_right', 'top_left'); window a list [left, right] or None; lse
is (batch, heads_q, seqlen_q) fp32 when return_lse, else an empty fp32 tensor. The real
implementation is qattn.attention's eager path (checks, the kernel built on first use, the launch
on the current stream); the fake one gives the output shapes and dtypes without running anything.

Registered once per process when torch is imported: at `import qattn` if torch is already
imported, else on the first qattn.attention call. torch.compile traces through the operator when it
is registered before tracing starts (import torch before qattn, or call qattn.attention once).
Needs torch >= 2.4 (torch.library.custom_op); older versions run eagerly (a graph break).

Training: the operator has an autograd formula (register_autograd): the gradients come from
`torch.ops.qattn.attention_backward(q, k, v, o, lse, dout, causal, window, scale, layout) ->
(dq, dk, dv)`, a second operator over the generated backward kernel (qattn._backward), so
torch.compile(fullgraph=True) traces forward and backward. qattn.attention asks the operator for the
LSE whenever an input requires grad; calls with attention variants have no backward (PY0109).
"""
from typing import List, Optional, Tuple

OP = None  # torch.ops.qattn.attention once registered

_CAUSAL_NAMES = {False: "none", None: "none", True: "bottom_right", "bottom_right": "bottom_right",
                 "top_left": "top_left"}


def causal_name(causal):
    """attention()'s causal argument as the operator's string (unknown values pass through, so the
    eager checks report them)."""
    try:
        return _CAUSAL_NAMES[causal]
    except (KeyError, TypeError):
        return str(causal)


def causal_value(name):
    return {"none": False, "bottom_right": True, "top_left": "top_left"}.get(name, name)


def register(torch):
    """Registers torch.ops.qattn.attention (once); returns it, or None where torch lacks custom_op."""
    global OP
    if OP is not None:
        return OP
    library = getattr(torch, "library", None)
    if library is None or not hasattr(library, "custom_op"):
        return None
    Tensor = torch.Tensor

    @library.custom_op("qattn::attention", mutates_args=(), device_types="cuda")
    def attention_op(q: Tensor, k: Tensor, v: Tensor, causal: str, window: Optional[List[int]], scale: Optional[float],
                     softcap: Optional[float], return_lse: bool, layout: str, score_mod: Optional[str],
                     mask_mod: Optional[str], prefix_lm: Optional[int], alibi_slopes: Optional[Tensor],
                     seg_q: Optional[Tensor], seg_k: Optional[Tensor],
                     relative_bias: Optional[Tensor], sm_margin: int = 0) -> Tuple[Tensor, Tensor]:
        from ._attention import eager_attention
        torch_ = torch
        with torch_.no_grad():  # the operator's forward; its gradient is the autograd formula below
            out = eager_attention(q, k, v, causal_value(causal), tuple(window) if window is not None else None, scale,
                                  softcap, return_lse, layout=layout, score_mod=score_mod, mask_mod=mask_mod,
                                  prefix_lm=prefix_lm, alibi_slopes=alibi_slopes,
                                  segment_ids=(seg_q, seg_k) if seg_q is not None else None,
                                  relative_bias=relative_bias, sm_margin=sm_margin)
        if return_lse:
            return out
        return out, q.new_empty((0,), dtype=torch.float32)

    @attention_op.register_fake
    def _(q, k, v, causal, window, scale, softcap, return_lse, layout, score_mod, mask_mod, prefix_lm, alibi_slopes,
          seg_q, seg_k, relative_bias, sm_margin=0):
        if layout == "bshd":
            b, sq, hq = q.shape[0], q.shape[1], q.shape[2]
            o = q.new_empty((b, sq, hq, v.shape[3]))
        else:
            b, hq, sq = q.shape[0], q.shape[1], q.shape[2]
            o = q.new_empty((b, hq, sq, v.shape[3]))
        lse = q.new_empty((b, hq, sq) if return_lse else (0,), dtype=torch.float32)
        return o, lse

    @library.custom_op("qattn::attention_backward", mutates_args=(), device_types="cuda")
    def attention_backward_op(q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, dout: Tensor, causal: str,
                              window: Optional[List[int]], scale: Optional[float],
                              layout: str) -> Tuple[Tensor, Tensor, Tensor]:
        from ._attention import attention_backward
        dq, dk, dv = attention_backward(q, k, v, o, lse, dout, causal_value(causal),
                                        tuple(window) if window is not None else None, scale, layout=layout)
        return dq.contiguous(), dk.contiguous(), dv.contiguous()

    @attention_backward_op.register_fake
    def _(q, k, v, o, lse, dout, causal, window, scale, layout):
        return torch.empty_like(q, memory_format=torch.contiguous_format), \
            torch.empty_like(k, memory_format=torch.contiguous_format), \
            torch.empty_like(v, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        q, k, v, causal, window, scale, softcap, return_lse, layout = inputs[:9]
        o, lse = output
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.args = (causal, window, scale, layout)
        ctx.variants = softcap is not None or any(x is not None for x in inputs[9:16])  # (inputs[16]: sm_margin)
        ctx.has_lse = return_lse

    def backward(ctx, do, _dlse):
        if ctx.variants or not ctx.has_lse:
            from .errors import SpecError
            raise SpecError("no backward for this call: attention variants have none yet, and the operator was called "
                            "without its LSE", code="PY0109", hint="qattn.attention asks for the LSE when an input "
                            "requires grad; differentiate the plain attention with its mask")
        q, k, v, o, lse = ctx.saved_tensors
        causal, window, scale, layout = ctx.args
        dq, dk, dv = torch.ops.qattn.attention_backward(q, k, v, o, lse, do, causal, window, scale, layout)
        return (dq, dk, dv) + (None,) * 14

    attention_op.register_autograd(backward, setup_context=setup_context)
    OP = torch.ops.qattn.attention
    return OP
