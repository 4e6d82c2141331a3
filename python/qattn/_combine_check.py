"""The combine kernel's numerics (qattn_combine, `qattn generate --combine`): random partial results
merged by the kernel against an fp64 torch merge. Used by qattn.verify (a combine library in the
artifacts folder of `qattn generate --combine` on a GPU), tests/gpu/combine_check.py and
tests/python/test_combine.py.

Cases: seqlen_q 1, 3, 17 (and 65 rows over 5 heads), splits 1, 2, 7, 16, contiguous and strided
(padded heads, the split dimension inside the row dimension, LSE rows padded, O written through a
BHSD view), with and without the LSE (NULL). Some parts are empty (LSE -inf), and rows whose parts
are all empty must give O = 0 and LSE = -inf. Outputs are poisoned with NaN first. Verdict:
|O - ref| <= 2 u (|ref| + 0.01 max |ref|) elementwise (u: the unit roundoff of the output dtype,
2^-8 bf16, 2^-11 fp16: the merge is fp32, one rounding at the store) and |LSE - ref| <= 1e-5
max(1, |ref|).
"""
import itertools

import torch

from . import _combine

DT = {"bf16": torch.bfloat16, "fp16": torch.float16}
UNIT = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}

# (batch, splits, seqlen_q, heads_q, strided, lse): tile boundaries (seqlen_q 1, 3, 17, 65), split counts
CASES = [(2, s, sq, 3, strided, (s + sq + strided) % 3 != 2)
         for sq, s, strided in itertools.product((1, 3, 17), (1, 2, 7, 16), (False, True))] + \
        [(1, 16, 65, 5, True, True), (3, 5, 9, 2, False, False)]


def reference(o_parts, l_parts):
    """The merge in fp64: (O (b, sq, hq, dv), LSE (b, hq, sq)); all-empty rows give 0 and -inf."""
    lp = l_parts.double()
    lse = torch.logsumexp(lp, dim=1)                              # -inf where every part is -inf
    w = torch.exp(lp - lse[:, None]).nan_to_num(0.0)               # (b, S, hq, sq); 0 for empty rows
    o = (o_parts.double() * w.transpose(2, 3)[..., None]).sum(dim=1)
    return o, lse


def make_inputs(dt, b, s, sq, hq, dv, strided, gen, device="cuda"):
    """o_parts (b, s, sq, hq, dv), l_parts (b, s, hq, sq), o (b, sq, hq, dv) poisoned with NaN; strided:
    views with padded heads / rows and the split dimension inside the row dimension, o a BHSD view."""
    if strided:
        op = torch.empty(b, sq, s, hq, dv + 8, device=device, dtype=dt).permute(0, 2, 1, 3, 4)[..., :dv]
        lp = torch.empty(s, b, hq, sq + 3, device=device, dtype=torch.float32).permute(1, 0, 2, 3)[..., :sq]
        o = torch.empty(b, hq, sq, dv, device=device, dtype=dt).transpose(1, 2)
    else:
        op = torch.empty(b, s, sq, hq, dv, device=device, dtype=dt)
        lp = torch.empty(b, s, hq, sq, device=device, dtype=torch.float32)
        o = torch.empty(b, sq, hq, dv, device=device, dtype=dt)
    op.copy_(torch.randn(op.shape, device=device, generator=gen))
    # LSE-like values spread over a few units (weights of very different sizes), some parts empty
    lp.copy_(4.0 + 3.0 * torch.randn(lp.shape, device=device, generator=gen))
    empty = torch.rand(lp.shape, device=device, generator=gen) < 0.25
    lp.masked_fill_(empty, float("-inf"))
    lp[0, :, 0, 0] = float("-inf")                                 # a row with every part empty
    if hq > 1:
        lp[-1, :, 1, -1] = float("-inf")                           # one with exactly one part left
        lp[-1, s // 2, 1, -1] = 2.5
    o.fill_(float("nan"))
    return op, lp, o


def lib_runner(lib):
    """run(o_parts, l_parts, o, lse) through a loaded CombineLibrary on the current stream."""
    def run(op, lp, o, lse):
        p = _combine.fill_combine_params(op, lp, o, lse)
        st = lib.combine(p, torch.cuda.current_stream().cuda_stream)
        if st != 0:
            raise RuntimeError(f"qattn_combine returned {st}: {lib.last_error()}")
    return run


def package_runner():
    """run(...) through qattn._combine.combine (the checks, the library built on first use)."""
    def run(op, lp, o, lse):
        _, got = _combine.combine(torch, op, lp, lse is not None, op.device, out=o)
        if lse is not None:
            lse.copy_(got)
    return run


def reference_runner():
    """run(...) by the fp64 reference rounded to the output dtype (any device): the harness's own check."""
    def run(op, lp, o, lse):
        ro, rl = reference(op, lp)
        o.copy_(ro)
        if lse is not None:
            lse.copy_(rl)
    return run


def run_case(run, dtype, dv, case, seed, device="cuda"):
    """Merges one random case with run(); returns a dict: ok, o_err (max |O - ref| / bound elementwise,
    <= 1 passes), lse_err (max relative LSE error), detail."""
    b, s, sq, hq, strided, with_lse = case
    gen = torch.Generator(device=device).manual_seed(seed)
    op, lp, o = make_inputs(DT[dtype], b, s, sq, hq, dv, strided, gen, device)
    lse = torch.full((b, hq, sq), float("nan"), device=device) if with_lse else None
    run(op, lp, o, lse)
    if device == "cuda":
        torch.cuda.synchronize()
    ref_o, ref_l = reference(op, lp)
    of = o.double()
    bound = 2 * UNIT[dtype] * (ref_o.abs() + 0.01 * ref_o.abs().max()) + 1e-30
    o_err = ((of - ref_o).abs() / bound).nan_to_num(float("inf")).max().item()
    empty_rows = torch.isinf(ref_l).transpose(1, 2)                # (b, sq, hq)
    ok = o_err <= 1 and bool((o[empty_rows] == 0).all())
    lse_err = 0.0
    if lse is not None:
        fin = torch.isfinite(ref_l)
        same_inf = bool((torch.isinf(lse) == ~fin).all()) and bool((lse[~fin] < 0).all())
        d = ((lse.double() - ref_l).abs() / ref_l.abs().clamp(min=1.0))[fin]
        lse_err = d.max().item() if d.numel() else 0.0
        lse_err = lse_err if lse_err == lse_err else float("inf")  # NaN: a row left unwritten
        ok = ok and same_inf and lse_err <= 1e-5
    detail = (f"{dtype} d_v={dv} b={b} S={s} sq={sq} hq={hq} {'strided' if strided else 'contiguous'} "
              f"lse={'yes' if with_lse else 'NULL'}: o err/bound {o_err:.2f}, lse rel err {lse_err:.1e}")
    return {"ok": ok, "o_err": o_err, "lse_err": lse_err, "detail": detail}



def check_library(lib, seed=0):
    """Every case on a loaded CombineLibrary: a list of run_case results (dicts with ok and detail)."""
    dt, dv = lib.info["dtype"], int(lib.info["d_v"])
    return [run_case(lib_runner(lib), dt, dv, case, seed=seed + 1000 * dv + i) for i, case in enumerate(CASES)]
