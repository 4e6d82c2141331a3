"""Attention on packed ragged batches (docs/python.md, "Ragged batches"), flash_attn_varlen_func's
layout: the sequences one after another without padding, q (total_q, heads_q, d), k / v (total_k,
heads_kv, d), sequence b's rows from cu_seqlens_q[b] / cu_seqlens_k[b] (int32, batch + 1 entries).
One launch of a kernel whose TL reads the cumulative counts (`Let seqlen_q = cu_seqlens_q[b + 1] -
cu_seqlens_q[b]`, `{ragged: cu_seqlens_q}`; docs/tl.md, "Ragged batches"): no padding, no document
mask over one long row, no host synchronisation (the counts stay on the device). The grid is sized
by max_seqlen_q; a tile past its sequence's queries returns at once.
"""
import os

from . import _attention, _backward, _build, _combine, _kvcache
from ._abi import fill_params
from ._torch_util import import_torch
from ._variants import split_launch_args, variant_fields
from .errors import DeviceError, SpecError


def _check(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """Shapes, dtypes and devices; returns (batch, total_q, heads_q, d_qk, total_k, heads_kv, d_v)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise SpecError(f"{name}: expected a (total, heads, d) tensor", code="PY0101",
                            hint="pack the sequences one after another: q (total_q, heads_q, d), k / v (total_k, heads_kv, d)")
        if t.device != q.device:
            raise DeviceError(f"{name} is on {t.device}, q on {q.device}", code="PY0103")
        if t.dtype != q.dtype:
            raise SpecError(f"{name} has dtype {t.dtype}, q {q.dtype}", code="PY0102")
    tq, hq, dqk = (int(x) for x in q.shape)
    tk, hkv, dk = (int(x) for x in k.shape)
    if int(v.shape[0]) != tk or int(v.shape[1]) != hkv or dk != dqk:
        raise SpecError(f"k {tuple(k.shape)} and v {tuple(v.shape)} do not match each other and q's head dim {dqk}",
                        code="PY0105")
    if hkv <= 0 or hq % hkv:
        raise SpecError(f"heads_q {hq} is not a multiple of heads_kv {hkv}", code="PY0105")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 1 or cu.dtype.is_floating_point \
                or cu.dtype == torch.bool:
            raise SpecError(f"{name}: expected a (batch + 1,) integer tensor", code="PY0105")
        if cu.device != q.device:
            raise DeviceError(f"{name} is on {cu.device}, q on {q.device}", code="PY0103")
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise SpecError("cu_seqlens_q and cu_seqlens_k describe different batch sizes", code="PY0105")
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(m, bool) or not isinstance(m, int) or m < 0 or m >= 2 ** 31:
            raise SpecError(f"{name}={m!r}: expected an int in [0, 2^31)", code="PY0105",
                            hint="the longest sequence's length (a host int: the grid is sized by it)")
    if q.device.type != "cuda":
        raise DeviceError(f"q is on {q.device}: qattn kernels run on CUDA devices", code="PY0103")
    return int(cu_seqlens_q.numel()) - 1, tq, hq, dqk, tk, hkv, int(v.shape[2])


def _rows(t):
    """t with a contiguous last dim and 16-byte aligned rows and heads (a copy only when needed)."""
    if t.stride(-1) != 1 or any((s * t.element_size()) % 16 for s in t.stride()[:2]) or t.data_ptr() % 16:
        return t.contiguous()
    return t


def _outputs(torch, q, hq, dv, bsz, max_seqlen_q, return_lse):
    """o (total_q, heads_q, d_v), lse (heads_q, total_q) or None, and whether there is nothing to run
    (then o = 0 and lse = -inf already)."""
    tq = int(q.shape[0])
    o = q.new_empty((tq, hq, dv))
    lse = torch.empty((hq, tq), device=q.device, dtype=torch.float32) if return_lse else None
    empty = bsz <= 0 or tq == 0 or max_seqlen_q == 0
    if empty:
        o.zero_()
        if lse is not None:
            lse.fill_(float("-inf"))
    return o, lse, empty


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False, window=None,
                     scale=None, softcap=None, return_lse=False, cache_seqlens=None, block_table=None):
    """Attention of each packed sequence's queries over its own keys. q (total_q, heads_q, d_qk), k
    (total_k, heads_kv, d_qk), v (total_k, heads_kv, d_v) fp16/bf16 CUDA tensors; cu_seqlens_q /
    cu_seqlens_k (batch + 1,) int32 (other integer dtypes are converted) on the same device, starting
    at 0 and not decreasing; max_seqlen_q / max_seqlen_k ints at least every sequence's length (a
    longer sequence is cut to them). causal and window align each sequence's queries with its last
    keys (FlashAttention's convention). Returns o (total_q, heads_q, d_v), and with return_lse=True
    also lse (heads_q, total_q) fp32. The counts are not read on the host: sequences outside the
    packed tensors are clamped to them; a sequence with no key gets O = 0 and LSE = -inf. Rows of o
    past cu_seqlens_q[-1] hold no result (o is allocated uninitialized).

    With cache_seqlens (batch,) int32 the keys sit in a KV cache instead (chunked prefill, prefix
    caching): k / v are the cache, contiguous (batch, capacity, heads_kv, d) or, with block_table
    (batch, pages) int32, paged (num_pages, page_size, heads_kv, d); sequence b's keys are its first
    cache_seqlens[b] rows and its queries the last of them; cu_seqlens_k must be None and
    max_seqlen_k is ignored (the capacity bounds the counts). On Hopper a call whose sequences leave
    SMs idle splits the keys (ragged_splits; QATTN_SPLIT_KV=0 turns it off) and merges the parts.

    Differentiable (not over a KV cache): see _differentiable; causal / window under autograd need
    queries and keys packed alike (cu_seqlens_q equal to cu_seqlens_k, total_q == total_k)."""
    torch = import_torch()
    if cache_seqlens is not None:
        _backward.refuse_grad(torch, "qattn.attention_varlen over a KV cache", "a KV cache serves inference: call it "
                              "under torch.no_grad()", q, k, v)
        return _with_cache(torch, q, k, v, cu_seqlens_q, max_seqlen_q, cache_seqlens, block_table, causal, window, scale,
                           softcap, return_lse)
    if block_table is not None:
        raise SpecError("block_table without cache_seqlens", code="PY0105",
                        hint="a paged cache needs each sequence's key count: pass cache_seqlens=")
    bsz, tq, hq, dqk, tk, hkv, dv = _check(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _differentiable(torch, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, window,
                               scale, softcap, return_lse)
    dt = _attention._dtype_name(torch, q.dtype)
    fields, args = split_launch_args(variant_fields(causal, window, softcap))
    o, lse, empty = _outputs(torch, q, hq, dv, bsz, max_seqlen_q, return_lse)
    if empty:
        return (o, lse) if return_lse else o
    b = _attention._build_for(torch, dt, dqk, dv, fields, return_lse, q.device, varlen=_build.varlen_kind(hq, hkv))
    roles = b.library.info.get("varlen", {})
    names = [a["name"] for a in b.library.info.get("aux", [])]
    cu = {roles.get("cu_seqlens_q"): cu_seqlens_q.to(torch.int32).contiguous(),
          roles.get("cu_seqlens_k"): cu_seqlens_k.to(torch.int32).contiguous()}
    if set(names) - set(cu):
        raise SpecError(f"kernel {b.spec['name']} reads {names}, a varlen kernel reads its cumulative counts",
                        code="PY0110")
    qv, kv, vv = _rows(q), _rows(k), _rows(v)
    p = fill_params(qv[None], kv[None], vv[None], o[None], lse, _attention._scale(scale, dqk), aux=[cu[n] for n in names],
                    window=args.get("window"), softcap=args.get("softcap"))
    p.batch, p.seqlen_q, p.seqlen_k, p.total_q, p.total_k = bsz, int(max_seqlen_q), int(max_seqlen_k), tq, tk
    _attention.run_fwd(torch, b, p, q.device)
    return (o, lse) if return_lse else o


def _differentiable(torch, q, k, v, cu_q, cu_k, max_q, max_k, causal, window, scale, softcap, return_lse):
    """attention_varlen recorded for autograd. The forward is the ragged launch with its LSE; the
    backward runs the backward kernel of the document mask over the packed rows as one sequence,
    with segment ids made on the device from the cumulative counts (there is no ragged backward
    kernel yet): each query sees the keys of its own sequence only. A causal mask or a window then
    reads positions in the packed rows, which equal each sequence's own (aligned) positions only for
    self-attention over one packing: cu_seqlens_q equal to cu_seqlens_k (checked: one host
    synchronisation) and total_q == total_k; other calls with them are refused (PY0109)."""
    aligned = causal not in (False, None) or window is not None
    if aligned and not (int(q.shape[0]) == int(k.shape[0]) and (cu_q is cu_k or bool(torch.equal(cu_q, cu_k)))):
        raise SpecError("attention_varlen's backward with causal or window needs the same packing for queries and keys "
                        "(cu_seqlens_q equal to cu_seqlens_k and total_q == total_k)", code="PY0109",
                        hint="train self-attention over one packing, or call it under torch.no_grad() (inference)")
    bsz = int(cu_q.numel()) - 1
    dt = _attention._dtype_name(torch, q.dtype)
    fields, args = split_launch_args(variant_fields("top_left" if causal not in (False, None) else False, window, softcap,
                                                    document=True))
    sc = _attention._scale(scale, int(q.shape[2]))

    def ids(cu, total, spare):
        """row r's sequence (searchsorted in the counts); rows past the last sequence get `spare`."""
        rows = torch.arange(total, device=cu.device, dtype=torch.int32)
        seg = torch.searchsorted(cu[1:].to(torch.int32).contiguous(), rows, right=True).to(torch.int32)
        return torch.where(seg >= bsz, torch.full_like(seg, spare), seg)[None].contiguous()

    def run(qd, kd, vd):
        o, lse = attention_varlen(qd, kd, vd, cu_q, cu_k, max_q, max_k, causal=causal, window=window, scale=scale,
                                  softcap=softcap, return_lse=True)
        # rows past the last sequence are not written by the launch: O 0 and LSE +inf there give them
        # P = 0 in the backward (no gradient), whatever the buffers held
        past = torch.arange(int(qd.shape[0]), device=qd.device) >= cu_q[-1].to(torch.int64)
        o.masked_fill_(past[:, None, None], 0)
        lse.masked_fill_(past[None, :], float("inf"))
        return o, lse

    det = _backward.requested()  # a deterministic_backward() around this call (flash_attn_interface)

    def bwd(q_, k_, v_, o_, lse_, do_):
        seg_q = ids(cu_q, int(q_.shape[0]), bsz)
        seg_k = ids(cu_k, int(k_.shape[0]), bsz + 1)
        aux = {"seg_q": seg_q, "seg_k": seg_k}
        g = _attention.run_backward(torch, dt, fields, args, aux, "bshd", sc, q_[None], k_[None], v_[None], o_[None],
                                    lse_[None].contiguous(), do_.contiguous()[None], deterministic=det)
        return tuple(x[0] for x in g)

    o, lse = _backward.function(torch).apply(q, k, v, run, bwd)
    return (o, lse) if return_lse else o


def _with_cache(torch, q, k_cache, v_cache, cu_seqlens_q, max_seqlen_q, cache_seqlens, block_table, causal, window, scale,
                softcap, return_lse):
    """attention_varlen over a KV cache: one launch of the kernel whose TL has ragged queries
    (`{ragged: cu_seqlens_q}`) and the cache's `Let seqlen_k = cache_seqlens[b]` (and `{paged}`)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise SpecError("q: expected a (total_q, heads, d) tensor", code="PY0101")
    if not isinstance(cu_seqlens_q, torch.Tensor) or cu_seqlens_q.dim() != 1 or cu_seqlens_q.numel() < 1 or \
            cu_seqlens_q.dtype.is_floating_point or cu_seqlens_q.dtype == torch.bool:
        raise SpecError("cu_seqlens_q: expected a (batch + 1,) integer tensor", code="PY0105")
    if isinstance(max_seqlen_q, bool) or not isinstance(max_seqlen_q, int) or not 0 <= max_seqlen_q < 2 ** 31:
        raise SpecError(f"max_seqlen_q={max_seqlen_q!r}: expected an int in [0, 2^31)", code="PY0105")
    bsz = int(cu_seqlens_q.numel()) - 1
    q4 = q[None].expand(max(bsz, 1), *q.shape)  # (batch, total_q, heads, d) for the cache's shape checks only
    _, _, hq, dqk, hkv, dv, capacity, page_size, pages = _kvcache._check(torch, q4, k_cache, v_cache, cache_seqlens,
                                                                         block_table)
    if cu_seqlens_q.device != q.device:
        raise DeviceError(f"cu_seqlens_q is on {cu_seqlens_q.device}, q on {q.device}", code="PY0103")
    dt = _attention._dtype_name(torch, q.dtype)
    fields, args = split_launch_args(variant_fields(causal, window, softcap))
    tq = int(q.shape[0])
    target = _attention._device_target(torch, q.device)[0]
    if target not in ("h100", "h200") and bsz > 0 and 0 < max_seqlen_q <= _build.SHORT_QUERIES and tq == bsz * max_seqlen_q:
        return _in_slots(torch, q, k_cache, v_cache, cu_seqlens_q, bsz, max_seqlen_q, cache_seqlens, block_table, causal,
                         window, scale, softcap, return_lse)
    o, lse, empty = _outputs(torch, q, hq, dv, bsz, max_seqlen_q, return_lse)
    if empty:
        return (o, lse) if return_lse else o
    kv = "paged" if block_table is not None else "lengths"
    kind = _build.varlen_kind(hq, hkv)
    decode = decoding_tile(target, hq, hkv, max_seqlen_q, fields)
    splits = ragged_splits(torch, q.device, bsz, tq, hq, hkv, capacity, fields, args, kind, max_seqlen_q=max_seqlen_q,
                           bm=64 if decode else 128)
    b = _attention._build_for(torch, dt, dqk, dv, fields, return_lse or splits > 1, q.device,
                              shape=(hq, hkv, max_seqlen_q) if decode else None, kv_cache=kv, varlen=kind,
                              split=splits > 1)
    roles = dict(b.library.info.get("kv_cache", {}))
    roles.update(b.library.info.get("varlen", {}))
    given = {roles.get("cu_seqlens_q"): cu_seqlens_q.to(torch.int32).contiguous(),
             roles.get("lengths"): cache_seqlens.to(torch.int32).contiguous(),
             roles.get("block_table"): block_table.to(torch.int32).contiguous() if block_table is not None else None}
    names = [a["name"] for a in b.library.info.get("aux", [])]
    if set(names) - set(given) or any(given[n] is None for n in names):
        raise SpecError(f"kernel {b.spec['name']} reads {names}: ragged queries over a KV cache", code="PY0110")
    qv = _rows(q)
    # split keys: part s of row r at row s x total_q + r of the parts (docs/tl.md, "Ragged batches"); the combine merges them
    o_k = q.new_empty((splits, tq, hq, dv)) if splits > 1 else o[None]
    lse_k = torch.empty((splits, hq, tq), device=q.device, dtype=torch.float32) if splits > 1 else lse
    p = fill_params(qv[None], k_cache, v_cache, o_k[:1], lse_k, _attention._scale(scale, dqk), aux=[given[n] for n in names],
                    window=args.get("window"), softcap=args.get("softcap"))
    p.batch, p.seqlen_q, p.seqlen_k, p.total_q, p.total_k = bsz, int(max_seqlen_q), capacity, tq, 0
    if block_table is not None:
        p.page_size, p.pages, p.num_pages = page_size, pages, int(k_cache.shape[0])
    if splits > 1:
        p.splits = splits
    _attention.run_fwd(torch, b, p, q.device)
    if splits > 1:
        _, lse_out = _combine.combine(torch, o_k[None], lse_k[None], return_lse, q.device, out=o[None])
        lse = lse_out[0] if return_lse else None
    return (o, lse) if return_lse else o


def _in_slots(torch, q, k_cache, v_cache, cu_seqlens_q, bsz, sq, cache_seqlens, block_table, causal, window, scale,
              softcap, return_lse):
    """Short ragged queries over a KV cache before Hopper, where the ragged kernel packs no query heads
    and splits no keys: the batched call (qattn.attention_with_kvcache: GQA packing, the key split) on
    the sequences' queries gathered into slots of sq rows, right-aligned: row r of slot b is packed
    row cu_seqlens_q[b + 1] - sq + r, so the batched kernel's position for it, cache_seqlens[b] - sq +
    r, is right for each of the sequence's queries (its last rows; the rows before them, another
    sequence's or clamped to q, are computed and dropped). Packed row j then takes its slot's row.
    Exact for any lengths up to sq and for q's spare rows (a serving engine's fixed-size buffer),
    without reading the counts on the host; the gathers are device ops (CUDA-graph capturable).
    Taken where q has batch x sq rows (what equal lengths give: no slot row wasted then)."""
    tq, hq = int(q.shape[0]), int(q.shape[1])
    cu = cu_seqlens_q.to(torch.int64)
    rows = torch.arange(sq, device=q.device)
    src = (cu[1:, None] - sq + rows[None, :]).clamp_(0, tq - 1).view(-1)  # (batch x sq) packed rows
    r = _kvcache.attention_with_kvcache(q.index_select(0, src).view(bsz, sq, *q.shape[1:]), k_cache, v_cache,
                                        cache_seqlens, block_table, causal=causal, window=window, scale=scale,
                                        softcap=softcap, return_lse=return_lse)
    o_s, lse_s = r if return_lse else (r, None)
    j = torch.arange(tq, device=q.device)
    seq = torch.searchsorted(cu[1:].contiguous(), j, right=True).clamp_(max=bsz - 1)  # packed row j's sequence
    slot = seq * sq + (j - cu[1:][seq] + sq).clamp_(0, sq - 1)
    o = o_s.reshape(bsz * sq, *o_s.shape[2:]).index_select(0, slot)
    if not return_lse:
        return o
    return o, lse_s.permute(1, 0, 2).reshape(hq, bsz * sq).index_select(1, slot)


def ragged_splits(torch, device, bsz, total_q, hq, hkv, capacity, fields, args, kind, max_seqlen_q=None, bm=128):
    """The parts the keys of ragged queries over a KV cache split into (1: none): on Hopper (the
    kernel splits in its TL, every part applying the call's mask to its own key tiles) when the
    blocks the launch can keep busy leave SMs idle: each sequence's partial tile plus the packed
    rows' full ones, per kv head (packed, `kind` True) or query head, at most each sequence's
    max_seqlen_q rows in tiles of bm (64: the decoding tile), against the SM count
    (_attention.parts_to_fill: at least MIN_KEYS_PER_SPLIT of the capacity's keys a part). A serving
    step of a few long sequences decoding beside a prefill chunk splits; many sequences fill the GPU.
    Decoding batches (one query a sequence, or a few) split as attention_with_kvcache does."""
    if os.environ.get("QATTN_SPLIT_KV", "1") in ("0", "false", "no") or not _attention.tl_split(torch, device) or \
            not _attention.split_allowed(fields, args, None, 2, True):
        return 1
    rows, heads = (hq // hkv, hkv) if kind is True else (1, hq)
    tiles = bsz + -(-total_q * rows // bm)
    if max_seqlen_q is not None:
        tiles = min(tiles, bsz * -(-max_seqlen_q * rows // bm))
    return max(1, _attention.parts_to_fill(torch, device, heads * tiles, capacity))


def decoding_tile(target, hq, hkv, max_seqlen_q, fields):
    """The one-tile decoding kernel's kind for ragged queries over a KV cache ("decode" / "decode1",
    _build.short_queries; else False): where each sequence's packed rows, at most max_seqlen_q x group,
    fit one 64-row tile (decoding, speculative decoding), the ragged kernel takes the decoding tile
    (BM 64, one consumer warpgroup; the spec states those queries) that attention_with_kvcache takes.
    The kernel still reads cu_seqlens_q, so sequences of fewer queries, and a q with spare rows (a
    serving engine's fixed-size buffer), stay exact."""
    short = _build.short_queries(target, hq, hkv, max_seqlen_q, fields)
    return short if short in ("decode", "decode1") else False
