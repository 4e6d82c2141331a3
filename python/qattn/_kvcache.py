"""Attention against a KV cache (docs/python.md, "KV caches"): each sequence's keys are the first
cache_seqlens[b] rows of a cache that is contiguous, (batch, capacity, heads_kv, d), or paged,
(num_pages, page_size, heads_kv, d) read through a block table (batch, pages), the layout vLLM and
FlashAttention use. One kernel launch reads the cache where it lies: its TL says
`Let seqlen_k = cache_seqlens[b]` and `{paged: block_table}` (docs/tl.md, "KV caches"), so no
gather, no padding, no host synchronisation (a CUDA graph captures the call).

Decoding (a few queries over a long cache, few blocks) splits the keys as qattn.attention does
(_attention.split_keys). On Hopper the kernel splits in its TL (spec split_keys; docs/tl.md,
"Splitting the keys"): one launch over q, the cache and its counts as they are, each sequence's key
tiles cut into S parts by a Grid axis, the mask applied per part, the parts' O and LSE written per
part. Elsewhere (or with QATTN_SPLIT_MODE=fold) the cache's capacity is cut into S parts folded into
the batch (the block table's rows reshaped, each part's key count clamped from cache_seqlens on the
device, the queries copied per part). Either way the partial results are merged by the TL combine
kernel (qattn._combine), which handles the empty parts of short sequences.

Absorbed MLA (DeepSeek-V2/V3 decoding; v_cache=None, head_dim_v=512): one latent cache of d_qk = 576
columns (512 latent + 64 rotary) whose first head_dim_v columns are also the values. The kernel is
built with the spec's v_from_k (V read from K's shared tile: each key tile is loaded once) and its
C ABI demands v == k: the launch passes k_cache as both (pointer and strides) with d_v = head_dim_v.
Hopper only; no window, no softcap; the 128 query heads of the one kv head are packed into 64-row
tiles (_build.short_queries); a launch whose tiles leave SMs idle splits the keys in its TL
(mla_splits) and the TL combine merges the parts.
"""
import os

from . import _attention, _backward, _combine
from ._abi import fill_params
from ._torch_util import import_torch
from ._variants import split_launch_args, variant_fields
from .errors import DeviceError, SpecError


def check_v_from_k(d_qk, head_dim_v, num_splits=0, fields=None, v_new_given=False):
    """The arguments of an absorbed-MLA call (v_cache=None: V is k_cache's first head_dim_v columns),
    checked without torch; returns head_dim_v. d_qk: q's head dim (None when q is not a 4-D tensor:
    _check reports that). PY0105: head_dim_v missing, not an int, not below d_qk or not a multiple of
    128 up to 512; v_new given. PY0107: a sliding window or a softcap (fields: the call's
    variant fields), which the spec's v_from_k does not take."""
    if head_dim_v is None:
        raise SpecError("v_cache=None reads V from k_cache's first head_dim_v columns (absorbed MLA), and head_dim_v "
                        "was not given", code="PY0105",
                        hint="DeepSeek-V3: head_dim_v=512 with q and k_cache of head dim 576 (512 latent + 64 rotary); "
                             "or pass a v_cache of its own")
    if isinstance(head_dim_v, bool) or not isinstance(head_dim_v, int):
        raise SpecError(f"head_dim_v={head_dim_v!r}: expected an int (V's columns, the first of k_cache's)",
                        code="PY0105")
    if head_dim_v <= 0 or head_dim_v % 128 or head_dim_v > 512 or (d_qk is not None and head_dim_v >= d_qk):
        raise SpecError(f"head_dim_v={head_dim_v}: V is the first head_dim_v columns of k_cache, so it must be below "
                        f"the head dim of q and k_cache ({d_qk}), and the kernel's two warpgroups take a multiple of "
                        f"64 columns each: a multiple of 128 up to 512", code="PY0105",
                        hint="DeepSeek-V3: head_dim_v=512 with a head dim of 576")
    if v_new_given:
        raise SpecError("v_new with v_cache=None: V is the first head_dim_v columns of the keys, so there is no value "
                        "cache to write to", code="PY0105", hint="pass k_new alone (its first head_dim_v columns are the "
                                                                 "new values)")
    fields = fields or {}
    if (fields.get("mask") or {}).get("kind") == "window" or fields.get("variants"):
        what = "a sliding window" if (fields.get("mask") or {}).get("kind") == "window" else "a softcap"
        raise SpecError(f"absorbed MLA (v_cache=None) with {what} is not supported", code="PY0107",
                        hint="call it without window / softcap (causal is supported), or pass a v_cache of its own")
    return head_dim_v


