"""qattn.distributed: context-parallel attention over a torch.distributed process group.

A sequence too long for one GPU's time or memory is split along its length over the ranks of a
process group: each rank holds one shard of q, k and v (the rows `shard` gives it) and gets its
shard of the output, and of the log-sum-exp with return_lse=True.

    import torch.distributed as dist
    import qattn.distributed as qcp
    dist.init_process_group("nccl")                 # one process per GPU (torchrun --nproc-per-node N)
    q_l, k_l, v_l = (qcp.shard(t) for t in (q, k, v))          # this rank's rows (zigzag sharding)
    o_l = qcp.attention(q_l, k_l, v_l, causal=True)            # mode="auto" (default), "ring" or "ulysses"
    o = qcp.unshard(o_l, q.shape[1])                           # every rank: the whole output

Two modes (docs/python.md, "Context parallelism", says when to take which):

- ring: the K/V shards travel around the ring of ranks (each step sends the shard it holds to
  rank + 1 and receives rank - 1's with NCCL point-to-point, overlapped with the local attention);
  every rank merges the partial outputs of its own queries by their log-sum-exp. With zigzag
  sharding (rank r holds chunks r and 2W-1-r of 2W) a causal mask gives every rank the same work.
  No mask, causal, softcap, sliding windows (each block the window reaches launched with the
  window that gives it its part of the global mask), documents (segment ids sliced per launch),
  prefix-LM (the prefix's keys of each block without a mask, the rest as the causal window),
  MHA/GQA/MQA, any head dims the kernels take. Masks and scores that read positions otherwise
  (ALiBi, score_mod / mask_mod) are refused: the kernels see positions inside a shard, not the
  global ones.
- ulysses: two all-to-alls trade the sequence split for a head split: each rank runs the whole
  sequence for heads_q / W of the heads, so every mask and variant works (head-indexed inputs,
  alibi_slopes and relative_bias, are sliced to the rank's heads). heads_q must be a multiple of
  W, and heads_kv a multiple or a divisor of W (kv heads are repeated then).

Sequence lengths need not divide the world size: the 2W (zigzag) or W (contiguous) chunks differ
by at most one row, the first ones longer (`chunk_bounds`). The planning functions here
(`chunk_bounds`, `rank_intervals`, `ring_schedule`, `merge_partial`) need no torch; the CPU tests
run the ring with them on numpy.
"""
import math
from typing import NamedTuple

from ._attention import _views
from .errors import SpecError

SHARDINGS = ("zigzag", "contiguous")
MODES = ("ring", "ulysses")


# ---- planning (no torch) -------------------------------------------------------------------------

def _check_sharding(sharding):
    if sharding not in SHARDINGS:
        raise SpecError(f"sharding={sharding!r}: expected one of {', '.join(SHARDINGS)}", code="PY0801")


def chunk_bounds(n, parts):
    """[start, stop) of `parts` contiguous chunks of n rows; sizes differ by at most one, longer first."""
    base, extra = divmod(int(n), int(parts))
    out, start = [], 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append((start, start + size))
        start += size
    return out


def rank_intervals(n, world, rank, sharding="zigzag"):
    """The global row intervals [start, stop) that `rank` of `world` holds, in the order its shard
    stores them: zigzag = chunks rank and 2*world-1-rank of 2*world; contiguous = chunk rank of world."""
    _check_sharding(sharding)
    if sharding == "zigzag":
        c = chunk_bounds(n, 2 * world)
        return [c[rank], c[2 * world - 1 - rank]]
    return [chunk_bounds(n, world)[rank]]


def shard_len(n, world, rank, sharding="zigzag"):
    return sum(b - a for a, b in rank_intervals(n, world, rank, sharding))


class RingCall(NamedTuple):
    """One kernel launch of a ring step: local query rows q = (lo, hi) of this rank's shard against
    local key rows kv = (lo, hi) of the shard that is here; causal: the top-left causal mask on these
    rows (they are a whole shard, q and kv the same rows, whose local order is the global order);
    window: (left, right) of qattn.attention (bottom-right aligned on these rows, -1 unbounded) that
    gives them the global window's mask, or None."""
    q: tuple
    kv: tuple
    causal: bool
    window: tuple = None


def _window_block(qa, qb, ka, kb, off, left, right):
    """A global sliding window over one block of contiguous global rows: query i in [qa, qb) sees key
    j in [ka, kb) iff i + off - left <= j <= i + off + right (off = n_k - n_q: bottom-right aligned;
    left / right None: unbounded). Returns ((qa', qb'), (ka', kb'), (L, R)): the rows that see a key
    and the keys some row sees (trimmed to a fixed point), and the window of qattn.attention on those
    rows that is the same mask (L = kb' - sb' + left, R = sb' - kb' + right with sb' = qb' + off,
    both >= 0 once trimmed); None when no row sees any key of the block."""
    sa, sb = qa + off, qb + off  # the queries' positions on the keys' axis
    while True:
        before = (sa, sb, ka, kb)
        if left is not None:
            ka = max(ka, sa - left)
            sb = min(sb, kb + left)
        if right is not None:
            kb = min(kb, sb + right)
            sa = max(sa, ka - right)
        if sa >= sb or ka >= kb:
            return None
        if (sa, sb, ka, kb) == before:
            break
    win = (-1 if left is None else kb - sb + left, -1 if right is None else sb - kb + right)
    return (sa - off, sb - off), (ka, kb), win


