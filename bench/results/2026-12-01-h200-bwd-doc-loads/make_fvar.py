#!/usr/bin/env python3
"""A variant of a generated sm90 forward unit with a document Mask and `{skip: document}` (src/backend/sm90),
for the A/B of run1.sh: in the consumers' key loop, the next visited tile's `empty when` clause and this
tile's `full when` clause are read at the top of the iteration (before the ring waits and the products)
instead of at the loop's increment and after S's wgmma wait. Fails loudly when an anchor moved.

    python3 make_fvar.py IN.cu OUT.cu
"""
import sys

src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()


def sub(old, new, count=1):
    global s
    if s.count(old) != count:
        sys.exit(f"make_fvar.py: anchor found {s.count(old)} times (want {count}): {old!r}")
    s = s.replace(old, new)


loop = "      for (j = prev_tile(j, j_lo, v); j >= j_lo; j = prev_tile(j, j_lo, v)) {\n"
sub(loop, "      bool vis_prev = false;  // the clause of key tile j - 1, read at the top of iteration j\n"
          "      for (j = prev_tile(j, j_lo, v); j >= j_lo; j = j - 1 < j_lo ? j_lo - 1 : vis_prev ? j - 1 : prev_tile(j - 1, j_lo, v)) {\n"
          "        vis_prev = v.visible(j - 1);  // (aux_at clamps j - 1)\n"
          "        const bool nd_j = v.needs_document(rows.q_lo(), rows.q_hi(), j);\n")
head, tail = s.split("vis_prev = v.visible(j - 1);", 1)
old = "        v.mask_tile_document(tSrS, rows, j);\n"
if tail.count(old) != 1:
    sys.exit("make_fvar.py: the loop's document mask not found once")
tail = tail.replace(old, "        if (nd_j) for_each_score(tSrS, rows, j * 128, [&](float& x, int q, int k) { if (!v.keep_document(q, k)) x = -INFINITY; });\n")
open(dst, "w").write(head + "vis_prev = v.visible(j - 1);" + tail)