def _check(torch, q, k_cache, v_cache, cache_seqlens, block_table, head_dim_v=None):
    """Shapes, dtypes and devices; returns (batch, seqlen_q, heads_q, d_qk, heads_kv, d_v, capacity,
    page_size, pages) with page_size = pages = 0 for a contiguous cache. v_cache None: V is k_cache's
    first head_dim_v columns (absorbed MLA; check_v_from_k has checked head_dim_v), d_v = head_dim_v."""
    tensors = (("q", q), ("k_cache", k_cache)) + ((("v_cache", v_cache),) if v_cache is not None else ())
    for name, t in tensors:
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise SpecError(f"{name}: expected a 4-D tensor", code="PY0101",
                            hint="q (batch, seqlen_q, heads_q, d); a cache (batch, capacity, heads_kv, d) or, paged, "
                                 "(num_pages, page_size, heads_kv, d)")
        if t.device != q.device:
            raise DeviceError(f"{name} is on {t.device}, q on {q.device}", code="PY0103")
        if t.dtype != q.dtype:
            raise SpecError(f"{name} has dtype {t.dtype}, q {q.dtype}", code="PY0102")
    bsz, sq, hq, dqk = (int(x) for x in q.shape)
    if v_cache is None:
        if int(k_cache.shape[3]) != dqk:
            raise SpecError(f"k_cache {tuple(k_cache.shape)} does not match q's head dim {dqk}", code="PY0105")
        dv = int(head_dim_v)
    else:
        if k_cache.shape[:3] != v_cache.shape[:3] or int(k_cache.shape[3]) != dqk:
            raise SpecError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} do not match each other "
                            f"and q's head dim {dqk}", code="PY0105")
        dv = int(v_cache.shape[3])
        if head_dim_v is not None and head_dim_v != dv:
            raise SpecError(f"head_dim_v={head_dim_v!r} but v_cache has {dv} columns", code="PY0105",
                            hint="head_dim_v is for v_cache=None (V read from k_cache's first columns); leave it out")
    hkv = int(k_cache.shape[2])
    if hkv <= 0 or hq % hkv:
        raise SpecError(f"heads_q {hq} is not a multiple of the cache's heads_kv {hkv}", code="PY0105")
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dim() != 1 or int(cache_seqlens.shape[0]) != bsz \
            or cache_seqlens.dtype.is_floating_point or cache_seqlens.dtype == torch.bool:
        raise SpecError("cache_seqlens: expected a (batch,) integer tensor", code="PY0105")
    if cache_seqlens.device != q.device:
        raise DeviceError(f"cache_seqlens is on {cache_seqlens.device}, q on {q.device}", code="PY0103")
    if block_table is None:
        if int(k_cache.shape[0]) != bsz:
            raise SpecError(f"a contiguous cache has one row per sequence: k_cache {tuple(k_cache.shape)}, batch {bsz}",
                            code="PY0105", hint="pass block_table= for a paged cache")
        _on_cuda(q)
        return bsz, sq, hq, dqk, hkv, dv, int(k_cache.shape[1]), 0, 0
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or int(block_table.shape[0]) != bsz \
            or block_table.dtype.is_floating_point or block_table.dtype == torch.bool:
        raise SpecError("block_table: expected a (batch, pages) integer tensor", code="PY0105")
    if block_table.device != q.device:
        raise DeviceError(f"block_table is on {block_table.device}, q on {q.device}", code="PY0103")
    page_size, pages = int(k_cache.shape[1]), int(block_table.shape[1])
    if page_size <= 0 or pages <= 0 or int(k_cache.shape[0]) <= 0:
        raise SpecError("a paged cache needs pages: num_pages, page_size and the block table's width must be positive",
                        code="PY0105")
    _on_cuda(q)
    return bsz, sq, hq, dqk, hkv, dv, pages * page_size, page_size, pages