def _local_offsets(intervals):
    out, off = [], 0
    for a, b in intervals:
        out.append((off, off + (b - a)))
        off += b - a
    return out


def ring_schedule(n_q, n_k, world, rank, causal, sharding="zigzag", window=None, prefix_lm=None):
    """The ring for `rank`: a list over the world steps of (src, [RingCall...]): at step t the K/V
    shard of rank src = (rank - t) mod world is here and these launches use it (none: it only passes
    through). Causal (n_q == n_k) pairs each query chunk with each key chunk: keys all before the
    queries -> full, all after -> skipped, the same chunk -> the diagonal; the full pairs of a step
    become one launch when they form one rectangle of local rows (zigzag: always), else one each.
    window=(left, right) (global, bottom-right aligned, -1 unbounded; with causal the right side is
    0): one launch per (query chunk, key chunk) block that the window reaches, on the rows and keys
    it reaches, with the window that block needs (_window_block); any lengths.
    prefix_lm=P (keys k <= q + n_k - n_q or k < P visible; no causal or window with it): in each block
    the keys before P are one launch without a mask over every row, the others the causal part
    (the window (-1, 0) of _window_block)."""
    if prefix_lm is not None:
        return _window_schedule(n_q, n_k, world, rank, False, sharding, (-1, 0), int(prefix_lm))
    if window is not None:
        return _window_schedule(n_q, n_k, world, rank, causal, sharding, window)
    if causal and n_q != n_k:
        raise SpecError(f"a causal mask over context-parallel shards needs seqlen_q == seqlen_k (got {n_q} and {n_k})",
                        code="PY0802", hint="mode='ulysses' runs any causal alignment")
    qi = rank_intervals(n_q, world, rank, sharding)
    q_loc = _local_offsets(qi)
    nq_local = q_loc[-1][1]
    steps = []
    for t in range(world):
        src = (rank - t) % world
        ki = rank_intervals(n_k, world, src, sharding)
        k_loc = _local_offsets(ki)
        nk_local = k_loc[-1][1]
        calls = []
        if nq_local == 0 or nk_local == 0:
            pass
        elif not causal:
            calls.append(RingCall((0, nq_local), (0, nk_local), False))
        elif src == rank:
            calls.append(RingCall((0, nq_local), (0, nk_local), True))
        else:
            full = []
            for (qa, qb), ql in zip(qi, q_loc):
                for (ka, kb), kl in zip(ki, k_loc):
                    if qb == qa or kb == ka or ka >= qb:  # empty, or every key after every query
                        continue
                    if kb - 1 <= qa:  # every key at or before every query
                        full.append((ql, kl))
                    else:  # chunks of the same chunking are equal or disjoint; equal ones are src == rank
                        raise AssertionError(f"partial block q {qa}:{qb} k {ka}:{kb}")
            qs = sorted({f[0] for f in full})
            ks = sorted({f[1] for f in full})
            contiguous = all(a[1] == b[0] for a, b in zip(qs, qs[1:])) and all(a[1] == b[0] for a, b in zip(ks, ks[1:]))
            if full and contiguous and len(full) == len(qs) * len(ks):
                calls.append(RingCall((qs[0][0], qs[-1][1]), (ks[0][0], ks[-1][1]), False))
            else:
                calls.extend(RingCall(ql, kl, False) for ql, kl in full)
        steps.append((src, calls))
    return steps


def _window_schedule(n_q, n_k, world, rank, causal, sharding, window, prefix=0):
    left, right = (None if int(w) < 0 else int(w) for w in window)
    if causal:
        right = 0
    qi = rank_intervals(n_q, world, rank, sharding)
    q_loc = _local_offsets(qi)
    steps = []
    for t in range(world):
        src = (rank - t) % world
        ki = rank_intervals(n_k, world, src, sharding)
        calls = []
        for (qa, qb), ql in zip(qi, q_loc):
            for (ka, kb), kl in zip(ki, _local_offsets(ki)):
                if qa == qb or ka == kb:
                    continue
                if ka < prefix:  # the prefix's keys: seen by every row, no mask
                    pe = min(kb, prefix)
                    calls.append(RingCall(ql, (kl[0], kl[0] + pe - ka), False))
                    kl, ka = (kl[0] + pe - ka, kl[1]), pe
                    if ka == kb:
                        continue
                blk = _window_block(qa, qb, ka, kb, n_k - n_q, left, right)
                if blk is None:
                    continue
                (qa2, qb2), (ka2, kb2), win = blk
                calls.append(RingCall((ql[0] + qa2 - qa, ql[0] + qb2 - qa), (kl[0] + ka2 - ka, kl[0] + kb2 - ka), False, win))
        steps.append((src, calls))
    return steps


