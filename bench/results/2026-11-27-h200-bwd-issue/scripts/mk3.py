import re, os
d = os.path.dirname(os.path.abspath(__file__))
def bulk(src, name, cw, stages):
    t = open(f"{d}/par/par_{src}.cu").read()
    m = re.search(r"constexpr int kSmemBytes = (\d+);", t)
    old = int(m.group(1))
    extra = 8 * stages * 16 * (cw + 8) * 4
    t = t.replace(m.group(0), f"constexpr int kSmemStageDQ = {old - 1024};\nconstexpr int kSmemBytes = {old + extra};")
    t = t.replace('#include "qattn/sm90/backward.cuh"', '#include "qattn/sm90/backward.cuh"\n#include "dq_exp.cuh"', 1)
    m = re.search(r"qattn::add_acc_global<(\d+), (\d+)>\(([^;]*?), rdQ, mdQ, i, tid\);", t)
    M, N, mma = m.group(1), m.group(2), m.group(3)
    t = t.replace(m.group(0), f"qattn::exp::add_acc_global_bulk<{M}, {N}, {cw}, {stages}>({mma}, rdQ, mdQ, i, i, reinterpret_cast<float*>(smem + kSmemStageDQ), tid);")
    t2 = re.sub(r"\n(  // TL \d+: Compute Multiply dK)", r"\n  qattn::exp::bulk_drain(tid);\n\1", t, count=1)
    assert t2 != t; t = t2
    os.makedirs(f"{d}/bulk", exist_ok=True)
    open(f"{d}/bulk/{name}_{src}.cu", "w").write(t)
    open(f"{d}/bulk/{name}_{src}.flags", "w").write(open(f"{d}/par/par_{src}.flags").read())
for s in ["c", "n", "d64c", "d64n"]:
    bulk(s, "bulk1", 64, 1)
    bulk(s, "bulk2", 64, 2)
