#!/usr/bin/env python3
"""Writes a copy of a generated Hopper backward kernel (.cu, src/backend/bwd) whose blocks record
%globaltimer (ns) into a device array, read back by the exported qattn_stamps_read (probe.py):
  0 block start (thread 0)                      1 past the prologue's barrier (K, V landed)
  2 the first ring slot landed (thread 0)       3 the loop done (thread 0, before dK's scale)
  4 dK, dV stored (before the TMA additions' last wait)   5 block end
  6 the block's iterations (hi - lo)            7 the SM it ran on
A measuring tool: the kernel is otherwise the generated one (the patch fails loudly if an anchor moved).

    python3 stamp.py IN.cu OUT.cu
"""
import re
import sys

src = open(sys.argv[1]).read()


def sub(old, new, count=1):
    global src
    if src.count(old) < count:
        sys.exit(f"stamp.py: anchor not found: {old!r}")
    src = src.replace(old, new, count)


STAMP = ("__device__ unsigned long long qattn_stamps[8192 * 8];\n"
         "__device__ __forceinline__ int qblock() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }\n"
         "__device__ __forceinline__ void qstamp(int k) { unsigned long long t; "
         "asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); if (qblock() < 8192) qattn_stamps[qblock() * 8 + k] = t; }\n")
sub('#pragma GCC visibility push(hidden)  // only the C ABI below is exported\n',
    '#pragma GCC visibility push(hidden)  // only the C ABI below is exported\n' + STAMP)
m = re.search(r'__global__ void __launch_bounds__\(kThreads, 1\) \w+\(const __grid_constant__ qattn_bwd_params p[^\n]*\{\n', src)
if not m:
    sys.exit("stamp.py: the main kernel's signature not found")
src = src[:m.end()] + ('  if (threadIdx.x == 0) { qstamp(0); unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); '
                       'if (qblock() < 8192) qattn_stamps[qblock() * 8 + 7] = s; }\n  bool qfirst = true;\n') + src[m.end():]
sub('  __syncthreads();  // the mbarriers and the copies so far are visible to every thread\n',
    '  __syncthreads();  // the mbarriers and the copies so far are visible to every thread\n'
    '  if (threadIdx.x == 0) { qstamp(1); if (qblock() < 8192) qattn_stamps[qblock() * 8 + 6] = hi_i - lo_i; }\n')
a = src.index('  // this iteration\'s ring slot has landed', src.index('for (int i = '))
e = src.index('\n', a) + 1
src = src[:e] + '    if (threadIdx.x == 0 && qfirst) { qfirst = false; qstamp(2); }\n' + src[e:]
a = src.index('  // TL ', src.index('Compute Multiply dK, softmax_scale') - 40)
src = src[:a] + '  if (threadIdx.x == 0) qstamp(3);\n' + src[a:]
sub('  qattn::sm90::add_acc_global_tma_done(tid);',
    '  if (threadIdx.x == 0) qstamp(4);\n  qattn::sm90::add_acc_global_tma_done(tid);\n  if (threadIdx.x == 0) qstamp(5);')
sub('QATTN_EXPORT const char* qattn_last_error(void)',
    'QATTN_EXPORT int qattn_stamps_read(void* dst, unsigned long bytes) { return int(cudaMemcpyFromSymbol(dst, ::qattn_stamps, bytes)); }\n\n'
    'QATTN_EXPORT const char* qattn_last_error(void)')
open(sys.argv[2], "w").write(src)