def merge_partial(out, lse, block_out, block_lse, xp=None):
    """Merges a partial attention result into a running one, in place, by log-sum-exp:
    out (batch, rows, heads, d) fp32 and lse (batch, heads, rows) fp32 become the result over the
    union of both key sets (block_out in any float dtype). A row empty in both (lse -inf) stays 0 /
    -inf. torch tensors (xp=None) or numpy arrays (xp=numpy)."""
    if xp is None:
        import torch as xp
    new = xp.logaddexp(lse, block_lse)
    ref = xp.where(xp.isinf(new), 0.0, new)  # both -inf: both weights 0, not nan
    w_old = xp.swapaxes(xp.exp(lse - ref), 1, 2)[..., None]
    w_new = xp.swapaxes(xp.exp(block_lse - ref), 1, 2)[..., None]
    out *= w_old
    if hasattr(out, "addcmul_"):
        out.addcmul_(block_out, w_new)  # one pass, no fp32 copy of block_out
    else:
        out += block_out * w_new
    lse[...] = new


# ---- torch.distributed ---------------------------------------------------------------------------

def _dist(group):
    from ._torch_util import import_torch
    torch = import_torch()
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        raise SpecError("torch.distributed is not initialized", code="PY0801",
                        hint="call torch.distributed.init_process_group('nccl') first (torchrun sets its environment)")
    return torch, dist, dist.get_world_size(group), dist.get_rank(group)


def _peer(dist, group, rank):
    return rank if group is None else dist.get_global_rank(group, rank)


def shard(x, group=None, *, seq_dim=1, sharding="zigzag"):
    """This rank's rows of the whole tensor x (the same x on every rank), contiguous: the shard that
    attention() takes. seq_dim: 1 for (batch, seqlen, heads, d); 2 for (batch, heads, seqlen, ...)."""
    _check_sharding(sharding)
    torch, dist, world, rank = _dist(group)
    n = x.shape[seq_dim]
    parts = [x.narrow(seq_dim, a, b - a) for a, b in rank_intervals(n, world, rank, sharding)]
    return torch.cat(parts, dim=seq_dim).contiguous()


def unshard(x, seqlen, group=None, *, seq_dim=1, sharding="zigzag"):
    """The whole tensor on every rank from each rank's shard x (seqlen rows along seq_dim in all):
    the inverse of shard(), one all-gather (shards padded to the longest)."""
    _check_sharding(sharding)
    torch, dist, world, rank = _dist(group)
    seqlen = int(seqlen)
    want = shard_len(seqlen, world, rank, sharding)
    if x.shape[seq_dim] != want:
        raise SpecError(f"this rank's shard has {x.shape[seq_dim]} rows; a {sharding} sharding of {seqlen} rows over "
                        f"{world} ranks gives rank {rank} {want}", code="PY0803")
    longest = max(shard_len(seqlen, world, r, sharding) for r in range(world))
    xs = x.movedim(seq_dim, 0)
    padded = xs.new_zeros((longest,) + tuple(xs.shape[1:]))
    padded[: xs.shape[0]] = xs
    gathered = padded.new_empty((world * longest,) + tuple(padded.shape[1:]))
    dist.all_gather_into_tensor(gathered, padded.contiguous(), group=group)
    gathered = gathered.view((world, longest) + tuple(padded.shape[1:]))
    full = xs.new_empty((seqlen,) + tuple(xs.shape[1:]))
    for r in range(world):
        for (a, b), (lo, hi) in zip(rank_intervals(seqlen, world, r, sharding),
                                    _local_offsets(rank_intervals(seqlen, world, r, sharding))):
            full[a:b] = gathered[r, lo:hi]
    return full.movedim(0, seq_dim).contiguous()


def _global_len(dist, group, world, rank, local, given, sharding, what):
    """The global length: given (checked against this rank's shard) or the sum of the shards
    (one all_gather_object, a host synchronisation), then checked to be a `sharding` sharding."""
    if given is None:
        lens = [None] * world
        dist.all_gather_object(lens, int(local), group=group)
        n = sum(lens)
        ok = all(shard_len(n, world, r, sharding) == lens[r] for r in range(world))
    else:
        n = int(given)
        ok = shard_len(n, world, rank, sharding) == local
        lens = None
    if not ok:
        raise SpecError(f"the {what} shards ({lens if lens else local} rows on rank {rank}) are not a {sharding} sharding "
                        f"of {n} rows over {world} ranks", code="PY0803",
                        hint="shard with qattn.distributed.shard(x, sharding=...) and pass the same sharding")
    return n


# The SMs a ring step's kernel leaves to the NCCL transfer of the next step's K/V (ring_attention's
# sm_margin default; bench/results/2026-11-28-h200x4-cp).
RING_SM_MARGIN = 0

_RING_REFUSED = ("window", "score_mod", "mask_mod", "prefix_lm", "alibi_slopes", "segment_ids", "relative_bias")
_RING_TAKES = ("window", "segment_ids", "prefix_lm")  # of those, what the ring runs too (a window per block; ids per launch)


def _result(o, lse, return_lse, layout):
    if layout == "bhsd":
        o = o.transpose(1, 2).contiguous()
    return (o, lse) if return_lse else o


def _check_local(torch, q, k, v):
    from ._attention import _check_tensors
    _check_tensors(torch, q, k, v, "bshd")


