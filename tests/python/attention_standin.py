"""An fp32 torch attention with qattn.attention's meaning of its arguments (BSHD; causal bottom-right
or 'top_left', window (left, right) with -1 unbounded, softcap, scale, ALiBi slopes, segment ids,
prefix_lm, return_lse). The CPU tests of the Python layers above the kernel (qattn.distributed's gloo test,
qattn.integrations.transformers, qattn.flash_attn_interface) put it in qattn.attention's place."""
import torch


def _positions(sq, sk, causal, window, device):
    """(query position i (sq, 1) aligned as the mask says, key position j (1, sk), visible (sq, sk))."""
    i = torch.arange(sq, device=device)[:, None] + (0 if causal == "top_left" else sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    vis = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if causal:
        vis &= j <= i
    if window is not None:
        left, right = window
        vis &= ((j >= i - left) | (left < 0)) & ((j <= i + right) | (right < 0))
    return i, j, vis


def standin(q, k, v, causal=False, window=None, scale=None, softcap=None, return_lse=False, segment_ids=None,
            alibi_slopes=None, prefix_lm=None, sm_margin=0, **kw):
    assert not kw, kw
    assert isinstance(sm_margin, int) and sm_margin >= 0, sm_margin  # a scheduling hint: no effect on values
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    qf = q.float().transpose(1, 2)
    kf = k.float().transpose(1, 2).repeat_interleave(hq // hkv, 1)
    vf = v.float().transpose(1, 2).repeat_interleave(hq // hkv, 1)
    s = (qf @ kf.transpose(-1, -2)) * (scale if scale is not None else d ** -0.5)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j, vis = _positions(sq, sk, causal, window, q.device)
    if prefix_lm is not None:  # keys k <= q + off or k < P
        vis = (j <= i) | (j < prefix_lm)
    if alibi_slopes is not None:
        s = s - alibi_slopes.float().view(1, hq, 1, 1) * (i - j).abs()
    vis = vis[None, None]
    if segment_ids is not None:
        sq_ids, sk_ids = segment_ids
        vis = vis & (sq_ids[:, None, :, None] == sk_ids[:, None, None, :])
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    o = (p @ vf).transpose(1, 2).to(q.dtype).contiguous()
    return (o, lse) if return_lse else o


def standin_backward(q, k, v, o, lse, dout, causal=False, window=None, scale=None, *, layout="bshd", segment_ids=None):
    """qattn._attention.attention_backward's meaning in fp32 torch (BSHD): dQ, dK, dV of the attention
    whose output is o and log-sum-exp lse, for the upstream gradient dout (P from lse; D = rowsum(dO * O))."""
    assert layout == "bshd"
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    qf = q.float().transpose(1, 2)
    kf = k.float().transpose(1, 2).repeat_interleave(g, 1)
    vf = v.float().transpose(1, 2).repeat_interleave(g, 1)
    sc = scale if scale is not None else d ** -0.5
    s = (qf @ kf.transpose(-1, -2)) * sc
    _, _, vis = _positions(sq, sk, causal, window, q.device)
    vis = vis[None, None]
    if segment_ids is not None:
        vis = vis & (segment_ids[0][:, None, :, None] == segment_ids[1][:, None, None, :])
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.exp(s - lse.float()[..., None]).nan_to_num(0.0)
    dof, of = dout.float().transpose(1, 2), o.float().transpose(1, 2)
    dvv = p.transpose(-1, -2) @ dof
    ds = p * ((dof @ vf.transpose(-1, -2)) - (dof * of).sum(-1, keepdim=True))
    dq = (ds @ kf) * sc
    dk = (ds.transpose(-1, -2) @ qf) * sc
    dk = dk.view(b, hkv, g, sk, d).sum(2)
    dvv = dvv.view(b, hkv, g, sk, dvv.shape[-1]).sum(2)
    return dq.transpose(1, 2).to(q.dtype), dk.transpose(1, 2).to(k.dtype), dvv.transpose(1, 2).to(v.dtype)


def kvcache_standin(q, k_cache, v_cache, cache_seqlens, block_table=None, *, causal=False, window=None, scale=None,
                    softcap=None, return_lse=False, num_splits=0):
    """qattn.attention_with_kvcache's meaning: each sequence's first cache_seqlens[b] keys (gathered
    through block_table when paged), one standin call per sequence; an empty one gets 0 / -inf.
    num_splits (a schedule: the key split's part count) does not change the result."""
    b, sq, hq, _ = q.shape
    o = q.new_zeros(q.shape[:3] + (v_cache.shape[3],))
    lse = torch.full((b, hq, sq), float("-inf"), device=q.device)
    cap = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
    for i in range(b):
        n = max(0, min(int(cache_seqlens[i]), cap))
        if n == 0:
            continue
        if block_table is None:
            k, v = k_cache[i, :n], v_cache[i, :n]
        else:
            rows = torch.arange(n, device=q.device)
            pages = block_table[i].to(torch.int64)[rows // k_cache.shape[1]]
            k, v = k_cache[pages, rows % k_cache.shape[1]], v_cache[pages, rows % k_cache.shape[1]]
        oi, li = standin(q[i:i + 1], k[None], v[None], causal=causal, window=window, scale=scale, softcap=softcap,
                         return_lse=True)
        o[i], lse[i] = oi[0], li[0]
    return (o, lse) if return_lse else o


def varlen_standin(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False, window=None,
                   scale=None, softcap=None, return_lse=False):
    """qattn.attention_varlen's meaning: one standin call per packed sequence; rows past the last
    sequence are 0, a sequence with no key gets 0 / -inf."""
    tq, hq, _ = q.shape
    o = q.new_zeros((tq, hq, v.shape[2]))
    lse = torch.full((hq, tq), float("-inf"), device=q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for i in range(len(cq) - 1):
        a, b, c, d = cq[i], min(cq[i + 1], cq[i] + max_seqlen_q), ck[i], min(ck[i + 1], ck[i] + max_seqlen_k)
        if b <= a or d <= c:
            continue
        oi, li = standin(q[None, a:b], k[None, c:d], v[None, c:d], causal=causal, window=window, scale=scale,
                         softcap=softcap, return_lse=True)
        o[a:b], lse[:, a:b] = oi[0], li[0]
    return (o, lse) if return_lse else o
