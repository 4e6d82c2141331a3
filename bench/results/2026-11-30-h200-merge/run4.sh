#!/usr/bin/env bash
# As run3.sh, the Merge's rows at a time and parts in flight written in the TL (out/mv/rRuU.tl: `Merge
# split {rows: R}`, `for part = 0: splits {unroll: U}`, U = 1 a rolled loop), against the TL without
# the Merge block (nomerge.tl) and the planner's rows 8 / unroll 8 (merge.tl).
set -u
source tests/gpu/device_env.sh
M=$PWD/out/mv
timeout 200 python3 bench/bench_merge_probe.py nomerge=$M/lib_nomerge.so r8u8=$M/lib_merge.so r4u1=$M/lib_r4u1.so \
  r4u2=$M/lib_r4u2.so r4u4=$M/lib_r4u4.so r8u2=$M/lib_r8u2.so r8u4=$M/lib_r8u4.so r16u1=$M/lib_r16u1.so | tee $OUT/probe.txt
