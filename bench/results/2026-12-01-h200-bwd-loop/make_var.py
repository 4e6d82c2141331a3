#!/usr/bin/env python3
"""Variants of a generated sm90 backward unit (the loop of bench/results/2026-12-01-h200-bwd-loop):
each one edit of the unit's text, written next to it as NAME_<variant>.cu with the same flags.
Bound variants (b_*) compute wrong gradients on purpose: they time the kernel without one step.

    python3 make_var.py BASE.cu OUT_PREFIX
"""
import sys

WAIT = "if (tid % 128 == 0) qattn::sm90::ptx::tma_store_wait<0>();"
LSE = "qattn::load_cols<128, 64>(Mma<128>{}, sLSE, rLSE, tid);"


def lines_without(text, needle, count=1):
    out, n = [], 0
    for ln in text.splitlines(keepends=True):
        if needle in ln:
            n += 1
            continue
        out.append(ln)
    if n != count:
        sys.exit(f"make_var.py: {needle!r} found {n} times, expected {count}")
    return "".join(out)


def lse_late(text):
    """The LSE columns read after the S and dP products are issued (they overlap the wgmma)."""
    ls = text.splitlines(keepends=True)
    k = [i for i, ln in enumerate(ls) if LSE in ln and "mbar_wait" not in ln]
    g = [i for i, ln in enumerate(ls) if "wg_gemm_ss" in ln and "rdPt" in ln]
    if len(k) != 1 or len(g) != 1 or g[0] < k[0]:
        sys.exit("make_var.py: lse_late: the LSE read or the dP product not found once")
    line = ls.pop(k[0])
    ls.insert(g[0], line)  # g shifted by one after the pop: right after the dP issue
    return "".join(ls)


def sub(text, old, new, count=1):
    n = text.count(old)
    if n != count:
        sys.exit(f"make_var.py: {old!r} found {n} times, expected {count}")
    return text.replace(old, new)


def arrive(text):
    """Only the first warp of a warpgroup waits at the dQ stage's barrier; the others arrive."""
    return sub(text, "add_acc_global_tma<64, 128, true>(", "add_acc_global_tma<64, 128, true, true>(")


def stage2(text):
    """Two dQ stages, alternating by iteration: the wait before a stage's reuse lets one group run."""
    text = sub(text, "qattn::sm90::ptx::tma_store_wait<0>();  // the previous iteration's",
               "qattn::sm90::ptx::tma_store_wait<1>();  // the previous iteration's")
    text = sub(text, "reinterpret_cast<float*>(smem + kSmemAdddQ), &tadQ, i,",
               "reinterpret_cast<float*>(smem + ((i) % 2 ? kSmemAdddQ + 32768 : kSmemAdddQ)), &tadQ, i,")
    text = sub(text, "allow_smem(" , "allow_smem(")  # one launch
    text = text.replace(", kSmemBytes);\n  if (e != cudaSuccess)", ", kSmemBytes + 32768);\n  if (e != cudaSuccess)")
    return sub(text, "kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>",
               "kThreads, kSmemBytes + 32768, static_cast<cudaStream_t>(stream)>>>")


def narrow(text, arrive_too=False):
    """dQ's stage in unswizzled boxes of 8 columns (tma_stage_offset_narrow): no bank conflicts."""
    text = sub(text, "add_acc_global_tma<64, 128, true>(",
               "add_acc_global_tma<64, 128, true, %s, 8>(" % ("true" if arrive_too else "false"))
    return sub(text, "p.dq_batch_stride); r != 0)", "p.dq_batch_stride, 8); r != 0)")


def pairs(text):
    """dS^T into shared memory by 32-bit stores of value pairs."""
    return sub(text, "qattn::store_acc_smem(Mma<128>{}, rdStc, sdStc, tid);",
               "qattn::store_acc_smem_pairs(Mma<128>{}, rdStc, sdStc, tid);")


def lds2(text):
    """LSE and D columns read in pairs (LDS.64)."""
    return sub(text, "qattn::load_cols<128, 64>(", "qattn::load_cols_pairs<128, 64>(", 2)


def main():
    base, prefix = sys.argv[1], sys.argv[2]
    text = open(base).read()
    flags = open(base.removesuffix(".cu") + ".flags").read()
    var = {
        "lsel": lse_late(text),
        "arrive": arrive(text),
        "stage2": stage2(text),
        "pairs": pairs(text),
        "lds2": lds2(text),
        "narrow": narrow(text),
        "an": narrow(text, True),
        "ap": pairs(arrive(text)),
        "anp": pairs(narrow(text, True)),
        "anpl": lds2(pairs(narrow(text, True))),
        "b_nodq": lines_without(text, "add_acc_global_tma<"),
        "b_nowait": lines_without(text, WAIT),
    }
    for name, t in var.items():
        open(f"{prefix}_{name}.cu", "w").write(t)
        open(f"{prefix}_{name}.flags", "w").write(flags)


if __name__ == "__main__":
    main()