def ring_attention(q, k, v, causal=False, scale=None, softcap=None, return_lse=False, *, group=None, seqlen=None,
                   seqlen_k=None, sharding="zigzag", layout="bshd", window=None, segment_ids=None, prefix_lm=None,
                   sm_margin=None):
    """Ring attention over `group` (default: the world): q, k, v are this rank's shards (see
    module doc). Returns this rank's rows of o (and of lse, (batch, heads_q, rows) fp32). seqlen /
    seqlen_k: the global lengths (k's defaults to q's sharding); without them one all_gather_object
    finds them. causal: False or True ('top_left' / 'bottom_right' agree: seqlen_q == seqlen_k).
    window: (left, right) over the global positions as qattn.attention's (bottom-right aligned, -1
    unbounded; with causal, right is 0): each ring step launches the blocks it reaches with the
    window that gives each its part of the global mask (ring_schedule). segment_ids: (seg_q, seg_k)
    the global document ids, (batch, seqlen_q) and (batch, seqlen_k), nondecreasing per row (checked
    once): each launch gets the ids of its rows and keys (a document mask reads no position).
    prefix_lm: P, the global prefix (keys k <= q + seqlen_k - seqlen_q or k < P visible; no causal or
    window with it), as ring_schedule launches it. sm_margin: the SMs a step's attention kernel leaves
    free while the next step's K/V shard travels (qattn.attention's sm_margin: NCCL's kernels need SMs
    of their own beside the Hopper kernel's persistent grid); None: RING_SM_MARGIN."""
    _check_sharding(sharding)
    from ._attention import _sm_margin
    sm_margin = _sm_margin(RING_SM_MARGIN if sm_margin is None else sm_margin)
    if window is not None:
        if not isinstance(window, (tuple, list)) or len(window) != 2 or \
                not all(isinstance(w, int) and not isinstance(w, bool) and w >= -1 for w in window):
            raise SpecError(f"window={window!r}: expected (left, right) ints, -1 unbounded", code="PY0107")
        window = (int(window[0]), int(window[1]))
    if prefix_lm is not None and (isinstance(prefix_lm, bool) or not isinstance(prefix_lm, int) or prefix_lm < 0
                                  or causal or window is not None):
        raise SpecError(f"prefix_lm={prefix_lm!r}: expected an int >= 0, without causal or window (it is its own mask)",
                        code="PY0107")
    torch, dist, world, rank = _dist(group)
    qv, kv, vv = _views(q, k, v, layout)
    _check_local(torch, qv, kv, vv)
    if causal not in (False, None, True, "bottom_right", "top_left"):
        raise SpecError(f"causal={causal!r}: expected False, True, 'bottom_right' or 'top_left'", code="PY0107")
    causal = bool(causal)
    b, sq, hq, dqk = (int(x) for x in qv.shape)
    sk = int(kv.shape[1])
    if seqlen_k is None and seqlen is not None and sk == sq:
        seqlen_k = seqlen
    n_q = _global_len(dist, group, world, rank, sq, seqlen, sharding, "q")
    n_k = _global_len(dist, group, world, rank, sk, seqlen_k, sharding, "k/v")
    steps = ring_schedule(n_q, n_k, world, rank, causal, sharding, window, prefix_lm)
    seg = _ring_segments(torch, segment_ids, b, n_q, n_k, world, rank, sharding, qv.device)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        if softcap is not None:
            raise SpecError("mode='ring' with a softcap has no backward yet", code="PY0804",
                            hint="train the softcap with mode='ulysses'")
        from ._attention import _scale
        s = _scale(scale, dqk)

        def run(qd, kd, vd):
            return _ring_forward(torch, dist, group, world, rank, steps, sharding, n_k, qd, kd, vd, scale, softcap, seg,
                                 sm_margin)

        def back(qd, kd, vd, od, ld, do):
            return _ring_backward(torch, dist, group, world, rank, steps, sharding, n_k, qd, kd, vd, od, ld, do, s, seg)
        from . import _backward
        o, lse = _backward.function(torch).apply(qv, kv, vv, run, back)  # the autograd Function attention() uses
        return _result(o, lse, return_lse, layout)
    o, lse = _ring_forward(torch, dist, group, world, rank, steps, sharding, n_k, qv, kv, vv, scale, softcap, seg,
                           sm_margin)
    return _result(o, lse, return_lse, layout)


def _ring_segments(torch, segment_ids, b, n_q, n_k, world, rank, sharding, device):
    """None, or (ids of this rank's query rows (batch, rows), {src: ids of src's key rows}) from the
    global segment ids, checked once (shapes, nondecreasing rows: one host synchronisation); every
    slice a launch takes is marked sorted, so the launches check nothing again."""
    if segment_ids is None:
        return None
    if not isinstance(segment_ids, (tuple, list)) or len(segment_ids) != 2:
        raise SpecError("segment_ids: expected a pair (seg_q, seg_k) of the global ids", code="PY0110")
    seg_q, seg_k = (t.to(device=device, dtype=torch.int32) for t in segment_ids)
    if tuple(seg_q.shape) != (b, n_q) or tuple(seg_k.shape) != (b, n_k):
        raise SpecError(f"segment_ids: expected the global ids, (batch, {n_q}) and (batch, {n_k})", code="PY0110")
    if bool(((seg_q[:, 1:] < seg_q[:, :-1]).any() | (seg_k[:, 1:] < seg_k[:, :-1]).any()).item()):
        raise SpecError("segment_ids must be nondecreasing along each row (documents one after another)", code="PY0110")

    def rows(t, n, r):
        return torch.cat([t[:, a:bb] for a, bb in rank_intervals(n, world, r, sharding)], dim=1)
    return rows(seg_q, n_q, rank), {src: rows(seg_k, n_k, src) for src in range(world)}


