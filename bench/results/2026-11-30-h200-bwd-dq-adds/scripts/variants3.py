#!/usr/bin/env python3
"""Third call's variants (timing only: a wgmma may read shared memory before the threads' stores are
visible to it): does the proxy fence before each barrier wait for the iteration's outstanding dQ
reductions? nof1: the loop-top fence (after the cp.async wait) removed; nof2: the fence before dQ's
GEMM (after dS^T's stores) removed; nof12: both. Applied to base and to v4.
  python3 variants3.py BASE.cu V4.cu OUT_DIR SUFFIX
"""
import sys

base_path, v4_path, out, suffix = sys.argv[1:5]
FENCE = "    qattn::sm90::fence_async_smem();  // the threads' shared stores, visible to wgmma (the async proxy)\n"


def drop(text, which):
    parts = text.split(FENCE)
    assert len(parts) == 3, "expected the two loop fences"
    keep = [w not in which for w in (1, 2)]
    return parts[0] + (FENCE if keep[0] else "") + parts[1] + (FENCE if keep[1] else "") + parts[2]


base, v4 = open(base_path).read(), open(v4_path).read()
for name, text in (("nof1", drop(base, {1})), ("nof2", drop(base, {2})), ("nof12", drop(base, {1, 2})),
                   ("v4nof12", drop(v4, {1, 2}))):
    open(f"{out}/{name}_{suffix}.cu", "w").write(text)
