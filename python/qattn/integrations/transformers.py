"""qattn as an attention implementation of Hugging Face transformers.

    import qattn.integrations.transformers                 # registers "qattn"
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16, attn_implementation="qattn")
    # or model.set_attn_implementation("qattn") on a loaded model; then generate() as usual

Importing this module registers `attention_forward` with transformers' AttentionInterface and a
mask function with its AttentionMaskInterface under the name "qattn" (`register()` does it again,
under another name if wanted). The attention runs qattn.attention on the model's q, k, v (GQA/MQA
natively, no repeated kv heads): causal (bottom-right aligned, so prefill and the decoding steps of
generate()'s KV cache are the same call), sliding windows (`sliding_window` W: the W - 1 keys before
each query and itself), `softcap`, `scaling`. A padding mask (left or right padding: each row's real
tokens are one run) packs a prefill's real tokens into ragged sequences for qattn.attention_varlen
(the padding is neither computed nor seen; its output rows are 0), and becomes segment ids, qattn's
document mask, while decoding against the cache; packed sequences (no mask, position_ids restarting
at 0) become segment ids too. Training works: every call is differentiable (qattn.attention's
backward kernel; the ragged launch's backward is the document mask's over the packed tokens).
What it cannot express is refused with a qattn.QattnError naming it (use attn_implementation="sdpa"
for those): a mask with holes in a row, a static cache's trailing slots during decoding, dropout in
training, attention sinks (s_aux), output_attentions.
"""
import weakref

from .. import _attention, _varlen
from ..errors import SpecError, ToolchainError

NAME = "qattn"
# The padding's segment ids of the last mask seen: every layer of a forward gets the same mask
# tensor, so they are computed (and their checks synchronise with the host) once per forward.
_LAST = {"ref": None, "key": None, "value": None}


def _target_dtype(torch, query, module):
    if query.dtype != torch.float32:
        return query.dtype
    dev = query.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear) and layer.weight.dtype in (torch.float16, torch.bfloat16):
            return layer.weight.dtype
    raise SpecError("attn_implementation='qattn' runs fp16 / bf16 models; this one computes in float32", code="PY0901",
                    hint="load the model with dtype=torch.bfloat16 (or float16)")


def _segments(torch, mask, q_len):
    """Segment ids (seg_q, seg_k) for a 2-D keep-mask (batch, kv_len), True = a real token: the
    runs of equal values numbered along each row (left padding 0 0 1 1 -> 0 0 1 1; right padding
    1 1 0 0 -> 0 0 1 1), so queries see keys of their run only. Refused: a row whose real tokens are
    not one run, and trailing padding when the queries are not the last kv positions (a static cache)."""
    m = mask.to(torch.int32)
    change = torch.zeros_like(m)
    change[:, 1:] = (m[:, 1:] != m[:, :-1]).to(torch.int32)
    seg = torch.cumsum(change, dim=1).to(torch.int32)
    runs_of_real = (change * m).sum(dim=1) + m[:, 0]
    if bool((runs_of_real > 1).any()):
        raise SpecError("the attention mask has a row whose real tokens are not one run (holes in the padding mask)",
                        code="PY0902", hint="use attn_implementation='sdpa' for such masks")
    if q_len < m.shape[1] and bool((m[:, -1] == 0).any()):
        raise SpecError("the attention mask pads the end of the keys while decoding (a static cache's free slots): "
                        "qattn aligns the queries with the last keys", code="PY0902",
                        hint="use the dynamic cache (the default) with attn_implementation='qattn'")
    return seg[:, -q_len:].contiguous(), seg


