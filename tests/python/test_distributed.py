"""Context parallelism (qattn.distributed), mostly without a GPU.

1. The ring's plan on numpy (runs in CI, no torch): every rank of a simulated world walks
   ring_schedule, runs each launch with an fp64 numpy attention that returns the LSE, merges with
   merge_partial, and the assembled rows must equal whole-sequence attention; world sizes 1-5,
   lengths that do not divide 2W, causal and not, both shardings, empty and fully masked rows.
2. The torch.distributed code (P2P ring, all-to-alls, shard/unshard) in several processes on the
   CPU over gloo, with qattn's kernel replaced by an fp32 torch attention (runs where torch is
   installed: the GPU machine's suite; the CPU CI installs no torch). The real kernels over NCCL:
   tests/gpu/cp_check.py.
3. Where a GPU is present: the ring's parts merged by the TL combine kernel against the fp32 merge.
"""
import os
import sys

import pytest

from conftest import REPO

import qattn
from qattn import distributed as qcp

np = pytest.importorskip("numpy")


def attn_np(q, k, v, causal, scale, window=None, prefix=None):
    """q (b, sq, h, d), k/v (b, sk, h, d) fp64 -> o, lse (b, h, sq); causal top-left; window (left,
    right) bottom-right aligned as qattn.attention's (-1 unbounded). Empty rows: 0, -inf."""
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    sq, sk = q.shape[1], k.shape[1]
    if causal:
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None], s, -np.inf)
    if window is not None:
        i, j = np.arange(sq)[:, None] + sk - sq, np.arange(sk)[None, :]
        vis = ((j >= i - window[0]) | (window[0] < 0)) & ((j <= i + window[1]) | (window[1] < 0))
        s = np.where(vis, s, -np.inf)
    if prefix is not None:  # prefix-LM: keys k <= q + (sk - sq) or k < P
        i, j = np.arange(sq)[:, None] + sk - sq, np.arange(sk)[None, :]
        s = np.where((j <= i) | (j < prefix), s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.full(s.shape[:-1] + (1,), -np.inf)
    m_safe = np.where(np.isinf(m), 0.0, m)
    p = np.exp(s - m_safe)
    l = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = np.einsum("bhqk,bkhd->bqhd", np.where(l > 0, p / l, 0.0), v)
        lse = np.where(l[..., 0] > 0, np.log(l[..., 0]) + m_safe[..., 0], -np.inf)
    return o, lse


def shard_np(x, n, world, rank, sharding, axis=1):
    return np.concatenate([np.take(x, range(a, b), axis=axis) for a, b in qcp.rank_intervals(n, world, rank, sharding)],
                          axis=axis)


def simulate_ring(q, k, v, world, causal, sharding, scale, window=None, prefix=None):
    """Every rank's (o, lse) shard from the ring plan, assembled into whole-sequence arrays."""
    b, nq, h, d = q.shape
    nk = k.shape[1]
    o_all = np.full((b, nq, h, v.shape[3]), np.nan)
    lse_all = np.full((b, h, nq), np.nan)
    for rank in range(world):
        ql = shard_np(q, nq, world, rank, sharding)
        out = np.zeros((b, ql.shape[1], h, v.shape[3]))
        lse = np.full((b, h, ql.shape[1]), -np.inf)
        for src, calls in qcp.ring_schedule(nq, nk, world, rank, causal, sharding, window, prefix):
            kl, vl = shard_np(k, nk, world, src, sharding), shard_np(v, nk, world, src, sharding)
            for c in calls:
                assert c.window is None or min(c.window) >= -1, c
                o_blk, l_blk = attn_np(ql[:, c.q[0]:c.q[1]], kl[:, c.kv[0]:c.kv[1]], vl[:, c.kv[0]:c.kv[1]], c.causal, scale,
                                       c.window)
                qcp.merge_partial(out[:, c.q[0]:c.q[1]], lse[:, :, c.q[0]:c.q[1]], o_blk, l_blk, xp=np)
        off = 0
        for a, bb in qcp.rank_intervals(nq, world, rank, sharding):
            o_all[:, a:bb] = out[:, off:off + bb - a]
            lse_all[:, :, a:bb] = lse[:, :, off:off + bb - a]
            off += bb - a
    return o_all, lse_all


def test_chunks_cover_every_row_once():
    for n in (0, 1, 5, 8, 37, 1000):
        for world in (1, 2, 3, 4, 8):
            for sharding in qcp.SHARDINGS:
                rows = []
                for r in range(world):
                    for a, b in qcp.rank_intervals(n, world, r, sharding):
                        rows.extend(range(a, b))
                assert sorted(rows) == list(range(n)), (n, world, sharding)
                lens = [qcp.shard_len(n, world, r, sharding) for r in range(world)]
                assert max(lens) - min(lens) <= 2 and sum(lens) == n
    assert qcp.chunk_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert qcp.rank_intervals(10, 2, 0, "zigzag") == [(0, 3), (8, 10)]


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sharding", qcp.SHARDINGS)
def test_ring_plan_equals_whole_attention(world, causal, sharding):
    rng = np.random.default_rng(world * 10 + causal)
    for nq, nk in ((37, 37), (2 * world, 2 * world), (61, 61), (3, 3)) + (() if causal else ((29, 50), (50, 7))):
        b, h, d = 2, 2, 8
        q, k, v = (rng.standard_normal((b, n, h, d)) for n in (nq, nk, nk))
        ref_o, ref_l = attn_np(q, k, v, causal, d ** -0.5)
        o, lse = simulate_ring(q, k, v, world, causal, sharding, d ** -0.5)
        np.testing.assert_allclose(o, ref_o, atol=1e-12, err_msg=f"{nq}x{nk}")
        np.testing.assert_allclose(lse, ref_l, atol=1e-12, err_msg=f"{nq}x{nk}")


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("sharding", qcp.SHARDINGS)
def test_ring_plan_with_a_window_equals_whole_attention(world, sharding):
    """A sliding window over the ring: each (query chunk, key chunk) block the window reaches is one
    launch on the rows and keys it reaches, with the local window that gives the global mask
    (bounded and unbounded sides, windows narrower and wider than a chunk, causal + window, any
    lengths); blocks it does not reach launch nothing."""
    rng = np.random.default_rng(world * 7 + len(sharding))
    cases = [((37, 37), (3, 0), False), ((61, 61), (0, 0), False), ((61, 61), (5, 2), False), ((37, 37), (-1, 4), False),
             ((37, 37), (7, -1), False), ((50, 50), (12, 9), True), ((29, 50), (6, 3), False), ((50, 7), (2, 1), False),
             ((40, 40), (100, 100), False), ((2 * world + 1, 2 * world + 1), (1, 0), False)]
    for (nq, nk), window, causal in cases:
        b, h, d = 1, 2, 8
        q, k, v = (rng.standard_normal((b, n, h, d)) for n in (nq, nk, nk))
        w_ref = (window[0], 0) if causal else window
        ref_o, ref_l = attn_np(q, k, v, False, d ** -0.5, w_ref)
        o, lse = simulate_ring(q, k, v, world, causal, sharding, d ** -0.5, window)
        np.testing.assert_allclose(o, ref_o, atol=1e-12, err_msg=f"{nq}x{nk} {window} causal={causal}")
        np.testing.assert_allclose(lse, ref_l, atol=1e-12, err_msg=f"{nq}x{nk} {window} causal={causal}")
    # a narrow window skips the blocks it cannot reach: rank 0's first chunk against the last rank's keys
    n = 64
    far = [c for src, calls in qcp.ring_schedule(n, n, 4, 0, False, "contiguous", (2, 0)) if src == 3 for c in calls]
    assert far == []


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("sharding", qcp.SHARDINGS)
def test_ring_plan_with_a_prefix_equals_whole_attention(world, sharding):
    """prefix-LM over the ring: per block, the keys before P in one launch without a mask, the
    others as the causal window; prefixes of 0, inside a chunk, on a chunk edge, everything, beyond."""
    rng = np.random.default_rng(world + 40)
    for (nq, nk), prefix in [((37, 37), 0), ((37, 37), 5), ((48, 48), 12), ((37, 37), 37), ((30, 30), 100),
                             ((29, 50), 17), ((50, 20), 9)]:
        q, k, v = (rng.standard_normal((1, n, 2, 8)) for n in (nq, nk, nk))
        ref_o, ref_l = attn_np(q, k, v, False, 8 ** -0.5, prefix=prefix)
        o, lse = simulate_ring(q, k, v, world, False, sharding, 8 ** -0.5, prefix=prefix)
        np.testing.assert_allclose(o, ref_o, atol=1e-12, err_msg=f"{nq}x{nk} P={prefix}")
        np.testing.assert_allclose(lse, ref_l, atol=1e-12, err_msg=f"{nq}x{nk} P={prefix}")


def test_ring_plan_is_balanced_and_launches_one_kernel_a_step():
    """zigzag + causal: every rank computes the same number of (query, key) pairs, one launch per
    step; contiguous + causal skips the steps of later shards (the imbalance zigzag removes)."""
    n, world = 64, 4
    work = []
    for rank in range(world):
        pairs = 0
        for src, calls in qcp.ring_schedule(n, n, world, rank, True, "zigzag"):
            assert len(calls) == 1
            for c in calls:
                rows, cols = c.q[1] - c.q[0], c.kv[1] - c.kv[0]
                pairs += rows * (rows + 1) // 2 if c.causal else rows * cols
        work.append(pairs)
    assert len(set(work)) == 1 and sum(work) == n * (n + 1) // 2
    skipped = [sum(1 for _, calls in qcp.ring_schedule(n, n, world, r, True, "contiguous") if not calls) for r in range(world)]
    assert skipped == [3, 2, 1, 0]


def test_a_planted_merge_bug_fails():
    """The simulation can fail: merging with the weights swapped gives other rows."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 20, 1, 4)) for _ in range(3))
    ref_o, _ = attn_np(q, k, v, True, 0.5)
    good = qcp.merge_partial

    def swapped(out, lse, bo, bl, xp=None):
        good(out, bl.copy(), bo, lse.copy(), xp=xp)
        lse[...] = np.logaddexp(lse, bl)
    qcp.merge_partial = swapped
    try:
        o, _ = simulate_ring(q, k, v, 2, True, "zigzag", 0.5)
    finally:
        qcp.merge_partial = good
    assert not np.allclose(o, ref_o, atol=1e-6)


def test_merge_keeps_empty_rows_empty():
    out = np.zeros((1, 2, 1, 3))
    lse = np.full((1, 1, 2), -np.inf)
    blk = np.ones((1, 2, 1, 3))
    qcp.merge_partial(out, lse, blk * 0, np.array([[[-np.inf, 0.0]]]), xp=np)
    assert np.all(out[:, 0] == 0) and lse[0, 0, 0] == -np.inf and np.isfinite(out).all()
    qcp.merge_partial(out, lse, blk, np.array([[[-np.inf, 0.0]]]), xp=np)
    np.testing.assert_allclose(out[0, 1, 0], [0.5, 0.5, 0.5])  # two equal-weight blocks (0 and 1)
    np.testing.assert_allclose(lse[0, 0, 1], np.log(2.0))


def test_arguments_are_checked_before_any_collective():
    with pytest.raises(qattn.SpecError) as e:
        qcp.rank_intervals(10, 2, 0, "striped")
    assert e.value.code == "PY0801"
    with pytest.raises(qattn.SpecError) as e:
        qcp.ring_schedule(10, 12, 2, 0, True)
    assert e.value.code == "PY0802" and "ulysses" in e.value.hint
    with pytest.raises(qattn.SpecError) as e:
        qcp.attention(None, None, None, mode="tree")
    assert e.value.code == "PY0801"
    with pytest.raises(qattn.SpecError) as e:
        qcp.attention(None, None, None, alibi_slopes=object(), mode="ring")
    assert e.value.code == "PY0802" and "alibi_slopes" in str(e.value)
    with pytest.raises(qattn.SpecError) as e:  # the ring takes a window, a well-formed one
        qcp.attention(None, None, None, window=(128, -3), mode="ring")
    assert e.value.code == "PY0107"
    for bad in (-1, True, 2.5, "8"):  # and a prefix, an int >= 0 without causal or window
        with pytest.raises(qattn.SpecError) as e:
            qcp.attention(None, None, None, prefix_lm=bad, mode="ring")
        assert e.value.code == "PY0107", bad
    with pytest.raises(qattn.SpecError) as e:
        qcp.attention(None, None, None, prefix_lm=4, causal=True, mode="ring")
    assert e.value.code == "PY0107"
    with pytest.raises(qattn.SpecError) as e:
        qcp.attention(None, None, None, mask_mod="kv_idx <= q_idx", mode="ring")
    assert e.value.code == "PY0802"
    with pytest.raises(qattn.SpecError) as e:
        qcp.attention(None, None, None, bogus=1)
    assert e.value.code == "PY0107"


# ---- torch.distributed on the CPU (gloo), qattn's kernel replaced by an fp32 torch attention -------

_WORKER = r'''
import os, sys, torch, torch.distributed as dist
sys.path.insert(0, os.environ["QATTN_PY"])
sys.path.insert(0, os.environ["QATTN_TESTS"])
import qattn.distributed as qcp
from qattn import _attention

from attention_standin import standin as ref  # fp32 attention with qattn.attention's arguments
from attention_standin import standin_backward

_attention.attention = ref
_attention.attention_backward = standin_backward
qcp._check_local = lambda *a: None  # fp32 CPU tensors: the checks of the real kernel do not apply
dist.init_process_group("gloo")
w, r = dist.get_world_size(), dist.get_rank()
g = torch.Generator().manual_seed(7)
fails = 0
for case, (n, hq, hkv, causal, mode, sharding, layout, softcap) in enumerate([
        (37, 4, 2, True, "ring", "zigzag", "bshd", None), (37, 4, 4, False, "ring", "contiguous", "bhsd", 5.0),
        (2 * w + 1, 2, 1, True, "ring", "contiguous", "bshd", None), (50, 4, 2, True, "ulysses", "zigzag", "bshd", None),
        (23, 4, 1, False, "ulysses", "contiguous", "bhsd", 3.0), (31, 4, 2, True, "auto", "zigzag", "bshd", None)]):
    if mode == "ulysses" and 4 % w:
        continue
    seen = []
    real_ring, real_uly = qcp.ring_attention, qcp.ulysses_attention
    qcp.ring_attention = lambda *a, **k: seen.append("ring") or real_ring(*a, **k)
    qcp.ulysses_attention = lambda *a, **k: seen.append("ulysses") or real_uly(*a, **k)
    q = torch.randn(2, n, hq, 16, generator=g); k = torch.randn(2, n, hkv, 16, generator=g); v = torch.randn(2, n, hkv, 16, generator=g)
    want_o, want_l = ref(q, k, v, causal=causal, softcap=softcap, return_lse=True)
    sd = 1 if layout == "bshd" else 2
    ql, kl, vl = (qcp.shard(t if layout == "bshd" else t.transpose(1, 2).contiguous(), seq_dim=sd, sharding=sharding) for t in (q, k, v))
    o, lse = qcp.attention(ql, kl, vl, causal=causal, softcap=softcap, return_lse=True, mode=mode, sharding=sharding,
                           layout=layout, seqlen=None if case % 2 else n)  # the same on every rank
    qcp.ring_attention, qcp.ulysses_attention = real_ring, real_uly
    # mode='auto': Ulysses where the heads split over the ranks, else the ring
    if seen != [mode if mode != "auto" else ("ulysses" if qcp._ulysses_heads_ok(hq, hkv, w) else "ring")]:
        fails += 1
        print(f"rank {r}: mode {mode} ran {seen}", flush=True)
    full = qcp.unshard(o, n, seq_dim=sd, sharding=sharding)
    full = full if layout == "bshd" else full.transpose(1, 2)
    lfull = qcp.unshard(lse, n, seq_dim=2, sharding=sharding)
    err = max((full - want_o).abs().max().item(), (lfull - want_l).abs().max().item())
    if not err < 1e-4:
        fails += 1
        print(f"rank {r}: {n} {hq}/{hkv} causal={causal} {mode} {sharding} {layout}: error {err}", flush=True)
# sm_margin: a ring step's launches leave the SMs to the transfer of the next step's K/V while it is
# in flight (every step but the last), and only then; a bad value is refused before any collective
margins = []
_attention.attention = lambda *a, **kw: margins.append(kw.get("sm_margin", 0)) or ref(*a, **kw)
q = torch.randn(2, 37, 4, 16, generator=g); k = torch.randn(2, 37, 2, 16, generator=g); v = torch.randn(2, 37, 2, 16, generator=g)
ql, kl, vl = (qcp.shard(t, seq_dim=1, sharding="zigzag") for t in (q, k, v))
qcp.attention(ql, kl, vl, causal=True, mode="ring", seqlen=37, sm_margin=5)
_attention.attention = ref
want_margins = [5 if t + 1 < w else 0 for t, (_, calls) in enumerate(qcp.ring_schedule(37, 37, w, r, True, "zigzag"))
                for _ in calls]
if margins != want_margins:
    fails += 1
    print(f"rank {r}: the ring's launches got sm_margin {margins}, expected {want_margins}", flush=True)
try:
    qcp.attention(ql, kl, vl, causal=True, mode="ring", seqlen=37, sm_margin=-1)
    fails += 1
    print(f"rank {r}: sm_margin=-1 was taken", flush=True)
except qcp.SpecError as e:
    fails += e.code != "PY0112"
# training through Ulysses (the all-to-alls are differentiable): the gradients of every rank's shards
# equal the rows of the whole attention's gradients; mode='auto' takes Ulysses for inputs that require
# grad; the ring refuses them (PY0804)
for n, hq, hkv, causal, sharding in [(37, 4, 2, True, "zigzag"), (29, 4, 4, False, "contiguous")]:
    if 4 % w:  # (Ulysses splits the heads; the ring below runs with any world size in the cases above)
        continue
    q = torch.randn(2, n, hq, 16, generator=g); k = torch.randn(2, n, hkv, 16, generator=g); v = torch.randn(2, n, hkv, 16, generator=g)
    do = torch.randn(2, n, hq, 16, generator=g)
    qf, kf, vf = (t.clone().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(ref(qf, kf, vf, causal=causal), (qf, kf, vf), do)
    ql, kl, vl = (qcp.shard(t, seq_dim=1, sharding=sharding).clone().requires_grad_() for t in (q, k, v))
    seen = []
    real_uly = qcp.ulysses_attention
    qcp.ulysses_attention = lambda *a, **k: seen.append("ulysses") or real_uly(*a, **k)
    o = qcp.attention(ql, kl, vl, causal=causal, sharding=sharding, seqlen=n)
    qcp.ulysses_attention = real_uly
    got = torch.autograd.grad(o, (ql, kl, vl), qcp.shard(do, seq_dim=1, sharding=sharding))
    err = max((a - qcp.shard(b, seq_dim=1, sharding=sharding)).abs().max().item() for a, b in zip(got, want))
    if seen != ["ulysses"] or not err < 1e-4:
        fails += 1
        print(f"rank {r}: training {n} {hq}/{hkv} causal={causal} {sharding}: modes {seen}, gradient error {err}", flush=True)
    # the ring trains too: its backward walks the ring with the global O and LSE
    ql, kl, vl = (qcp.shard(t, seq_dim=1, sharding=sharding).clone().requires_grad_() for t in (q, k, v))
    o = qcp.attention(ql, kl, vl, causal=causal, sharding=sharding, seqlen=n, mode="ring")
    got = torch.autograd.grad(o, (ql, kl, vl), qcp.shard(do, seq_dim=1, sharding=sharding))
    err = max((a - qcp.shard(b, seq_dim=1, sharding=sharding)).abs().max().item() for a, b in zip(got, want))
    if not err < 1e-4:
        fails += 1
        print(f"rank {r}: ring training {n} {hq}/{hkv} causal={causal} {sharding}: gradient error {err}", flush=True)
    try:
        qcp.attention(ql, kl, vl, causal=causal, softcap=5.0, sharding=sharding, seqlen=n, mode="ring")
        fails += 1
        print(f"rank {r}: the ring took a softcap under autograd", flush=True)
    except qcp.SpecError as e:
        fails += e.code != "PY0804"
# sliding windows over the ring (global positions; each block launched with its own window), forward
# and backward, any world size; mode='auto' with heads that do not split over the ranks takes the ring
for n, hq, hkv, window, causal, sharding in [(41, 4, 2, (5, 0), False, "zigzag"), (37, 3, 1, (7, 3), False, "contiguous"),
                                            (45, 4, 2, (9, 9), True, "zigzag"), (33, 2, 2, (-1, 2), False, "zigzag")]:
    q = torch.randn(2, n, hq, 16, generator=g); k = torch.randn(2, n, hkv, 16, generator=g); v = torch.randn(2, n, hkv, 16, generator=g)
    do = torch.randn(2, n, hq, 16, generator=g)
    w_ref = (window[0], 0) if causal else window
    qf, kf, vf = (t.clone().requires_grad_() for t in (q, k, v))
    want_o = ref(qf, kf, vf, window=w_ref)
    want = torch.autograd.grad(want_o, (qf, kf, vf), do)
    ql, kl, vl = (qcp.shard(t, seq_dim=1, sharding=sharding).clone().requires_grad_() for t in (q, k, v))
    seen = []
    real_ring = qcp.ring_attention
    qcp.ring_attention = lambda *a, **kw: seen.append("ring") or real_ring(*a, **kw)
    o = qcp.attention(ql, kl, vl, causal=causal, window=window, sharding=sharding, seqlen=n,
                      mode="auto" if hq % w or (hkv % w and w % hkv) else "ring")
    qcp.ring_attention = real_ring
    got = torch.autograd.grad(o, (ql, kl, vl), qcp.shard(do, seq_dim=1, sharding=sharding))
    err_o = (qcp.unshard(o.detach(), n, seq_dim=1, sharding=sharding) - want_o.detach()).abs().max().item()
    err = max((a - qcp.shard(b, seq_dim=1, sharding=sharding)).abs().max().item() for a, b in zip(got, want))
    if seen != ["ring"] or not err_o < 1e-4 or not err < 1e-4:
        fails += 1
        print(f"rank {r}: ring window {window} causal={causal} {n} {hq}/{hkv} {sharding}: modes {seen}, output error "
              f"{err_o}, gradient error {err}", flush=True)
# documents (segment ids, global) on the ring: each launch gets the ids of its rows and keys; with a
# causal mask and with a window too; forward and backward
for n, hq, hkv, causal, window, sharding in [(43, 4, 2, True, None, "zigzag"), (38, 3, 3, False, None, "contiguous"),
                                            (47, 4, 1, False, (6, 0), "zigzag")]:
    q = torch.randn(2, n, hq, 16, generator=g); k = torch.randn(2, n, hkv, 16, generator=g); v = torch.randn(2, n, hkv, 16, generator=g)
    do = torch.randn(2, n, hq, 16, generator=g)
    ends = sorted(torch.randint(1, n, (4,), generator=g).tolist())
    seg = torch.zeros(2, n, dtype=torch.int32)
    for e in ends:
        seg[:, e:] += 1
    seg[1] = torch.where(torch.arange(n) >= n // 2, 9, 0).to(torch.int32)  # another row, two documents
    qf, kf, vf = (t.clone().requires_grad_() for t in (q, k, v))
    want_o = ref(qf, kf, vf, causal=causal, window=window, segment_ids=(seg, seg))
    want = torch.autograd.grad(want_o, (qf, kf, vf), do)
    ql, kl, vl = (qcp.shard(t, seq_dim=1, sharding=sharding).clone().requires_grad_() for t in (q, k, v))
    o = qcp.attention(ql, kl, vl, causal=causal, window=window, segment_ids=(seg, seg), sharding=sharding, seqlen=n,
                      mode="ring")
    got = torch.autograd.grad(o, (ql, kl, vl), qcp.shard(do, seq_dim=1, sharding=sharding))
    err_o = (qcp.unshard(o.detach(), n, seq_dim=1, sharding=sharding) - want_o.detach()).abs().max().item()
    err = max((a - qcp.shard(b, seq_dim=1, sharding=sharding)).abs().max().item() for a, b in zip(got, want))
    if not err_o < 1e-4 or not err < 1e-4:
        fails += 1
        print(f"rank {r}: ring documents causal={causal} window={window} {n} {hq}/{hkv} {sharding}: output error "
              f"{err_o}, gradient error {err}", flush=True)
# prefix-LM on the ring (a launch without a mask for the prefix's keys of each block, the causal
# window for the rest), forward and backward
for n, hq, hkv, prefix, sharding in [(44, 4, 2, 13, "zigzag"), (39, 2, 1, 0, "contiguous"), (35, 2, 2, 60, "zigzag")]:
    q = torch.randn(2, n, hq, 16, generator=g); k = torch.randn(2, n, hkv, 16, generator=g); v = torch.randn(2, n, hkv, 16, generator=g)
    do = torch.randn(2, n, hq, 16, generator=g)
    qf, kf, vf = (t.clone().requires_grad_() for t in (q, k, v))
    want_o = ref(qf, kf, vf, prefix_lm=prefix)
    want = torch.autograd.grad(want_o, (qf, kf, vf), do)
    ql, kl, vl = (qcp.shard(t, seq_dim=1, sharding=sharding).clone().requires_grad_() for t in (q, k, v))
    o = qcp.attention(ql, kl, vl, prefix_lm=prefix, sharding=sharding, seqlen=n, mode="ring")
    got = torch.autograd.grad(o, (ql, kl, vl), qcp.shard(do, seq_dim=1, sharding=sharding))
    err_o = (qcp.unshard(o.detach(), n, seq_dim=1, sharding=sharding) - want_o.detach()).abs().max().item()
    err = max((a - qcp.shard(b, seq_dim=1, sharding=sharding)).abs().max().item() for a, b in zip(got, want))
    if not err_o < 1e-4 or not err < 1e-4:
        fails += 1
        print(f"rank {r}: ring prefix_lm={prefix} {n} {hq}/{hkv} {sharding}: output error {err_o}, gradient error {err}",
              flush=True)
x = qcp.shard(torch.randn(1, 20, 2, 16), seq_dim=1)
unsorted = torch.zeros(1, 20, dtype=torch.int32); unsorted[0, 5] = 3
local = (("local-length", (torch.zeros(1, x.shape[1], dtype=torch.int32),) * 2),) if w > 1 else ()  # (w 1: global)
for what, ids in (("unsorted", (unsorted, unsorted)), ("one tensor", torch.zeros(1, 20, dtype=torch.int32))) + local:
    try:  # refused before any launch
        qcp.attention(x, x, x, segment_ids=ids, seqlen=20, mode="ring")
        fails += 1
        print(f"rank {r}: {what} segment ids were taken", flush=True)
    except qcp.SpecError as e:
        fails += e.code != "PY0110"
print(f"rank {r} of {w}: {fails} failures", flush=True)
dist.destroy_process_group()
sys.exit(1 if fails else 0)
'''


@pytest.mark.parametrize("world", [1, 2, 3])
def test_torch_distributed_on_cpu_gloo(tmp_path, world):
    torch = pytest.importorskip("torch", reason="torch is not installed (the CPU CI installs none)")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    import socket
    import subprocess
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    procs = []
    for r in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(r),
                   QATTN_PY=os.path.join(REPO, "python"), QATTN_TESTS=os.path.dirname(os.path.abspath(__file__)),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}:\n{out[-3000:]}"
        assert f"rank {r} of {world}: 0 failures" in out


def test_auto_mode_takes_ulysses_where_the_heads_split(monkeypatch):
    """mode='auto': Ulysses whenever the heads split over the world size (measured faster than the
    ring at 4 GPUs, bench/results/2026-11-28-h200x4-cp), with or without variants; otherwise the ring
    for what it runs (no mask, causal, windows, documents, prefix-LM) and PY0802 naming why neither
    runs the rest."""
    class T:
        def __init__(self, *shape):
            self.shape = shape
    calls = []
    monkeypatch.setattr(qcp, "_dist", lambda group: (None, None, 4, 0))
    monkeypatch.setattr(qcp, "ring_attention", lambda *a, **k: calls.append("ring"))
    monkeypatch.setattr(qcp, "ulysses_attention", lambda *a, **k: calls.append(("ulysses", k.get("mask_mod"))))
    q, k = T(1, 64, 8, 64), T(1, 64, 2, 64)
    qcp.attention(q, k, k, causal=True)
    qcp.attention(q, k, k, window=(32, 0))
    qcp.attention(q, k, k, mask_mod="kv_idx <= q_idx")
    assert calls == [("ulysses", None), ("ulysses", None), ("ulysses", "kv_idx <= q_idx")]
    qcp.attention(T(1, 64, 6, 64), T(1, 64, 3, 64), None, window=(32, 0))  # heads do not split: the ring runs it
    assert calls[-1] == "ring"
    qcp.attention(T(1, 64, 6, 64), T(1, 64, 3, 64), None, causal=True)
    assert calls[-1] == "ring"
    with pytest.raises(qattn.SpecError) as e:
        qcp.attention(T(1, 64, 6, 64), T(1, 64, 3, 64), None, alibi_slopes=T(6))
    assert e.value.code == "PY0802" and "6/3" in str(e.value)


def test_ring_parts_merged_by_the_tl_combine_equal_the_fp32_merge():
    """On a GPU the ring writes each launch's partial result into a slot and merges them with the TL
    combine kernel (_ring_forward_parts); rows a launch does not cover stay empty in its slot. One
    process, world 1, a hand-made schedule of four launches over overlapping row ranges and disjoint
    key ranges: the result equals merge_partial's fp32 running
    merge (QATTN_COMBINE=torch) within bf16 rounding, and the whole attention computed at once."""
    torch = pytest.importorskip("torch")
    from conftest import gpu_skip_reason
    if gpu_skip_reason():
        pytest.skip(gpu_skip_reason())
    import qattn
    from qattn import distributed as qcp

    g = torch.Generator().manual_seed(4)
    b, sq, sk, hq, hkv, d = 2, 300, 700, 4, 2, 64
    q, k, v = (torch.randn(b, n, h, d, generator=g).to("cuda", torch.bfloat16) for n, h in ((sq, hq), (sk, hkv), (sk, hkv)))
    calls = [qcp.RingCall((0, sq), (0, 250), False), qcp.RingCall((0, 200), (250, 500), False),
             qcp.RingCall((200, sq), (250, 500), False), qcp.RingCall((0, sq), (500, 700), False)]
    steps = [(0, calls)]

    class OneRank:  # world 1: nothing is sent
        pass

    got = qcp._ring_forward(torch, OneRank(), None, 1, 0, steps, "contiguous", sk, q, k, v, None, None)
    old = os.environ.get("QATTN_COMBINE")
    os.environ["QATTN_COMBINE"] = "torch"
    try:
        want = qcp._ring_forward(torch, OneRank(), None, 1, 0, steps, "contiguous", sk, q, k, v, None, None)
    finally:
        if old is None:
            del os.environ["QATTN_COMBINE"]
        else:
            os.environ["QATTN_COMBINE"] = old
    whole, whole_lse = qattn.attention(q, k, v, return_lse=True)
    assert (got[0].float() - want[0].float()).abs().max().item() < 2e-2
    assert (got[0].float() - whole.float()).abs().max().item() < 2e-2
    assert torch.allclose(got[1], whole_lse, atol=1e-3) and torch.allclose(want[1], whole_lse, atol=1e-3)
