#!/usr/bin/env bash
# The split kernel alone (bench/bench_merge_probe.py) with other tiles written in the TL, for decoding's
# packed rows (at most 32 of a tile's 128 used by MQA 32/1, 16 by MQA 16/1, 4 by GQA 32/8):
# out/mv/bm64.tl (BM 64, one consumer warpgroup, 8 warps), bm64s3.tl (and 3 stages), st3.tl (BM 128,
# 3 stages) against nomerge.tl (the planner's BM 128, 2 consumer warpgroups, 2 stages).
set -u
source tests/gpu/device_env.sh
M=$PWD/out/mv
timeout 200 python3 bench/bench_merge_probe.py nomerge=$M/lib_nomerge.so bm64=$M/lib_bm64.so bm64s3=$M/lib_bm64s3.so \
  st3=$M/lib_st3.so | tee $OUT/probe.txt