def _call_segments(seg, src, c):
    """The segment_ids keyword of RingCall c on the K/V shard of src ({} without documents)."""
    if seg is None:
        return {}
    from ._attention import mark_sorted_segments
    sq_ids, sk_ids = seg
    pair = (sq_ids[:, c.q[0]:c.q[1]].contiguous(), sk_ids[src][:, c.kv[0]:c.kv[1]].contiguous())
    mark_sorted_segments(*pair)
    return {"segment_ids": pair}


def _tl_merge(torch, q):
    """Whether the ring merges its partial outputs with the TL combine kernel (qattn._combine): CUDA
    tensors and QATTN_COMBINE not 'torch'; else merge_partial's fp32 torch operations per launch."""
    from . import _combine
    return q.device.type == "cuda" and q.dtype in (torch.float16, torch.bfloat16) and _combine.mode() != "torch"


def _ring_launches(torch, dist, group, world, rank, steps, sharding, n_k, qv, kv, vv, scale, softcap, seg=None,
                   sm_margin=0):
    """The ring's forward launches, in order: yields (call, o_blk, l_blk) for every RingCall of every
    step, the K/V shard of the next step travelling (NCCL point-to-point) while a step computes (its
    kernels leave sm_margin SMs to the transfer)."""
    from . import _attention
    b = int(qv.shape[0])
    hkv, dqk, dv = int(kv.shape[2]), int(kv.shape[3]), int(vv.shape[3])
    nxt, prv = _peer(dist, group, (rank + 1) % world), _peer(dist, group, (rank - 1) % world)
    cur_k, cur_v = kv.contiguous(), vv.contiguous()
    for t, (src, calls) in enumerate(steps):
        reqs = []
        if t + 1 < world:  # the next step's shard travels while this one computes
            n_next = shard_len(n_k, world, (rank - t - 1) % world, sharding)
            nk = cur_k.new_empty((b, n_next, hkv, dqk))
            nv = cur_v.new_empty((b, n_next, hkv, dv))
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, cur_k, nxt, group), dist.P2POp(dist.isend, cur_v, nxt, group),
                                           dist.P2POp(dist.irecv, nk, prv, group), dist.P2POp(dist.irecv, nv, prv, group)])
        for c in calls:
            o_blk, l_blk = _attention.attention(qv[:, c.q[0]:c.q[1]], cur_k[:, c.kv[0]:c.kv[1]], cur_v[:, c.kv[0]:c.kv[1]],
                                                causal="top_left" if c.causal else False, window=c.window, scale=scale,
                                                softcap=softcap, return_lse=True, sm_margin=sm_margin if reqs else 0,
                                                **_call_segments(seg, src, c))
            yield c, o_blk, l_blk
        for r in reqs:
            r.wait()
        if reqs:
            cur_k, cur_v = nk, nv


def _ring_forward(torch, dist, group, world, rank, steps, sharding, n_k, qv, kv, vv, scale, softcap, seg=None,
                  sm_margin=0):
    """The ring's forward on BSHD views: (o in q's dtype, lse fp32) of this rank's rows. On a GPU
    every launch writes its partial result into a slot of one parts buffer (rows it does not cover
    stay empty: O 0, LSE -inf) and one launch of the TL combine kernel (qattn._combine, the split-KV
    decode's) merges them at the end; elsewhere merge_partial folds each into an fp32 running result."""
    from . import _combine
    b, sq, hq, _ = (int(x) for x in qv.shape)
    dv = int(vv.shape[3])
    launches = _ring_launches(torch, dist, group, world, rank, steps, sharding, n_k, qv, kv, vv, scale, softcap, seg,
                              sm_margin)
    if _tl_merge(torch, qv):
        slots = sum(len(calls) for _, calls in steps)
        if slots == 0:  # no key for any row here
            return qv.new_zeros((b, sq, hq, dv)), torch.full((b, hq, sq), float("-inf"), device=qv.device)
        o_parts = qv.new_zeros((b, slots, sq, hq, dv))
        l_parts = torch.full((b, slots, hq, sq), float("-inf"), device=qv.device, dtype=torch.float32)
        for slot, (c, o_blk, l_blk) in enumerate(launches):
            o_parts[:, slot, c.q[0]:c.q[1]] = o_blk
            l_parts[:, slot, :, c.q[0]:c.q[1]] = l_blk
        return _combine.combine(torch, o_parts, l_parts, True, qv.device)
    # the first launch covers every row in the usual case (step 0, the rank's own shard): it is copied
    # in, not merged; otherwise rows start empty (0, -inf)
    c0 = steps[0][1][0] if steps[0][1] else None
    whole = c0 is not None and c0.q == (0, sq)
    out = (torch.empty if whole else torch.zeros)((b, sq, hq, dv), device=qv.device, dtype=torch.float32)
    lse = torch.empty((b, hq, sq), device=qv.device, dtype=torch.float32) if whole else \
        torch.full((b, hq, sq), float("-inf"), device=qv.device, dtype=torch.float32)
    for i, (c, o_blk, l_blk) in enumerate(launches):
        if i == 0 and whole:
            out.copy_(o_blk)
            lse.copy_(l_blk)
        else:
            merge_partial(out[:, c.q[0]:c.q[1]], lse[:, :, c.q[0]:c.q[1]], o_blk, l_blk)
    return out.to(qv.dtype), lse


