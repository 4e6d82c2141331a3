"""Numerical verification of generated qattn kernels on a GPU (the numerics half of the last step
of `qattn generate`, and the GPU suites' check).

    python3 -m qattn.verify OUT_DIR [--only REGEX] [--seed N]     # or tests/gpu/verify.py

Loads every OUT_DIR/*.so (built by tests/gpu/build_kernels.sh, or the libqattn_kernel.so of a
`qattn generate` artifacts folder), reads what it computes from qattn_kernel_info() (head dims, mask,
window, LSE, dtype) and, next to an artifacts folder's library, spec.json (the variants: softcap,
ALiBi, relative bias, prefix-LM, document masking, as independent torch formulas with their
auxiliary inputs; a kernel with custom score_mod / mask_mod expressions has no reference here: it
is reported, and the exit status is 3 when nothing else failed), and runs it on many shapes: ragged
sequence lengths (seqlen_q < and > seqlen_k, 1), batch > 1, MHA, GQA, MQA, BSHD and BHSD strides.
Every run uses fresh random inputs and poisoned outputs (O and LSE filled with NaN). Reference:
fp64 attention with the kernel's mask. Verdict (FlashAttention's rule): max |O - ref| <=
2 * max |O_naive - ref| + atol, where O_naive is a naive same-precision implementation (S and the
softmax in fp32, probabilities rounded to V's dtype, P V rounded to O's dtype); atol = 1e-5 * max(1,
max |ref|) (1e-3 for fp8). LSE likewise against an fp32 naive LSE. Also checks the C ABI's error
statuses. Kernels that take the window or the softcap at launch (info "args") are run with a
different window (unbounded sides, -1, included) and cap per case, the reference with the same.
Kernels named neg_* were built from deliberately broken TL (build_kernels.sh): they must
compute wrong answers (the translator must not repair the TL). Prints a table; exits 1 if anything
fails, 3 if some kernel could not be verified (and nothing failed), else 0.
Libraries of the backward pass (exporting qattn_bwd: `qattn generate --backward`) are checked by
qattn._backward_check: dQ, dK, dV against fp32 autograd on shapes that cross every tile boundary.
Libraries of the combine step (exporting qattn_combine: `qattn generate --combine`) by
qattn._combine_check: random partial results, some empty, against an fp64 merge. Libraries that read
a KV cache (info "kv_cache": `qattn generate --kv-cache lengths|paged`) by qattn._kvcache_check: random
key counts, NaN wherever no key is, shuffled pages, each sequence against its own fp64 attention.
Libraries over packed ragged batches (info "varlen": `qattn generate --varlen true`) by
qattn._varlen_check: random lengths, NaN rows past the last sequence, outputs there left untouched.
Libraries that split the keys (info "splits": spec split_keys, ABI 8) are launched with 1, 3 and 7
parts in turn (more parts than a short sequence has key tiles: empty parts), the parts (NaN-poisoned)
merged by their LSE in fp64 and the merge checked as above.
"""
import argparse
import ctypes
import glob
import json
import math
import os
import re
import sys

import torch

from qattn._abi import QATTN_ABI_VERSION, Kernel

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}


# The launch values of case i for kernels that read them (info "args"): windows that cut tiles,
# unbounded sides (-1) and the empty window; caps from tight to loose.
WINDOWS = [(256, 0), (37, 0), (-1, 19), (150, -1), (5, 3), (0, 0), (1000, 64)]
SOFTCAPS = [30.0, 5.0, 50.0, 1.5]


def launch_values(info, i):
    args = info.get("args", [])
    window = WINDOWS[i % len(WINDOWS)] if ("window_left" in args or "window_right" in args) else None
    softcap = SOFTCAPS[i % len(SOFTCAPS)] if "softcap" in args else None
    return window, softcap


def split_count(info, i):
    """The number of key parts case i launches a split kernel (info "splits") with: 1, 3, 7 in turn."""
    return (1, 3, 7)[i % 3] if info.get("splits") else 1


