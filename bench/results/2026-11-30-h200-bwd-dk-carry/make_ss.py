#!/usr/bin/env python3
"""Variants of a generated sm90 backward kernel (d128, BN 128 on two warpgroups): dK += dS^T Q with dS^T
read from its shared copy (the one dQ's product reads) instead of registers (wgmma SS, A K-major: the
warpgroup's 64 key rows), and with --carry also dK's group left in flight into the next iteration
(waited for by the next S^T wait; groups complete in order), no register A operand in flight.
usage: make_ss.py IN.cu OUT.cu [--carry]"""
import sys

src = open(sys.argv[1]).read()
carry = "--carry" in sys.argv
rs = ("qattn::sm90::wg_gemm_rs<qattn::sm90::Wgmma<128, __nv_bfloat16, qattn::sm90::Major::K, qattn::sm90::Major::MN>, 64>"
      "(qattn::sm90::regs<uint32_t>(rdStc), raw_pointer_cast(sQ.data()), qattn::sm90::regs<float>(rdK));")
assert src.count(rs) == 1, "dK's RS product"
ss = ("qattn::sm90::wg_gemm_ss<qattn::sm90::Wgmma<128, __nv_bfloat16, qattn::sm90::Major::K, qattn::sm90::Major::MN>, false, true, "
      "128, 64, 64, true>(raw_pointer_cast(sdStc.data()), 64 * wg, raw_pointer_cast(sQ.data()), 0, qattn::sm90::regs<float>(rdK));")
src = src.replace(rs, ss)
end = ("    qattn::sm90::wgmma_wait<0>();  // dK ready\n    qattn::sm90::fence_regs(qattn::sm90::regs<float>(rdK));\n"
       "    qattn::sm90::fence_regs(qattn::sm90::regs<uint32_t>(rdStc));  // (A, live until now)\n  }\n")
assert src.count(end) == 1, "end"
if carry:
    src = src.replace(end, "  }\n  qattn::sm90::wgmma_wait<0>();  // the last dK group\n  qattn::sm90::fence_regs(qattn::sm90::regs<float>(rdK));\n")
    wait = "    qattn::sm90::wgmma_wait<1>();  // St ready (1 later group still running)\n    qattn::sm90::fence_regs(qattn::sm90::regs<float>(rSt));\n"
    assert src.count(wait) == 1
    src = src.replace(wait, wait + "    qattn::sm90::fence_regs(qattn::sm90::regs<float>(rdK));  // the previous iteration's dK group, done with St's\n")
else:
    src = src.replace(end, "    qattn::sm90::wgmma_wait<0>();  // dK ready\n    qattn::sm90::fence_regs(qattn::sm90::regs<float>(rdK));\n  }\n")
open(sys.argv[2], "w").write(src)
