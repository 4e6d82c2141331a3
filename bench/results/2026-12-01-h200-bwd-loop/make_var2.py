#!/usr/bin/env python3
"""Variants of this tree's generated sm90 backward unit (make2.sh's CONFIG_n.cu), run5.sh: dS^T by
stmatrix, and D's columns read earlier. Written next to it as NAME_<variant>.cu with the same flags.

    python3 make_var2.py UNIT.cu OUT_PREFIX
"""
import sys

D_LOAD = "qattn::load_cols<128, 64>(Mma<128>{}, sD, rD, tid);"
LSE_LOAD = "qattn::load_cols<128, 64>(Mma<128>{}, sLSE, rLSE, tid);"
EXP = "qattn::map<qattn::op::Exp2>(rPt, rPt);"


def sub(text, old, new, count=1):
    n = text.count(old)
    if n != count:
        sys.exit(f"make_var2.py: {old!r} found {n} times, expected {count}")
    return text.replace(old, new)


def move_after(text, line_text, anchor):
    """The line holding `line_text` moved right after the line holding `anchor`."""
    ls = text.splitlines(keepends=True)
    k = [i for i, ln in enumerate(ls) if line_text in ln]
    if len(k) != 1:
        sys.exit(f"make_var2.py: {line_text!r} not found once")
    line = ls.pop(k[0])
    a = [i for i, ln in enumerate(ls) if anchor in ln]
    if len(a) != 1:
        sys.exit(f"make_var2.py: {anchor!r} not found once")
    ls.insert(a[0] + 1, line)
    return "".join(ls)


def main():
    base, prefix = sys.argv[1], sys.argv[2]
    text = open(base).read()
    flags = open(base.removesuffix(".cu") + ".flags").read()
    stsm = sub(text, "qattn::store_acc_smem_pairs(Mma<128>{}, rdStc, sdStc, tid);", "qattn::store_acc_smem_stsm(Mma<128>{}, rdStc, sdStc, tid);")
    var = {"stsm": stsm}
    if D_LOAD in text:  # (d64 reads D at its use, {at_use})
        var["dtop"] = move_after(text, D_LOAD, LSE_LOAD)
        var["dexp"] = move_after(text, D_LOAD, EXP)
        var["stsm_dexp"] = move_after(stsm, D_LOAD, EXP)
    for name, t in var.items():
        open(f"{prefix}_{name}.cu", "w").write(t)
        open(f"{prefix}_{name}.flags", "w").write(flags)


if __name__ == "__main__":
    main()
