import sys, re
src, out, w2, ring = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
L = open(src).read().split("\n")
o = []
for l in L:
    if w2 and re.match(r"Allocate d[KV] in register \(BN, d\) fp32 init 0$", l):
        l += " {warps_m: 2}"
    if w2 and l.strip() == "Compute GEMM dSc, K and get dQ":
        l += " {warps_m: 2}"
    if ring and re.match(r"Allocate (Q|dO) in shared \(BM, d\) \w+$|Allocate (LSE|D) in shared \(BM\) fp32$", l):
        l += " {stages: 2}"
    o.append(l)
open(out, "w").write("\n".join(o))
