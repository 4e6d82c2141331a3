#!/usr/bin/env python3
"""Fourth call's variants: the query tile's inputs (Q, dO, LSE, D) in rings of 3 slots, filled two
iterations ahead instead of one (s3: base; s3v4: v4). Is the loop-top wait for the cp.async copies
exposed once the L2 also serves the previous iteration's dQ reductions? The third slot of each ring
lies after the kernel's shared plan.
  python3 variants4.py BASE.cu V4.cu OUT_DIR SUFFIX
"""
import re
import sys

base_path, v4_path, out, suffix = sys.argv[1:5]


def three_stages(text):
    smem = re.search(r"constexpr int kSmemBytes = (\d+);", text)
    total = int(smem.group(1))
    extra = {}
    for name in ("Q", "dO", "LSE", "D"):
        m = re.search(r"kSmem%s \+ \(i\) %% 2 \* (\d+)" % name, text)
        extra[name] = (total, int(m.group(1)))
        total += int(m.group(1))
    text = text.replace(smem.group(0), f"constexpr int kSmemBytes = {total};  // + the third slots")
    for name, (at, size) in extra.items():
        text = text.replace(f"kSmem{name} + (i) % 2 * {size}", f"((i) % 3 < 2 ? kSmem{name} + (i) % 3 * {size} : {at})")
    # the prologue: the first two iterations' copies, one group each
    start = text.index("  if (lo_i < hi_i) {\n    const int i = lo_i;\n")
    end = text.index("\n  }\n", start) + len("\n  }\n")
    first = text[start:end]
    second = first.replace("if (lo_i < hi_i)", "if (lo_i + 1 < hi_i)").replace("const int i = lo_i;", "const int i = lo_i + 1;")
    text = text[:start] + first + "  qattn::commit();\n" + second + "  qattn::commit();\n" + text[end:]
    text = text.replace("    qattn::commit();\n    qattn::wait<0>();  // the cp.async copies into shared memory have landed\n",
                        "    qattn::wait<1>();  // this iteration's copies have landed (the next one's may still run)\n")
    assert "if (i + 1 < hi_i) {\n      const int i_next = i + 1;" in text
    text = text.replace("if (i + 1 < hi_i) {\n      const int i_next = i + 1;", "if (i + 2 < hi_i) {\n      const int i_next = i + 2;")
    # the copies of iteration i + 2 committed as one group right after they are issued (empty at the end)
    k = text.index("const int i_next = i + 2;")
    k = text.index("\n    }\n", k) + len("\n    }\n")
    text = text[:k] + "    qattn::commit();\n" + text[k:]
    end_commit = "    qattn::commit();  // the next iteration's copies: one group\n"
    assert end_commit in text
    return text.replace(end_commit, "")


for name, path in (("s3", base_path), ("s3v4", v4_path)):
    open(f"{out}/{name}_{suffix}.cu", "w").write(three_stages(open(path).read()))
