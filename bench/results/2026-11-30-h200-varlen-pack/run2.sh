#!/usr/bin/env bash
# Call 2: speed. bench/bench_varlen.py in one process: prefill rows (equal lengths and mixes: the packed
# ragged kernel against the padded batch, cuDNN, and the parent's unpacked ragged kernel) and serving
# steps (decoding sequences + a prefill chunk over a paged cache); `--also parent` = main at 0c71bd1's
# device runtime and qattn (its planner writes no packing for ragged batches; the ragged kernel is
# otherwise unchanged since). Carry out/carry, out/gpu-py, out/parent.
set -u
source tests/gpu/device_env.sh
export OMP_NUM_THREADS=1
S=$(date +%s)
timeout 560 python3 bench/bench_varlen.py $OUT/results.csv --rounds 5 \
  --rows serve_gqa_64x4k+512,serve_gqa_128x2k+2k,serve_gqa64_32x8k+1k,serve_mqa_32x8k+1k,eq_8x2k,eq_4x8k,mix_lognormal_32,mix_uniform_128 \
  --also parent=$PWD/out/parent/device:$PWD/out/parent/qattn > $OUT/bench.txt 2>&1
echo "bench rc=$? $(( $(date +%s) - S )) s"; cat $OUT/bench.txt | tail -12