def poisoned_merge(p, info, b, hq, sq, layout="bshd"):
    """A kernel that merges its parts itself (info "merge", ABI 10): NaN-filled merged outputs set in p;
    returns (o, lse or None), which the kernel must overwrite; (None, None) for other kernels."""
    if not info.get("merge"):
        return None, None
    o = torch.full((b, sq, hq, info["d_v"]), float("nan"), device="cuda", dtype=DTYPES[info["out_dtype"]])
    if layout == "bhsd":
        o = torch.full((b, hq, sq, info["d_v"]), float("nan"), device="cuda", dtype=DTYPES[info["out_dtype"]]).permute(0, 2, 1, 3)
    lse = torch.full((b, hq, sq), float("nan"), device="cuda", dtype=torch.float32) if info["lse"] else None
    p.o_merged = o.data_ptr()
    p.lse_merged = lse.data_ptr() if lse is not None else None
    p.om_batch_stride, p.om_row_stride, p.om_head_stride = (int(x) for x in o.stride()[:3])
    return o, lse


def merge_parts(o_parts, l_parts, splits):
    """The LSE merge of a split kernel's parts in fp64: o_parts (batch * S, sq, hq, d) (any strides),
    l_parts (batch * S, hq, sq) -> o (batch, sq, hq, d), lse (batch, hq, sq); a row without keys in
    any part: O = 0, LSE = -inf. NaN (an unwritten part) stays NaN."""
    b = o_parts.shape[0] // splits
    o = o_parts.double().reshape(b, splits, *o_parts.shape[1:])
    lp = l_parts.double().reshape(b, splits, *l_parts.shape[1:])
    lse = torch.logsumexp(lp, dim=1)
    w = torch.exp(lp - lse[:, None])
    w = torch.where(torch.isneginf(lse)[:, None] & ~torch.isnan(lp), torch.zeros_like(w), w)
    return (o * w.permute(0, 1, 3, 2)[..., None]).sum(dim=1), lse


def visible(info, sq, sk, device, window=None):
    qi = torch.arange(sq, device=device)[:, None]
    kj = torch.arange(sk, device=device)[None, :]
    off = sk - sq
    mask = info["mask"]
    if mask == "causal":
        return kj <= qi + off
    if mask == "causal_top_left":
        return kj <= qi
    if mask == "window":
        left, right = window if window is not None else info["window"]  # -1: unbounded
        return ((kj >= qi + off - left) | (left < 0)) & ((kj <= qi + off + right) | (right < 0))
    return torch.ones(sq, sk, dtype=torch.bool, device=device)


