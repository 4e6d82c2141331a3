#!/usr/bin/env python3
"""Adds per-iteration stamps to a unit stamped by ../2026-11-30-h200-bwd-timeline/stamp.py: thread 0
records %globaltimer when each of a block's first 15 visits has its ring slot (qattn_iters[block * 16
+ visit]), and slot 15 the block's visits; read back by the exported qattn_iters_read
(probe_iter.py). Fails loudly when an anchor moved.

    python3 stamp_iter.py STAMPED_IN.cu OUT.cu
"""
import sys

s = open(sys.argv[1]).read()


def sub(old, new):
    global s
    if s.count(old) != 1:
        sys.exit(f"stamp_iter.py: anchor found {s.count(old)} times: {old!r}")
    s = s.replace(old, new)


sub("__device__ unsigned long long qattn_stamps[8192 * 8];\n",
    "__device__ unsigned long long qattn_stamps[8192 * 8];\n__device__ unsigned long long qattn_iters[8192 * 16];\n")
sub("  bool qfirst = true;\n", "  bool qfirst = true;\n  int qit = 0;\n")
sub("    if (threadIdx.x == 0 && qfirst) { qfirst = false; qstamp(2); }\n",
    "    if (threadIdx.x == 0 && qfirst) { qfirst = false; qstamp(2); }\n"
    "    if (threadIdx.x == 0 && qit < 15 && qblock() < 8192) { unsigned long long t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); "
    "qattn_iters[qblock() * 16 + qit] = t; }\n    ++qit;\n")
sub("  if (threadIdx.x == 0) qstamp(3);\n",
    "  if (threadIdx.x == 0) { qstamp(3); if (qblock() < 8192) qattn_iters[qblock() * 16 + 15] = qit; }\n")
sub("QATTN_EXPORT int qattn_stamps_read(",
    "QATTN_EXPORT int qattn_iters_read(void* dst, unsigned long bytes) { return int(cudaMemcpyFromSymbol(dst, ::qattn_iters, bytes)); }\n"
    "QATTN_EXPORT int qattn_stamps_read(")
open(sys.argv[2], "w").write(s)
