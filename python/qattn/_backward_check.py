"""The backward pass on a GPU: numerics of a `qattn_bwd` library against fp32 autograd, and its time
next to PyTorch's SDPA backward (cuDNN and FlashAttention-2 backends). Used by `python -m
qattn.verify` / `qattn.timing` (the GPU step of `qattn generate --backward`) and
tests/gpu/bwd_check.py.

Numerics (FlashAttention's rule for gradients): for each of dQ, dK, dV, max |dX - dX_ref| <=
2 * max |dX_torch - dX_ref| + 1e-4 * max(1, max |dX_ref|), dX_ref from fp32 autograd of the same
inputs, dX_torch from autograd in the kernel's dtype. Fresh random inputs per case; dQ (and fp32
dK / dV) zeroed as the ABI asks, 16-bit dK / dV poisoned with NaN. A kernel that stores dK / dV once
per query head must refuse GQA calls (QATTN_ERR_SHAPE).
"""
import math

import torch
import torch.nn.functional as F

from . import _abi

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def mask_matrix(kind, sq, sk, window, device):
    q = torch.arange(sq, device=device)[:, None]
    k = torch.arange(sk, device=device)[None, :]
    off = sk - sq
    if kind == "causal":
        return k <= q + off
    if kind == "causal_top_left":
        return k <= q
    if kind == "window":
        left, right = window
        ok = torch.ones(sq, sk, dtype=torch.bool, device=device)
        if left >= 0:
            ok &= k >= q + off - left
        if right >= 0:
            ok &= k <= q + off + right
        return ok
    return None