def _ring_backward(torch, dist, group, world, rank, steps, sharding, n_k, q, k, v, o, lse, do, scale, seg=None):
    """dQ, dK, dV of this rank's shards (BSHD views) from the ring schedule `steps`: the ring walked
    again; at each step the kernel's backward (qattn._attention.attention_backward) runs on this
    rank's queries against the K/V shard that is here, with this rank's final O and LSE (the gradient
    of a step's scores only needs the global softmax: P = exp(S - LSE), D = rowsum(dO * O)). dQ adds
    up here. Every transfer overlaps a step's kernels: the next step's K/V shard travels while this
    step computes (as in the forward), and so do the dK / dV that the ranks before this one summed
    for the shard that is here (the previous rank finished with it one step ago): they are added to
    this step's own terms, then sent on with the next step. After the last step each shard's sum goes
    home, the one transfer nothing overlaps."""
    from . import _attention
    b, sq, hq, dqk = (int(x) for x in q.shape)
    hkv, dv_ = int(k.shape[2]), int(v.shape[3])
    f32 = torch.float32
    dq = torch.zeros((b, sq, hq, dqk), device=q.device, dtype=f32)
    cur_k, cur_v = k.contiguous(), v.contiguous()
    nxt, prv = _peer(dist, group, (rank + 1) % world), _peer(dist, group, (rank - 1) % world)
    do = do.contiguous()
    done_dk = done_dv = None  # the sums of the previous step's shard, to send on
    for t, (src, calls) in enumerate(steps):
        ops, nk, nv, in_dk, in_dv = [], None, None, None, None
        if t + 1 < world:  # the next step's shard
            n_next = shard_len(n_k, world, (rank - t - 1) % world, sharding)
            nk, nv = cur_k.new_empty((b, n_next, hkv, dqk)), cur_v.new_empty((b, n_next, hkv, dv_))
            ops += [dist.P2POp(dist.isend, cur_k, nxt, group), dist.P2POp(dist.isend, cur_v, nxt, group),
                    dist.P2POp(dist.irecv, nk, prv, group), dist.P2POp(dist.irecv, nv, prv, group)]
        if t > 0:  # the sums for the shard here arrive; the previous shard's go on
            in_dk, in_dv = torch.empty(cur_k.shape, device=q.device, dtype=f32), torch.empty(cur_v.shape, device=q.device, dtype=f32)
            ops += [dist.P2POp(dist.isend, done_dk, nxt, group), dist.P2POp(dist.isend, done_dv, nxt, group),
                    dist.P2POp(dist.irecv, in_dk, prv, group), dist.P2POp(dist.irecv, in_dv, prv, group)]
        reqs = dist.batch_isend_irecv(ops) if ops else []
        my_dk = torch.zeros(cur_k.shape, device=q.device, dtype=f32)
        my_dv = torch.zeros(cur_v.shape, device=q.device, dtype=f32)
        for c in calls:
            gq, gk, gv = _attention.attention_backward(
                q[:, c.q[0]:c.q[1]], cur_k[:, c.kv[0]:c.kv[1]], cur_v[:, c.kv[0]:c.kv[1]], o[:, c.q[0]:c.q[1]],
                lse[:, :, c.q[0]:c.q[1]].contiguous(), do[:, c.q[0]:c.q[1]], causal="top_left" if c.causal else False,
                window=c.window, scale=scale, **_call_segments(seg, src, c))
            dq[:, c.q[0]:c.q[1]] += gq.float()
            my_dk[:, c.kv[0]:c.kv[1]] += gk.float()
            my_dv[:, c.kv[0]:c.kv[1]] += gv.float()
        for r in reqs:
            r.wait()
        if in_dk is not None:
            my_dk += in_dk
            my_dv += in_dv
        done_dk, done_dv = my_dk, my_dv
        if nk is not None:
            cur_k, cur_v = nk, nv
    if world > 1:  # the last shard's sums go home; this rank's own arrive
        dk = torch.empty(k.shape, device=q.device, dtype=f32)
        dv = torch.empty(v.shape, device=q.device, dtype=f32)
        for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, done_dk, nxt, group), dist.P2POp(dist.isend, done_dv, nxt, group),
                                         dist.P2POp(dist.irecv, dk, prv, group), dist.P2POp(dist.irecv, dv, prv, group)]):
            r.wait()
    else:
        dk, dv = done_dk, done_dv
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _heads_of(x, world, rank):
    h = x.shape[2] // world
    return x[:, :, rank * h:(rank + 1) * h]


_A2A = None