def append_to_cache(torch, k_cache, v_cache, k_new, v_new, lens, block_table=None):
    """Writes k_new / v_new (batch, new, heads_kv, d) into the cache at each sequence's end (rows
    lens[b] ..., through block_table when paged; device indexing, in place) and returns lens + new
    (int32, the caller's tensor untouched). That they fit is checked on the host (PY0105) except
    under CUDA-graph capture, which leaves it to the caller (rows past the capacity then land on
    its last row). v_cache None (absorbed MLA: V is K's first columns): k_new alone is written."""
    b, new = int(k_new.shape[0]), int(k_new.shape[1])
    page = int(k_cache.shape[1])
    s_cache = int(block_table.shape[1]) * page if block_table is not None else page
    if not (k_new.device.type == "cuda" and torch.cuda.is_current_stream_capturing()) and \
            bool(((lens < 0) | (lens + new > s_cache)).any()):
        raise SpecError(f"the cache holds {s_cache} rows per sequence: cache_seqlens + {new} new rows do not fit",
                        code="PY0105")
    pos = lens[:, None].to(torch.int64) + torch.arange(new, device=lens.device)[None, :]  # (b, new)
    if block_table is not None:
        pg = torch.gather(block_table.to(torch.int64), 1, (pos // page).clamp_(max=block_table.shape[1] - 1))
        k_cache[pg, pos % page] = k_new
        if v_cache is not None:
            v_cache[pg, pos % page] = v_new
    else:
        rows = torch.arange(b, device=lens.device)[:, None].expand(b, new)
        k_cache[rows, pos.clamp(max=s_cache - 1)] = k_new
        if v_cache is not None:
            v_cache[rows, pos.clamp(max=s_cache - 1)] = v_new
    return (lens + new).to(torch.int32)


_STARTS = {}  # (device, splits, part) -> the first key of each part, (1, splits) int32


def _on_cuda(q):
    if q.device.type != "cuda":
        raise DeviceError(f"q is on {q.device}: qattn kernels run on CUDA devices", code="PY0103")


def _splits(torch, q, capacity, pages, fields, args, hq, hkv, sq, in_tl=False, num_splits=0):
    """S parts of the capacity (1: none): num_splits when given (> 0; 1 is no split) and the call may
    split (_attention.split_allowed), else _attention.split_keys on the capacity; folded into the batch
    (not in_tl), S divides the capacity (contiguous) or the block table's width (paged), so every part
    is a view. A kernel that splits in its TL (in_tl) cuts each sequence's own key tiles: any S."""
    if num_splits:
        s = num_splits if _attention.split_allowed(fields, args, None, sq, in_tl) else 1
    else:
        kv_shape = torch.empty((1, capacity, hkv, 1), device="meta")  # split_keys reads shapes only
        s = _attention.split_keys(torch, q.device, q, kv_shape, fields, args, None)
    while s > 1 and not in_tl and ((pages and pages % s) or (not pages and capacity % s)):
        s -= 1
    return s


def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table=None, k_new=None, v_new=None, *, causal=False,
                           window=None, scale=None, softcap=None, return_lse=False, num_splits=0, head_dim_v=None):
    """Attention of q (batch, seqlen_q, heads_q, d) over each sequence's first cache_seqlens[b] keys of
    the cache: k_cache / v_cache (batch, capacity, heads_kv, d), or with block_table (batch, pages)
    int32 the paged (num_pages, page_size, heads_kv, d). The queries are the last seqlen_q positions
    of their sequence (causal and window align at the end of each sequence's keys). A count outside
    0..capacity is clamped; a sequence with no key gets O = 0 and LSE = -inf. k_new / v_new (batch,
    new, heads_kv, d): written into the cache at each sequence's end first (in place; then the keys
    are cache_seqlens + new; cache_seqlens itself is not changed), as flash_attn_with_kvcache does;
    PY0105 when they do not fit (checked on the host except under CUDA-graph capture). num_splits:
    the parts the keys are split into, as flash_attn_with_kvcache's: 0 qattn's choice
    (_attention.split_keys), 1 none, N > 1 N parts (on Hopper any N, each sequence's key tiles cut
    into N; elsewhere at most N, a divisor of the capacity, and only where the fold may split).
    v_cache=None with head_dim_v (absorbed MLA, DeepSeek-V3: q (batch, seqlen_q, 128, 576), k_cache
    (..., 1, 576), head_dim_v=512): V is k_cache's first head_dim_v columns, read in place (no copy);
    head_dim_v a multiple of 128 (up to 512) below d; Hopper only; num_splits as above (0: mla_splits); no window,
    no softcap; k_new alone may be appended (v_new refused). PY0105 / PY0107 otherwise.
    Returns o (batch, seqlen_q, heads_q, d_v) or (o, lse (batch, heads_q, seqlen_q) fp32)."""
    torch = import_torch()
    _backward.refuse_grad(torch, "qattn.attention_with_kvcache", "a KV cache serves inference: call it under "
                          "torch.no_grad()", q, k_cache, v_cache, k_new, v_new)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits <= 65535:
        raise SpecError(f"num_splits={num_splits!r}: expected an int from 0 (qattn chooses) to 65535", code="PY0105")
    fields, args = split_launch_args(variant_fields(causal, window, softcap))
    v_from_k = v_cache is None
    if v_from_k:  # absorbed MLA: its own argument checks first (on any device)
        d_q = int(q.shape[3]) if isinstance(q, torch.Tensor) and q.dim() == 4 else None
        head_dim_v = check_v_from_k(d_q, head_dim_v, num_splits, fields, v_new is not None)
    bsz, sq, hq, dqk, hkv, dv, capacity, page_size, pages = _check(torch, q, k_cache, v_cache, cache_seqlens, block_table,
                                                                   head_dim_v)
    dt = _attention._dtype_name(torch, q.dtype)
    if v_from_k:
        target = _attention._device_target(torch, q.device)[0]
        if target not in ("h100", "h200"):
            raise SpecError(f"absorbed MLA (v_cache=None: V read from k_cache's first {dv} columns) is built for Hopper "
                            f"(H100 / H200) only; {q.device} is planned as {target}", code="PY0105",
                            hint="on other GPUs pass v_cache=k_cache[..., :head_dim_v] (a view: the plain kernel reads it "
                                 "as a separate V)")
    kv = "paged" if block_table is not None else "lengths"
    o = q.new_empty((bsz, sq, hq, dv))
    lse = torch.empty((bsz, hq, sq), device=q.device, dtype=torch.float32) if return_lse else None
    lens = cache_seqlens.to(torch.int32).contiguous()
    if not v_from_k and (k_new is None) != (v_new is None):
        raise SpecError("k_new and v_new: pass both or neither", code="PY0105")
    if k_new is not None:
        new_rows = (("k_new", k_new, k_cache),) + ((("v_new", v_new, v_cache),) if not v_from_k else ())
        for name, t, c in new_rows:
            if not isinstance(t, torch.Tensor) or t.dim() != 4 or int(t.shape[0]) != bsz or t.shape[2:] != c.shape[2:] \
                    or t.device != q.device or t.dtype != q.dtype:
                raise SpecError(f"{name}: expected a (batch, new, heads_kv, d) tensor like the cache's rows on q's device",
                                code="PY0105")
        if not v_from_k and int(k_new.shape[1]) != int(v_new.shape[1]):
            raise SpecError("k_new and v_new hold different numbers of rows", code="PY0105")
        if int(k_new.shape[1]):
            lens = append_to_cache(torch, k_cache, v_cache, k_new, v_new, lens, block_table)
    if o.numel() == 0:
        return (o, lse) if return_lse else o
    table = block_table.to(torch.int32).contiguous() if block_table is not None else None
    if v_from_k:  # V read from k_cache: launched with v = k; one bottom-right causal query sees every key
        splits = mla_splits(torch, q, capacity, hq, hkv, sq, num_splits)
        b, _ = _attention._build_split(torch, dt, dqk, dv, _attention.split_fields(fields, sq), return_lse, q.device,
                                       (hq, hkv, sq), splits, kv_cache=kv, v_from_k=True)
        s = _attention._scale(scale, dqk)
        if splits <= 1:
            _launch(torch, b, q, k_cache, k_cache, o, lse, lens, table, capacity, page_size, pages, s, args, d_v=dv)
            return (o, lse) if return_lse else o
        o_parts = q.new_empty((bsz * splits, sq, hq, dv))
        l_parts = torch.empty((bsz * splits, hq, sq), device=q.device, dtype=torch.float32)
        _launch(torch, b, q, k_cache, k_cache, o_parts, l_parts, lens, table, capacity, page_size, pages, s, args, splits,
                d_v=dv)
        _, lse_out = _combine.combine(torch, o_parts.view(bsz, splits, sq, hq, dv), l_parts.view(bsz, splits, hq, sq),
                                      return_lse, q.device, out=o)
        return (o, lse_out) if return_lse else o
    splits = _splits(torch, q, capacity, pages, fields, args, hq, hkv, sq, _attention.tl_split(torch, q.device), num_splits)
    b, in_tl = _attention._build_split(torch, dt, dqk, dv, fields, return_lse, q.device, (hq, hkv, sq), splits, kv_cache=kv)
    s = _attention._scale(scale, dqk)
    if splits <= 1:
        _launch(torch, b, q, k_cache, v_cache, o, lse, lens, table, capacity, page_size, pages, s, args)
        return (o, lse) if return_lse else o
    if in_tl:  # the kernel cuts each sequence's key tiles into the parts: q, the cache and its counts as they are
        o_parts = q.new_empty((bsz * splits, sq, hq, dv))
        l_parts = torch.empty((bsz * splits, hq, sq), device=q.device, dtype=torch.float32)
        _launch(torch, b, q, k_cache, v_cache, o_parts, l_parts, lens, table, capacity, page_size, pages, s, args, splits)
        _, lse_out = _combine.combine(torch, o_parts.view(bsz, splits, sq, hq, dv), l_parts.view(bsz, splits, hq, sq),
                                      return_lse, q.device, out=o)
        return (o, lse_out) if return_lse else o
    # keys folded into the batch: part p of sequence i is batch entry i * S + p
    part = capacity // splits
    key = (q.device, splits, part)
    starts = _STARTS.get(key)
    if starts is None:  # made once, outside a CUDA graph capture (whose kernels run only at replay)
        starts = torch.arange(splits, device=q.device, dtype=torch.int32)[None, :] * part
        if not torch.cuda.is_current_stream_capturing():
            _STARTS[key] = starts
    lens_f = (lens[:, None] - starts).clamp_(0, part).view(-1)
    qf = q[:, None].expand(bsz, splits, sq, hq, dqk).reshape(bsz * splits, sq, hq, dqk)
    if table is not None:
        kf, vf, table_f = k_cache, v_cache, table.view(bsz * splits, pages // splits)
        pages_f = pages // splits
    else:
        kf = k_cache.reshape(bsz * splits, part, hkv, dqk)  # a view of a contiguous cache
        vf = v_cache.reshape(bsz * splits, part, hkv, dv)
        table_f, pages_f = None, 0
    o_parts = q.new_empty((bsz * splits, sq, hq, dv))
    l_parts = torch.empty((bsz * splits, hq, sq), device=q.device, dtype=torch.float32)
    _launch(torch, b, qf, kf, vf, o_parts, l_parts, lens_f, table_f, part, page_size, pages_f, s, args)
    _, lse_out = _combine.combine(torch, o_parts.view(bsz, splits, sq, hq, dv), l_parts.view(bsz, splits, hq, sq),
                                  return_lse, q.device, out=o)
    return (o, lse_out) if return_lse else o


def mla_splits(torch, q, capacity, hq, hkv, sq, num_splits=0):
    """The parts an absorbed-MLA call splits its keys into (the kernel cuts each sequence's key tiles in
    its TL, Hopper): num_splits when given (> 0), else as many as fill the SMs one launch leaves idle
    (its blocks: batch x the 64-row tiles of a kv head's packed queries, 2 per token for DeepSeek's
    128 heads), each part at least MIN_KEYS_PER_SPLIT keys, at most MAX_SPLITS parts.
    QATTN_SPLIT_KV=0 turns the automatic split off."""
    if num_splits:
        return num_splits
    if os.environ.get("QATTN_SPLIT_KV", "1") in ("0", "false", "no"):
        return 1
    return max(1, _attention.parts_to_fill(torch, q.device, int(q.shape[0]) * hkv * -(-sq * (hq // hkv) // 64), capacity))


def _launch(torch, b, q, k, v, o, lse, lens, table, capacity, page_size, pages, scale, args, splits=1, d_v=None):
    """One qattn_fwd of Build b over the cache (capacity rows per sequence; pages of page_size); splits:
    the parts of a kernel that splits the keys (o, lse hold batch * splits entries). d_v: a v_from_k
    kernel's head_dim_v (absorbed MLA), launched with v = k: the ABI's v pointer and v strides are k's
    (the kernel reads V from K's memory and refuses anything else) and d_v is V's width, not k's."""
    names = [a["name"] for a in b.library.info.get("aux", [])]
    roles = b.library.info.get("kv_cache", {})
    given = {roles.get("lengths"): lens, roles.get("block_table"): table}
    if set(names) - set(given):
        raise SpecError(f"kernel {b.spec['name']} reads {names}, a KV cache kernel reads its key counts and block table",
                        code="PY0110")
    p = fill_params(q, k, v, o, lse, scale, aux=[given[n] for n in names], window=args.get("window"),
                    softcap=args.get("softcap"), splits=splits)
    if d_v is not None:
        if v is not k:
            raise SpecError("internal: a v_from_k kernel must be launched with v = k", code="PY0105")
        p.d_v = int(d_v)  # fill_params took v's (k's) last dim; pointer and strides of v are k's
    p.seqlen_k = capacity
    if table is not None:
        p.page_size, p.pages, p.num_pages = page_size, pages, int(k.shape[0])
    _attention.run_fwd(torch, b, p, q.device)


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata=None, num_splits=None,
                           softmax_scale=None, causal=False):
    """Absorbed-MLA decoding with FlashMLA's signature (DeepSeek-V3; flash_mla.flash_mla_with_kvcache): q
    (batch, seqlen_q, heads_q, 576), the latent cache k_cache (num_pages, page_size, 1, 576) read
    through block_table (batch, pages) int32 (or, with block_table None, contiguous (batch, capacity,
    1, 576)), cache_seqlens (batch,) int32, head_dim_v (512): V is the cache's first head_dim_v
    columns, read in place. softmax_scale: default 1/sqrt(576); causal: bottom-right (seqlen_q > 1:
    speculative tokens). Returns (o (batch, seqlen_q, heads_q, head_dim_v), lse (batch, heads_q,
    seqlen_q) fp32), as FlashMLA does. tile_scheduler_metadata and num_splits (what
    flash_mla_interface.get_mla_metadata returns) are taken and not read: qattn splits the keys by its
    own choice at the call (mla_splits). = attention_with_kvcache(q, k_cache, None, cache_seqlens,
    block_table, causal=causal, scale=softmax_scale, return_lse=True, head_dim_v=head_dim_v)."""
    del tile_scheduler_metadata, num_splits  # FlashMLA's scheduling plan: qattn's kernel makes its own
    return attention_with_kvcache(q, k_cache, None, cache_seqlens, block_table, causal=causal, scale=softmax_scale,
                                  return_lse=True, head_dim_v=head_dim_v)
