#!/usr/bin/env python3
"""Variant of a generated sm90 backward kernel: dK's wgmma group (dK += dS^T Q) is not waited for at
the end of its iteration but by the next iteration's first wait (St ready: groups complete in order),
so it runs while the next iteration's ring wait, LSE load and S^T / dP^T issue do. dS^T's registers
(dK's A operand) live across the loop's back edge (hoisted before the loop); the last group is waited
for after the loop. usage: make_carry.py IN.cu OUT.cu"""
import re
import sys

src = open(sys.argv[1]).read()
m = re.search(r"Tensor rdPt = (partition_fragment_C\(Mma<128>\{\}, Shape<Int<\d+>, Int<\d+>>\{\}\));", src)
assert m, "rdPt"
frag = m.group(1)
loop = "  for (int i = lo_i; i < hi_i; ++i) {\n"
assert src.count(loop) == 1
src = src.replace(loop, "  auto rdStcK = qattn::convert<Element>(make_fragment_like<float>(" + frag + "));  // dS^T: dK's A, live across iterations\n" + loop)
old = "    Tensor rdStc = qattn::convert<Element>(rdSt);\n"
assert src.count(old) == 1
src = src.replace(old, "    auto& rdStc = rdStcK;\n    {\n      auto t_ = qattn::convert<Element>(rdSt);\n      CUTE_UNROLL\n      for (int x_ = 0; x_ < int(size(t_)); ++x_) rdStcK(x_) = t_(x_);\n    }\n")
wait = "    qattn::sm90::wgmma_wait<1>();  // St ready (1 later group still running)\n    qattn::sm90::fence_regs(qattn::sm90::regs<float>(rSt));\n"
assert src.count(wait) == 1
src = src.replace(wait, wait + "    qattn::sm90::fence_regs(qattn::sm90::regs<float>(rdK));  // the previous iteration's dK group, done with St's\n"
                  "    qattn::sm90::fence_regs(qattn::sm90::regs<uint32_t>(rdStcK));\n")
end = ("    qattn::sm90::wgmma_wait<0>();  // dK ready\n    qattn::sm90::fence_regs(qattn::sm90::regs<float>(rdK));\n"
       "    qattn::sm90::fence_regs(qattn::sm90::regs<uint32_t>(rdStc));  // (A, live until now)\n  }\n")
assert src.count(end) == 1, "end"
src = src.replace(end, "  }\n  qattn::sm90::wgmma_wait<0>();  // the last dK group\n  qattn::sm90::fence_regs(qattn::sm90::regs<float>(rdK));\n"
                  "  qattn::sm90::fence_regs(qattn::sm90::regs<uint32_t>(rdStcK));\n")
open(sys.argv[2], "w").write(src)
