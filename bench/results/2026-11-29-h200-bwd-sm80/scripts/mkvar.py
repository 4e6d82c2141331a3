import sys, re
src, out, ring, reorder = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
L = open(src).read().split("\n")
if ring:
    L = [l + " {stages: 2}" if re.match(r"Allocate (Q|dO) in shared \(BM, d\) \w+$|Allocate (LSE|D) in shared \(BM\) fp32$", l) else l for l in L]
if reorder:
    def idx(s):
        return next(i for i, l in enumerate(L) if l.strip() == s)
    dv = idx("Compute GEMM Pc^T, dO and accumulate dV")
    line = L.pop(dv)
    k = idx("Compute GEMM dSc^T, Q and accumulate dK")
    L.insert(k, line)
open(out, "w").write("\n".join(L))
