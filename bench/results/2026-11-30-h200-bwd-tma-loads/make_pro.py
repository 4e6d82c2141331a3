#!/usr/bin/env python3
"""Experiment (after the review): the first ring slot issued while K and V are still loading. The
lowering (new_*.cu) waits for K / V's cp.async and publishes them with the mbarriers' initialisation
in one __syncthreads, then issues the first slot; here a __syncthreads publishes the mbarriers first,
the first slot is issued, and only then K / V (and the slot's cp.async rows) are waited for.
Usage: make_pro.py IN.cu OUT.cu"""
import re
import sys

out = open(sys.argv[1]).read()
wait = ("  qattn::commit();\n  qattn::wait<0>();  // the copies before the loop have landed\n"
        "  qattn::sm90::fence_async_smem();  // the threads' shared stores, visible to wgmma (the async proxy)\n"
        "  __syncthreads();  // the mbarriers and the copies so far are visible to every thread\n")
assert out.count(wait) == 1
out = out.replace(wait, "  __syncthreads();  // the mbarriers are initialised\n")
m = re.search(r"  // the first iteration's ring slot, issued before the loop.*?\n  \}\n(  for \(int i = )", out, re.S)
assert m
out = out[:m.start(1)] + wait.replace("the mbarriers and the copies so far are visible to every thread", "K and V are visible to every thread") + out[m.start(1):]
open(sys.argv[2], "w").write(out)
