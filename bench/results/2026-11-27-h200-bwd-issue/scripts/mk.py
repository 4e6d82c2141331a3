import re, os
d = os.path.dirname(os.path.abspath(__file__))
def var(name, src, nodq=False, nold=False, noexp=False):
    t = open(f"{d}/base_{src}.cu").read()
    if nodq:
        t2 = re.sub(r"\n\s*qattn::add_acc_global<[^\n]*rdQ, mdQ, i, tid\);[^\n]*", "", t); assert t2 != t; t = t2
    if nold:
        # the in-loop issue of the next iteration's ring copies
        m = re.search(r"\n(\s*)// Q, dO, LSE, D of iteration i \+ 1[^\n]*\n\s*if \(i \+ 1 < hi_i\) \{", t); assert m
        start = m.start(); ind = m.group(1)
        end = t.index("\n" + ind + "}", m.end()) + len(ind) + 2
        t = t[:start] + t[end:]
    if noexp:
        t2 = t.replace("qattn::map<qattn::op::Exp2>(rPt, rPt);", ""); assert t2 != t; t = t2
    open(f"{d}/{name}_{src}.cu", "w").write(t)
    open(f"{d}/{name}_{src}.flags", "w").write(open(f"{d}/base_{src}.flags").read())
for s in ["c", "n"]:
    var("v0", s); var("vnodq", s, nodq=True); var("vnold", s, nold=True); var("vnoexp", s, noexp=True)
    var("vnone", s, nodq=True, nold=True)
