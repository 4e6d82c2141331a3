#!/usr/bin/env python3
"""Writes a copy of a generated sm90 split-keys decoding kernel (.cu) whose blocks record %globaltimer
at five points into a device array, read back by the exported qattn_stamps_read (probe.py):
  0 block start (thread 0)          1 the producer's Q copy issued (first tile)
  2 the consumer's first K tile landed (first tile)    3 the consumer's key loop done (first tile)
  4 the consumer's last store issued (block end)       5 the SM the block ran on
--fine adds the prologue's points (each after a value it loaded is used, so the load has landed):
  6 after __syncthreads (thread 0)   7 the producer after setmaxnreg   8 after prefetch_maps
  9 the producer's Scope built (its seqlen_k stored)   10 a consumer after setmaxnreg
  11 the consumer's tile received   12 the consumer's Scope built   13 Q landed (consumer)
A measuring tool: the kernel is otherwise the generated one (the patch fails loudly if an anchor moved).

    python3 stamp.py IN.cu OUT.cu [--fine]
"""
import sys

src = open(sys.argv[1]).read()
fine = "--fine" in sys.argv[3:]


def sub(old, new, count=1):
    global src
    if src.count(old) < count:
        sys.exit(f"stamp.py: anchor not found: {old!r}")
    src = src.replace(old, new, count)


STAMP = ("__device__ __forceinline__ void qstamp(int k) { unsigned long long t; "
         "asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); qattn_stamps[blockIdx.x * 8 + k] = t; }\n")
sub('#pragma GCC visibility push(hidden)  // only the C ABI below is exported\n',
    '__device__ unsigned long long qattn_stamps[4096 * 8];\n#pragma GCC visibility push(hidden)  // only the C ABI below is exported\n')
sub('#if !defined(QATTN_HOST_ONLY)  // ---- the kernel ----\n', '#if !defined(QATTN_HOST_ONLY)  // ---- the kernel ----\n' + STAMP)
sub('  unsigned char* smem = smem_base();\n',
    '  if (threadIdx.x == 0) { qstamp(0); unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); qattn_stamps[blockIdx.x * 8 + 5] = s; }\n'
    '  unsigned char* smem = smem_base();\n')
a = src.index('load_tile_packed<')
e = src.index(';', a) + 1
src = src[:e] + '\n      if (leader && nth == 0) qstamp(1);' + src[e:]
a = src.index('      ringK.wait(posK);\n', src.index('// -- the first key tile: stage 0'))
e = a + len('      ringK.wait(posK);\n')
src = src[:e] + '      if (tid == 0 && nth == 0) qstamp(2);\n' + src[e:]
a = src.index('    store_o<')
src = src[:a] + '    if (tid == 0 && nth == 0) qstamp(3);\n' + src[a:]
sub('  PP::finish(cw);\n}\n', '  PP::finish(cw);\n  if (tid == 0) qstamp(4);\n}\n')
sub('QATTN_EXPORT const char* qattn_last_error(void)',
    'QATTN_EXPORT int qattn_stamps_read(void* dst, unsigned long bytes) { return int(cudaMemcpyFromSymbol(dst, qattn_stamps, bytes)); }\n\n'
    'QATTN_EXPORT const char* qattn_last_error(void)')
if fine:
    def after(anchor, code, start=0):
        global src
        a = src.index(anchor, start)
        e = src.index("\n", a) + 1
        indent = anchor[:len(anchor) - len(anchor.lstrip())]
        src = src[:e] + indent + code + "\n" + src[e:]
    after("  __syncthreads();", "if (threadIdx.x == 0) qstamp(6);")
    after("    producer_registers<", "if (threadIdx.x == 0) qstamp(7);")
    after("    if (leader) prefetch_maps(", "if (leader) qstamp(8);")
    after("      const Scope v(tile_coord<", "if (leader && nth == 0) { qattn_stamps[blockIdx.x * 16 + 15] = v.seqlen_k; qstamp(9); }")
    after("  consumer_registers<", "if (threadIdx.x == 128) qstamp(10);")
    after("    const int tile = sched.receive(nth, p);", "if (tid == 0 && nth == 0) { qattn_stamps[blockIdx.x * 16 + 14] = tile; qstamp(11); }")
    c = src.index("    const int tile = sched.receive(nth, p);")
    after("    const Scope v(tile_coord<", "if (tid == 0 && nth == 0) { qattn_stamps[blockIdx.x * 16 + 15] = v.seqlen_k; qstamp(12); }", c)
    after("    ringQ.wait(posQ);", "if (tid == 0 && nth == 0) qstamp(13);", c)
src = src.replace("blockIdx.x * 8 + ", "blockIdx.x * 16 + ").replace("qattn_stamps[4096 * 8]", "qattn_stamps[4096 * 16]")
src = src.replace('"=l"(t));', '"=l"(t) :: "memory");')
open(sys.argv[2], "w").write(src)