def _a2a_function(torch, dist):
    """all_to_all_single as an autograd Function: its gradient is the all-to-all back (the sizes
    swapped), so Ulysses attention trains (qattn.attention is differentiable)."""
    global _A2A
    if _A2A is None:
        class AllToAll(torch.autograd.Function):
            @staticmethod
            def forward(ctx, flat_in, out_sizes, in_sizes, group):
                ctx.sizes, ctx.group = (out_sizes, in_sizes), group
                flat_out = flat_in.new_empty(sum(out_sizes))
                dist.all_to_all_single(flat_out, flat_in.contiguous(), out_sizes, in_sizes, group=group)
                return flat_out

            @staticmethod
            def backward(ctx, grad):
                out_sizes, in_sizes = ctx.sizes
                back = grad.new_empty(sum(in_sizes))
                dist.all_to_all_single(back, grad.contiguous(), in_sizes, out_sizes, group=ctx.group)
                return back, None, None, None
        _A2A = AllToAll
    return _A2A


def _all_to_all(torch, dist, group, send, shapes):
    """send[j] goes to rank j; returns the tensors received from each rank (shapes[j] from rank j).
    One all_to_all_single on flattened buffers (uneven sizes; NCCL and gloo both take it);
    differentiable (_a2a_function)."""
    flat_in = torch.cat([t.reshape(-1) for t in send])
    sizes = [math.prod(s) for s in shapes]
    flat_out = _a2a_function(torch, dist).apply(flat_in, sizes, [t.numel() for t in send], group)
    return [c.view(s) for c, s in zip(torch.split(flat_out, sizes), shapes)]


def _seq_to_heads(torch, dist, group, world, x, n, sharding):
    """(batch, shard rows, H, d) on each rank -> (batch, n, H / world, d): all rows of this rank's heads."""
    hw = x.shape[2] // world
    send = [x[:, :, j * hw:(j + 1) * hw] for j in range(world)]
    recv = _all_to_all(torch, dist, group, send, [(x.shape[0], shard_len(n, world, j, sharding), hw) + tuple(x.shape[3:])
                                                  for j in range(world)])
    pieces = []  # (global start, rows): the whole sequence in order, differentiable (no in-place writes)
    for j in range(world):
        iv = rank_intervals(n, world, j, sharding)
        for (a, bb), (lo, hi) in zip(iv, _local_offsets(iv)):
            pieces.append((a, recv[j][:, lo:hi]))
    pieces.sort(key=lambda t: t[0])
    return torch.cat([t for _, t in pieces], dim=1)


def _heads_to_seq(torch, dist, group, world, rank, x, n, sharding, seq_dim=1):
    """The inverse: (batch, n, H / world, ...) -> (batch, this rank's rows, H, ...); seq_dim 2 with
    heads at 1 for lse ((batch, H / world, n) -> (batch, H, rows))."""
    head_dim = 2 if seq_dim == 1 else 1
    send = []
    for j in range(world):
        parts = [x.narrow(seq_dim, a, bb - a) for a, bb in rank_intervals(n, world, j, sharding)]
        send.append(torch.cat(parts, dim=seq_dim))
    shape = list(x.shape)
    shape[seq_dim] = shard_len(n, world, rank, sharding)
    recv = _all_to_all(torch, dist, group, send, [tuple(shape)] * world)
    return torch.cat(recv, dim=head_dim)


