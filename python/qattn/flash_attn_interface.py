"""FlashAttention's Python interface on qattn kernels: code written for flash_attn switches by its import.

    from qattn.flash_attn_interface import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

The three functions take flash_attn 2.x's arguments and defaults (flash_attn/flash_attn_interface.py)
and return what it returns, forward only:

- flash_attn_func(q, k, v, ...): (batch, seqlen, heads, d) tensors; one qattn.attention call.
- flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...):
  packed ragged batches (total, heads, d): one launch of a kernel whose TL reads the cumulative
  counts (qattn.attention_varlen; docs/tl.md, "Ragged batches"); causal and window masks align each
  sequence's queries with its last keys, as FlashAttention does. With `block_table`, k / v are a
  paged cache (num_pages, page_size, heads_kv, d) and cu_seqlens_k gives each sequence's key count
  (chunked prefill over a paged cache: qattn.attention_varlen with cache_seqlens). The counts are checked on the host
  (PY0105: not starting at 0, decreasing, past the packed tensors or max_seqlen) except under CUDA
  graph capture, where the kernel clamps them to the packed tensors. With alibi_slopes: the
  sequences run as one packed row with qattn's document mask (segment ids from cu_seqlens), or one
  call per sequence when their ends differ.
- flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=..., block_table=None):
  decoding and chunked prefill against a KV cache, contiguous (batch, seqlen_cache, heads_kv, d) or
  paged (num_pages, page_size, heads_kv, d) with block_table (batch, pages); k / v are written into
  the cache in place at cache_seqlens first (device indexing; PY0105 when they do not fit, checked
  on the host except under CUDA-graph capture). One launch of a kernel whose TL reads
  each sequence's key count and pages (qattn.attention_with_kvcache; docs/tl.md, "KV caches"), split
  over the keys for decoding. With alibi_slopes (contiguous cache only): one call per row.

Refused with a qattn.QattnError (PY0903) naming the argument: dropout_p > 0, rotary_cos /
rotary_sin, cache_batch_idx, cache_leftpad, alibi_slopes with a paged cache, (batch, heads) ALiBi
slopes that differ per row in a packed call. return_attn_probs returns (out, softmax_lse, None): the
probabilities are not formed. deterministic=True makes the call's backward the kernel with ordered
additions (bit-identical gradients; also under torch.use_deterministic_algorithms(True)); num_splits
of flash_attn_with_kvcache: 0 (the default) lets qattn choose, 1 does not split, N > 1 splits the keys
into N parts (qattn.attention_with_kvcache's num_splits).
"""
import contextlib

from . import _attention, _backward
from ._kvcache import append_to_cache, attention_with_kvcache
from ._varlen import attention_varlen
from ._torch_util import import_torch
from .errors import SpecError


def _refuse(what, hint):
    raise SpecError(f"flash_attn_interface: {what} is not supported by qattn", code="PY0903", hint=hint)


def _common(dropout_p, window_size, softcap, causal):
    if dropout_p:
        _refuse(f"dropout_p={dropout_p}", "qattn kernels have no dropout: pass dropout_p=0.0")
    window = None
    if window_size is not None and tuple(int(x) for x in window_size) != (-1, -1):
        left, right = (int(x) for x in window_size)
        if causal:  # FlashAttention: causal with a window is the window with right = 0
            right = 0
        window = (left, right)
    return window, (float(softcap) if softcap else None)


