#!/usr/bin/env python3
"""Experiment (issue 19): the backward's query-tile ring filled by TMA and waited for on mbarriers.

Rewrites a Hopper backward translation unit that qattn_translate emitted (wgmma mode, Q / dO / LSE / D
in rings of 2 slots, filled by cp.async one tile ahead, waited for at the loop's top with a block-wide
__syncthreads) into one where
  - thread 0 loads Q and dO with TMA (one 4-D tensor map each, built by qattn_bwd) and the first 64
    threads copy LSE and D with cp.async, completing on the slot's `full` mbarrier
    (cp.async.mbarrier.arrive.noinc: 1 + 64 arrivals and 2 x BM x d x 2 bytes per phase);
  - the loop's top waits on that mbarrier instead of cp.async.wait_group + __syncthreads;
  - the next tile is issued right after the iteration's other __syncthreads (before dQ = dS K): every
    warp is then past iteration i - 1, the last reader of the slot.
Everything else is the translation as emitted. Usage: make_tma.py IN.cu OUT.cu (asserts every edit).
"""
import re
import sys

src = open(sys.argv[1]).read()
out = src


def sub(old, new, count=1):
    global out
    n = out.count(old)
    assert n == count, f"expected {count} x {old!r}, found {n}"
    out = out.replace(old, new)


def rsub(pat, new, count=1):
    global out
    out, n = re.subn(pat, new, out, flags=re.S)
    assert n == count, f"expected {count} x /{pat}/, found {n}"


m = re.search(r"constexpr int kSmemBytes = (\d+);", out)
smem = int(m.group(1))
bar_off = (smem + 127) // 128 * 128
sub(m.group(0), f"constexpr int kSmemBar = {bar_off};  // the ring's two full mbarriers\nconstexpr int kSmemBytes = {bar_off + 128};")
sub('#include "qattn/sm90/backward.cuh"\n',
    '#include "qattn/sm90/backward.cuh"\n#include "qattn/sm90/tma.cuh"\n#include "qattn/sm90/tensor_map.h"\n')
q_bytes = int(re.search(r"constexpr int kSmemQ = \d+;  // Q: (\d+) bytes", out).group(1))
do_bytes = int(re.search(r"constexpr int kSmemdO = \d+;  // dO: (\d+) bytes", out).group(1))
bm = int(re.search(r"constexpr int BM = (\d+);", out).group(1))
d = int(re.search(r"constexpr int d = (\d+);", out).group(1))
assert q_bytes == bm * d * 2 and do_bytes == bm * d * 2, "Q / dO slots are not one (BM, d) tile"

kname = re.search(r"__global__ void __launch_bounds__\(kThreads, 1\) (\w+)\(const __grid_constant__ qattn_bwd_params p\)", out).group(1)
sub(f"{kname}(const __grid_constant__ qattn_bwd_params p) {{",
    f"{kname}(const __grid_constant__ qattn_bwd_params p, const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmdO) {{")

issue_fn = f"""
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kSmemBar);
  // the slot of tile i: Q and dO by TMA (thread 0), LSE and D by cp.async (threads 0..63), all on full[i % 2]
  auto issue = [&](int i, int s) {{
    if (tid == 0) {{
      qattn::sm90::ptx::mbar_arrive_expect_tx(full + s, {q_bytes + do_bytes});
      qattn::sm90::tma_load_tile<{bm}, {d}>(&tmQ, full + s, reinterpret_cast<Element*>(smem + kSmemQ + s * {q_bytes}), i * {bm}, head, b);
      qattn::sm90::tma_load_tile<{bm}, {d}>(&tmdO, full + s, reinterpret_cast<Element*>(smem + kSmemdO + s * {do_bytes}), i * {bm}, head, b);
    }}
    if (tid < 64) {{
      qattn::copy_rows_g2s<{bm}, 64>(gLSE, p.seqlen_q, i, reinterpret_cast<float*>(smem + kSmemLSE + s * {bm * 4}), tid);
      qattn::copy_rows_g2s<{bm}, 64>(gD, p.seqlen_q, i, reinterpret_cast<float*>(smem + kSmemD + s * {bm * 4}), tid);
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(qattn::sm90::ptx::smem_u32(full + s)) : "memory");
    }}
  }};
  if (tid == 0) {{
    qattn::sm90::ptx::mbar_init(full, 65);
    qattn::sm90::ptx::mbar_init(full + 1, 65);
    qattn::sm90::ptx::fence_mbar_init();
  }}
  qattn::commit();
  qattn::wait<0>();  // K and V have landed
  qattn::sm90::fence_async_smem();
  __syncthreads();
"""
# the prologue's copies of the first tile -> the barrier setup and issue(lo_i)
doc = "for (int i = first_i, it_i = 0, nx_i;" in out  # a {skip} loop: slots by visit count, the next tile nx_i
first = "first_i" if doc else "lo_i"
slot0 = "0" if doc else "lo_i % 2"
rsub(r"  // the first iteration's copies, issued before the loop.*?\n  if \((?:lo_i|first_i) < hi_i\) \{\n.*?\n  \}\n  for \(int i = ",
     issue_fn.replace("\\", "\\\\") + f"  if ({first} < hi_i) issue({first}, {slot0});\n  for (int i = ")
# the loop's top: the mbarrier instead of cp.async.wait + __syncthreads, and no copies there
wait = "full + it_i % 2, (it_i >> 1) & 1" if doc else "full + i % 2, ((i - lo_i) >> 1) & 1"
rsub(r"    qattn::commit\(\);\n    qattn::wait<0>\(\);  // the cp.async copies into shared memory have landed\n"
     r"    qattn::sm90::fence_async_smem\(\);  // the threads' shared stores, visible to wgmma \(the async proxy\)\n"
     r"    __syncthreads\(\);  // \.\.\. for every thread\n.*?\n    if \((?:i \+ 1|nx_i) < hi_i\) \{\n.*?\n    \}\n",
     f"    qattn::sm90::ptx::mbar_wait({wait});  // Q, dO, LSE, D of this tile landed\n")
# the next tile right after the barrier that follows the dS store
sub("    __syncthreads();  // what the block stored to shared memory is visible\n",
    "    __syncthreads();  // what the block stored to shared memory is visible\n" +
    ("    if (nx_i < hi_i) issue(nx_i, (it_i + 1) % 2);" if doc else "    if (i + 1 < hi_i) issue(i + 1, (i + 1) % 2);")
    + "  // every warp is past the previous iteration, the slot's last reader\n")
sub("    qattn::commit();  // the next iteration's copies: one group\n", "")
# host: the two tensor maps
launch = re.search(rf"  {kname}<<<(.*?), kThreads, kSmemBytes, static_cast<cudaStream_t>\(stream\)>>>\(p\);\n", out)
dt = "true" if "using Element = cute::bfloat16_t;" in out else "false"
sub(launch.group(0),
    f"  CUtensorMap tmQ, tmdO;\n"
    f"  if (qattn::sm90::make_tile_map(&tmQ, p.q, {dt}, {d}, seqlen_q, heads_q, batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride, {bm}) != 0 ||\n"
    f"      qattn::sm90::make_tile_map(&tmdO, p.dout, {dt}, {d}, seqlen_q, heads_q, batch, p.do_row_stride, p.do_head_stride, p.do_batch_stride, {bm}) != 0)\n"
    f"    return qattn::host::fail(QATTN_ERR_SHAPE, \"the Q / dO tensor maps were refused\");\n"
    f"  {kname}<<<{launch.group(1)}, kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(p, tmQ, tmdO);\n")
open(sys.argv[2], "w").write(out)
