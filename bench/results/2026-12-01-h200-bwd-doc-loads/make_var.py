#!/usr/bin/env python3
"""Variants of a generated document-mask backward unit (src/backend/bwd, `{skip: NAME}` loop), for the
A/B of run1.sh. Each edit fails loudly when its anchor moved.

    python3 make_var.py IN.cu OUT.cu VARIANT     VARIANT: f | h | h16 | n
  f    the Mask's `full when` flag read at the top of the iteration (before the ring wait and the first
       products) instead of after S's wgmma wait
  h    f, and the next tile's `empty when` clause read at the top too: nx_i resolved where it is first
       needed (the ring's refill), from that preloaded flag
  h16  h with sixteen clauses a round when a run of empty tiles follows
  n    h without f: only the next tile's clause read at the top
"""
import re
import sys

src, dst, var = sys.argv[1], sys.argv[2], sys.argv[3]
s = open(src).read()


def sub(old, new):
    global s
    if s.count(old) != 1:
        sys.exit(f"make_var.py: anchor found {s.count(old)} times: {old!r}")
    s = s.replace(old, new)


m = re.search(r"const bool full = (full_\w+)\(q0, q0 \+ (\d+) - 1, k0, k0 \+ (\d+) - 1\);", s)
if not m:
    sys.exit("make_var.py: the document Mask's full flag not found")
fn, bm, bn = m.group(1), m.group(2), m.group(3)
if var != "n":
    sub(m.group(0), "const bool full = full_top_i;")
top = "    nx_i = next_i(i);  // the next visited tile (prefetched during this one)\n"
pre = (f"    const bool full_top_i = {fn}((i) * {bm}, (i) * {bm} + {bm} - 1, (n_block) * {bn}, (n_block) * {bn} + {bn} - 1);"
       "  // read before the ring wait\n")
if var == "f":
    sub(top, top + pre)
else:
    sub(top, (pre if var != "n" else "") + "    const bool vis_next_i = visible_i(i + 1);  // read now, used at the refill (aux_at clamps i + 1)\n")
    sub("[[maybe_unused]] const bool handoff_wait_i = it_i != 0, handoff_pass_i = nx_i < hi_i;",
        "[[maybe_unused]] const bool handoff_wait_i = it_i != 0;")
    ring = "    if (nx_i < hi_i) {\n      const int i_next = nx_i;\n"
    sub(ring, "    nx_i = i + 1 >= hi_i ? hi_i : vis_next_i ? i + 1 : next_i(i + 1);\n"
              "    [[maybe_unused]] const bool handoff_pass_i = nx_i < hi_i;\n" + ring)
    if var == "h16":
        sub("qattn::next_visible<4, 1>(i, hi_i, visible_i)", "qattn::next_visible<16, 1>(i, hi_i, visible_i)")
    elif var not in ("h", "n"):
        sys.exit(f"make_var.py: unknown variant {var}")
open(dst, "w").write(s)