def _padding(torch, attention_mask, kv_len, q_len):
    """What a 2-D keep-mask asks for, once per mask tensor and shape (None: nothing padded): a prefill
    (q_len == kv_len) as packed ragged sequences, ("varlen", (batch_idx, pos_idx) of the real tokens,
    cu_seqlens, longest), else ("segments", (seg_q, seg_k)) for the document mask."""
    key = (attention_mask._version, kv_len, q_len, attention_mask.device)
    ref = _LAST["ref"]
    if ref is not None and ref() is attention_mask and _LAST["key"] == key:
        return _LAST["value"]
    mask = attention_mask[:, -kv_len:].to(torch.bool)
    value = None
    if not bool(mask.all()):
        seg = _segments(torch, mask, q_len)  # (its checks: one run of real tokens per row)
        if q_len == kv_len:
            counts = mask.sum(dim=1, dtype=torch.int32)
            cu = torch.zeros(mask.shape[0] + 1, dtype=torch.int32, device=mask.device)
            cu[1:] = torch.cumsum(counts, 0)
            where = mask.nonzero(as_tuple=True)  # row-major: each row's real tokens in order
            value = ("varlen", where, cu, int(counts.max()))
        else:
            _attention.mark_sorted_segments(*seg)  # numbered in order along each row by construction
            value = ("segments", seg)
    _LAST.update(ref=weakref.ref(attention_mask), key=key, value=value)
    return value


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      softcap=None, is_causal=None, s_aux=None, **kwargs):
    """The AttentionInterface function: query (batch, heads, q_len, d), key / value (batch, kv_heads,
    kv_len, d); attention_mask None or the 2-D keep-mask of the "qattn" mask function. Returns
    (attn_output (batch, q_len, heads, d_v), None)."""
    import torch
    if kwargs.get("output_attentions"):
        raise SpecError("attn_implementation='qattn' returns no attention weights (output_attentions=True)",
                        code="PY0901", hint="use attn_implementation='eager' to inspect the weights")
    if s_aux is not None:
        raise SpecError("attention sinks (s_aux) are not supported by qattn kernels", code="PY0901",
                        hint="use attn_implementation='sdpa' or 'eager' for this model")
    if dropout and module.training:
        raise SpecError(f"attention dropout {dropout} in training: qattn kernels have no dropout",
                        code="PY0901", hint="train with attention_dropout=0.0, or call model.eval() for inference")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    q_len, kv_len = query.shape[2], key.shape[2]
    dt = _target_dtype(torch, query, module)
    q, k, v = (t.transpose(1, 2).to(dt) for t in (query, key, value))  # (batch, len, heads, d) views
    extra, packed = {}, None
    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise SpecError(f"attn_implementation='qattn' takes its own 2-D padding mask; got a {attention_mask.dim()}-D one",
                            code="PY0902", hint="a custom 4-D mask needs attn_implementation='sdpa' or 'eager'")
        pad = _padding(torch, attention_mask, kv_len, q_len)
        if pad is not None and pad[0] == "segments":
            extra["segment_ids"] = pad[1]
        elif pad is not None:
            packed = pad
    elif kwargs.get("position_ids") is not None and q_len == kv_len and q_len > 1:
        pos = kwargs["position_ids"]
        pos = pos.expand(q.shape[0], -1) if pos.shape[0] != q.shape[0] else pos
        if bool((pos[:, 1:] <= pos[:, :-1]).any()):  # packed sequences: a new document where positions restart
            seg = torch.cumsum((pos == 0).to(torch.int32), dim=1).to(torch.int32)
            extra["segment_ids"] = (seg, seg)
    window = None
    if sliding_window is not None and kv_len > sliding_window - 1:
        w = int(sliding_window) - 1
        window = (w, 0) if causal else (w, w)
    if packed is not None:  # a padded prefill: the real tokens packed, one ragged-batch launch, zeros at the padding
        _, (bi, ti), cu, longest = packed
        op = _varlen.attention_varlen(q[bi, ti], k[bi, ti], v[bi, ti], cu, cu, longest, longest,
                                      causal=bool(causal) and window is None, window=window, scale=scaling, softcap=softcap)
        o = q.new_zeros(q.shape[:3] + (v.shape[3],))
        o[bi, ti] = op
        return o, None
    o = _attention.attention(q, k, v, causal=bool(causal) and window is None, window=window, scale=scaling,
                             softcap=softcap, **extra)
    return o, None


def mask_function(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None, attention_mask=None,
                  **kwargs):
    """The AttentionMaskInterface function: the 2-D keep-mask (batch, kv_length) of the padding, or
    None when nothing is padded (the causal or sliding pattern is the attention function's own)."""
    if attention_mask is not None:
        attention_mask = attention_mask[:, -kv_length:]
        if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
            attention_mask = None
    return attention_mask


def register(name=NAME):
    """Registers attention_forward and mask_function with transformers under `name`."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:
        raise ToolchainError(f"qattn.integrations.transformers needs transformers with AttentionInterface and "
                             f"AttentionMaskInterface ({e})", code="PY0904",
                             hint="pip install 'transformers>=5'") from None
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, mask_function)
    return name


register()