def attention(q, k, v, vis, scale, acc, p_dtype=None, out_dtype=None, softcap=None, score=None, keep=None):
    """q (B,Sq,Hq,D), k/v (B,Sk,Hkv,D) -> O (B,Sq,Hq,Dv), LSE (B,Hq,Sq) computed in `acc`; softcap c:
    scores become c tanh(s / c) before the mask; score(s, b, h, q, k) / keep(b, h, q, k): a spec's
    variants on broadcast index grids (variant_fns); vis (Sq, Sk) or None."""
    hq, hkv = q.shape[2], k.shape[2]
    qd = q.to(acc).permute(0, 2, 1, 3)
    kd = k.to(acc).permute(0, 2, 1, 3).repeat_interleave(hq // hkv, dim=1)
    vd = v.to(acc).permute(0, 2, 1, 3).repeat_interleave(hq // hkv, dim=1)
    s = (qd @ kd.transpose(-1, -2)) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if score is not None or keep is not None:
        B, H, Sq, Sk = s.shape
        dev = s.device
        grids = (torch.arange(B, device=dev)[:, None, None, None], torch.arange(H, device=dev)[None, :, None, None],
                 torch.arange(Sq, device=dev)[None, None, :, None], torch.arange(Sk, device=dev)[None, None, None, :])
        if score is not None:
            s = score(s, *grids).to(acc)
        if keep is not None:
            s = s.masked_fill(~keep(*grids).expand(B, H, Sq, Sk), float("-inf"))
    if vis is not None:
        s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    if p_dtype is not None:
        p = p.to(p_dtype).to(acc)
    o = p @ vd
    if out_dtype is not None:
        o = o.to(out_dtype).to(acc)
    return o.permute(0, 2, 1, 3), lse


# ---- a spec's variants (docs/spec.md, "Variants"), independently of the TL ------------------------

def packed_ids(batch, length, gen):
    """Nondecreasing segment ids per batch row (documents of random lengths), int32."""
    ids = torch.zeros(batch, length, dtype=torch.int32, device="cuda")
    for b in range(batch):
        pos, seg = 0, 0
        while pos < length:
            n = int(torch.randint(1, max(2, length // 3), (1,), generator=gen, device="cuda").item())
            ids[b, pos:pos + n] = seg
            pos, seg = pos + n, seg + 1
    return ids


def make_aux(info, batch, hq, sq, sk, gen):
    """The auxiliary tensors the kernel reads, by name ({name: tensor}); ValueError for an unknown one."""
    out = {}
    for a in info.get("aux", []):
        n = a["name"]
        if n == "alibi_slopes":  # the standard ALiBi slopes 2^(-8 (h + 1) / H)
            out[n] = torch.tensor([2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq)], device="cuda", dtype=torch.float32)
        elif n in ("seg_q", "seg_k"):
            out[n] = packed_ids(batch, sq if n == "seg_q" else sk, gen)
        elif n == "rel_bias":
            nb = int(info["tiles"].get("NB", 32))
            out[n] = torch.randn(hq, nb, generator=gen, device="cuda", dtype=torch.float32)
        else:
            raise ValueError(f"unknown auxiliary tensor {n} (shape {a.get('shape')})")
    return out


def variant_fns(spec, aux, sq, sk, window=None, softcap=None, extra=None):
    """(score(s, b, h, q, k), keep(b, h, q, k)) of a spec's mask and variants on broadcast index
    grids, None when absent; window / softcap: the launch values (else the spec's); extra: Python
    transcriptions of custom score_mod / mask_mod ({"score": ..., "keep": ...}: expressions over s, b,
    h, q, k, off and torch)."""
    extra = extra or {}
    off = sk - sq
    m = spec.get("mask", {})
    m = dict(m) if isinstance(m, dict) else {"kind": m}
    if window is not None:
        m["left"], m["right"] = window
    var = dict(spec.get("variants", {}))
    mods = []
    if var.get("alibi"):
        slopes = aux["alibi_slopes"]
        mods.append(lambda s, b, h, q, k: s - slopes[h] * (q + off - k).abs())
    if var.get("relative_bias"):
        nb = int(var["relative_bias"])
        table = aux["rel_bias"]
        mods.append(lambda s, b, h, q, k: s + table[h, (k - q - off).clamp(-(nb // 2), nb // 2 - 1) + nb // 2])
    if extra.get("score"):  # the planner's order: alibi, relative bias, score_mod, softcap
        mods.append(eval("lambda s, b, h, q, k: " + extra["score"], {"torch": torch, "off": off}))  # noqa: S307 - test input
    if var.get("softcap"):
        c = float(softcap if softcap is not None else var["softcap"])
        mods.append(lambda s, b, h, q, k: c * torch.tanh(s / c))
    keeps = []
    kind = m.get("kind", "none")
    if kind == "causal":
        top_left = m.get("align") == "top_left"
        keeps.append(lambda b, h, q, k: k <= q if top_left else k <= q + off)
    elif kind == "causal_top_left":
        keeps.append(lambda b, h, q, k: k <= q)
    if kind == "window":
        lo, hi = m["left"], m["right"]  # -1: unbounded
        keeps.append(lambda b, h, q, k: ((k >= q + off - lo) | (lo < 0)) & ((k <= q + off + hi) | (hi < 0)))
    if var.get("prefix_lm") is not None:
        pl = int(var["prefix_lm"])
        keeps.append(lambda b, h, q, k: (k <= q + off) | (k < pl))
    if var.get("document"):
        sgq, sgk = aux["seg_q"].long(), aux["seg_k"].long()
        keeps.append(lambda b, h, q, k: sgq[b, q] == sgk[b, k])
    if extra.get("keep"):
        keeps.append(eval("lambda b, h, q, k: " + extra["keep"], {"torch": torch, "off": off}))  # noqa: S307 - test input
    score = keep = None
    if mods:
        def score(s, b, h, q, k):
            for f in mods:
                s = f(s, b, h, q, k)
            return s
    if keeps:
        def keep(b, h, q, k):
            r = keeps[0](b, h, q, k)
            for f in keeps[1:]:
                r = r & f(b, h, q, k)
            return r
    return score, keep


def load_spec(so_path):
    """The spec of an artifacts folder's library (`qattn generate` writes spec.json next to
    libqattn_kernel.so), else None."""
    p = os.path.join(os.path.dirname(os.path.abspath(so_path)), "spec.json")
    if os.path.basename(so_path) != "libqattn_kernel.so" or not os.path.isfile(p):
        return None
    try:
        with open(p) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return None
    return s if isinstance(s, dict) else None


def make_inputs(info, b, hq, hkv, sq, sk, layout, gen):
    dt = DTYPES[info["dtype"]]
    dqk, dv = info["d_qk"], info["d_v"]

    def rnd(bb, s, h, d):
        if layout == "bhsd":  # (B, H, S, D) memory, (B, S, H, D) view
            t = torch.randn(bb, h, s, d, device="cuda", generator=gen).permute(0, 2, 1, 3)
        else:
            t = torch.randn(bb, s, h, d, device="cuda", generator=gen)
        return t.to(dt)

    return rnd(b, sq, hq, dqk), rnd(b, sk, hkv, dqk), rnd(b, sk, hkv, dv)


def max_abs(a, b):
    d = (a - b).abs()
    return d.max().item() if d.numel() else 0.0


CUSTOM = ("score_mod", "mask_mod")


def spec_variants(spec):
    """The variants of a spec (docs/spec.md) this verifier models through variant_fns, or None when
    the kernel has none (its mask comes from the kernel info alone)."""
    var = (spec or {}).get("variants") or {}
    return var if any(v not in (None, False) for v in var.values()) else None


def run_case(kern, case, gen, i=0, spec=None):
    info = kern.info
    window, softcap = launch_values(info, i)
    b, hq, hkv, sq, sk, layout = case
    var = spec_variants(spec)
    if var and any(var.get(c) for c in CUSTOM):
        return False, ("custom score_mod / mask_mod: this verifier has no reference for TL expressions (the TL "
                       "interpreter checked the program; tests/gpu/verify_variants.py checks such kernels from a "
                       "variants.json)"), None
    q, k, v = make_inputs(info, b, hq, hkv, sq, sk, layout, gen)
    out_dt = DTYPES[info["out_dtype"]]
    parts = split_count(info, i)  # a kernel that splits the keys: o and lse hold b * parts entries
    bo = b * parts
    o = torch.full((bo, sq, hq, info["d_v"]), float("nan"), device="cuda", dtype=out_dt)
    if layout == "bhsd":
        o = torch.full((bo, hq, sq, info["d_v"]), float("nan"), device="cuda", dtype=out_dt).permute(0, 2, 1, 3)
    lse = torch.full((bo, hq, sq), float("nan"), device="cuda", dtype=torch.float32) if info["lse"] else None
    scale = info["d_qk"] ** -0.5
    descale = None
    fp8 = info["dtype"].startswith("fp8")
    qf, kf, vf = q.float(), k.float(), v.float()
    if fp8:
        dq, dk, dvs = 0.5, 1.25, 0.75
        descale = tuple(torch.tensor([x], device="cuda", dtype=torch.float32) for x in (dq, dk, dvs))
        qf, kf, vf = qf * dq, kf * dk, vf * dvs
    aux = make_aux(info, b, hq, sq, sk, gen) if var else {}
    p = kern.params(q, k, v, o, lse, scale, descale, window=window, softcap=softcap,
                    aux=[aux[a["name"]] for a in info.get("aux", [])] if aux else None)
    p.splits = parts
    om, lm = poisoned_merge(p, info, b, hq, sq, layout)
    st = kern(q, k, v, o, params=p)
    torch.cuda.synchronize()
    if st != 0:
        return False, f"status {st}: {kern.last_error()}", None
    if om is not None:  # the kernel's own merge is what is checked
        o, lse = om, lm
    elif parts > 1:
        o, lse = merge_parts(o, lse, parts)
    p_dt = DTYPES[info["dtype"]] if not fp8 else torch.float8_e4m3fn
    if var:  # the spec's mask and variants as independent torch formulas (softcap at the launch value)
        score, keep = variant_fns(spec, aux, sq, sk, window, softcap)
        o_ref, lse_ref = attention(qf, kf, vf, None, scale, torch.float64, score=score, keep=keep)
        o_naive, lse_naive = attention(qf, kf, vf, None, scale, torch.float32, p_dtype=p_dt, out_dtype=out_dt, score=score,
                                       keep=keep)
    else:
        vis = visible(info, sq, sk, q.device, window)
        o_ref, lse_ref = attention(qf, kf, vf, vis, scale, torch.float64, softcap=softcap)
        o_naive, lse_naive = attention(qf, kf, vf, vis, scale, torch.float32, p_dtype=p_dt, out_dtype=out_dt, softcap=softcap)
    o64 = o.double()
    nan = torch.isnan(o64).sum().item()
    err = max_abs(o64, o_ref)
    naive = max_abs(o_naive.double(), o_ref)
    atol = (1e-3 if fp8 else 1e-5) * max(1.0, o_ref.abs().max().item() if o_ref.numel() else 1.0)
    ok = nan == 0 and err <= 2 * naive + atol
    msg = f"err {err:.2e} naive {naive:.2e}" + (f" {parts} parts" if parts > 1 else "") + (f" window={window}" if window else "") + (f" softcap={softcap:g}" if softcap else "")
    if nan:
        msg += f" NaN x{nan}"
    if lse is not None:
        lse64 = lse.double()
        fin = torch.isfinite(lse_ref)
        lnan = torch.isnan(lse64).sum().item()
        same_inf = bool(((lse64 == float("-inf")) == ~fin).all().item())
        lerr = max_abs(lse64[fin], lse_ref[fin])
        lnaive = max_abs(lse_naive.double()[fin], lse_ref[fin])
        lok = lnan == 0 and same_inf and lerr <= 2 * lnaive + 1e-5 * max(1.0, lse_ref[fin].abs().max().item() if fin.any() else 1.0)
        msg += f" | lse err {lerr:.2e} naive {lnaive:.2e}" + ("" if same_inf else " -inf rows differ") + (f" NaN x{lnan}" if lnan else "")
        ok = ok and lok
    return ok, msg, err


def abi_checks(kern, gen=None):
    """The C ABI refuses bad calls with the documented statuses."""
    info = kern.info
    dt = DTYPES[info["dtype"]]
    q = torch.randn(1, 64, 2, info["d_qk"], device="cuda").to(dt)
    k = torch.randn(1, 64, 2, info["d_qk"], device="cuda").to(dt)
    v = torch.randn(1, 64, 2, info["d_v"], device="cuda").to(dt)
    o = torch.empty(1, 64, 2, info["d_v"], device="cuda", dtype=DTYPES[info["out_dtype"]])
    window, softcap = launch_values(info, 0)
    aux = make_aux(info, 1, 2, 64, 64, gen)
    aux = [aux[a["name"]] for a in info.get("aux", [])] or None

    # a kernel that splits the keys needs its LSE (else QATTN_ERR_SHAPE before the checks below)
    lse = torch.empty(1, 2, 64, device="cuda", dtype=torch.float32) if info.get("splits") else None

    def prm(window=window, softcap=softcap):
        return kern.params(q, k, v, o, lse, window=window, softcap=softcap, aux=aux)

    results = []
    if window is not None or softcap is not None:
        p = prm((-2, 0) if window else None, -1.0 if softcap else None)
        results.append(("bad launch argument", kern(q, k, v, o, params=p) == 7))
    p = prm()
    p.abi_version = QATTN_ABI_VERSION + 1
    results.append(("abi_version", kern(q, k, v, o, params=p) == 1))
    p = prm()
    p.d_qk += 8
    results.append(("head dim", kern(q, k, v, o, params=p) == 2))
    p = prm()
    p.heads_kv = 3
    results.append(("heads_q % heads_kv", kern(q, k, v, o, params=p) == 2))
    p = prm()
    p.q = p.q + 2
    results.append(("misaligned q", kern(q, k, v, o, params=p) == 3))
    p = prm()
    p.k_row_stride = p.k_row_stride + 1
    results.append(("misaligned stride", kern(q, k, v, o, params=p) == 3))
    if info.get("merge"):  # a kernel that merges its parts itself needs o_merged, aligned (ABI 10)
        om = torch.empty_like(o)
        results.append(("o_merged NULL", kern(q, k, v, o, params=prm()) == 2))
        p = prm()
        poisoned_merge(p, info, 1, 2, 64)
        p.o_merged = om.data_ptr() + 2
        results.append(("misaligned o_merged", kern(q, k, v, o, params=p) == 3))
    return results


CASES = [
    # batch, heads_q, heads_kv, seqlen_q, seqlen_k, layout
    (1, 1, 1, 128, 128, "bshd"),
    (2, 4, 4, 200, 333, "bshd"),
    (2, 8, 2, 77, 513, "bshd"),      # GQA, seqlen_q < seqlen_k
    (1, 4, 1, 300, 100, "bshd"),     # MQA, seqlen_q > seqlen_k (causal: rows with no key)
    (3, 2, 2, 1, 517, "bshd"),
    (1, 2, 1, 517, 1, "bshd"),
    (2, 4, 2, 1000, 1000, "bhsd"),   # BHSD strides
    (1, 6, 3, 1024, 1024, "bshd"),
    (1, 2, 2, 2047, 3001, "bshd"),
    (4, 2, 1, 64, 64, "bhsd"),
    (3, 16, 4, 1100, 1234, "bshd"),  # 400+ work tiles: a persistent block runs several
    (2, 32, 8, 16, 1000, "bshd"),    # GQA, a short query chunk over a long cache (packed tiles: 4 heads)
    (1, 16, 1, 3, 777, "bhsd"),      # MQA, 3 queries (packed: 16 heads, one tile row per (query, head))
]


def is_backward_library(path):
    """A library of a backward program exports qattn_bwd (include/qattn/qattn.h)."""
    try:
        return hasattr(ctypes.CDLL(path), "qattn_bwd")
    except OSError:
        return False


def is_combine_library(path):
    """A library of a combine program exports qattn_combine (include/qattn/qattn.h)."""
    try:
        return hasattr(ctypes.CDLL(path), "qattn_combine")
    except OSError:
        return False


def verify_combine(path, name, rows):
    """The combine's numerics (qattn._combine_check: random parts, some empty, against an fp64
    merge) of one library into rows; returns the failures."""
    from ._combine import CombineLibrary
    from ._combine_check import check_library
    try:
        lib = CombineLibrary(path)
    except (OSError, ValueError) as e:
        rows.append((name, "load", False, str(e)))
        return 1
    failures = 0
    for r in check_library(lib):
        rows.append((name, "combine " + r["detail"].split(": ")[0], r["ok"], r["detail"].split(": ", 1)[-1]))
        failures += 0 if r["ok"] else 1
    i = lib.info
    print(f"{name}: combine {i['arch']} {i['dtype']} d_v {i['d_v']}", flush=True)
    return failures


def verify_backward(path, name, rows):
    """The backward numerics (qattn._backward_check) of one library into rows; returns the failures.
    A neg_* library (broken TL) must compute wrong gradients on some case."""
    from . import _abi
    from ._backward_check import check_library
    try:
        lib = _abi.BwdLibrary(path)
    except (OSError, ValueError) as e:
        rows.append((name, "load", False, str(e)))
        return 1
    results = check_library(lib)
    if name.startswith("neg_"):
        wrong = sum(1 for _, _, r in results if not r["ok"])
        rows.append((name, "broken TL -> wrong gradients", wrong > 0, f"{wrong}/{len(results)} cases wrong"))
        return 0 if wrong > 0 else 1
    failures = 0
    for (b, hq, hkv, sq, sk), window, r in results:
        detail = r["status"] if r["status"] != "ok" else " ".join(
            f"{n}={r[n + '_err']:.2e}/{r[n + '_bound']:.2e}" for n in ("dq", "dk", "dv"))
        case = f"bwd b{b} h{hq}/{hkv} s{sq}/{sk}" + (f" w{window[0]},{window[1]}" if window != (-1, -1) else "")
        rows.append((name, case, r["ok"], detail))
        failures += 0 if r["ok"] else 1
    i = lib.info
    print(f"{name}: backward {i['arch']} {i['dtype']} d{i['d_qk']}/{i['d_v']} {i['mask']} dK/dV {i['dk_dtype']}", flush=True)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--only", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="print each case before it runs (to find the one a crash comes from)")
    args = ap.parse_args()
    libs = sorted(glob.glob(os.path.join(args.out_dir, "*.so")))
    libs = [p for p in libs if re.search(args.only, os.path.basename(p))]
    if not libs:
        print(f"no kernels in {args.out_dir}", file=sys.stderr)
        return 1
    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    failures = unverifiable = 0
    rows = []
    for path in libs:
        name = os.path.basename(path)[:-3]
        if is_backward_library(path):  # `Kernel NAME backward`: dQ, dK, dV against fp32 autograd
            failures += verify_backward(path, name, rows)
            continue
        if is_combine_library(path):  # `Kernel NAME combine`: the merge against an fp64 merge
            failures += verify_combine(path, name, rows)
            continue
        try:
            kern = Kernel(path)
        except (OSError, ValueError, AttributeError) as e:  # not loadable, no C ABI, or a bad kernel_info
            rows.append((name, "load", False, str(e)))
            failures += 1
            continue
        i = kern.info
        if "varlen" in i:  # packed ragged batches: per-sequence counts and rows (qattn._varlen_check)
            from ._varlen_check import check_library as check_varlen
            for case, ok, msg in check_varlen(kern, gen):
                rows.append((name, case, ok, msg))
                failures += 0 if ok else 1
            print(f"{name}: {i['arch']} {i['dtype']} d{i['d_qk']}/{i['d_v']} {i['mask']} ragged batches", flush=True)
            continue
        if "kv_cache" in i:  # a KV cache's kernel: per-sequence key counts, pages (qattn._kvcache_check)
            from ._kvcache_check import check_library as check_kv
            for case, ok, msg in check_kv(kern, gen):
                rows.append((name, case, ok, msg))
                failures += 0 if ok else 1
            print(f"{name}: {i['arch']} {i['dtype']} d{i['d_qk']}/{i['d_v']} {i['mask']} KV cache {i['kv_cache']}", flush=True)
            continue
        spec = load_spec(path)  # an artifacts folder (`qattn generate`): its variants are checked too
        if any((spec_variants(spec) or {}).get(c) for c in CUSTOM):
            print(f"{name}: not verified: custom score_mod / mask_mod expressions have no reference here (the TL "
                  "interpreter checked the program; tests/gpu/verify_variants.py checks such kernels from a "
                  "variants.json)", flush=True)
            unverifiable += 1
            continue
        desc = f"{i['arch']} {i['dtype']} d{i['d_qk']}/{i['d_v']} {i['mask']}{' lse' if i['lse'] else ''}"
        if spec_variants(spec):
            desc += " " + ",".join(sorted(k for k, x in spec["variants"].items() if x not in (None, False)))
        if name.startswith("neg_"):
            wrong = 0
            for ci, case in enumerate(CASES):
                if args.verbose:
                    print(f"  {name} {case}", flush=True)
                ok, msg, _ = run_case(kern, case, gen, ci, spec)
                wrong += 0 if ok else 1
            ok = wrong > 0
            rows.append((name, "broken TL -> wrong kernel", ok, f"{wrong}/{len(CASES)} cases wrong"))
            failures += 0 if ok else 1
            print(f"{name}: {desc} (from broken TL)", flush=True)
            continue
        for ci, case in enumerate(CASES):
            if args.verbose:
                print(f"  {name} {case}", flush=True)
            ok, msg, _ = run_case(kern, case, gen, ci, spec)
            b, hq, hkv, sq, sk, layout = case
            rows.append((name, f"b{b} h{hq}/{hkv} s{sq}/{sk} {layout}", ok, msg))
            failures += 0 if ok else 1
        for what, ok in abi_checks(kern, gen):
            rows.append((name, f"abi: {what}", ok, ""))
            failures += 0 if ok else 1
        print(f"{name}: {desc}", flush=True)
    if not rows:
        return 3 if unverifiable else 1
    w = max(len(r[0]) for r in rows)
    print(f"\n{'kernel':<{w}}  {'case':<32} {'ok':<4} detail")
    for name, case, ok, msg in rows:
        print(f"{name:<{w}}  {case:<32} {'PASS' if ok else 'FAIL':<4} {msg}")
    print(f"\n{len(rows) - failures}/{len(rows)} passed" + (f"; {unverifiable} kernel(s) not verifiable here" if unverifiable else ""))
    return 1 if failures else 3 if unverifiable else 0


if __name__ == "__main__":
    sys.exit(main())
