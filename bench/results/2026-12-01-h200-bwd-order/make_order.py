#!/usr/bin/env python3
"""Writes copies of a generated Hopper backward unit (.cu, src/backend/bwd) whose main grid visits
the key tiles in another order (an experiment: the TL's Grid order is what the lowering follows):
  hfirst: blockIdx.x = head, .y = n_block, .z = b (every head's n_block 0 first, batch by batch);
  grpN:   heads in groups of N: .x = head within the group, .y = n_block, .z = group + groups * b.
    python3 make_order.py IN.cu OUT_PREFIX N   ->  OUT_PREFIX_hfirst.cu, OUT_PREFIX_grpN.cu
"""
import sys

src = open(sys.argv[1]).read()
prefix, n = sys.argv[2], int(sys.argv[3])
IDX = "  const int n_block = blockIdx.x;\n  const int head = blockIdx.y;\n  const int b = blockIdx.z;\n"
GRID = "const long long gx = qattn::cdiv(seqlen_k, BN), gy = heads_q, gz = batch;"
for anchor in (IDX, GRID):
    if src.count(anchor) != 1:
        sys.exit(f"make_order.py: anchor found {src.count(anchor)} times: {anchor!r}")
hf = src.replace(IDX, "  const int n_block = blockIdx.y;\n  const int head = blockIdx.x;\n  const int b = blockIdx.z;\n")
hf = hf.replace(GRID, "const long long gx = heads_q, gy = qattn::cdiv(seqlen_k, BN), gz = batch;")
open(prefix + "_hfirst.cu", "w").write(hf)
gr = src.replace(IDX, f"  const int n_block = blockIdx.y;\n  const int head = (blockIdx.z % (p.heads_q / {n})) * {n} + blockIdx.x;\n"
                      f"  const int b = blockIdx.z / (p.heads_q / {n});\n")
gr = gr.replace(GRID, f"if (heads_q % {n} != 0) return qattn::host::fail(QATTN_ERR_SHAPE, \"grp{n}: heads_q %d\", heads_q);\n"
                      f"  const long long gx = {n}, gy = qattn::cdiv(seqlen_k, BN), gz = (long long)batch * (heads_q / {n});")
open(prefix + f"_grp{n}.cu", "w").write(gr)
