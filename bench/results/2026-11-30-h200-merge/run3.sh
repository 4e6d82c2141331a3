#!/usr/bin/env bash
# The split kernel alone, library by library (bench/bench_merge_probe.py), for the in-kernel merge's
# cost: out/mv holds libraries built here from the planner's TL (merge.tl: Merge {rows: 8}, unroll 8;
# nomerge.tl: the same TL without the Merge block; r16u4 / r4u16: rows 16 / 4, unroll 4 / 16) and two
# hand-edited diagnostics of merge's kernel.cu (arrive: the counting without the merge body;
# arrive_nowait: also without waiting for the part's bulk store): not kernels anyone runs.
set -u
source tests/gpu/device_env.sh
M=$PWD/out/mv
timeout 200 python3 bench/bench_merge_probe.py nomerge=$M/lib_nomerge.so merge=$M/lib_merge.so r16u4=$M/lib_r16u4.so \
  r4u16=$M/lib_r4u16.so arrive=$M/lib_arrive.so arrive_nowait=$M/lib_arrive_nowait.so | tee $OUT/probe.txt