def document_aux(info, b, sq, sk, device, generator=None):
    """The auxiliary inputs of a kernel whose TL reads document ids (kernel info "aux": seg_q (batch,
    seqlen_q) and seg_k (batch, seqlen_k), int32, nondecreasing) and the (b, 1, sq, sk) pairs they
    keep; ([], None) for a kernel without auxiliary inputs. With a generator: random documents
    (about 5 per row, lengths 1 to s / 2); without: 4 documents at s/8, s/2, 3s/4 (bench_backward's)."""
    names = [a["name"] for a in info.get("aux", [])]
    if not names:
        return [], None
    if names != ["seg_q", "seg_k"]:
        raise ValueError(f"auxiliary inputs {names}: this check fills document ids (seg_q, seg_k) only")

    def ids(s):
        if generator is None:
            seg = torch.zeros(b, s, dtype=torch.int32, device=device)
            for e in (s // 8, s // 2, 3 * s // 4):
                seg[:, e:] += 1
            return seg
        starts = torch.rand(b, s, device=device, generator=generator) < 5.0 / max(s, 1)
        starts[:, 0] = False
        return starts.to(torch.int32).cumsum(dim=1).to(torch.int32).contiguous()
    seg_q, seg_k = ids(sq), ids(sk)
    return [seg_q, seg_k], (seg_q[:, None, :, None] == seg_k[:, None, None, :])


SOFTCAP = 30.0  # the softcap of a kernel whose TL reads the launch argument (kernel info "args")


def attention(q, k, v, keep, scale, softcap=None):
    """(b, s, h, d) eager attention in q's dtype; rows with no visible key give 0. softcap: the
    scaled scores become softcap * tanh(s / softcap) (TL `Score softcap`), before the mask."""
    hq, hk = q.shape[2], k.shape[2]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if hq != hk:
        kt = kt.repeat_interleave(hq // hk, dim=1)
        vt = vt.repeat_interleave(hq // hk, dim=1)
    s = (qt @ kt.transpose(-1, -2)) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s.float(), dim=-1).nan_to_num(0.0).to(q.dtype)
    o = p @ vt
    lse = torch.logsumexp(s.float(), dim=-1)
    return o.transpose(1, 2), lse


def run_case(lib, shape, seed, window):
    info = lib.info
    dt = DT[info["dtype"]]
    b, hq, hk, sq, sk = shape
    d, dv_ = info["d_qk"], info["d_v"]
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(seed)
    q = torch.randn(b, sq, hq, d, device=dev, generator=g).to(dt)
    k = torch.randn(b, sk, hk, d, device=dev, generator=g).to(dt)
    v = torch.randn(b, sk, hk, dv_, device=dev, generator=g).to(dt)
    dout = torch.randn(b, sq, hq, dv_, device=dev, generator=g).to(dt)
    scale = d ** -0.5
    keep = mask_matrix(info["mask"], sq, sk, window, dev)
    aux, docs = document_aux(info, b, sq, sk, dev, generator=g)
    if docs is not None:
        keep = docs if keep is None else docs & keep
    cap = SOFTCAP if "softcap" in info.get("args", []) else None
    # fp32 reference (forward and autograd), and the same math in the kernel's dtype
    qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
    of, lse = attention(qf, kf, vf, keep, scale, cap)
    ref = torch.autograd.grad(of, (qf, kf, vf), dout.float())
    ql, kl, vl = (x.clone().requires_grad_() for x in (q, k, v))
    ol, _ = attention(ql, kl, vl, keep, scale, cap)
    low = torch.autograd.grad(ol, (ql, kl, vl), dout)
    o = of.detach().to(dt)
    lse = lse.detach().contiguous()  # (b, hq, sq), -inf on rows with no visible key
    dk_dt = DT[info["dk_dtype"]]
    dq = torch.zeros(b, sq, hq, d, device=dev, dtype=torch.float32)
    fill = 0.0 if dk_dt == torch.float32 else float("nan")
    dk = torch.full((b, sk, hk, d), fill, device=dev, dtype=dk_dt)
    dvv = torch.full((b, sk, hk, dv_), fill, device=dev, dtype=dk_dt)
    p = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dvv, scale=scale, window=window, softcap=cap, aux=aux)
    ws = _abi.bwd_workspace(torch, lib, p, dev)  # noqa: F841 (kept alive for the launch)
    st = lib.bwd(p, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    if dk_dt != torch.float32 and hq != hk:
        # a kernel that stores dK / dV per query head must refuse GQA (qattn.h: "dk_dtype")
        refused = st == 2 and "GQA" in lib.last_error()
        return {"status": "refused GQA as documented" if refused else f"GQA not refused (status {st})", "ok": refused}
    if st != 0:
        return {"status": f"{_abi.STATUS.get(st, st)}: {lib.last_error()}", "ok": False}
    out = {"status": "ok", "ok": True}
    for name, got, r, lo in (("dq", dq, ref[0], low[0]), ("dk", dk, ref[1], low[1]), ("dv", dvv, ref[2], low[2])):
        err = (got.float() - r).abs().max().item()
        naive = (lo.float() - r).abs().max().item()
        bound = 2 * naive + 1e-4 * max(1.0, r.abs().max().item())
        good = math.isfinite(err) and err <= bound
        out[name + "_err"], out[name + "_bound"] = err, bound
        out["ok"] = out["ok"] and good
    return out


def sdpa_backward_ms(q, k, v, dout, causal, backend):
    from torch.nn.attention import sdpa_kernel
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(backend):
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=q.shape[2] != k.shape[2])
    dot = dout.transpose(1, 2)

    def step():
        torch.autograd.grad(o, (qt, kt, vt), dot, retain_graph=True)
    return time_ms(step)


def time_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def bench(lib, shape, rows, name, dq_heads_first=False):
    """Times the library's backward and SDPA's cuDNN / FA2 backward on one shape into rows.
    dq_heads_first: the fp32 dQ accumulator laid out (batch, heads, seqlen, d) (each head's rows
    contiguous) instead of q's (batch, seqlen, heads, d); the kernel reads its strides."""
    from torch.nn.attention import SDPBackend
    info = lib.info
    dt = DT[info["dtype"]]
    b, hq, hk, sq, sk = shape
    d, dv_ = info["d_qk"], info["d_v"]
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dt)
    v = torch.randn(b, sk, hk, dv_, device="cuda", dtype=dt)
    dout = torch.randn(b, sq, hq, dv_, device="cuda", dtype=dt)
    # SDPA's is_causal is the top-left diagonal: the same work as either causal kind on square shapes
    causal = info["mask"] in ("causal", "causal_top_left")
    keep = mask_matrix(info["mask"], sq, sk, (-1, -1), "cuda") if sq * sk <= 4096 * 4096 else None
    aux, docs = document_aux(info, b, sq, sk, "cuda")
    kept = 0.5 if causal else 1.0  # the fraction of (query, key) pairs the kernel computes
    if docs is not None:  # counted exactly (the documents at fixed boundaries, and the causal mask)
        both = docs if keep is None else docs & keep
        kept = both.float().mean().item()
        del both
    with torch.no_grad():
        qt = q.transpose(1, 2)
        kt = k.transpose(1, 2).repeat_interleave(hq // hk, dim=1)
        vt = v.transpose(1, 2).repeat_interleave(hq // hk, dim=1)
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2).contiguous()
        lse = torch.zeros(b, hq, sq, device="cuda", dtype=torch.float32)  # timing only (values do not change the work)
        del keep
    dk_dt = DT[info["dk_dtype"]]
    if dq_heads_first:
        dq = torch.zeros(b, hq, sq, d, device="cuda", dtype=torch.float32).transpose(1, 2)
    else:
        dq = torch.zeros(b, sq, hq, d, device="cuda", dtype=torch.float32)
    dk = torch.zeros(b, sk, hk, d, device="cuda", dtype=dk_dt)
    dv = torch.zeros(b, sk, hk, dv_, device="cuda", dtype=dk_dt)
    p = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dv, scale=d ** -0.5, aux=aux)
    ws = _abi.bwd_workspace(torch, lib, p, "cuda")  # noqa: F841 (kept alive for the launches)
    stream = torch.cuda.current_stream().cuda_stream
    st = lib.bwd(p, stream)  # a refused launch would time nothing
    if st != 0:
        raise RuntimeError(f"{name}: qattn_bwd returned {st} on {shape}: {lib.last_error()}")

    def ours():  # what a training step pays: zero the accumulators, the kernel, the dtype conversions
        dq.zero_()
        if dk_dt == torch.float32:
            dk.zero_()
            dv.zero_()
        lib.bwd(p, stream)
        dq.to(dt)
        if dk_dt == torch.float32:
            dk.to(dt)
            dv.to(dt)
    ms = time_ms(ours)
    # 5 GEMMs: S, dK, dQ over d_qk; dP, dV over d_v (2.5x the forward's two when d_qk == d_v)
    flops = 2 * b * hq * sq * sk * (3 * d + 2 * dv_) * kept
    row = {"kernel": name + (" dq-heads-first" if dq_heads_first else ""),
           "shape": f"b{b} h{hq}/{hk} s{sq}x{sk} d{d}" + (f"/{dv_}" if dv_ != d else ""), "mask": info["mask"]
           + (" documents" if aux else ""), "qattn_ms": ms, "qattn_tflops": flops / ms / 1e9}
    # SDPA's cuDNN and FA2 backends take no document mask: their rows time the mask without documents
    # (not again for the heads-first dQ: their work does not depend on it)
    for label, backend in () if dq_heads_first else (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
        try:
            t = sdpa_backward_ms(q, k, v, dout, causal, backend)
            sdpa_flops = 2 * b * hq * sq * sk * (3 * d + 2 * dv_) * (0.5 if causal else 1.0)
            row[label + "_ms"], row[label + "_tflops"] = t, sdpa_flops / t / 1e9
        except RuntimeError as e:
            row[label + "_ms"], row[label + "_tflops"] = float("nan"), float("nan")
            print(f"  {label}: {str(e).splitlines()[0]}")
    rows.append(row)
    print(f"  {row['shape']} {row['mask']}: qattn {ms:.3f} ms {row['qattn_tflops']:.1f} TFLOPS, cudnn "
          f"{row.get('cudnn_tflops', float('nan')):.1f}, fa2 {row.get('fa2_tflops', float('nan')):.1f}")



# Shapes (batch, heads_q, heads_kv, seqlen_q, seqlen_k) crossing every tile boundary of 64-row tiles:
# odd lengths, both length orders, one query, GQA / MQA; windows cycled for window kernels.
SHAPES = [(1, 2, 2, 77, 130), (2, 4, 2, 130, 77), (1, 4, 1, 257, 257), (2, 2, 2, 1, 333), (1, 2, 2, 500, 64),
          (1, 8, 2, 1030, 1000), (2, 3, 3, 64, 64), (1, 2, 1, 63, 65)]
WINDOWS = [(37, 0), (-1, 19), (150, -1), (5, 5)]


def random_shapes(n, seed, gqa=True):
    """n random (batch, heads_q, heads_kv, seqlen_q, seqlen_k): batch 1-3, MHA / GQA / MQA (MHA only
    when gqa is False), lengths 1-1100 (odd ones included), from one seed."""
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        hk = rng.choice([1, 2, 3])
        hq = hk * (rng.choice([1, 2, 4]) if gqa else 1)
        out.append((rng.randint(1, 3), hq, hk, rng.randint(1, 1100), rng.randint(1, 1100)))
    return out


def repeat_identical(lib, shape, runs=10, seed=7):
    """The gradients of `runs` launches on the same inputs: (number of runs whose (dQ, dK, dV) differ
    bitwise from the first run's, status). A deterministic kernel (kernel info "deterministic": true)
    must give 0."""
    info = lib.info
    dt = DT[info["dtype"]]
    b, hq, hk, sq, sk = shape
    d, dv_ = info["d_qk"], info["d_v"]
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, hq, d, device="cuda", generator=g).to(dt)
    k = torch.randn(b, sk, hk, d, device="cuda", generator=g).to(dt)
    v = torch.randn(b, sk, hk, dv_, device="cuda", generator=g).to(dt)
    dout = torch.randn(b, sq, hq, dv_, device="cuda", generator=g).to(dt)
    aux, docs = document_aux(info, b, sq, sk, "cuda", generator=g)
    keep = mask_matrix(info["mask"], sq, sk, (-1, -1), "cuda")
    if docs is not None:
        keep = docs if keep is None else docs & keep
    with torch.no_grad():
        o, lse = attention(q.float(), k.float(), v.float(), keep, d ** -0.5)
    o, lse = o.to(dt), lse.contiguous()
    dk_dt = DT[info["dk_dtype"]]
    first, differ = None, 0
    for _ in range(runs):
        dq = torch.zeros(b, sq, hq, d, device="cuda", dtype=torch.float32)
        dk = torch.zeros(b, sk, hk, d, device="cuda", dtype=dk_dt)
        dvv = torch.zeros(b, sk, hk, dv_, device="cuda", dtype=dk_dt)
        p = _abi.fill_bwd_params(q, k, v, o, dout, lse, dq, dk, dvv, scale=d ** -0.5, aux=aux)
        ws = _abi.bwd_workspace(torch, lib, p, "cuda")  # noqa: F841
        st = lib.bwd(p, torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        if st != 0:
            return 0, f"{_abi.STATUS.get(st, st)}: {lib.last_error()}"
        bits = [x.view(torch.int32) if x.dtype == torch.float32 else x.view(torch.int16) for x in (dq, dk, dvv)]
        if first is None:
            first = bits
        else:
            differ += not all(torch.equal(a, c) for a, c in zip(first, bits))
    return differ, "ok"


def check_library(lib, seed=100, random_count=0):
    """Every shape of SHAPES, then random_count random ones, on one BwdLibrary: [(shape, window, result)]."""
    out = []
    shapes = SHAPES + random_shapes(random_count, seed, gqa=lib.info.get("dk_dtype") == "fp32")
    for i, shape in enumerate(shapes):
        window = WINDOWS[i % len(WINDOWS)] if lib.info["mask"] == "window" else (-1, -1)
        out.append((shape, window, run_case(lib, shape, seed=seed + i, window=window)))
    return out
