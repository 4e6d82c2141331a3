#!/usr/bin/env python3
"""Experiment: the TMA ring as the lowering emits it (new_*.cu), with the barrier before the dS^T store
("every warp is done reading dStc") split into a pair of named barriers between the two warpgroups:
each warpgroup arrives on the other's barrier once its dQ = dS K product of the iteration has been
waited for (it no longer reads dStc), and syncs on its own before it stores the next dS^T; one arrival
before the loop, none in the last iteration, so every sync meets one arrival. The next ring slot is
then issued after the iteration's other __syncthreads (the named barrier does not order the other
warpgroup's dK product, which reads the slot). Usage: make_nb.py IN.cu OUT.cu (loops without {skip})."""
import re
import sys

out = open(sys.argv[1]).read()


def sub(old, new):
    global out
    assert out.count(old) == 1, f"expected one {old!r}, found {out.count(old)}"
    out = out.replace(old, new)


m = re.search(r"    __syncthreads\(\);  // every warp is done reading dStc\n(    // Q, dO, LSE, D of iteration i \+ 1.*?\n    if \(i \+ 1 < hi_i\) \{\n.*?\n    \}\n)", out, re.S)
assert m, "no dStc barrier followed by the ring's issue"
issue = m.group(1)
out = out.replace(m.group(0), "    qattn::sm90::ptx::bar_sync(1 + wg, 256);  // the other warpgroup's dQ product of the previous iteration is done with dStc\n")
sub("    __syncthreads();  // what the block stored to shared memory is visible\n",
    "    __syncthreads();  // what the block stored to shared memory is visible\n" + issue)
sub("    qattn::sm90::wgmma_wait<1>();  // dV, dQ ready (1 later group still running)\n",
    "    qattn::sm90::wgmma_wait<1>();  // dV, dQ ready (1 later group still running)\n"
    "    if (i + 1 < hi_i) qattn::sm90::ptx::bar_arrive(2 - wg, 256);  // this warpgroup is done with dStc\n")
sub("  for (int i = lo_i; i < hi_i; ++i) {\n",
    "  if (lo_i < hi_i) qattn::sm90::ptx::bar_arrive(2 - wg, 256);  // (the first iteration's store waits for nothing)\n"
    "  for (int i = lo_i; i < hi_i; ++i) {\n")
open(sys.argv[2], "w").write(out)
