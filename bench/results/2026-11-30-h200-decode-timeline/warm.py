#!/usr/bin/env python3
"""The prologue variant of a generated sm90 kernel (.cu): the barriers set up by thread 32 (a producer
warp that has nothing else to do before the copies) while warp 0 prefetches the tensor maps and loads
one word of every 64-byte line of the launch parameters past the maps (lane l: line l), waiting for
them, so that the first tile's Scope reads a warm constant cache after the __syncthreads.

    python3 warm.py IN.cu OUT.cu [--only prefetch|bar32]

--only prefetch: only the tensor maps' prefetch moved before the barriers' setup (thread 0, which then
sets them up); --only bar32: only the setup moved to thread 32.
"""
import re
import sys

src = open(sys.argv[1]).read()
m = re.search(r"  if \(threadIdx.x == 0\) \{\n(    [^\n]*sched.init\(\);\n    ptx::fence_mbar_init\(\);\n)  \}\n", src)
if not m:
    sys.exit("warm.py: the barrier setup not found")
maps = re.search(r"prefetch_maps\((\{[^}]*\})\);", src).group(1)
only = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--only" else ""
if only == "prefetch":
    new = "  if (threadIdx.x == 0) {\n    prefetch_maps(" + maps + ");\n" + m.group(1) + "  }\n"
elif only == "bar32":
    new = "  if (threadIdx.x == 32) {\n" + m.group(1) + "  }\n"
else:
    new = ("  if (threadIdx.x == 32) {  // the barriers: a producer warp idle until its return\n" + m.group(1) + "  } else if (threadIdx.x < 32) {\n"
       "    if (threadIdx.x == 0) prefetch_maps(" + maps + ");\n"
       "    const unsigned char* base = reinterpret_cast<const unsigned char*>(&p.lse);\n"
       "    const int bytes = int(reinterpret_cast<const unsigned char*>(&p + 1) - base);\n"
       "    if (int(threadIdx.x) * 64 < bytes) { const int x = *reinterpret_cast<const int*>(base + threadIdx.x * 64); asm volatile(\"\" ::\"r\"(x)); }\n"
       "  }\n")
src = src[:m.start()] + new + src[m.end():]
open(sys.argv[2], "w").write(src)