def ulysses_attention(q, k, v, causal=False, window=None, scale=None, softcap=None, return_lse=False, *, group=None,
                      seqlen=None, seqlen_k=None, sharding="zigzag", layout="bshd", **variants):
    """Ulysses (all-to-all) attention over `group`: q, k, v are this rank's shards; every keyword of
    qattn.attention works (alibi_slopes / relative_bias: the whole (heads_q, ...) tensors, sliced
    here; segment_ids: the global (batch, seqlen) ids). score_mod / mask_mod must not read `head`
    (each rank sees its heads renumbered from 0)."""
    import re
    _check_sharding(sharding)
    torch, dist, world, rank = _dist(group)
    from . import _attention
    qv, kv, vv = _views(q, k, v, layout)
    _check_local(torch, qv, kv, vv)
    hq, hkv = int(qv.shape[2]), int(kv.shape[2])
    if hq % world:
        raise SpecError(f"mode='ulysses' splits the heads: heads_q {hq} is not a multiple of the world size {world}",
                        code="PY0802", hint="mode='ring' takes any head count")
    if hkv % world and world % hkv:
        raise SpecError(f"mode='ulysses': heads_kv {hkv} is neither a multiple nor a divisor of the world size {world}",
                        code="PY0802", hint="mode='ring' takes any head count")
    for name in ("score_mod", "mask_mod"):
        if variants.get(name) and re.search(r"\bhead\b", variants[name]):
            raise SpecError(f"mode='ulysses': {name} reads `head`, and each rank numbers its heads from 0",
                            code="PY0802", hint="index per-head values through alibi_slopes / relative_bias")
    sq, sk = int(qv.shape[1]), int(kv.shape[1])
    if seqlen_k is None and seqlen is not None and sk == sq:
        seqlen_k = seqlen
    n_q = _global_len(dist, group, world, rank, sq, seqlen, sharding, "q")
    n_k = _global_len(dist, group, world, rank, sk, seqlen_k, sharding, "k/v")
    if hkv < world:  # repeat kv heads so that each rank holds the kv heads of its query heads
        kv, vv = kv.repeat_interleave(world // hkv, dim=2), vv.repeat_interleave(world // hkv, dim=2)
    hw = hq // world
    for name in ("alibi_slopes", "relative_bias"):
        t = variants.get(name)
        if t is not None:
            if not hasattr(t, "shape") or t.dim() < 1 or t.shape[0] != hq:
                raise SpecError(f"{name}: expected the whole tensor with heads_q = {hq} rows", code="PY0110")
            variants[name] = t[rank * hw:(rank + 1) * hw].contiguous()
    seg = variants.get("segment_ids")
    if seg is not None and (len(seg) != 2 or seg[0].shape[-1] != n_q or seg[1].shape[-1] != n_k):
        raise SpecError(f"segment_ids: expected the global ids, (batch, {n_q}) and (batch, {n_k})", code="PY0110")
    qf = _seq_to_heads(torch, dist, group, world, qv, n_q, sharding)
    kf = _seq_to_heads(torch, dist, group, world, kv, n_k, sharding)
    vf = _seq_to_heads(torch, dist, group, world, vv, n_k, sharding)
    of, lf = _attention.attention(qf, kf, vf, causal=causal, window=window, scale=scale, softcap=softcap,
                                  return_lse=True, **variants)
    o = _heads_to_seq(torch, dist, group, world, rank, of, n_q, sharding)
    lse = _heads_to_seq(torch, dist, group, world, rank, lf, n_q, sharding, seq_dim=2) if return_lse else None
    return _result(o, lse, return_lse, layout)


def _ulysses_heads_ok(hq, hkv, world):
    return hq % world == 0 and (hkv % world == 0 or world % hkv == 0)


def attention(q, k, v, causal=False, window=None, scale=None, softcap=None, return_lse=False, *, mode="auto",
              group=None, seqlen=None, seqlen_k=None, sharding="zigzag", layout="bshd", sm_margin=None, **variants):
    """Context-parallel qattn.attention on this rank's shards: mode='ring' (ring_attention),
    'ulysses' (ulysses_attention) or 'auto' (the default: Ulysses where the heads split over the
    ranks, else the ring, which takes any head count and, of the calls that read positions, windows,
    documents and prefix-LM; the others are PY0802). sm_margin: the ring's (ring_attention). Returns
    this rank's rows of o (and lse)."""
    if mode not in MODES + ("auto",):
        raise SpecError(f"mode={mode!r}: expected 'auto', 'ring' or 'ulysses'", code="PY0801")
    unknown = [n for n in variants if n not in _RING_REFUSED]
    if unknown:
        raise SpecError(f"unexpected keyword {unknown[0]!r}", code="PY0107")
    given = [n for n in _RING_REFUSED if (window if n == "window" else variants.get(n)) is not None]
    if mode == "auto":  # Ulysses where the heads split over the ranks (measured faster: docs/python.md), else the ring
        _, _, world, _ = _dist(group)
        hq, hkv = (int(q.shape[2]), int(k.shape[2])) if layout == "bshd" else (int(q.shape[1]), int(k.shape[1]))
        if _ulysses_heads_ok(hq, hkv, world):
            mode = "ulysses"
        elif given and not set(given) <= set(_RING_TAKES):
            raise SpecError(f"{given[0]} reads global positions, which only mode='ulysses' runs, and heads "
                            f"{hq}/{hkv} do not split over {world} ranks", code="PY0802",
                            hint="Ulysses needs heads_q a multiple of the world size and heads_kv a multiple or "
                                 "a divisor of it")
        else:
            mode = "ring"  # any head count; windows, documents and prefix-LM too
    if mode == "ulysses":
        return ulysses_attention(q, k, v, causal, window, scale, softcap, return_lse, group=group, seqlen=seqlen,
                                 seqlen_k=seqlen_k, sharding=sharding, layout=layout, **variants)
    refused = [n for n in given if n not in _RING_TAKES]
    if refused:
        raise SpecError(f"mode='ring' does not take {refused[0]}: it reads positions, and the kernel of a ring step "
                        f"sees positions inside a shard, not global ones", code="PY0802",
                        hint="mode='ulysses' (or 'auto') runs every mask and variant (each rank holds whole sequences)")
    return ring_attention(q, k, v, causal, scale, softcap, return_lse, group=group, seqlen=seqlen, seqlen_k=seqlen_k,
                          sharding=sharding, layout=layout, window=window, segment_ids=variants.get("segment_ids"),
                          prefix_lm=variants.get("prefix_lm"), sm_margin=sm_margin)


def flops(batch, heads_q, seqlen_q, seqlen_k, d_qk, d_v, causal):
    """Forward FLOPs of the whole (unsharded) problem: 2 GEMMs, halved by a causal mask."""
    f = 2.0 * batch * heads_q * seqlen_q * seqlen_k * (d_qk + d_v)
    return f / 2 if causal else f


__all__ = ["attention", "ring_attention", "ulysses_attention", "shard", "unshard", "chunk_bounds", "rank_intervals",
           "shard_len", "ring_schedule", "merge_partial", "RingCall", "SHARDINGS", "MODES", "flops"]
