#!/usr/bin/env bash
# Call 2: serving steps over a paged cache (bench/bench_varlen.py serve rows): qattn-varlen (split where
# ragged_splits says so) against the same call unsplit and the parent's unpacked, unsplit ragged
# kernel (out/parent: main at 0c71bd1). Carry out/carry, out/gpu-py, out/parent.
set -u
source tests/gpu/device_env.sh
export OMP_NUM_THREADS=1
S=$(date +%s)
timeout 500 python3 bench/bench_varlen.py $OUT/results.csv --rounds 5 \
  --rows serve_mqa_4x32k+256,serve_gqa_2x64k+1k,serve_gqa_64x4k+512,serve_gqa_128x2k+2k,serve_gqa64_32x8k+1k,serve_mqa_32x8k+1k \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn > $OUT/bench.txt 2>&1
echo "bench rc=$? $(( $(date +%s) - S )) s"; tail -8 $OUT/bench.txt
