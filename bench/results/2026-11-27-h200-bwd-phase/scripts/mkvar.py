import re, sys, os
d = os.path.dirname(os.path.abspath(__file__))
def variant(name, src, bulk, nod):
    t = open(os.path.join(d, f"base_{src}.cu")).read()
    if bulk:
        m = re.search(r"constexpr int kSmemBytes = (\d+);", t)
        old = int(m.group(1))
        t = t.replace(m.group(0), f"constexpr int kSmemStageDQ = {old - 1024};\nconstexpr int kSmemBytes = {old + 36864};")
        t = t.replace('#include "qattn/sm90/backward.cuh"', '#include "qattn/sm90/backward.cuh"\n#include "bulk_dq.cuh"', 1)
        assert "bulk_dq.cuh" in t
        m = re.search(r"qattn::add_acc_global<(\d+), (\d+)>\(([^;]*?), rdQ, mdQ, i, tid\);", t)
        M, N, mma = m.group(1), m.group(2), m.group(3)
        t = t.replace(m.group(0), f"qattn::exp::add_acc_global_bulk<{M}, {N}, 64>({mma}, rdQ, mdQ, i, reinterpret_cast<float*>(smem + kSmemStageDQ), tid);")
        # drain before the kernel's end (after the loop)
        t = re.sub(r"\n(  // TL \d+: Compute Multiply dK)", r"\n  qattn::exp::bulk_drain(tid);\n\1", t, count=1)
        assert "bulk_drain" in t, "no drain"
    if nod:
        # drop O's copies and the D reduction; Di read like LSE (timing only: wrong gradients)
        t = re.sub(r"\n\s*\{\n\s*Tensor sO = make_tensor[^\n]*\n\s*qattn::copy_g2s\(gmem_copy, mO[^\n]*\n\s*\}", "", t)
        t = re.sub(r"\n\s*qattn::load_acc\([^\n]*, sdO, rdO, tid\);", "", t)
        t = re.sub(r"\n\s*qattn::load_acc\([^\n]*, sO, rO, tid\);", "", t)
        t = re.sub(r"\n\s*Tensor rdOO = [^\n]*\n\s*qattn::ew<qattn::op::Mul>\(rdO, rO, rdOO\);", "", t)
        lc = re.search(r"qattn::load_cols<[^\n]*sLSE, rLSE, tid\);", t).group(0)
        out = []
        for line in t.split("\n"):
            if re.search(r"Tensor rDi = |Tensor rDi_part = |qattn::row_sum<false>\(rdOO", line):
                continue
            if re.search(r"qattn::rows_(across_warps_)?to_cols", line):
                line = "    " + lc.replace("rLSE", "rDi_cols")
            out.append(line)
        t = "\n".join(out)
        assert "copy_g2s(gmem_copy, mO" not in t, name
    open(os.path.join(d, f"{name}.cu"), "w").write(t)
    open(os.path.join(d, f"{name}.flags"), "w").write(open(os.path.join(d, f"base_{src}.flags")).read().split("target:")[0])
for src in ["d128_causal", "d128_none", "d64_causal", "d64_none"]:
    variant(f"v0_{src}", src, False, False)
    variant(f"vbulk_{src}", src, True, False)
    variant(f"vnod_{src}", src, False, True)
    variant(f"vboth_{src}", src, True, True)