def _slopes(torch, alibi_slopes, rows=None):
    """(heads,) slopes, or (batch, heads) ones that agree on every row (else None and refused)."""
    if alibi_slopes is None:
        return None
    if alibi_slopes.dim() == 1:
        return alibi_slopes
    if rows is not None:
        return alibi_slopes[rows]
    if alibi_slopes.shape[0] == 1 or bool((alibi_slopes == alibi_slopes[:1]).all()):
        return alibi_slopes[0]
    return None


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (batch, seqlen_q, heads, d), k / v (batch, seqlen_k, heads_kv, d). Returns out, or with
    return_attn_probs (out, softmax_lse (batch, heads, seqlen_q), None)."""
    torch = import_torch()
    window, cap = _common(dropout_p, window_size, softcap, causal)
    slopes = _slopes(torch, alibi_slopes)
    if alibi_slopes is not None and slopes is None:  # per-row slopes: one call per row
        outs = [flash_attn_func(q[i:i + 1], k[i:i + 1], v[i:i + 1], 0.0, softmax_scale, causal, window_size, softcap,
                                alibi_slopes[i], deterministic, True) for i in range(q.shape[0])]
        out, lse = torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])
        return (out, lse, None) if return_attn_probs else out
    with _deterministic(deterministic):
        r = _attention.attention(q, k, v, causal=bool(causal) and window is None, window=window, scale=softmax_scale,
                                 softcap=cap, return_lse=bool(return_attn_probs), alibi_slopes=slopes)
    return (r[0], r[1], None) if return_attn_probs else r


def _deterministic(flag):
    """deterministic=True: the call's backward takes the kernel with ordered additions (bit-identical
    gradients); False leaves the choice to torch.use_deterministic_algorithms, as FlashAttention's
    default does not force atomics either."""
    return _backward.deterministic_backward(True) if flag else contextlib.nullcontext()


def _seq_ids(torch, cu, total):
    """int32 ids (1, total): the sequence of each packed token (cu_seqlens (batch + 1,))."""
    idx = torch.arange(total, device=cu.device, dtype=cu.dtype)
    return (torch.searchsorted(cu[1:].contiguous(), idx, right=True)).to(torch.int32)[None]


def _varlen_call(q, k, v, cu_q, cu_k, max_q, max_k, causal, window, scale, cap, return_attn_probs):
    r = attention_varlen(q, k, v, cu_q, cu_k, int(max_q), int(max_k), causal=bool(causal) and window is None, window=window,
                         scale=scale, softcap=cap, return_lse=bool(return_attn_probs))
    return (r[0], r[1], None) if return_attn_probs else r


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """q (total_q, heads, d), k / v (total_k, heads_kv, d), cu_seqlens_* (batch + 1,) int32.
    Returns out (total_q, heads, d_v), or with return_attn_probs (out, softmax_lse (heads, total_q), None)."""
    with _deterministic(deterministic):
        return _varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                            window_size, softcap, alibi_slopes, return_attn_probs, block_table)


def _varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                 window_size, softcap, alibi_slopes, return_attn_probs, block_table):
    torch = import_torch()
    window, cap = _common(dropout_p, window_size, softcap, causal)
    if block_table is not None:  # k / v: a paged cache (num_pages, page_size, heads_kv, d); cu_seqlens_k: the key counts
        if alibi_slopes is not None:
            _refuse("alibi_slopes with block_table", "gather the pages into contiguous k / v first")
        if not isinstance(cu_seqlens_k, torch.Tensor) or cu_seqlens_k.dim() != 1 or cu_seqlens_k.numel() < 2:
            raise SpecError("cu_seqlens_k: expected a (batch + 1,) integer tensor", code="PY0105")
        lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)  # (device ops: no host read)
        r = attention_varlen(q, k, v, cu_seqlens_q, None, int(max_seqlen_q), int(max_seqlen_k),
                             causal=bool(causal) and window is None, window=window, scale=softmax_scale, softcap=cap,
                             return_lse=bool(return_attn_probs), cache_seqlens=lens, block_table=block_table)
        return (r[0], r[1], None) if return_attn_probs else r
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise SpecError(f"{name}: expected a (total, heads, d) tensor", code="PY0101")
    for name, cu, t in (("cu_seqlens_q", cu_seqlens_q, q), ("cu_seqlens_k", cu_seqlens_k, k)):
        if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2 or cu.dtype.is_floating_point:
            raise SpecError(f"{name}: expected a (batch + 1,) integer tensor", code="PY0105")
        if cu.device != q.device:
            raise SpecError(f"{name} is on {cu.device}, q on {q.device}", code="PY0103")
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise SpecError("cu_seqlens_q and cu_seqlens_k describe different batch sizes", code="PY0105")
    capturing = q.is_cuda and torch.cuda.is_current_stream_capturing()
    if alibi_slopes is None and capturing:  # no host read inside a CUDA graph: the kernel clamps the counts
        return _varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window, softmax_scale,
                            cap, return_attn_probs)
    cq, ck = cu_seqlens_q.to(torch.int64).cpu(), cu_seqlens_k.to(torch.int64).cpu()  # (one small copy to the host)
    lens_q, lens_k = (cq[1:] - cq[:-1]), (ck[1:] - ck[:-1])
    if int(cq[0]) != 0 or int(ck[0]) != 0 or bool((lens_q < 0).any()) or bool((lens_k < 0).any()) \
            or int(cq[-1]) > q.shape[0] or int(ck[-1]) > k.shape[0]:
        raise SpecError("cu_seqlens must start at 0, not decrease, and end within the packed tensors", code="PY0105")
    if int(lens_q.max()) > int(max_seqlen_q) or int(lens_k.max()) > int(max_seqlen_k):
        raise SpecError("a sequence is longer than max_seqlen_q / max_seqlen_k", code="PY0105")
    if alibi_slopes is None:  # one launch of the ragged-batch kernel
        return _varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window, softmax_scale,
                            cap, return_attn_probs)
    nq, nk = int(cq[-1]), int(ck[-1])
    masked = bool(causal) or window is not None or alibi_slopes is not None
    ends = ck[1:] - cq[1:]
    one_call = not masked or bool((ends == nk - nq).all())
    slopes = _slopes(torch, alibi_slopes)
    if one_call and (alibi_slopes is None or slopes is not None):
        seg = (_seq_ids(torch, cu_seqlens_q.to(torch.int64), nq), _seq_ids(torch, cu_seqlens_k.to(torch.int64), nk))
        r = _attention.attention(q[None, :nq], k[None, :nk], v[None, :nk], causal=bool(causal) and window is None,
                                 window=window, scale=softmax_scale, softcap=cap, return_lse=True, alibi_slopes=slopes,
                                 segment_ids=seg)
        out, lse = r[0][0], r[1][0]
    else:  # sequences whose queries end at different distances from their last key: one call each
        out = q.new_empty((nq, q.shape[1], v.shape[2]))
        lse = torch.empty((q.shape[1], nq), device=q.device, dtype=torch.float32)
        for i in range(len(lens_q)):
            a, b, c, d = int(cq[i]), int(cq[i + 1]), int(ck[i]), int(ck[i + 1])
            if b == a:
                continue
            if d == c:
                out[a:b] = 0
                lse[:, a:b] = float("-inf")
                continue
            o, l_ = _attention.attention(q[None, a:b], k[None, c:d], v[None, c:d], causal=bool(causal) and window is None,
                                         window=window, scale=softmax_scale, softcap=cap, return_lse=True,
                                         alibi_slopes=_slopes(torch, alibi_slopes, i))
            out[a:b], lse[:, a:b] = o[0], l_[0]
    return (out, lse, None) if return_attn_probs else out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None,
                            num_splits=0, return_softmax_lse=False):
    """q (batch, seqlen_q, heads, d) against a cache of cache_seqlens (int or (batch,) int32) valid
    rows per sequence: contiguous (batch, seqlen_cache, heads_kv, d), or with block_table (batch,
    pages) int32 paged (num_pages, page_size, heads_kv, d). k / v (batch, seqlen_new, heads_kv, d) are
    written into the cache at cache_seqlens first. One kernel launch reads the cache where it lies
    (qattn.attention_with_kvcache). Returns out, or (out, softmax_lse) with return_softmax_lse."""
    torch = import_torch()
    for name, val, hint in (("rotary_cos / rotary_sin", rotary_cos if rotary_cos is not None else rotary_sin,
                             "apply the rotary embedding to q and k before the call"),
                            ("cache_batch_idx", cache_batch_idx, "index the cache rows before the call"),
                            ("cache_leftpad", cache_leftpad, "use right-aligned valid rows (cache_seqlens)")):
        if val is not None:
            _refuse(name, hint)
    window, cap = _common(0.0, window_size, softcap, causal)
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if t is not None and (not isinstance(t, torch.Tensor) or t.dim() != 4):
            raise SpecError(f"{name}: expected a 4-D tensor", code="PY0101")
    b = q.shape[0]
    paged = block_table is not None
    if paged and (not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] != b):
        raise SpecError("block_table: expected a (batch, pages) integer tensor", code="PY0105")
    page = k_cache.shape[1]
    s_cache = block_table.shape[1] * page if paged else k_cache.shape[1]
    if not paged and k_cache.shape[0] != b:
        raise SpecError(f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}: batch sizes differ", code="PY0105",
                        hint="pass block_table= for a paged cache")
    if v_cache.shape[:3] != k_cache.shape[:3]:
        raise SpecError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ", code="PY0105")
    if (k is None) != (v is None):
        raise SpecError("k and v: pass both or neither", code="PY0105")
    new = 0 if k is None else k.shape[1]
    for name, t, cache in (("k", k, k_cache), ("v", v, v_cache)):
        if t is not None and (t.shape[0] != b or t.shape[2:] != cache.shape[2:]):
            raise SpecError(f"{name} {tuple(t.shape)} does not match its cache {tuple(cache.shape)} (batch, heads, d)",
                            code="PY0105")
    if cache_seqlens is None:
        lens = torch.full((b,), s_cache - new, dtype=torch.int32, device=q.device)
    elif isinstance(cache_seqlens, int):
        lens = torch.full((b,), cache_seqlens, dtype=torch.int32, device=q.device)
    elif isinstance(cache_seqlens, torch.Tensor) and cache_seqlens.dim() == 1 and cache_seqlens.shape[0] == b:
        lens = cache_seqlens.to(device=q.device, dtype=torch.int32)
    else:
        raise SpecError("cache_seqlens: an int or a (batch,) integer tensor", code="PY0105")
    if new:  # append k / v at each sequence's end (device indexing)
        lens = append_to_cache(torch, k_cache, v_cache, k, v, lens, block_table)
    if alibi_slopes is not None:  # ALiBi is not a KV-cache kernel yet: one call per sequence on its rows
        if paged:
            _refuse("alibi_slopes with a paged cache", "gather the pages into a contiguous cache first")
        lens_h = lens.cpu()  # (one small copy to the host)
        o = q.new_empty(q.shape[:3] + (v_cache.shape[3],))
        lse = torch.empty((b, q.shape[2], q.shape[1]), device=q.device, dtype=torch.float32)
        for i in range(b):
            n = int(lens_h[i])
            if n <= 0:
                o[i] = 0
                lse[i] = float("-inf")
                continue
            oi, li = _attention.attention(q[i:i + 1], k_cache[i:i + 1, :n], v_cache[i:i + 1, :n],
                                          causal=bool(causal) and window is None, window=window, scale=softmax_scale,
                                          softcap=cap, return_lse=True, alibi_slopes=_slopes(torch, alibi_slopes, i))
            o[i], lse[i] = oi[0], li[0]
        return (o, lse) if return_softmax_lse else o
    r = attention_with_kvcache(q, k_cache, v_cache, lens, block_table, causal=bool(causal) and window is None,
                               window=window, scale=softmax_scale, softcap=cap, return_lse=True, num_splits=num_splits)
    return r if return_softmax_lse else r[0]


__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache"]
