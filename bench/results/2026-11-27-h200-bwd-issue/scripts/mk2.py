import re, os, sys
d = os.path.dirname(os.path.abspath(__file__))
def rows(src, name, cw):
    t = open(f"{d}/par/par_{src}.cu").read()
    m = re.search(r"constexpr int kSmemBytes = (\d+);", t)
    old = int(m.group(1))
    extra = 8 * 16 * (cw + 8) * 4
    t = t.replace(m.group(0), f"constexpr int kSmemStageDQ = {old - 1024};\nconstexpr int kSmemBytes = {old + extra};")
    t = t.replace('#include "qattn/sm90/backward.cuh"', '#include "qattn/sm90/backward.cuh"\n#include "dq_exp.cuh"', 1)
    assert "dq_exp.cuh" in t
    m = re.search(r"qattn::add_acc_global<(\d+), (\d+)>\(([^;]*?), rdQ, mdQ, i, tid\);", t)
    M, N, mma = m.group(1), m.group(2), m.group(3)
    t = t.replace(m.group(0), f"qattn::exp::add_acc_global_rows<{M}, {N}, {cw}>({mma}, rdQ, mdQ, i, reinterpret_cast<float*>(smem + kSmemStageDQ), tid);")
    os.makedirs(f"{d}/rows", exist_ok=True)
    open(f"{d}/rows/{name}_{src}.cu", "w").write(t)
    open(f"{d}/rows/{name}_{src}.flags", "w").write(open(f"{d}/par/par_{src}.flags").read())
for s, cw in [("c", 64), ("n", 64), ("d64c", 64), ("d64n", 64)]:
    rows(s, "rows", cw)
